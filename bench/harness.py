"""Shared by the benchmark commands: where things are, which allocators
there are, running one command under one of them (through build/bench/launch)
and measuring it, small statistics, and writing a marked section of
docs/benchmarks.md."""

import datetime
import math
import os
import platform
import random
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
# Where the peers' shared objects are: BENCH_PEER_LIBDIR points elsewhere on a
# machine that has copies of them rather than the Debian packages.
LIBDIR = os.environ.get("BENCH_PEER_LIBDIR", "/usr/lib/x86_64-linux-gnu")

# name, preload (None: glibc itself), Debian package, is a peer, chart colour
ALLOCATORS = [
    ("tidemalloc", LIB, None, False, "#d62728"),
    ("glibc", None, "libc6", True, "#7f7f7f"),
    ("jemalloc", LIBDIR + "/libjemalloc.so.2", "libjemalloc2", True, "#1f77b4"),
    ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4", True, "#2ca02c"),
    ("mimalloc", LIBDIR + "/libmimalloc.so.2", "libmimalloc2.0", True, "#9467bd"),
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
    KiB), rss_kernel (ru_maxrss alone, KiB), faults (minor page faults), rc, out, err and, with sample_rss, avg_rss: the mean of VmRSS
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
                   sys=float(rep.get("sys", "nan")),
                   # VmHWM at the exit is exact where ru_maxrss reads up to 31 pages per
                   # CPU low (bench/launch.c); ru_maxrss alone covers the command's
                   # children (gcc's cc1), so the larger of the two.
                   rss=max(int(rep.get("hwm", "0")), int(rep.get("maxrss", "0"))),
                   rss_kernel=int(rep.get("maxrss", "0")),
                   faults=int(rep.get("minflt", "0")),
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


def rotated(items, rep):
    """items in turn, repetition `rep` starting `rep` places on: so that a host
    that speeds up or slows down within repetitions favours none of them."""
    k = rep % len(items) if items else 0
    return items[k:] + items[:k]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and not math.isnan(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def bootstrap_interval(samples, level=0.95, rounds=2000, seed=1):
    """How far the geometric mean over benchmarks of each benchmark's median
    could move had the run's repetitions come out otherwise (a change of the
    host slower than a run moves figures further, between runs). `samples`
    holds one list of per-repetition figures a benchmark; each round
    resamples every list with replacement, and the interval holds the middle
    `level` of the rounds' figures. One list: the interval of its median. A
    fixed seed, so that the same runs print the same interval."""
    samples = [xs for xs in samples if xs]
    if not samples:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    figures = sorted(geomean([median([xs[rng.randrange(len(xs))] for _ in xs]) for xs in samples])
                     for _ in range(rounds))
    cut = int(round(rounds * (1 - level) / 2))
    return figures[cut], figures[rounds - 1 - cut]


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec % x


def interval_text(interval, spec="%.3f"):
    """An interval of bootstrap_interval as `low-high`."""
    return "%s-%s" % (fmt(interval[0], spec), fmt(interval[1], spec))


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
target (`make bench`, `make bench-insns`, `make bench-checks`, `make bench-cache`,
`make bench-ebizzy`, `make bench-gs`, `make bench-latency`, `make bench-scaling`),
so the dates of the sections may differ. The benchmarks are our own programs in
`bench/`: fixed work, fixed seeds, each run with `LD_PRELOAD` of the allocator
(glibc: no preload). Peers are the Debian 12 packages `libjemalloc2`,
`libtcmalloc-minimal4` and `libmimalloc2.0` (`apt-get install` them; a missing
one is skipped).

"""

SECTIONS = ["bench", "insns", "checks", "cache", "ebizzy", "gs", "latency", "scaling"]


def section_head(title, machine):
    """The first lines of a section of docs/benchmarks.md: its title, the
    date and the machine."""
    return ["## " + title, "", "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "- Machine: %s" % machine]


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




def host_probe():
    """One line on the host's state (bench/hostprobe.c): a first-touch fault,
    a cache line's round trip between two threads, a serial loop. A run's
    header gives it at the start and at the end, so that its ratios can be
    read against the host's phase."""
    try:
        r = subprocess.run([os.path.join(BIN, "hostprobe")], capture_output=True, text=True,
                           timeout=30)
        return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"
