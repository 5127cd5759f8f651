#!/usr/bin/env python3
"""docs/tried.md points into docs/benchmark-history.md by session and line
("45th, l. 4702"): every such line must lie in the session it names, and in
the section of that session, so that the index keeps leading to its idea when
the log grows (it grows only at its end; editing an earlier section shifts
the lines after it). Prints one line per reference that does not hold, and
exits 1 if any, 2 if the files cannot be read or hold no reference."""

import re
import sys

ORDINALS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh "
            "twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth "
            "nineteenth").split()
TENS = {"twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60,
        "seventieth": 70, "eightieth": 80, "ninetieth": 90}
TENS_PREFIX = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
               "seventy": 70, "eighty": 80, "ninety": 90}


def session_number(header):
    """The session a '## ' header names: 0 for the state paragraphs before the
    tenth session, None for a header of no session."""
    words = header[3:].split()
    if not words:
        return None
    word = words[0].lower()
    if word == "the" and "state paragraphs" in header:
        return 0
    if word in ORDINALS:
        return ORDINALS.index(word) + 1
    if word in TENS:
        return TENS[word]
    if "-" in word:
        tens, unit = word.split("-", 1)
        if tens in TENS_PREFIX and unit in ORDINALS[:9]:
            return TENS_PREFIX[tens] + ORDINALS.index(unit) + 1
    return None


def main(root):
    try:
        history = open(root + "/docs/benchmark-history.md").read().split("\n")
        index = open(root + "/docs/tried.md").read().split("\n")
    except OSError as e:
        print("cannot read: %s" % e)
        return 2
    # the session of every line of the log
    sessions, current = [], None
    for line in history:
        if line.startswith("## "):
            current = session_number(line)
        sessions.append(current)
    bad = refs = 0
    for row in index:
        if not row.startswith("| ") or row.startswith("| idea") or row.startswith("| :"):
            continue
        where = re.split(r"(?<!\\)\|", row.strip())[-2]
        for part in where.split(";"):
            m = re.search(r"(?:(\d+)(?:st|nd|rd|th)|state paragraphs).*?l\. (\d+)", part)
            if not m:
                print("no session and line: %s" % part.strip())
                bad += 1
                continue
            refs += 1
            named = int(m.group(1)) if m.group(1) else 0
            line = int(m.group(2))
            found = sessions[line - 1] if 0 < line <= len(sessions) else None
            if found != named:
                print("%s: line %d lies in %s" % (part.strip(), line,
                                                 "no session" if found is None else
                                                 "session %d" % found))
                bad += 1
    if refs == 0:
        print("no reference found in docs/tried.md")
        return 2
    print("%d references, %d wrong" % (refs, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
