#!/usr/bin/env bash
# The benchmark harness's launcher (bench/launch): the figures `make bench`
# reports come from it, so it must pass the command's exit status and signals
# through untouched and report the peak RSS exactly (VmHWM at the command's
# exit: ru_maxrss reads up to 31 pages per CPU low, see bench/launch.c).
# Prints one PASS/FAIL/SKIP line per test and always exits 0.
set -u
ROOT=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || { echo "FAIL bench-setup cannot cd to $ROOT"; exit 0; }
CC=${CC:-cc}

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1 $2"; }
skip() { echo "SKIP $1 $2"; }
# PASS NAME when a check's output is "ok", else FAIL NAME with its last lines.
verdict() {
  if [ "$2" = ok ]; then pass "$1"
  else fail "$1" "$(echo "$2" | tail -3 | tr '\n' ' ' | cut -c1-400)"; fi
}
# make -s TARGETS...; when that fails, FAIL NAME with make's output and
# return 1.
built() {
  local name=$1
  shift
  make -s "$@" >"$TMP/make-$name.log" 2>&1 && return 0
  fail "$name" "$(tr '\n' ' ' < "$TMP/make-$name.log" | cut -c1-300)"
  return 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tm-bench.XXXXXX") || { echo "FAIL bench-setup mktemp"; exit 0; }
trap 'rm -rf "$TMP"' EXIT
unset LD_PRELOAD

if ! make -s build/bench/launch >"$TMP/make.log" 2>&1; then
  fail bench-launch-build "$(tr '\n' ' ' < "$TMP/make.log" | cut -c1-300)"
  exit 0
fi
LAUNCH=$ROOT/build/bench/launch

# The command: touches PAGES pages one at a time, so that the last ones sit in
# the kernel's per-CPU counters; counts the signals its handler got; writes
# its own exact VmRSS (KiB) and leaves at once (_exit: nothing more mapped),
# with status 3, or execs ARGV[3].
cat > "$TMP/touch.c" <<'CEOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile sig_atomic_t got;
static void on_signal(int s) { (void)s; got++; }
static long own_rss_kib(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    char *p = strstr(buf, "\nVmRSS:");
    return p ? atol(p + 7) : -1L;
}
int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 0;
    char out[64];
    signal(SIGUSR1, on_signal);
    signal(SIGTRAP, on_signal);
    if (argc > 2 && strcmp(argv[2], "signals") == 0) { raise(SIGUSR1); raise(SIGTRAP); }
    /* Everything the end runs, run once before the pages are touched. */
    int len = snprintf(out, sizeof out, "rss %ld got %d\n", own_rss_kib(), (int)got);
    char *m = mmap(NULL, (size_t)pages * 4096 + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || len < 0 || write(1, out, 0) != 0) return 2;
    for (long i = 0; i < pages; i++) m[i * 4096] = 1;
    len = snprintf(out, sizeof out, "rss %ld got %d\n", own_rss_kib(), (int)got);
    if (write(1, out, (size_t)len) != len) return 2;
    if (argc > 3) execv(argv[3], argv + 3);
    _exit(3);
}
CEOF
if ! $CC -O2 -o "$TMP/touch" "$TMP/touch.c" 2>"$TMP/cc.log"; then
  fail bench-launch-setup "$(tr '\n' ' ' < "$TMP/cc.log" | cut -c1-300)"
  exit 0
fi
field() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }

# Exit status and the raw wait status are the command's.
out=$("$LAUNCH" "$TMP/rep" "$TMP/touch" 10); rc=$?
if [ $rc -eq 3 ] && [ "$(field status "$TMP/rep")" = 768 ] && [ -n "$(field pid "$TMP/rep")" ]; then
  pass bench-launch-exit-status
else
  fail bench-launch-exit-status "rc=$rc, report: $(tr '\n' ' ' < "$TMP/rep")"
fi

# Signals the command raises reach its handlers (SIGTRAP too: only exec
# events are the tracer's); a command killed by a signal is reported so.
out=$("$LAUNCH" "$TMP/rep" "$TMP/touch" 10 signals); rc=$?
if [ $rc -eq 3 ] && echo "$out" | grep -q "got 2$"; then pass bench-launch-signals
else fail bench-launch-signals "rc=$rc, output '$out' (want got 2)"; fi
"$LAUNCH" "$TMP/rep" sh -c 'kill -TERM $$' >/dev/null 2>&1; rc=$?
if [ $rc -eq 143 ] && [ "$(field status "$TMP/rep")" = 15 ]; then pass bench-launch-killed
else fail bench-launch-killed "rc=$rc (want 143), report: $(tr '\n' ' ' < "$TMP/rep")"; fi

# Peak RSS: 2000 pages (7.8 MiB) touched. The command's own exact reading at
# its end is the answer, give or take the 64 KiB window of libc the first call
# of _exit maps (the kernel maps file pages 64 KiB at a time); ru_maxrss may
# read lower (the report keeps it), never higher.
out=$("$LAUNCH" "$TMP/rep" "$TMP/touch" 2000); rc=$?
own=$(echo "$out" | awk '/^rss/ { print $2 }')
hwm=$(field hwm "$TMP/rep"); hwm=${hwm:-0}; maxrss=$(field maxrss "$TMP/rep")
if [ "$(field traced "$TMP/rep")" = 0 ]; then
  skip bench-launch-peak-rss "ptrace refused here: only ru_maxrss ($maxrss KiB) is reported"
elif [ $rc -eq 3 ] && [ "$hwm" -ge "$own" ] && [ "$hwm" -le $((own + 64)) ] && [ "$own" -ge 8000 ] &&
     [ "$maxrss" -le "$hwm" ]; then
  pass bench-launch-peak-rss
else
  fail bench-launch-peak-rss "command's own VmRSS at its end $own KiB, launch hwm $hwm, ru_maxrss $maxrss, rc $rc"
fi

# A command that execs: its peak is the new image's or the old one's, the
# larger; ru_maxrss (kept in the report) covers the image before the exec.
out=$("$LAUNCH" "$TMP/rep" "$TMP/touch" 2000 x /bin/true); rc=$?
maxrss=$(field maxrss "$TMP/rep")
if [ $rc -eq 0 ] && [ "${maxrss:-0}" -ge 7000 ]; then pass bench-launch-exec
else fail bench-launch-exec "rc=$rc, ru_maxrss ${maxrss:-none} KiB (want >= 7000: the image before exec)"; fi

# The paired ratio (bench/suite.py): each run divided by the best peer's run
# of the same repetition. Synthetic runs: tidemalloc 10% faster than the peer
# in every repetition, while the host's speed halves between repetitions and
# one of tidemalloc's runs failed (no entry for repetition 2). The ratio of
# medians reads 0.61 here; the paired figure must read 0.909 (1/1.1), and RSS
# 2.0. An allocator failed everywhere on a benchmark gets no figure ("nan").
out=$(cd "$ROOT/bench" && python3 - <<'PYEOF' 2>&1
import math
from suite import paired_ratios
allocs = [dict(name="tidemalloc", peer=False), dict(name="glibc", peer=True),
          dict(name="jemalloc", peer=True)]
benches = [dict(name="b")]
def run(rep, wall, rss):
    return dict(rep=rep, wall=wall, rss=rss)
results = {("b", "tidemalloc"): [run(0, 1.0, 20), run(1, 2.0, 20), run(3, 4.0, 20)],
           ("b", "glibc"): [run(r, 1.1 * 2 ** r, 10) for r in range(4)],
           ("b", "jemalloc"): [run(r, 5.0 * 2 ** r, 30) for r in range(4)]}
p = paired_ratios(benches, allocs, results)
ok = (abs(p["tidemalloc"]["tr"] - 1 / 1.1) < 1e-9 and abs(p["tidemalloc"]["rr"] - 2.0) < 1e-9
      and abs(p["glibc"]["tr"] - 1.0) < 1e-9 and abs(p["jemalloc"]["tr"] - 5 / 1.1) < 1e-9)
# resampled, our three repetitions' ratios (1/1.1 twice, 4/8.8 once) give
# either median often
lo, hi = p["tidemalloc"]["tr_interval"]
ok = ok and abs(lo - 4 / 8.8) < 1e-9 and abs(hi - 1 / 1.1) < 1e-9
ok = ok and p["tidemalloc"]["rr_interval"] == (2.0, 2.0)
del results[("b", "jemalloc")]
p = paired_ratios(benches, allocs, results)
ok = ok and math.isnan(p["jemalloc"]["tr"]) and abs(p["tidemalloc"]["tr"] - 1 / 1.1) < 1e-9
ok = ok and all(math.isnan(x) for x in p["jemalloc"]["tr_interval"])
print("ok" if ok else "wrong: %r" % p)
PYEOF
)
verdict bench-paired-ratio "$out"

# The checks' 95% intervals (bench/run.py checks): each benchmark's ratios
# resampled, the geometric mean of the medians taken each round. Ratios that
# never vary give a point; two values give an interval from one to the other;
# the interval holds the figure it is about, narrows with more repetitions of
# the same spread, skips benchmarks with no pairs, and repeats exactly.
out=$(cd "$ROOT/bench" && python3 - <<'PYEOF' 2>&1
import math
from harness import bootstrap_interval, geomean, median
ok = bootstrap_interval([[1.03] * 45] * 11) == (1.03, 1.03)
ok = ok and bootstrap_interval([[2.0] * 5, [0.5] * 5]) == (1.0, 1.0)
ok = ok and bootstrap_interval([[1.0] * 20 + [1.1] * 21]) == (1.0, 1.1)
ok = ok and bootstrap_interval([[], [1.2] * 3]) == (1.2, 1.2)
ok = ok and all(math.isnan(x) for x in bootstrap_interval([[], []]))
spread = [1 + ((i * 7) % 10) / 100 for i in range(10)]
samples = [spread, [x * 1.05 for x in spread[3:]], [1.01, 0.99, 1.02]]
lo, hi = bootstrap_interval(samples)
point = geomean([median(xs) for xs in samples])
ok = ok and lo < point < hi and bootstrap_interval(samples) == (lo, hi)
small = bootstrap_interval([spread])
big = bootstrap_interval([spread * 20])
ok = ok and big[1] - big[0] < small[1] - small[0] and small[0] <= median(spread) <= small[1]
print("ok" if ok else "wrong: %r %r %r %r" % ((lo, hi), point, small, big))
PYEOF
)
verdict bench-bootstrap-interval "$out"

# make bench-cache's reading of cachegrind's summary: the data misses of the
# first level (D1) and of the last (LLd), not the instruction or combined
# lines beside them; then a real cachegrind run of a small command, whose
# summary must read so (a valgrind that words it otherwise fails here, not
# as a blank table).
out=$(cd "$ROOT/bench" && python3 - <<'PYEOF' 2>&1
import os, shutil
from cache_sim import parse_cachegrind, simulate
summary = """==7== I1  misses:          1,234
==7== LLi misses:          1,100
==7== D   refs:       69,066,159  (50,345,727 rd   + 18,720,432 wr)
==7== D1  misses:      6,300,598  ( 4,472,017 rd   +  1,828,581 wr)
==7== LLd misses:         63,086  (     2,082 rd   +     61,004 wr)
==7== D1  miss rate:         9.1% (       8.9%     +        9.8%  )
==7== LL misses:          64,186  (     3,182 rd   +     61,004 wr)
"""
ok = parse_cachegrind(summary) == {"D1": 6300598, "LLd": 63086}
ok = ok and parse_cachegrind(summary.replace("LLd", "LLx")) == {"D1": 6300598}
if shutil.which("valgrind"):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    got = simulate(["/bin/true"], env, "1048576,8,64")
    ok = ok and 0 < got["LLd"] <= got["D1"]
print("ok" if ok else "wrong: %r" % parse_cachegrind(summary))
PYEOF
)
verdict bench-cache-parse "$out"

# make bench-scaling's arithmetic: the runs file read back (the machine line
# kept), ebizzy's records/s turned into the time one thread takes for 1000
# records, the ratio to the best peer at each thread count, and the default
# thread counts (up to the CPUs, 16 at most).
out=$(cd "$ROOT/bench" && TMPF="$TMP/s.runs" python3 - <<'PYEOF' 2>&1
import math, os
from scaling import cost, default_counts, read_runs, summarise, SCALING
path = os.environ["TMPF"]
with open(path, "w") as f:
    f.write("# machine: test box, 16 CPUs\n")
    for rep in range(3):
        for t, tm, gl, je in ((1, 1.0, 2.0, 0.5), (4, 3.0, 2.0, 4.0)):
            for name, c in (("tidemalloc", tm), ("glibc", gl), ("jemalloc", je)):
                f.write("larson %d %s %d wall=%.4f user=0 sys=0 rss=%d faults=0 cost=%.5f\n"
                        % (t, name, rep, c * (1 + rep), 1024 * (t + rep), c + 0.001 * rep))
machine, res, counts, names, reps = read_runs([path])
allocs = [dict(name=n, peer=n != "tidemalloc") for n in names]
benches = [b for b in SCALING if b[0] == "larson"]
s = summarise(benches, counts, allocs, res)
ok = (machine == "test box, 16 CPUs" and counts == [1, 4] and reps == 3
      and names == ["tidemalloc", "glibc", "jemalloc"]
      and abs(s[("larson", 1)]["_ratio"] - 1.001 / 0.501) < 1e-9 and s[("larson", 1)]["_best"] == "jemalloc"
      and abs(s[("larson", 4)]["_ratio"] - 3.001 / 2.001) < 1e-9 and s[("larson", 4)]["_best"] == "glibc"
      and abs(s[("larson/rss", 4)]["_ratio"] - 1.0) < 1e-9
      and abs(cost("ebizzy", 4, {"out": "x records_per_s=8000\n"}) - 0.5) < 1e-12
      and math.isnan(cost("ebizzy", 4, {"out": "no figure"}))
      and default_counts(2) == [1, 2] and default_counts(6) == [1, 2, 4, 6]
      and default_counts(64) == [1, 2, 4, 8, 16] and default_counts(1) == [1])
print("ok" if ok else "wrong: %r %r %r" % (machine, counts, s))
PYEOF
)
verdict bench-scaling-summary "$out"

# make bench-latency's program and parser: the table has its three rows, each
# row's percentiles rise to its maximum and its counts of slow calls fall
# with the threshold, the control region is timed at every step, and the
# mallocs, which depend on each thread's own steps only, are the same from
# run to run (build/bench/latency; bench/latency.py).
if built bench-latency build/bench/latency build/libtidemalloc.so; then
  for run in 1 2; do
    LD_PRELOAD=$ROOT/build/libtidemalloc.so "$ROOT/build/bench/latency" 2 20000 4 \
      > "$TMP/latency$run.out" 2>&1
  done
  out=$(cd "$ROOT/bench" && TMPD="$TMP" python3 - <<'PYEOF' 2>&1
import os
from latency import parse
runs = [parse(open(os.path.join(os.environ["TMPD"], "latency%d.out" % i)).read()) for i in (1, 2)]
ok = all(r is not None for r in runs)
for r in runs if ok else []:
    for kind, row in r.items():
        tail = [row[c] for c in ("p50", "p90", "p99", "p99.9", "p99.99", "max")]
        ok = ok and all(a <= b for a, b in zip(tail, tail[1:])) and tail[0] > 0
        ok = ok and row["count"] >= row["over10us"] >= row["over100us"] >= row["over1ms"] >= 0
    ok = ok and r["empty"]["count"] == 2 * 20000 and 0 < r["free"]["count"] <= r["malloc"]["count"]
ok = ok and runs[0]["malloc"]["count"] == runs[1]["malloc"]["count"]
ok = ok and parse("malloc 1 2 3\n") is None
print("ok" if ok else "wrong: %r" % runs)
PYEOF
)
  verdict bench-latency "$out"
fi

# bench/pairs.py, the runner of paired rounds that a session's figures quote:
# its arithmetic (median ratios round by round, rounds lower, the order of a
# round), and a real run: each build's preload and settings reach its own
# runs only, a failing run stops it with status 1, an unknown build is a
# usage error (2).
out=$(cd "$ROOT/bench" && python3 - <<'PYEOF' 2>&1
from pairs import round_order, summarise
runs = [[(1, 1, 100, 10), (2, 2, 100, 10), (1, 1, 100, 10)],
        [(2, 0.5, 200, 5), (2, 4, 100, 5), (3, 3, 100, 5)]]
s = summarise(runs)
ok = (s[0]["wall_ratio"] == 1 and s[0]["cpu_ratio"] == 1 and s[0]["lower"] == 0
      and s[1]["wall_ratio"] == 2 and s[1]["cpu_ratio"] == 2 and s[1]["rss_ratio"] == 1
      and s[1]["lower"] == 1 and s[1]["wall"] == 2 and s[1]["faults"] == 5
      and s[1]["cpu_interval"][0] >= 0.5 and s[1]["cpu_interval"][1] <= 3 + 1e-9
      and round_order(3, 0) == [0, 1, 2] and round_order(3, 1) == [0, 2, 1]
      and round_order(3, 2) == [2, 0, 1])
print("ok" if ok else "wrong: %r" % s)
PYEOF
)
verdict bench-pairs-summary "$out"
if built bench-pairs build/bench/launch build/libtidemalloc.so; then
  is_ours='case "$LD_PRELOAD" in *libtidemalloc*) exit 0;; *) exit 1;; esac'
  python3 bench/pairs.py -n 2 tidemalloc tidemalloc@PAIRS_T=1 -- sh -c "$is_ours" \
    > "$TMP/pairs1.out" 2>&1; rc1=$?
  python3 bench/pairs.py -n 2 tidemalloc glibc -- sh -c "$is_ours" > "$TMP/pairs2.out" 2>&1; rc2=$?
  python3 bench/pairs.py -n 2 glibc glibc@PAIRS_T=1 -- sh -c 'test "$PAIRS_T" = 1' \
    > "$TMP/pairs3.out" 2>&1; rc3=$?
  python3 bench/pairs.py -n 1 glibc@PAIRS_T=1 -- sh -c 'test "$PAIRS_T" = 1' \
    > "$TMP/pairs4.out" 2>&1; rc4=$?
  python3 bench/pairs.py -n 1 no-such-build -- true > "$TMP/pairs5.out" 2>&1; rc5=$?
  rows=$(grep -c '^tidemalloc' "$TMP/pairs1.out")
  if [ $rc1 = 0 ] && [ "$rows" = 2 ] && grep -q '^tidemalloc  .* 1\.000 .*0/2 .* 1\.000$' "$TMP/pairs1.out" &&
     [ $rc2 = 1 ] && grep -q 'glibc, round .: exit status 1' "$TMP/pairs2.out" &&
     [ $rc3 = 1 ] && grep -q 'glibc, round .: exit status 1' "$TMP/pairs3.out" &&
     [ $rc4 = 0 ] && [ $rc5 = 2 ]; then
    pass bench-pairs
  else
    fail bench-pairs "statuses $rc1 $rc2 $rc3 $rc4 $rc5, rows $rows: $(cat "$TMP"/pairs?.out | tr '\n' ' ' | cut -c1-400)"
  fi
fi
