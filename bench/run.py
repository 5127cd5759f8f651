#!/usr/bin/python3
"""tidemalloc benchmark runner (Python 3 standard library only).

    run.py bench   [--reps N] [--only a,b] [--allocs x,y] [--no-doc]
    run.py quick   the same on a quick subset, 3 repetitions, no doc update
    run.py insns   callgrind instructions per malloc(32)+free pair
    run.py cache   cachegrind's simulated L1 and 1 MiB L2 misses, one thread
    run.py ebizzy  ebizzy-like records/s and sys time, 1 and 2 threads
    run.py gs      ghostscript average RSS and wall time (seed 001)
    run.py latency single malloc and free calls' latency: percentiles, tail
    run.py scaling [--threads 1,2,4] [--md FILE] [--from-runs FILE,FILE]
                   the multithreaded benchmarks by thread count (weak scaling)

Every benchmark runs with tidemalloc (LD_PRELOAD=build/libtidemalloc.so), glibc
and each installed peer, interleaved (A B C D E A B C D E ...). Each command
writes its own marked section of docs/benchmarks.md, so the targets can be run
separately without erasing one another's figures.
"""
import argparse
import os
import sys

from harness import BIN, log
from cache_sim import cmd_cache
from fast_path import cmd_checks, cmd_insns
from latency import cmd_latency
from release import cmd_ebizzy, cmd_gs
from scaling import cmd_scaling
from suite import BENCHMARKS, cmd_bench


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["bench", "quick", "insns", "checks", "cache", "ebizzy", "gs",
                                        "latency", "scaling", "list"])
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 7; quick 3)")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None, help="benchmarks, comma-separated")
    ap.add_argument("--allocs", type=lambda s: s.split(","), default=None, help="allocators, comma-separated")
    ap.add_argument("--no-doc", action="store_true", help="do not touch docs/")
    ap.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="scaling: thread counts, comma-separated (default 1, 2, 4... up to "
                    "the CPUs, 16 at most)")
    ap.add_argument("--md", default=None, help="scaling: also write its markdown to this file, "
                    "and each run's figures to FILE.runs as it ends")
    ap.add_argument("--from-runs", type=lambda s: s.split(","), default=None,
                    help="scaling: write the section from earlier .runs files instead of running")
    args = ap.parse_args()
    missing = [p for p in ("launch", "churn", "pair", "ebizzy") if not os.path.exists(os.path.join(BIN, p))]
    if missing and args.command != "list":
        log("benchmarks not built (%s): run `make bench-build`" % ", ".join(missing))
        return 2
    if args.command == "list":
        for b in BENCHMARKS:
            log("%-14s %s%s" % (b["name"], b["shape"], "  [quick]" if "quick_argv" in b else ""))
        return 0
    if args.command in ("bench", "quick"):
        return cmd_bench(args, args.command == "quick")
    return {"insns": cmd_insns, "checks": cmd_checks, "cache": cmd_cache, "ebizzy": cmd_ebizzy,
            "gs": cmd_gs, "latency": cmd_latency, "scaling": cmd_scaling}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
