"""`make bench-latency`: how long single malloc and free calls take, their
distribution and their tail, for every allocator (build/bench/latency)."""

import os

from harness import (BIN, Progress, alloc_env, available_allocators, failure_text, fmt, log,
                     machine_text, md_table, median, rotated, run_once, section_head, text_table,
                     write_section)

THREADS, OPS, HIGH_MIB = 2, 2000000, 64
KINDS = ("malloc", "free", "empty")
COLUMNS = ("count", "p50", "p90", "p99", "p99.9", "p99.99", "max", "over10us", "over100us",
           "over1ms")


def parse(out):
    """{kind: {column: value}} from the program's table, or None."""
    rows = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) == len(COLUMNS) + 1 and p[0] in KINDS:
            try:
                rows[p[0]] = dict(zip(COLUMNS, (float(x) for x in p[1:])))
            except ValueError:
                return None
    return rows if len(rows) == len(KINDS) else None


def configs_of(allocs):
    """(label, allocator, extra environment): every allocator as it comes,
    and tidemalloc with its helper thread making every release."""
    out = [(a["name"], a, None) for a in allocs]
    for a in allocs:
        if a["name"] == "tidemalloc":
            out.append(("tidemalloc, releases on the helper", a,
                        {"TIDEMALLOC_BACKGROUND_PURGE": "2"}))
    return out


def cmd_latency(args):
    allocs = available_allocators(args.allocs)
    reps = args.reps or 7
    configs = configs_of(allocs)
    argv = [os.path.join(BIN, "latency"), str(THREADS), str(OPS), str(HIGH_MIB)]
    prog = Progress(reps * len(configs))
    res = {}
    for rep in range(reps):
        for label, a, extra in rotated(configs, rep):
            prog.show("latency rep %d %s" % (rep + 1, label))
            r = run_once(argv, alloc_env(a, extra), timeout=120)
            prog.step()
            rows = parse(r["out"])
            if r["rc"] != 0 or rows is None:
                prog.end()
                log("FAILED latency with %s: %s" % (label, failure_text(r)))
                continue
            r["rows"] = rows
            res.setdefault(label, []).append(r)
    prog.end()
    hdr = ["allocator", "p50 ns", "p90", "p99", "p99.9", "p99.99", "max us", "over 10 us",
           "over 100 us", "over 1 ms"]
    md = [*section_head("Latency of single calls (`make bench-latency`)", machine_text(allocs)),
          "- Method: `build/bench/latency %d %d %d`: %d threads, each making %d steps over a "
          "working set whose target swings between %d MiB and an eighth of it every 200,000 "
          "steps (so that memory is freed in bulk, given back and taken again), of mixed sizes "
          "(three in four 16-256 B, most others up to 64 KiB, one in 256 from 64 KiB to 1 MiB); "
          "a quarter of the blocks a thread frees go to the other thread through a shared "
          "array, so frees of other threads' blocks are timed too. Every call is timed with "
          "the time-stamp counter (`rdtsc` / `rdtscp` with fences), into buckets 12%% wide; "
          "so is an empty region at the same rate (the `empty` rows, the control: its tail is "
          "the host's own, interrupts and preemption, which no allocator can do better than). "
          "Percentiles and the maximum are the medians over %d interleaved runs; the counts "
          "of calls over 10 us, 100 us and 1 ms are their medians too. Peak RSS and wall time "
          "are each run's, medians. `releases on the helper`: "
          "`TIDEMALLOC_BACKGROUND_PURGE=2`, the helper thread makes every release "
          "(`docs/tuning.md`, item 3 of the release policy)."
          % (THREADS, OPS, HIGH_MIB, THREADS, OPS, HIGH_MIB, reps), ""]
    for kind in KINDS:
        rows = []
        for label, _, _ in configs:
            runs = res.get(label)
            if not runs:
                rows.append([label] + ["failed"] + [""] * (len(hdr) - 2))
                continue
            m = lambda col: median([r["rows"][kind][col] for r in runs])
            rows.append([label] + [fmt(m(c), "%.0f") for c in ("p50", "p90", "p99", "p99.9",
                                                                 "p99.99")]
                        + [fmt(m("max") / 1000, "%.0f")]
                        + [fmt(m(c), "%.0f") for c in ("over10us", "over100us", "over1ms")])
        title = {"malloc": "`malloc`", "free": "`free`",
                 "empty": "the empty region (the host's own tail)"}[kind]
        count = median([r["rows"][kind]["count"] for runs in res.values() for r in runs])
        log("== latency, %s (%.0f calls a run)" % (kind, count))
        log(text_table(hdr, rows))
        log("")
        md += ["### %s, %.0f calls a run" % (title, count), "", md_table(hdr, rows), ""]
    rows = []
    for label, _, _ in configs:
        runs = res.get(label)
        if runs:
            rows.append([label, "%.3f" % median([r["wall"] for r in runs]),
                         "%.1f" % (median([r["rss"] for r in runs]) / 1024),
                         "%.0f" % median([r["faults"] for r in runs])])
    hdr2 = ["allocator", "wall s", "peak RSS MiB", "page faults"]
    log(text_table(hdr2, rows))
    md += ["### Wall time and memory of the runs", "", md_table(hdr2, rows), ""]
    if not args.no_doc:
        write_section("latency", "\n".join(md))
    return 0
