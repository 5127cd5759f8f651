#!/usr/bin/env python3
"""Paired rounds: one command under several builds, for the figures a session
quotes when it compares two libraries or two settings (Python 3 standard
library only; needs `make bench-build` for build/bench/launch).

    bench/pairs.py [-n ROUNDS] BUILD[@VAR=VALUE...] ... -- COMMAND [ARGS...]

BUILD is tidemalloc (build/libtidemalloc.so), nochecks
(build/nochecks/libtidemalloc.so, `make lib-nochecks`), glibc (no preload),
jemalloc, tcmalloc, mimalloc (the Debian packages), or the path of a shared
object that defines malloc (a scratch build). Each @VAR=VALUE is set in that
build's runs only: `tidemalloc@TIDEMALLOC_RETAIN_PERCENT=0`.

Each round runs the command once under every build, one after the other: the
order starts one build further on each round and runs backwards every other
round, so that neither a host that drifts within a round nor the order
favours a build. Per build it prints the medians of wall time, user+sys time,
peak RSS and minor faults (bench/launch, as `make bench` measures), and the
median over rounds of each round's ratio to the first build's run in the same
round: a phase of the host that spans a round divides out. The CPU ratio
comes with the interval that holds 95% of its medians when the rounds are
resampled, and the count of rounds in which the build used less CPU than the
first. The first build twice (an A/A pair) shows how far the host alone moves
a ratio. Exit status 1 if a run failed (its status and stderr's last line are
printed), 2 for a usage error."""

import os
import sys

import harness

BUILDS = {
    "tidemalloc": harness.LIB,
    "nochecks": os.path.join(harness.BUILD, "nochecks", "libtidemalloc.so"),
    "glibc": None,
}
BUILDS.update({name: preload for name, preload, _, peer, _ in harness.ALLOCATORS if peer})


def parse_build(spec):
    """BUILD[@VAR=VALUE...] -> (label, preload or None, {VAR: VALUE}); raises
    ValueError for an unknown name, a missing file or a malformed setting."""
    name, *settings = spec.split("@")
    if name in BUILDS:
        preload = BUILDS[name]
    elif os.path.exists(name):
        preload = os.path.abspath(name)
    else:
        raise ValueError("%s: neither a build name (%s) nor a file" % (name, ", ".join(BUILDS)))
    if preload is not None and not os.path.exists(preload):
        raise ValueError("%s: %s not found" % (name, preload))
    env = {}
    for setting in settings:
        var, eq, value = setting.partition("=")
        if not var or not eq:
            raise ValueError("%s: a setting is VAR=VALUE" % setting)
        env[var] = value
    return spec, preload, env


def round_order(count, rnd):
    """The builds' indices in round `rnd`: rotated one further each round,
    backwards every other round."""
    order = harness.rotated(list(range(count)), rnd)
    return order[::-1] if rnd % 2 else order


def summarise(runs):
    """runs[b][r]: build b's figures (wall, cpu, rss, faults) in round r.
    Returns one dict a build: the medians, the median ratios to build 0 round
    by round, the CPU ratio's 95% interval and the rounds lower in CPU."""
    first = runs[0]
    out = []
    for figures in runs:
        row = {key: harness.median([f[i] for f in figures])
               for i, key in enumerate(("wall", "cpu", "rss", "faults"))}
        ratios = {key: [f[i] / g[i] if g[i] else float("nan") for f, g in zip(figures, first)]
                  for i, key in enumerate(("wall", "cpu", "rss"))}
        for key, xs in ratios.items():
            row[key + "_ratio"] = harness.median(xs)
        row["cpu_interval"] = harness.bootstrap_interval([ratios["cpu"]])
        row["lower"] = sum(f[1] < g[1] for f, g in zip(figures, first))
        out.append(row)
    return out


def main(argv):
    rounds = 7
    if len(argv) > 1 and argv[0] == "-n":
        try:
            rounds = int(argv[1])
        except ValueError:
            rounds = 0
        argv = argv[2:]
    if "--" not in argv or rounds < 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    cut = argv.index("--")
    specs, command = argv[:cut], argv[cut + 1:]
    if not specs or not command:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        builds = [parse_build(spec) for spec in specs]
    except ValueError as e:
        print("pairs.py: %s" % e, file=sys.stderr)
        return 2
    if not os.path.exists(os.path.join(harness.BIN, "launch")):
        print("pairs.py: %s missing: run `make bench-build`" % os.path.join(harness.BIN, "launch"),
              file=sys.stderr)
        return 2
    runs = [[None] * rounds for _ in builds]
    for rnd in range(rounds):
        for b in round_order(len(builds), rnd):
            label, preload, env = builds[b]
            res = harness.run_once(command, harness.alloc_env(dict(preload=preload), env))
            if res["rc"] != 0:
                print("pairs.py: %s, round %d: %s" % (label, rnd + 1, harness.failure_text(res)),
                      file=sys.stderr)
                return 1
            runs[b][rnd] = (res["wall"], res["user"] + res["sys"], res["rss"], res["faults"])
    print("%d paired rounds of `%s`; ratios to %s, round by round (median; for CPU time its "
          "95%% interval and the rounds lower)" % (rounds, " ".join(command), builds[0][0]))
    header = ("build", "wall s", "cpu s", "peak RSS KiB", "faults", "wall ratio", "cpu ratio",
              "its 95% interval", "lower", "RSS ratio")
    rows = []
    for (label, _, _), row in zip(builds, summarise(runs)):
        rows.append((label, "%.4f" % row["wall"], "%.4f" % row["cpu"], "%d" % row["rss"],
                     "%d" % row["faults"], "%.3f" % row["wall_ratio"], "%.3f" % row["cpu_ratio"],
                     harness.interval_text(row["cpu_interval"]), "%d/%d" % (row["lower"], rounds),
                     "%.3f" % row["rss_ratio"]))
    print(harness.text_table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
