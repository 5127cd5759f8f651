#!/usr/bin/env bash
# Hardening tests (issue 6 items 3-6), built by `make hardening` from
# tests/hardening/:
#   oom-*       RLIMIT_AS of 200 MiB: every allocation function returns NULL
#               with ENOMEM, nothing aborts, memory is usable again once freed
#               (oom-arena: a mapped block and segments find room in the
#               arena's chunks; oom-reserve: a chunk leaves the program room;
#               oom-lent: a segment lent from a chunk leaves big blocks room
#               beside it, and all of it once empty);
#               oom-*-data: the same under RLIMIT_DATA
#   fuzz        libFuzzer harness on the prefixed library, fixed seed and runs
#   fuzz-secure, fuzz-aggressive  shorter runs of it in those modes
#   soak        30 s multithreaded stress with a fork, contents checked, RSS plateau
#   fork-storm  20 s of it with 16 threads, forking every 0.25 s: children
#               of threads stopped mid-malloc or mid-free check, free and
#               allocate (a child that adopted such threads' pages crashed
#               within 1-3 forks)
#   tsan-*      multithreaded test of the prefixed library under ThreadSanitizer
#   ubsan-*     the same under UBSan
#   asan-*      the same under AddressSanitizer
# The oom and soak programs run with $TIDEMALLOC_LIB in LD_PRELOAD; the others
# link the library's objects. Longer runs: make fuzz, make soak, make sanitize.
#   HARDENING_FUZZ_RUNS  libFuzzer -runs (default 15000)
#   HARDENING_SOAK_TIME  soak seconds (default 30)
#   HARDENING_STORM_TIME fork-storm seconds (default 20)
#   HARDENING_SAN_OPS    operations per thread in the sanitizer tests (default 20000)
# Prints PASS/FAIL/SKIP lines; always exits 0.
set -u
root=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 0
lib=${TIDEMALLOC_LIB:-$root/build/libtidemalloc.so}
bdir=$root/build/hardening
. "$root/tests/report.sh"
fuzz_runs=${HARDENING_FUZZ_RUNS:-15000}
fuzz_mode_runs=${HARDENING_FUZZ_MODE_RUNS:-5000} # each of secure and aggressive mode
soak_time=${HARDENING_SOAK_TIME:-30}
storm_time=${HARDENING_STORM_TIME:-20}
san_ops=${HARDENING_SAN_OPS:-20000}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# First lines that explain a failure, on one line.
why() { grep -m3 -E "${2:-oom:|soak:|mt_sanitize:|fuzz_alloc:|SUMMARY|ERROR|WARNING|runtime error|invalid|corrupt|detected|Assertion}" "$1" | tr '\n' ' ' | cut -c1-400; }

# run NAME TIMEOUT CMD...: PASS on exit 0, else FAIL with the reason.
run() {
  local name=$1 tmo=$2
  shift 2
  (timeout -k 5 "$tmo" "$@" >"$log" 2>&1 </dev/null; exit $?) 2>/dev/null
  local rc=$?
  report_result "$name" "$rc" "$tmo" "$(why "$log") $(tail -1 "$log" | cut -c1-200)"
}

# ---- programs run with the library preloaded ----
if ! out=$(make -s hardening-native 2>&1); then
  echo "FAIL hardening-build make hardening-native: $(echo "$out" | grep -m1 -E 'error|Error' || echo "$out" | tail -1)"
elif [ ! -e "$lib" ]; then
  for t in oom-st oom-mt oom-huge-table oom-arena oom-reserve oom-lent oom-st-data oom-mt-data \
    oom-arena-data oom-reserve-data oom-lent-data soak fork-storm; do echo "SKIP $t library $lib not built"; done
else
  run oom-st 240 env LD_PRELOAD="$lib" "$bdir/oom" st
  run oom-mt 240 env LD_PRELOAD="$lib" "$bdir/oom" mt
  run oom-huge-table 120 env LD_PRELOAD="$lib" "$bdir/oom" table
  run oom-arena 120 env LD_PRELOAD="$lib" "$bdir/oom" arena
  run oom-reserve 60 env LD_PRELOAD="$lib" "$bdir/oom" reserve
  run oom-lent 60 env LD_PRELOAD="$lib" "$bdir/oom" lent
  for m in st mt arena reserve lent; do
    run oom-$m-data 240 env LD_PRELOAD="$lib" "$bdir/oom" $m data
  done
  run soak $((soak_time + 120)) env LD_PRELOAD="$lib" "$bdir/soak" "$soak_time" 4
  run fork-storm $((storm_time + 120)) env LD_PRELOAD="$lib" "$bdir/soak" "$storm_time" 16 0.25
fi

# ---- programs linking the prefixed library (clang) ----
clang_bin=${HARD_CLANG:-clang}
if ! command -v "$clang_bin" >/dev/null 2>&1; then
  for t in fuzz fuzz-secure fuzz-aggressive tsan-core tsan-stats tsan-fitted ubsan-core \
    ubsan-stats ubsan-fitted asan-core asan-stats asan-fitted; do
    echo "SKIP $t clang not installed"
  done
  exit 0
fi
if ! out=$(make -s hardening-clang 2>&1); then
  echo "FAIL hardening-clang-build make hardening-clang: $(echo "$out" | grep -m1 -E 'error|Error' || echo "$out" | tail -1)"
  exit 0
fi

# TSan of clang 14 cannot map its shadow with a large mmap randomisation;
# then run it without address randomisation.
norand=()
if TSAN_OPTIONS=exitcode=66 "$bdir/mt_tsan" core 1 2>&1 | grep -q 'unexpected memory mapping'; then
  norand=(setarch "$(uname -m)" -R)
fi

fuzz_dir=$(mktemp -d)
run fuzz 300 env ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$bdir/fuzz_alloc" \
  -seed=1 -runs="$fuzz_runs" -max_len=4096 -rss_limit_mb=3072 -timeout=60 \
  -artifact_prefix="$fuzz_dir/" "$fuzz_dir"
rm -rf "$fuzz_dir"
# Shorter runs in the modes whose frees take the slow path (a secure-mode
# run found malloc_trim's release inside free blocks read as a write after
# free, 2026-11-30).
for mode in secure aggressive; do
  case $mode in
    secure) mode_env=(MALLOC_CHECK_=3) ;;
    aggressive) mode_env=(MALLOC_AGGRESSIVE_MADVISE_=1) ;;
  esac
  fuzz_dir=$(mktemp -d)
  run "fuzz-$mode" 300 env "${mode_env[@]}" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    "$bdir/fuzz_alloc" -seed=2 -runs="$fuzz_mode_runs" -max_len=4096 -rss_limit_mb=3072 \
    -timeout=60 -artifact_prefix="$fuzz_dir/" "$fuzz_dir"
  rm -rf "$fuzz_dir"
done

for mode in core stats fitted; do
  run "tsan-$mode" 300 env TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 \
    "${norand[@]}" "$bdir/mt_tsan" "$mode" "$san_ops"
done
# the purge helper making every release beside the threads and the
# statistics reader (it found the helper's stack address raced with every
# lock's read of it, seventy-third session)
run tsan-helper 300 env TIDEMALLOC_BACKGROUND_PURGE=2 \
  TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 \
  "${norand[@]}" "$bdir/mt_tsan" stats "$san_ops"
for mode in core stats fitted; do
  run "ubsan-$mode" 300 env UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bdir/mt_ubsan" "$mode" "$san_ops"
done
for mode in core stats fitted; do
  run "asan-$mode" 300 "$bdir/mt_asan" "$mode" "$san_ops"
done
exit 0
