#!/usr/bin/python3
"""tidemalloc benchmark runner (Python 3 standard library only).

    run.py bench   [--reps N] [--only a,b] [--allocs x,y] [--no-doc]
    run.py quick   the same on a quick subset, 3 repetitions, no doc update
    run.py insns   callgrind instructions per malloc(32)+free pair
    run.py ebizzy  ebizzy-like records/s and sys time, 1 and 2 threads
    run.py gs      ghostscript average RSS and wall time (seed 001)

Every benchmark runs with tidemalloc (LD_PRELOAD=build/libtidemalloc.so), glibc
and each installed peer, interleaved (A B C D E A B C D E ...). Each command
writes its own marked section of docs/benchmarks.md, so the targets can be run
separately without erasing one another's figures.
"""
import argparse
import datetime
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "bench")
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
BIN = os.path.join(BUILD, "bench")
LIB = os.path.join(BUILD, "libtidemalloc.so")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
SVG = os.path.join(ROOT, "docs", "benchmarks.svg")
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# name, preload (None: glibc itself), Debian package, is a peer, chart colour
ALLOCATORS = [
    ("tidemalloc", LIB, None, False, "#d62728"),
    ("glibc", None, "libc6", True, "#7f7f7f"),
    ("jemalloc", LIBDIR + "/libjemalloc.so.2", "libjemalloc2", True, "#1f77b4"),
    ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4", True, "#2ca02c"),
    ("mimalloc", LIBDIR + "/libmimalloc.so.2", "libmimalloc2.0", True, "#9467bd"),
]

# The benchmark table. {bin}: build/bench, {src}: bench/, {gen}: generated
# inputs. quick: member of the `make bench-quick` subset (with quick_argv).
# Fixed work and fixed seeds; each is sized to take about 0.5-2 s with glibc
# on a 2-core machine.
BENCHMARKS = [
    dict(name="churn", shape="single-thread small-object churn (random replace + LIFO batches)",
         argv=["{bin}/churn", "12"], quick_argv=["{bin}/churn", "6"]),
    dict(name="prodcons", shape="producer/consumer: one thread allocates, the other frees",
         argv=["{bin}/prodcons", "12"], quick_argv=["{bin}/prodcons", "8"]),
    dict(name="larson", shape="server simulation: 2 threads trade arrays, free random objects",
         argv=["{bin}/larson", "2", "20"], quick_argv=["{bin}/larson", "2", "10"]),
    dict(name="cache-thrash", shape="active false sharing: 2 threads alloc/write/free 8 B objects",
         argv=["{bin}/falseshare", "thrash", "2", "1000", "100"]),
    dict(name="cache-scratch", shape="passive false sharing: objects from main freed by workers",
         argv=["{bin}/falseshare", "scratch", "2", "1000", "100"]),
    dict(name="mstress", shape="4 threads, bursts of mixed sizes, cross-thread frees",
         argv=["{bin}/mstress", "4", "1600"], quick_argv=["{bin}/mstress", "4", "700"]),
    dict(name="large", shape="64 KiB-8 MiB blocks with realloc growth, pages touched",
         argv=["{bin}/large", "12"], quick_argv=["{bin}/large", "5"]),
    dict(name="threadchurn", shape="waves of 2 threads that allocate, hand off and exit",
         argv=["{bin}/threadchurn", "2", "2500"]),
    dict(name="python", shape="PYTHONMALLOC=malloc python3 object churn",
         argv=["/usr/bin/python3", "{src}/py_churn.py", "8"],
         env={"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}),
    dict(name="perl", shape="perl hash + sort churn",
         argv=["/usr/bin/perl", "{src}/perl_churn.pl", "3"],
         env={"PERL_HASH_SEED": "0", "PERL_PERTURB_KEYS": "0"}),
    dict(name="gcc", shape="gcc -O2 -c on a generated C file",
         argv=["/usr/bin/gcc", "-O2", "-c", "{gen}/gen.c", "-o", "/dev/null"], setup="gen_c"),
]

TIMEOUT_S = 120


# ---------------------------------------------------------------- helpers

def log(msg=""):
    print(msg, flush=True)


class Progress:
    """One progress line: rewritten in place on a terminal, else sparse lines."""

    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last_plain = 0.0

    def show(self, what):
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0
        line = "[%3d/%d %3d%%] %-46s elapsed %4.0fs eta %4.0fs" % (
            self.done + 1, self.total, 100 * self.done // max(self.total, 1), what, el, eta)
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K")
            sys.stderr.flush()
        elif el - self.last_plain >= 10 or self.done == 0:
            self.last_plain = el
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def step(self):
        self.done += 1

    def end(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def has_malloc(path):
    """True when path is a shared object that defines malloc."""
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return os.path.exists(path)
    return re.search(r"\sT malloc(@|$)", out, re.M) is not None


def available_allocators(wanted=None, quiet=False):
    """The allocators to run; prints a line for each one that is skipped."""
    out = []
    for name, preload, pkg, peer, colour in ALLOCATORS:
        if wanted and name not in wanted:
            continue
        if preload and not os.path.exists(preload):
            if not quiet:
                hint = "run `make lib`" if pkg is None else "apt-get install " + pkg
                log("skipping %s: %s not found (%s)" % (name, os.path.relpath(preload, ROOT)
                                                       if preload.startswith(ROOT) else preload, hint))
            continue
        if preload and not has_malloc(preload):
            if not quiet:
                log("skipping %s: %s does not define malloc" % (name, preload))
            continue
        out.append(dict(name=name, preload=preload, pkg=pkg, peer=peer, colour=colour))
    return out


def base_env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["LC_ALL"] = "C"
    return env


def alloc_env(alloc, extra=None):
    """The environment for a run; bench/launch turns BENCH_LD_PRELOAD into
    LD_PRELOAD for the command only."""
    env = base_env()
    if alloc["preload"]:
        env["BENCH_LD_PRELOAD"] = alloc["preload"]
    if extra:
        env.update(extra)
    return env


def read_report(path):
    rep = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                rep[k] = v.strip()
    except OSError:
        pass
    return rep


def run_once(argv, env, timeout=TIMEOUT_S, sample_rss=False):
    """Runs argv under bench/launch; returns wall, user, sys (s), rss (peak,
    KiB), rc, out, err and, with sample_rss, avg_rss: the mean of VmRSS
    sampled every 10 ms from /proc/PID/status (KiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="bench-report-") as report:
        p = subprocess.Popen([os.path.join(BIN, "launch"), report.name] + argv, env=env,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True)
        killed = []

        def kill():
            killed.append(1)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        samples = []
        try:
            if sample_rss:
                child = None
                next_t = time.perf_counter()
                while p.poll() is None:
                    if child is None:
                        child = read_report(report.name).get("pid")
                    if child:
                        try:
                            with open("/proc/%s/status" % child) as f:
                                m = re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M)
                            if m:
                                samples.append(int(m.group(1)))
                        except OSError:
                            pass
                    next_t += 0.010
                    time.sleep(max(0.0, next_t - time.perf_counter()))
            p.wait()
        finally:
            timer.cancel()
        rep = read_report(report.name)
        out.seek(0)
        err.seek(0)
        status = int(rep.get("status", "-1"))
        rc = os.waitstatus_to_exitcode(status) if status >= 0 else (p.returncode or 127)
        res = dict(wall=float(rep.get("wall", "nan")), user=float(rep.get("user", "nan")),
                   sys=float(rep.get("sys", "nan")), rss=int(rep.get("maxrss", "0")),
                   rc=rc, out=out.read().decode(errors="replace"),
                   err=err.read().decode(errors="replace"), timeout=bool(killed))
        if killed:
            res["rc"] = -9
        if sample_rss:
            res["avg_rss"] = statistics.mean(samples) if samples else float(res["rss"])
            res["samples"] = len(samples)
        return res


def failure_text(res):
    if res["timeout"]:
        return "timed out after %d s" % TIMEOUT_S
    rc = res["rc"]
    why = "killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc
    tail = res["err"].strip().splitlines()[-3:]
    return why + ("" if not tail else ": " + " | ".join(tail))


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and not math.isnan(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec % x


def pkg_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_text(allocs):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s+(\d+)", f.read(), re.M)
            mem = "%.1f GiB" % (int(m.group(1)) / 1048576) if m else mem
    except OSError:
        pass
    vers = []
    for a in allocs:
        if a["name"] == "tidemalloc":
            vers.append("tidemalloc (this tree%s)" % git_rev())
        elif a["name"] == "glibc":
            vers.append("glibc %s" % (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1])
        else:
            vers.append("%s %s" % (a["name"], pkg_version(a["pkg"])))
    return ("%s, %d CPUs, %s RAM, Linux %s; %s" %
            (cpu, os.cpu_count() or 0, mem, platform.release(), ", ".join(vers)))


def git_rev():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return ", " + r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


# ------------------------------------------------------------ docs/benchmarks.md

DOC_HEAD = """# tidemalloc benchmarks

Generated by `bench/run.py`; every section below is rewritten by its own make
target (`make bench`, `make bench-insns`, `make bench-ebizzy`, `make bench-gs`),
so the dates of the sections may differ. The benchmarks are our own programs in
`bench/`: fixed work, fixed seeds, each run with `LD_PRELOAD` of the allocator
(glibc: no preload). Peers are the Debian 12 packages `libjemalloc2`,
`libtcmalloc-minimal4` and `libmimalloc2.0` (`apt-get install` them; a missing
one is skipped).

"""

SECTIONS = ["bench", "insns", "checks", "ebizzy", "gs"]


def write_section(name, text):
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    try:
        with open(DOC) as f:
            doc = f.read()
    except OSError:
        doc = DOC_HEAD
    begin, end = "<!-- section:%s begin -->" % name, "<!-- section:%s end -->" % name
    block = "%s\n%s\n%s" % (begin, text.rstrip() + "\n", end)
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        # keep the sections in SECTIONS order
        pos = len(doc)
        for later in SECTIONS[SECTIONS.index(name) + 1:]:
            tag = "<!-- section:%s begin -->" % later
            if tag in doc:
                pos = doc.index(tag)
                break
        doc = doc[:pos].rstrip() + "\n\n" + block + "\n\n" + doc[pos:].lstrip()
    with open(DOC, "w") as f:
        f.write(doc.rstrip() + "\n")
    log("wrote section '%s' of %s" % (name, os.path.relpath(DOC, ROOT)))


def md_table(header, rows, align=None):
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header, rows):
    w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(c).ljust(w[0]) if i == 0 else str(c).rjust(w[i])
                               for i, c in enumerate(r))
    return "\n".join([line(header), line(["-" * x for x in w])] + [line(r) for r in rows])


# ------------------------------------------------------------ generated inputs

def gen_c(gen_dir):
    """A C file that keeps gcc -O2 busy for about a second: many functions with
    loops, switches, structs and inlinable helpers. Deterministic."""
    path = os.path.join(gen_dir, "gen.c")
    import random
    rng = random.Random(2024)
    out = ["/* generated by bench/run.py for the gcc benchmark */",
           "#include <stddef.h>", "struct rec { long a, b; double c; int v[8]; };",
           "static inline long mix(long x, long y) { return (x * 31) ^ (y >> 3); }"]
    nfun = 60
    for f in range(nfun):
        ops = ["+", "-", "*", "^", "|", "&"]
        body = ["long f%d(struct rec *r, size_t n, long k) {" % f, "  long acc = k;"]
        body.append("  for (size_t i = 0; i < n; i++) {")
        for s in range(rng.randrange(4, 12)):
            body.append("    acc = mix(acc %s r[i].a, r[i].v[%d]) %s %d;" %
                        (rng.choice(ops), rng.randrange(8), rng.choice(ops), rng.randrange(1, 999)))
            if rng.random() < 0.3:
                body.append("    if (acc > %d) r[i].c += (double)acc / %d.0;" %
                            (rng.randrange(1000), rng.randrange(1, 50)))
        body.append("  }")
        body.append("  switch (k & 15) {")
        for c in range(rng.randrange(4, 16)):
            body.append("  case %d: acc = mix(acc, %d) + r[%d %% (n ? n : 1)].b; break;" %
                        (c, rng.randrange(99999), c))
        body.append("  default: break;\n  }")
        if f and f % 4 == 0:
            body.append("  if (k > %d) acc += f%d(r, n / 2, k - 1);" % (rng.randrange(100), f - 1))
        body.append("  return acc;\n}")
        out.append("long f%d(struct rec *r, size_t n, long k);" % f)
        out.extend(body)
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def fill(argv, gen_dir):
    return [a.format(bin=BIN, src=SRC, gen=gen_dir) for a in argv]


# ---------------------------------------------------------------- make bench

def cmd_bench(args, quick):
    allocs = available_allocators(args.allocs)
    benches = [b for b in BENCHMARKS if (not quick or "quick_argv" in b)
               and (not args.only or b["name"] in args.only)]
    reps = args.reps or (3 if quick else 5)
    gen_dir = os.path.join(BIN, "gen")
    os.makedirs(gen_dir, exist_ok=True)
    for b in benches:
        if b.get("setup") == "gen_c":
            gen_c(gen_dir)
    log("%s: %d benchmarks x %d allocators x %d repetitions, interleaved" %
        ("bench-quick" if quick else "bench", len(benches), len(allocs), reps))
    prog = Progress(len(benches) * len(allocs) * reps)
    results = {}   # (bench, alloc) -> list of runs
    failures = []
    t_start = time.monotonic()
    load_start = loadavg()
    for b in benches:
        argv = fill(b["quick_argv"] if quick else b["argv"], gen_dir)
        for rep in range(reps):
            for a in allocs:
                prog.show("%s rep %d/%d %s" % (b["name"], rep + 1, reps, a["name"]))
                r = run_once(argv, alloc_env(a, b.get("env")))
                prog.step()
                if r["rc"] != 0 or r["timeout"]:
                    failures.append((b["name"], a["name"], failure_text(r)))
                    prog.end()
                    log("FAILED %s with %s: %s" % (b["name"], a["name"], failure_text(r)))
                    continue
                results.setdefault((b["name"], a["name"]), []).append(r)
    prog.end()
    elapsed = time.monotonic() - t_start
    load = (load_start, loadavg())
    summary = summarise(benches, allocs, results)
    print_bench(benches, allocs, summary, failures, elapsed)
    log("load average (1 min) at start %s, at end %s" % load)
    md = bench_markdown(benches, allocs, summary, failures, elapsed, reps, quick, load)
    if quick or args.no_doc:
        path = os.path.join(BIN, "quick.md" if quick else "bench.md")
        with open(path, "w") as f:
            f.write(md)
        log("wrote %s (docs/benchmarks.md is left as it is)" % os.path.relpath(path, ROOT))
    else:
        write_section("bench", md)
        write_svg(benches, allocs, summary)
    return 1 if failures else 0


def summarise(benches, allocs, results):
    s = {}
    for b in benches:
        row = {}
        for a in allocs:
            runs = results.get((b["name"], a["name"]))
            if runs:
                row[a["name"]] = dict(wall=median([r["wall"] for r in runs]),
                                      user=median([r["user"] for r in runs]),
                                      sys=median([r["sys"] for r in runs]),
                                      rss=median([r["rss"] for r in runs]),
                                      n=len(runs))
        peers = [row[a["name"]] for a in allocs if a["peer"] and a["name"] in row]
        best_t = min((p["wall"] for p in peers), default=None)
        best_r = min((p["rss"] for p in peers), default=None)
        for v in row.values():
            v["tr"] = v["wall"] / best_t if best_t else float("nan")
            v["rr"] = v["rss"] / best_r if best_r else float("nan")
        row["_best"] = ([a["name"] for a in allocs if a["peer"] and a["name"] in row
                         and row[a["name"]]["wall"] == best_t] or ["-"])[0]
        s[b["name"]] = row
    s["_geo"] = {a["name"]: dict(tr=geomean([s[b["name"]][a["name"]]["tr"] for b in benches
                                            if a["name"] in s[b["name"]]]),
                                rr=geomean([s[b["name"]][a["name"]]["rr"] for b in benches
                                            if a["name"] in s[b["name"]]]))
                 for a in allocs}
    return s


def bench_rows(b, allocs, summary):
    row = summary[b["name"]]
    rows = []
    for a in allocs:
        v = row.get(a["name"])
        if not v:
            rows.append([a["name"], "failed", "", "", "", "", ""])
            continue
        rows.append([a["name"], "%.3f" % v["wall"], "%.3f" % v["user"], "%.3f" % v["sys"],
                     "%.1f" % (v["rss"] / 1024), "%.2f" % v["tr"], "%.2f" % v["rr"]])
    return rows


HDR = ["allocator", "wall s", "user s", "sys s", "peak RSS MiB", "time/best", "RSS/best"]


def print_bench(benches, allocs, summary, failures, elapsed):
    log("")
    for b in benches:
        log("== %s: %s  (best peer: %s)" % (b["name"], b["shape"], summary[b["name"]]["_best"]))
        log(text_table(HDR, bench_rows(b, allocs, summary)))
        log("")
    geo = summary["_geo"]
    log("== geometric means of the ratios to the best peer (%d benchmarks)" % len(benches))
    log(text_table(["allocator", "time", "peak RSS"],
                   [[a["name"], fmt(geo[a["name"]]["tr"], "%.3f"), fmt(geo[a["name"]]["rr"], "%.3f")]
                    for a in allocs]))
    for f in failures:
        log("FAILED: %s with %s: %s" % f)
    log("total %.0f s" % elapsed)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def bench_markdown(benches, allocs, summary, failures, elapsed, reps, quick, load):
    geo = summary["_geo"]
    names = [a["name"] for a in allocs]
    L = ["## Benchmarks (`make %s`)" % ("bench-quick" if quick else "bench"), "",
         "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
         "- Machine: %s" % machine_text(allocs),
         "- Method: %d repetitions, runs interleaved across allocators; median wall, user and sys "
         "time (`wait4` rusage) and median peak RSS (`ru_maxrss` of the child). Ratios are to "
         "the best peer of glibc, jemalloc, tcmalloc and mimalloc on that benchmark "
         "(below 1.00: faster or smaller than every peer). Run took %.0f s; load average "
         "(1 min) %s at the start and %s at the end: on a shared machine wall time includes "
         "waiting for a CPU, compare user+sys too." % (reps, elapsed, load[0], load[1]),
         "", "![time ratio to the best peer](benchmarks.svg)", "",
         "### Time ratio to the best peer (median wall time)", ""]
    rows = [[b["name"]] + [fmt(summary[b["name"]].get(n, {}).get("tr"), "%.2f") for n in names]
            + [summary[b["name"]]["_best"]] for b in benches]
    rows.append(["**geometric mean**"] + ["**%s**" % fmt(geo[n]["tr"], "%.3f") for n in names] + [""])
    L += [md_table(["benchmark"] + names + ["best peer"], rows, ["l"] + ["r"] * len(names) + ["l"]), ""]
    L += ["### Peak RSS ratio to the best peer", ""]
    rows = [[b["name"]] + [fmt(summary[b["name"]].get(n, {}).get("rr"), "%.2f") for n in names]
            for b in benches]
    rows.append(["**geometric mean**"] + ["**%s**" % fmt(geo[n]["rr"], "%.3f") for n in names])
    L += [md_table(["benchmark"] + names, rows), ""]
    L += ["### Per benchmark", ""]
    for b in benches:
        cmd = " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x
                       for x in (b["quick_argv"] if quick else b["argv"]))
        cmd = cmd.replace("{bin}", "build/bench").replace("{src}", "bench").replace("{gen}", "build/bench/gen")
        envs = " ".join("%s=%s" % kv for kv in b.get("env", {}).items())
        L += ["#### %s" % b["name"], "", "%s. Command: `%s%s`" % (b["shape"][0].upper() + b["shape"][1:],
                                                                 envs + " " if envs else "", cmd), "",
              md_table(HDR, bench_rows(b, allocs, summary)), ""]
    if failures:
        L += ["### Failures", "", "A geometric mean leaves out the benchmarks on which that "
              "allocator failed every run.", ""]
        L += ["- %s with %s: %s" % f for f in sorted(set(failures))] + [""]
    return "\n".join(L)


def write_svg(benches, allocs, summary):
    """Grouped horizontal bars of the time ratio to the best peer."""
    names = [a["name"] for a in allocs]
    colours = {a["name"]: a["colour"] for a in allocs}
    groups = [(b["name"], summary[b["name"]]) for b in benches] + [("geomean", summary["_geo"])]
    bar, gap, left, width, top = 11, 10, 110, 520, 40
    cap = 2.5
    scale = width / cap
    height = top + len(groups) * (len(names) * bar + gap) + 40
    W = left + width + 90
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="11">' % (W, height),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="16" font-size="13" font-weight="bold">Wall time / best peer\'s '
         '(lower is better; bars cut at %.1f)</text>' % (left, cap)]
    # legend
    x = left
    for n in names:
        s.append('<rect x="%d" y="24" width="10" height="10" fill="%s"/>' % (x, colours[n]))
        s.append('<text x="%d" y="33">%s</text>' % (x + 13, n))
        x += 14 + 7 * len(n) + 14
    y = top
    for gname, row in groups:
        gh = len(names) * bar
        s.append('<text x="%d" y="%d" text-anchor="end"%s>%s</text>' %
                 (left - 6, y + gh / 2 + 4, ' font-weight="bold"' if gname == "geomean" else "", gname))
        for n in names:
            v = row.get(n, {}).get("tr")
            if v is not None and not math.isnan(v):
                w = min(v, cap) * scale
                s.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' %
                         (left, y, w, bar - 1, colours[n]))
                s.append('<text x="%.1f" y="%d" font-size="9">%.2f%s</text>' %
                         (left + w + 3, y + bar - 2, v, ">" if v > cap else ""))
            y += bar
        y += gap
    for t in [0.5, 1.0, 1.5, 2.0, 2.5]:
        xx = left + t * scale
        s.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%s"/>' %
                 (xx, top - 4, xx, y - gap + 4, "black" if t == 1.0 else "#ccc",
                  "1.2" if t == 1.0 else "0.6"))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>' % (xx, y + 12, t))
    s.append("</svg>")
    with open(SVG, "w") as f:
        f.write("\n".join(s) + "\n")
    log("wrote %s" % os.path.relpath(SVG, ROOT))


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
        "## Instructions per malloc(32)+free pair (`make bench-insns`)", "",
        "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "- Machine: %s" % machine_text(allocs),
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
    t_start = time.monotonic()
    load_start = loadavg()
    rows, wall_ratios, cpu_ratios, min_ratios, failed = [], [], [], [], 0
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
        wall_ratios.append(median([x["wall"] / y["wall"] for x, y in pairs]))
        cpu_ratios.append(median([cpu(x) / cpu(y) for x, y in pairs if cpu(y) > 0] or [float("nan")]))
        # The fastest run of each build: what a run costs when nothing else
        # slows it (the machine's noise only ever adds time).
        min_on, min_off = min(cpu(r) for r in on), min(cpu(r) for r in off)
        min_ratios.append(min_on / min_off if min_off > 0 else float("nan"))
        rows.append([b["name"], "%.3f" % w_on, "%.3f" % w_off, "%.3f" % wall_ratios[-1],
                     "%.3f" % c_on, "%.3f" % c_off, fmt(cpu_ratios[-1], "%.3f"),
                     fmt(min_ratios[-1], "%.3f")])
    prog.end()
    elapsed = time.monotonic() - t_start
    rows.append(["**geometric mean**", "", "", "**%.3f**" % geomean(wall_ratios), "", "",
                 "**%.3f**" % geomean(cpu_ratios), "**%.3f**" % geomean(min_ratios)])
    hdr = ["benchmark", "wall s, checks", "wall s, none", "wall ratio",
           "user+sys s, checks", "user+sys s, none", "user+sys ratio", "ratio of fastest"]
    log("")
    log(text_table(hdr, [[c.replace("*", "") for c in r] for r in rows]))
    md = "\n".join([
        "## Cost of the default checks (`make bench-checks`)", "",
        "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "- Machine: %s" % machine_text([dict(name="tidemalloc")]),
        "- Method: every `make bench` benchmark with `build/libtidemalloc.so` and with "
        "`build/nochecks/libtidemalloc.so` (`make lib-nochecks`: the same sources built with "
        "`-DTIDEMALLOC_NO_CHECKS`, so no link encoding, link check, pointer validation or "
        "double-free test), interleaved in ABBA order, %d repetitions; times are medians, a ratio is "
        "the median over repetitions of with checks / without, the two runs of a repetition being back "
        "to back (1.03 = the checks cost 3%%); the last column is the fastest user+sys of each build "
        "over all repetitions, with checks / without. Run took %.0f s; load average (1 min) %s at the start and "
        "%s at the end." % (reps, elapsed, load_start, loadavg()), "",
        md_table(hdr, rows), ""])
    if not args.no_doc:
        write_section("checks", md)
    return 1 if failed else 0


# ---------------------------------------------------------------- make bench-ebizzy

def cmd_ebizzy(args):
    allocs = available_allocators(args.allocs)
    secs = 2
    reps = args.reps or 3
    variants = [("mixed 192 KiB-1 MiB", "0"), ("fixed 192 KiB", "192")]
    configs = []   # (label, alloc, extra env)
    for a in allocs:
        configs.append((a["name"], a, None))
    # seed 000's setting: glibc 2.36 makes one madvise per free with it
    for a in allocs:
        if a["name"] in ("tidemalloc", "glibc"):
            configs.append((a["name"] + " MMAP_THRESHOLD_=256K", a,
                            {"MALLOC_MMAP_THRESHOLD_": "262144"}))
    prog = Progress(len(variants) * 2 * reps * len(configs))
    res = {}
    for vname, vsize in variants:
        for threads in (1, 2):
            for rep in range(reps):
                for label, a, extra in configs:
                    prog.show("ebizzy %s %dT rep %d %s" % (vsize, threads, rep + 1, label))
                    r = run_once([os.path.join(BIN, "ebizzy"), str(threads), str(secs), vsize],
                                 alloc_env(a, extra), timeout=60)
                    prog.step()
                    m = re.search(r"records_per_s=(\d+)", r["out"])
                    if r["rc"] != 0 or not m:
                        prog.end()
                        log("FAILED ebizzy with %s: %s" % (label, failure_text(r)))
                        continue
                    r["rps"] = int(m.group(1))
                    res.setdefault((vname, threads, label), []).append(r)
    prog.end()
    hdr = ["allocator", "records/s", "ratio to best peer", "sys s", "user s", "peak RSS MiB"]
    md = ["## ebizzy-like: large buffer allocate/search/free (`make bench-ebizzy`)", "",
          "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
          "- Machine: %s" % machine_text(allocs),
          "- Method: `build/bench/ebizzy THREADS %d SIZE`: worker threads (created threads, also "
          "with one) loop malloc(buffer), memcpy 192 KiB-1 MiB into it, 64 binary searches, free, "
          "for %d s; median of %d interleaved runs. sys s is kernel time in the %d s run: the goal "
          "is close to 0. Rows with `MMAP_THRESHOLD_=256K` set `MALLOC_MMAP_THRESHOLD_=262144`, "
          "seed 000's setting that turns glibc's dynamic threshold off." % (secs, secs, reps, secs),
          ""]
    for vname, _ in variants:
        for threads in (1, 2):
            rows = []
            best = max((median([r["rps"] for r in res[(vname, threads, a["name"])]])
                        for a in allocs if a["peer"] and (vname, threads, a["name"]) in res), default=None)
            for label, a, extra in configs:
                runs = res.get((vname, threads, label))
                if not runs:
                    rows.append([label, "failed", "", "", "", ""])
                    continue
                rps = median([r["rps"] for r in runs])
                rows.append([label, "%.0f" % rps, fmt(rps / best if best else None, "%.2f"),
                             "%.3f" % median([r["sys"] for r in runs]),
                             "%.3f" % median([r["user"] for r in runs]),
                             "%.1f" % (median([r["rss"] for r in runs]) / 1024)])
            title = "ebizzy, %s, %d thread%s" % (vname, threads, "s" if threads > 1 else "")
            log("== " + title)
            log(text_table(hdr, rows))
            log("")
            md += ["### " + title, "", md_table(hdr, rows), ""]
    if not args.no_doc:
        write_section("ebizzy", "\n".join(md))
    return 0


# ---------------------------------------------------------------- make bench-gs

def gen_ps(path, pages=24):
    """A PostScript document of text and vector graphics, generated here."""
    import random
    rng = random.Random(77)
    words = ("allocator heap segment page purge release madvise kernel thread cache span arena "
             "block chunk free list size class retain decay trim threshold mapping resident "
             "memory fragment latency throughput benchmark").split()
    fonts = ["Times-Roman", "Helvetica", "Courier", "Times-Bold", "Helvetica-Oblique", "Palatino-Roman"]
    out = ["%!PS-Adobe-3.0", "%%Pages: " + str(pages), "%%BoundingBox: 0 0 612 792",
           "%%EndComments"]
    for p in range(1, pages + 1):
        out += ["%%%%Page: %d %d" % (p, p), "save"]
        # background: many filled and stroked random curves
        for i in range(250):
            out.append("%.2f %.2f %.2f setrgbcolor newpath %d %d moveto %d %d %d %d %d %d curveto "
                       "%d %d lineto closepath %s" % (
                           rng.random(), rng.random(), rng.random(), rng.randrange(612),
                           rng.randrange(792), rng.randrange(612), rng.randrange(792),
                           rng.randrange(612), rng.randrange(792), rng.randrange(612),
                           rng.randrange(792), rng.randrange(612), rng.randrange(792),
                           "fill" if i % 3 else "0.7 setlinewidth stroke"))
        # a chart: a polyline with many points
        out.append("0 0 0 setrgbcolor 0.4 setlinewidth newpath 40 400 moveto")
        yv = 400.0
        for x in range(41, 572):
            yv = max(250.0, min(550.0, yv + rng.uniform(-6, 6)))
            out.append("%d %.1f lineto" % (x, yv))
        out.append("stroke")
        # a procedural grey image (the data string is allocated by the interpreter)
        out.append("gsave 400 640 translate 160 120 scale 64 48 8 [64 0 0 -48 0 48] "
                   "{ 64 string 0 1 63 { 1 index exch dup %d add 4 mul 255 and put } for } image grestore"
                   % p)
        # text in several fonts and sizes
        y = 760
        for line in range(46):
            size = rng.choice([7, 8, 9, 10, 12, 14])
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 14)))
            out.append("/%s findfont %d scalefont setfont 0 0 0.3 setrgbcolor %d %d moveto (%s) show"
                       % (rng.choice(fonts), size, 30 + rng.randrange(40), y, text))
            y -= 16
        out += ["restore", "showpage"]
    out.append("%%EOF")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


GS_CONFIGS = [
    # label, allocator, extra environment
    ("glibc", "glibc", {}),
    ("tidemalloc", "tidemalloc", {}),
    ("tidemalloc aggressive", "tidemalloc", {"MALLOC_AGGRESSIVE_MADVISE_": "1"}),
    ("jemalloc", "jemalloc", {}),
    ("jemalloc prompt", "jemalloc", {"MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}),
    ("tcmalloc", "tcmalloc", {}),
    ("tcmalloc prompt", "tcmalloc", {"TCMALLOC_RELEASE_RATE": "10",
                                     "TCMALLOC_AGGRESSIVE_DECOMMIT": "true"}),
    ("mimalloc", "mimalloc", {}),
    ("mimalloc prompt", "mimalloc", {"MIMALLOC_PURGE_DELAY": "0", "MIMALLOC_RESET_DELAY": "0",
                                     "MIMALLOC_SEGMENT_DECOMMIT_DELAY": "0"}),
]
GS_RES = 100


def cmd_gs(args):
    if not os.path.exists("/usr/bin/gs"):
        log("skipping bench-gs: /usr/bin/gs not found (apt-get install ghostscript)")
        return 0
    allocs = {a["name"]: a for a in available_allocators(args.allocs)}
    reps = args.reps or 3
    gdir = os.path.join(BIN, "gs")
    os.makedirs(gdir, exist_ok=True)
    ps, pdf = os.path.join(gdir, "doc.ps"), os.path.join(gdir, "doc.pdf")
    if not os.path.exists(pdf):
        gen_ps(ps)
        r = run_once(["gs", "-q", "-dSAFER", "-dBATCH", "-dNOPAUSE", "-sDEVICE=pdfwrite",
                      "-sOutputFile=" + pdf, ps], base_env(), timeout=300)
        if r["rc"] != 0:
            log("FAILED to make %s: %s" % (pdf, failure_text(r)))
            return 1
    argv = ["gs", "-q", "-dSAFER", "-dBATCH", "-dNOPAUSE", "-sDEVICE=png16m", "-r%d" % GS_RES,
            "-sOutputFile=/dev/null", pdf]
    configs = [c for c in GS_CONFIGS if c[1] in allocs]
    prog = Progress(reps * len(configs))
    res = {}
    for rep in range(reps):
        for label, an, extra in configs:
            prog.show("gs rep %d/%d %s" % (rep + 1, reps, label))
            r = run_once(argv, alloc_env(allocs[an], extra), timeout=300, sample_rss=True)
            prog.step()
            if r["rc"] != 0 or r["timeout"]:
                prog.end()
                log("FAILED gs with %s: %s" % (label, failure_text(r)))
                continue
            res.setdefault(label, []).append(r)
    prog.end()
    hdr = ["allocator (setting)", "avg RSS MiB", "peak RSS MiB", "wall s", "user s", "sys s",
           "avg RSS vs glibc", "wall vs glibc"]
    base = res.get("glibc")
    b_rss = median([r["avg_rss"] for r in base]) if base else None
    b_wall = median([r["wall"] for r in base]) if base else None
    rows, med = [], {}
    for label, an, extra in configs:
        runs = res.get(label)
        if not runs:
            rows.append([label, "failed", "", "", "", "", "", ""])
            continue
        m = {k: median([r[k] for r in runs]) for k in ("avg_rss", "rss", "wall", "user", "sys")}
        med[label] = m
        rows.append([label, "%.1f" % (m["avg_rss"] / 1024), "%.1f" % (m["rss"] / 1024),
                     "%.3f" % m["wall"], "%.3f" % m["user"], "%.3f" % m["sys"],
                     fmt(m["avg_rss"] / b_rss if b_rss else None, "%.2f"),
                     fmt(m["wall"] / b_wall if b_wall else None, "%.3f")])
    log(text_table(hdr, rows))
    verdict = ""
    off, on = med.get("tidemalloc"), med.get("tidemalloc aggressive")
    if off and on:
        drop = 1 - on["avg_rss"] / off["avg_rss"]
        cost = on["wall"] / off["wall"] - 1
        cpu = (on["user"] + on["sys"]) / (off["user"] + off["sys"]) - 1
        ok = drop >= 0.14 and cost <= 0.024
        verdict = ("tidemalloc aggressive mode vs default: average RSS %+.1f%%, wall time %+.1f%% "
                   "(user+sys %+.1f%%); goal: at least 14%% less RSS for at most 2.4%% more time: %s."
                   % (-100 * drop, 100 * cost, 100 * cpu, "met" if ok else "NOT met"))
        log(verdict)
    envs = "; ".join("%s: `%s`" % (l, " ".join("%s=%s" % kv for kv in e.items()))
                     for l, _, e in configs if e)
    md = ["## ghostscript RSS, seed 001's experiment (`make bench-gs`)", "",
          "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
          "- Machine: %s; ghostscript %s" % (machine_text(list(allocs.values())), pkg_version("ghostscript")),
          "- Document: generated by `bench/run.py` (%s): 24 pages of text in 6 fonts, 250 random "
          "filled/stroked curves, a 530-point polyline and a procedural image per page, converted "
          "once to PDF with pdfwrite." % "build/bench/gs/doc.ps",
          "- Command: `gs -q -dSAFER -dBATCH -dNOPAUSE -sDEVICE=png16m -r%d "
          "-sOutputFile=/dev/null build/bench/gs/doc.pdf`; VmRSS sampled every 10 ms from "
          "/proc/PID/status and averaged; median of %d interleaved runs." % (GS_RES, reps),
          "- Settings: " + envs, "", md_table(hdr, rows, ["l"] + ["r"] * 7), ""]
    if verdict:
        md += [verdict, ""]
    if not args.no_doc:
        write_section("gs", "\n".join(md))
    return 0


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["bench", "quick", "insns", "checks", "ebizzy", "gs", "list"])
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 5; quick 3)")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None, help="benchmarks, comma-separated")
    ap.add_argument("--allocs", type=lambda s: s.split(","), default=None, help="allocators, comma-separated")
    ap.add_argument("--no-doc", action="store_true", help="do not touch docs/")
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
    return {"insns": cmd_insns, "checks": cmd_checks, "ebizzy": cmd_ebizzy,
            "gs": cmd_gs}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
