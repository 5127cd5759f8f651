"""The fast path's cost: callgrind instructions per malloc(32)+free pair
(`make bench-insns`) and the time the default checks cost against a build
without them (`make bench-checks`)."""

import os
import re
import time

from harness import (BIN, BUILD, LIB, Progress, ROOT, alloc_env, available_allocators,
                     bootstrap_interval, failure_text, fmt, geomean, host_probe, interval_text,
                     loadavg, log, machine_text, md_table, median, run_once, section_head,
                     text_table, write_section)
from suite import BENCHMARKS, fill, gen_c


# ---------------------------------------------------------------- make bench-insns

def callgrind_insns(argv, env):
    r = run_once(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + argv,
                 env, timeout=600)
    m = re.search(r"Collected\s*:\s*(\d+)", r["err"])
    if r["rc"] != 0 or not m:
        raise RuntimeError(failure_text(r))
    return int(m.group(1))


def cmd_insns(args):
    allocs = available_allocators(args.allocs)
    n = 1000000
    pair = os.path.join(BIN, "pair")
    variants = [("alone", "0"), ("with 100 live", "100")]
    rows = []
    log("callgrind: instructions per malloc(32)+free pair = (I(%d pairs) - I(%d pairs)) / %d"
        % (2 * n, n, n))
    for a in allocs:
        row = [a["name"]]
        for vname, live in variants:
            try:
                i1 = callgrind_insns([pair, str(n), live], alloc_env(a))
                i2 = callgrind_insns([pair, str(2 * n), live], alloc_env(a))
                row.append("%.1f" % ((i2 - i1) / n))
            except RuntimeError as e:
                row.append("failed")
                log("FAILED %s (%s): %s" % (a["name"], vname, e))
        rows.append(row)
        log("  %-10s %s" % (a["name"], "  ".join(row[1:])))
    hdr = ["allocator", "insns/pair, block alone in its page", "insns/pair, 100 other blocks live"]
    log("")
    log(text_table(hdr, rows))
    md = "\n".join([
        *section_head("Instructions per malloc(32)+free pair (`make bench-insns`)",
                      machine_text(allocs)),
        "- Method: `valgrind --tool=callgrind build/bench/pair N LIVE` with the allocator "
        "preloaded (callgrind does not replace malloc, so `LD_PRELOAD` works), for N = "
        "1,000,000 and 2,000,000; instructions per pair = (I(2M) - I(1M)) / 1M, so start-up and "
        "exit cancel out. The figure includes the loop itself (`sink = malloc(32); free(sink);` "
        "through a volatile pointer, about 10 instructions with the two PLT jumps), the same for "
        "every allocator. LIVE = 0: the block is the only one in use, so each free empties its "
        "page (an allocator that retires empty pages pays for it every time); LIVE = 100: 100 "
        "other 32-byte blocks stay allocated, the steady-state fast path.", "",
        md_table(hdr, rows), ""])
    if not args.no_doc:
        write_section("insns", md)
    return 0


# ---------------------------------------------------------------- make bench-checks

NOCHECKS_LIB = os.path.join(BUILD, "nochecks", "libtidemalloc.so")


def cmd_checks(args):
    """What the default checks cost: every benchmark with the library and
    with the build without them (-DTIDEMALLOC_NO_CHECKS), interleaved."""
    if not os.path.exists(NOCHECKS_LIB):
        log("%s not found: run `make lib-nochecks`" % os.path.relpath(NOCHECKS_LIB, ROOT))
        return 2
    variants = [dict(name="checks", preload=LIB), dict(name="no checks", preload=NOCHECKS_LIB)]
    benches = [b for b in BENCHMARKS if not args.only or b["name"] in args.only]
    # 15: with 9 the geometric mean moved by 1.013-1.069 between runs of the
    # same trees, the size of the 3% budget it is to show
    reps = args.reps or 15
    gen_dir = os.path.join(BIN, "gen")
    os.makedirs(gen_dir, exist_ok=True)
    for b in benches:
        if b.get("setup") == "gen_c":
            gen_c(gen_dir)
    log("bench-checks: %d benchmarks x 2 builds x %d repetitions, interleaved" % (len(benches), reps))
    prog = Progress(len(benches) * 2 * reps)
    host_start = host_probe()
    log("host: %s" % host_start)
    t_start = time.monotonic()
    load_start = loadavg()
    rows, min_ratios, failed = [], [], 0
    # each benchmark's ratio a repetition; its figure is their median
    wall_pairs, cpu_pairs = [], []
    for b in benches:
        argv = fill(b["argv"], gen_dir)
        runs = {v["name"]: [] for v in variants}
        pairs = []  # (checks, none) of one repetition: run back to back
        for rep in range(reps):
            # ABBA order: whichever runs first in a pair pays for a cold start
            for v in (variants if rep % 2 == 0 else variants[::-1]):
                prog.show("%s rep %d/%d %s" % (b["name"], rep + 1, reps, v["name"]))
                r = run_once(argv, alloc_env(v, b.get("env")))
                prog.step()
                if r["rc"] != 0 or r["timeout"]:
                    failed += 1
                    prog.end()
                    log("FAILED %s with %s: %s" % (b["name"], v["name"], failure_text(r)))
                    continue
                runs[v["name"]].append(r)
            if len(runs["checks"]) == len(runs["no checks"]) == len(pairs) + 1:
                pairs.append((runs["checks"][-1], runs["no checks"][-1]))
        on, off = runs["checks"], runs["no checks"]
        if not pairs:
            continue
        w_on, w_off = median([r["wall"] for r in on]), median([r["wall"] for r in off])
        c_on = median([r["user"] + r["sys"] for r in on])
        c_off = median([r["user"] + r["sys"] for r in off])
        # The median of each back-to-back pair's ratio: load that drifts over
        # the run hits both builds of a pair alike, so it cancels.
        cpu = lambda r: r["user"] + r["sys"]
        wall_pairs.append([x["wall"] / y["wall"] for x, y in pairs])
        cpu_pairs.append([cpu(x) / cpu(y) for x, y in pairs if cpu(y) > 0])
        # The fastest run of each build: what a run costs when nothing else
        # slows it (the machine's noise only ever adds time).
        min_on, min_off = min(cpu(r) for r in on), min(cpu(r) for r in off)
        min_ratios.append(min_on / min_off if min_off > 0 else float("nan"))
        rows.append([b["name"], "%.3f" % w_on, "%.3f" % w_off, "%.3f" % median(wall_pairs[-1]),
                     interval_text(bootstrap_interval([wall_pairs[-1]])),
                     "%.3f" % c_on, "%.3f" % c_off, fmt(median(cpu_pairs[-1]), "%.3f"),
                     interval_text(bootstrap_interval([cpu_pairs[-1]])),
                     fmt(min_ratios[-1], "%.3f")])
    prog.end()
    elapsed = time.monotonic() - t_start
    host_end = host_probe()
    wall_mean = geomean([median(xs) for xs in wall_pairs])
    cpu_mean = geomean([median(xs) for xs in cpu_pairs])
    wall_interval, cpu_interval = bootstrap_interval(wall_pairs), bootstrap_interval(cpu_pairs)
    rows.append(["**geometric mean**", "", "", "**%.3f**" % wall_mean,
                 "**%s**" % interval_text(wall_interval), "", "", "**%.3f**" % cpu_mean,
                 "**%s**" % interval_text(cpu_interval), "**%.3f**" % geomean(min_ratios)])
    hdr = ["benchmark", "wall s, checks", "wall s, none", "wall ratio", "its 95% interval",
           "user+sys s, checks", "user+sys s, none", "user+sys ratio", "its 95% interval",
           "ratio of fastest"]
    log("")
    log(text_table(hdr, [[c.replace("*", "") for c in r] for r in rows]))
    log("host at the end: %s" % host_end)
    md = "\n".join([
        *section_head("Cost of the default checks (`make bench-checks`)",
                      machine_text([dict(name="tidemalloc")])),
        "- Method: every `make bench` benchmark with `build/libtidemalloc.so` and with "
        "`build/nochecks/libtidemalloc.so` (`make lib-nochecks`: the same sources built with "
        "`-DTIDEMALLOC_NO_CHECKS`, so no link encoding, link check, pointer validation, "
        "double-free test or double-free mark), interleaved in ABBA order, %d repetitions; times are medians, a ratio is "
        "the median over repetitions of with checks / without, the two runs of a repetition being back "
        "to back (1.03 = the checks cost 3%%); a ratio's 95%% interval is where its median, or the "
        "geometric mean of the medians, falls in 2,000 resamplings of the repetitions' pairs "
        "(bootstrap, a fixed seed): the spread the run's own repetitions allow, not a slower change "
        "of the host between runs "
        "(`gcc` spends 0.9%% of its instructions in the allocator and 0.1%% in the checks: its "
        "interval is the host's noise); "
        "the last column is the fastest user+sys of each build "
        "over all repetitions, with checks / without. Run took %.0f s; load average (1 min) %s at the start and "
        "%s at the end." % (reps, elapsed, load_start, loadavg()),
        "- Host (`build/bench/hostprobe`): at the start %s; at the end %s." % (host_start, host_end),
        "",
        md_table(hdr, rows), ""])
    if not args.no_doc:
        write_section("checks", md)
    return 1 if failed else 0
