"""Simulated cache misses (`make bench-cache`): cachegrind's model of a
core's first-level data cache and of a 1 MiB second level, per allocator,
on single-thread benchmarks.

This machine's virtual CPUs expose no hardware counters, so a miss count
can only be simulated. A single-thread run under cachegrind repeats its
counts to within 1% (address randomisation moves the mappings against
the sets), so they compare allocators, and two builds, far more closely
than times on this shared host. The second level is simulated twice: 8-way
(AMD Zen 4's L2: 1 MiB, 8 ways) and 256-way (nearly fully associative). The
8-way misses the 256-way model avoids are conflict misses: lines that fall
in one set because of where the allocator placed the blocks (a page's
blocks start at the same offset in every 64 KiB slice), not because the
working set is too large. Threads are not simulated (cachegrind runs one
at a time and shares one cache model), so a line passed between cores
costs nothing here."""

import os
import re

from harness import (BIN, Progress, alloc_env, available_allocators, failure_text, log,
                     machine_text, md_table, run_once, section_head, text_table, write_section)

# Single-thread commands: churn's random replacement and LIFO batches, and
# mstress's bursts with long-lived sets (one thread: its exchanges are with
# itself). Sized to run in seconds under cachegrind (about 50 times slower).
COMMANDS = [
    ("churn", ["churn", "3"]),
    ("mstress 1 thread", ["mstress", "1", "1600"]),
]

L1 = "32768,8,64"
SECOND_LEVELS = [("8-way", "1048576,8,64"), ("256-way", "1048576,256,64")]


def parse_cachegrind(text):
    """The data-read and -write misses of cachegrind's summary (stderr), as
    {"D1": n, "LLd": n}; a level missing from the text is absent."""
    found = {}
    for level in ("D1", "LLd"):
        m = re.search(r"^==\d+== %s\s+misses:\s+([\d,]+)" % level, text, re.M)
        if m:
            found[level] = int(m.group(1).replace(",", ""))
    return found


def simulate(argv, env, second_level):
    r = run_once(["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--D1=" + L1,
                  "--LL=" + second_level, "--cachegrind-out-file=/dev/null"] + argv,
                 env, timeout=900)
    found = parse_cachegrind(r["err"])
    if r["rc"] != 0 or len(found) != 2:
        raise RuntimeError(failure_text(r))
    return found


def cmd_cache(args):
    allocs = available_allocators(args.allocs)
    commands = [c for c in COMMANDS if not args.only or c[0] in args.only]
    prog = Progress(len(commands) * len(allocs) * len(SECOND_LEVELS))
    rows, failed = [], 0
    for name, argv in commands:
        argv = [os.path.join(BIN, argv[0])] + argv[1:]
        for a in allocs:
            counts = {}
            for level_name, level in SECOND_LEVELS:
                prog.show("%s %s L2 %s" % (name, a["name"], level_name))
                try:
                    counts[level_name] = simulate(argv, alloc_env(a), level)
                except RuntimeError as e:
                    failed += 1
                    prog.end()
                    log("FAILED %s with %s: %s" % (name, a["name"], e))
                prog.step()
            if len(counts) != len(SECOND_LEVELS):
                continue
            (tight_name, _), (loose_name, _) = SECOND_LEVELS
            tight, loose = counts[tight_name]["LLd"], counts[loose_name]["LLd"]
            rows.append([name, a["name"], "{:,}".format(counts[tight_name]["D1"]),
                         "{:,}".format(tight), "{:,}".format(loose),
                         "%.0f%%" % (100.0 * (tight - loose) / tight) if tight else "-"])
    prog.end()
    hdr = ["benchmark", "allocator", "L1 misses", "L2 misses, 8-way", "L2 misses, 256-way",
           "conflict share"]
    log("")
    log(text_table(hdr, rows))
    md = "\n".join([
        *section_head("Simulated cache misses (`make bench-cache`)", machine_text(allocs)),
        "- Method: `valgrind --tool=cachegrind --cache-sim=yes --D1=%s --LL=SECOND` with "
        "the allocator preloaded, SECOND a 1 MiB level of 64-byte lines, 8-way (AMD Zen 4's "
        "L2) and 256-way (nearly fully associative); the figures are data misses, reads "
        "and writes, the program's and the allocator's. A single-thread run repeats "
        "its counts to within 1%% (address randomisation), so one run each. The "
        "conflict share is the part of the 8-way misses the 256-way model does not "
        "have: lines crowded into the same sets by where the blocks lie. This "
        "machine's CPUs have no hardware counters; threads "
        "are not simulated (a line passed between cores costs nothing here)." % L1, "",
        md_table(hdr, rows), ""])
    if not args.no_doc:
        write_section("cache", md)
    return 1 if failed else 0
