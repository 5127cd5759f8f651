"""`make bench-scaling`: the multithreaded benchmarks at 1, 2, 4, ... threads,
each thread doing the same work at every count (weak scaling), so a perfect
allocator keeps the wall time flat as threads are added. By default the
counts go up to the machine's CPUs (16 at most): on the project's 2-core
machine, 1 and 2.

Peers are found in BENCH_PEER_LIBDIR when it is set (a machine without the
Debian packages can be handed copies of their shared objects)."""

import os
import re
import time

from harness import (BIN, Progress, alloc_env, available_allocators, failure_text, fmt, geomean,
                     loadavg, log, machine_text, md_table, median, rotated, run_once, section_head,
                     write_section)


# name, shape, argv with {t}: the thread count and {t12}: 12 times it. Each
# thread's share of the work is fixed; each is sized to take about 0.1-0.3 s
# per run on one core of the project's machine. ebizzy runs for a fixed time
# and is measured by its records/s.
SCALING = [
    ("larson", "threads trade arrays and replace random objects of 16-1000 B",
     ["larson", "{t}", "{t12}"]),
    ("mstress", "bursts of mixed sizes, kept, freed locally or handed to another thread",
     ["mstress", "{t}", "6000"]),
    ("cache-thrash", "each thread allocates, writes and frees 8 B objects (active false sharing)",
     ["falseshare", "thrash", "{t}", "500", "100"]),
    ("cache-scratch", "objects from main freed by the workers, then thrash (passive false sharing)",
     ["falseshare", "scratch", "{t}", "500", "100"]),
    # 500 waves: with 2000, jemalloc took 23 s a run at 16 threads on 16 CPUs
    ("threadchurn", "waves of T threads that allocate, hand off and exit",
     ["threadchurn", "{t}", "500"]),
    ("ebizzy", "192 KiB-1 MiB buffers: allocate, fill, search, free, for 1 s (records/s)",
     ["ebizzy", "{t}", "1", "0"]),
]


def argv_for(template, threads):
    return [a.format(t=threads, t12=12 * threads) for a in template]


def cost(name, threads, r):
    """The run's cost in seconds, lower is better: its wall time, or for
    ebizzy the time one thread takes for 1000 records (so flat is perfect
    there too)."""
    if name != "ebizzy":
        return r["wall"]
    m = re.search(r"records_per_s=(\d+)", r["out"])
    return 1000.0 * threads / int(m.group(1)) if m and int(m.group(1)) > 0 else float("nan")


def read_runs(paths):
    """The runs of earlier `--md` runs' .runs files: (machine line, results,
    thread counts, allocator names, repetitions)."""
    machine, res, counts, names, reps = None, {}, [], [], 0
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.startswith("# machine: "):
                    machine = machine or line[len("# machine: "):].strip()
                    continue
                name, t, alloc, rep, *fields = line.split()
                r = {k: float(v) for k, v in (x.split("=") for x in fields)}
                res.setdefault((name, int(t), alloc), []).append(r)
                counts += [] if int(t) in counts else [int(t)]
                names += [] if alloc in names else [alloc]
                reps = max(reps, int(rep) + 1)
    return machine, res, sorted(counts), names, reps


def default_counts(cpus):
    """1, 2, 4, ... up to the CPUs (and the CPUs themselves), at most 16:
    more threads than CPUs would measure time-sharing, not the allocator."""
    counts, t = [], 1
    while t <= min(cpus, 16):
        counts.append(t)
        t *= 2
    if cpus <= 16 and counts[-1] != cpus:
        counts.append(cpus)
    return counts


def cmd_scaling(args):
    allocs = available_allocators(args.allocs)
    counts = args.threads or default_counts(os.cpu_count() or 1)
    reps = args.reps or 3
    benches = [b for b in SCALING if not args.only or b[0] in args.only]
    if args.from_runs:
        machine, res, counts, names, reps = read_runs(args.from_runs)
        allocs = [a for a in available_allocators(quiet=True) if a["name"] in names]
        benches = [b for b in benches if any(k[0] == b[0] for k in res)]
        md = scaling_markdown(benches, counts, allocs, res, [], reps, None, None, machine)
        write_markdown(args, md)
        return 0
    log("bench-scaling: %d benchmarks x threads %s x %d allocators x %d repetitions, "
        "interleaved; %d CPUs" % (len(benches), ",".join(map(str, counts)), len(allocs), reps,
                                   os.cpu_count() or 0))
    prog = Progress(len(benches) * len(counts) * len(allocs) * reps)
    res, failures = {}, []
    # one line per run as it ends, so that a run cut short keeps its figures
    raw = open(args.md + ".runs", "w") if args.md else None
    if raw:
        raw.write("# machine: %s\n" % machine_text(allocs))
    t0 = time.monotonic()
    load0 = loadavg()
    for name, _, template in benches:
        for t in counts:
            argv = argv_for(template, t)
            argv[0] = os.path.join(BIN, argv[0])
            for rep in range(reps):
                for a in rotated(allocs, rep):
                    prog.show("%s %dT rep %d/%d %s" % (name, t, rep + 1, reps, a["name"]))
                    r = run_once(argv, alloc_env(a), timeout=120)
                    prog.step()
                    c = cost(name, t, r) if r["rc"] == 0 and not r["timeout"] else float("nan")
                    if c != c:
                        prog.end()
                        failures.append((name, t, a["name"], failure_text(r)))
                        log("FAILED %s %dT with %s: %s" % (name, t, a["name"], failure_text(r)))
                        continue
                    r["cost"] = c
                    res.setdefault((name, t, a["name"]), []).append(r)
                    if raw:
                        raw.write("%s %d %s %d wall=%.4f user=%.4f sys=%.4f rss=%d faults=%d "
                                  "cost=%.5f\n" % (name, t, a["name"], rep, r["wall"], r["user"],
                                                   r["sys"], r["rss"], r["faults"], c))
                        raw.flush()
    prog.end()
    if raw:
        raw.close()
    elapsed = time.monotonic() - t0
    md = scaling_markdown(benches, counts, allocs, res, failures, reps, elapsed, (load0, loadavg()))
    log(md)
    write_markdown(args, md)
    return 1 if failures else 0


def write_markdown(args, md):
    """The table to --md's file, if given, and to docs/benchmarks.md unless
    --no-doc."""
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
        log("wrote %s" % args.md)
    if not args.no_doc:
        write_section("scaling", md)


def summarise(benches, counts, allocs, res):
    """(bench, threads) -> {allocator: median cost, '_best': best peer,
    '_ratio': tidemalloc / best peer} and (bench, threads, 'rss') likewise."""
    s = {}
    peers = [a["name"] for a in allocs if a["peer"]]
    for name, _, _ in benches:
        for t in counts:
            row = {a["name"]: median([r["cost"] for r in res.get((name, t, a["name"]), [])])
                   for a in allocs}
            rss = {a["name"]: median([r["rss"] for r in res.get((name, t, a["name"]), [])])
                   for a in allocs}
            for key, d in ((name, row), (name + "/rss", rss)):
                ok = [p for p in peers if d[p] == d[p]]
                best = min(ok, key=lambda p: d[p], default=None)
                d["_best"] = best or "-"
                d["_ratio"] = d.get("tidemalloc", float("nan")) / d[best] if best else float("nan")
                s[(key, t)] = d
    return s


def scaling_markdown(benches, counts, allocs, res, failures, reps, elapsed, load, machine=None):
    s = summarise(benches, counts, allocs, res)
    names = [a["name"] for a in allocs]
    took = ("Run took %.0f s; load average (1 min) %s at the start and %s at the end."
            % (elapsed, load[0], load[1]) if elapsed is not None
            else "Assembled from the runs' `.runs` files (`--from-runs`).")
    L = [*section_head("Thread scaling (`make bench-scaling`)", machine or machine_text(allocs)),
         "- Method: each benchmark at %s threads, every thread doing the same work at every "
         "count, so flat is perfect; %d repetitions interleaved across allocators; median wall "
         "time in ms (ebizzy: the ms one thread takes for 1000 records, from its records/s "
         "over 1 s), median "
         "peak RSS. Ratios are tidemalloc's to the best peer at that count. %s"
         % (", ".join(map(str, counts)), reps, took), ""]
    rows = []
    for t in counts:
        rows.append([str(t)] + [fmt(s[(n, t)]["_ratio"], "%.2f") for n, _, _ in benches]
                    + [fmt(geomean([s[(n, t)]["_ratio"] for n, _, _ in benches]), "**%.3f**")])
    L += ["### Time ratio to the best peer, by thread count", "",
          md_table(["threads"] + [n for n, _, _ in benches] + ["geometric mean"], rows), ""]
    rows = []
    for t in counts:
        rows.append([str(t)] + [fmt(s[(n + "/rss", t)]["_ratio"], "%.2f") for n, _, _ in benches]
                    + [fmt(geomean([s[(n + "/rss", t)]["_ratio"] for n, _, _ in benches]),
                           "**%.3f**")])
    L += ["### Peak RSS ratio to the best peer, by thread count", "",
          md_table(["threads"] + [n for n, _, _ in benches] + ["geometric mean"], rows), ""]
    L += ["### Per benchmark", ""]
    for name, shape, template in benches:
        cmd = "build/bench/" + " ".join(a.format(t="T", t12="12T") for a in template)
        L += ["#### %s" % name, "", "%s. Command: `%s`." % (shape[0].upper() + shape[1:], cmd), ""]
        rows = []
        for t in counts:
            d, m = s[(name, t)], s[(name + "/rss", t)]
            rows.append([str(t)] + [fmt(d[n] * 1000, "%.0f") for n in names]
                        + [fmt(d["_ratio"], "%.2f"), d["_best"]]
                        + [fmt(m[n] / 1024, "%.1f") for n in names])
        L += [md_table(["threads"] + ["%s ms" % n for n in names] + ["time/best", "best peer"]
                       + ["%s MiB" % n for n in names], rows,
                       ["l"] + ["r"] * (len(names) + 1) + ["l"] + ["r"] * len(names)), ""]
    if failures:
        L += ["### Failures", ""] + ["- %s at %d threads with %s: %s" % f for f in failures] + [""]
    return "\n".join(L)
