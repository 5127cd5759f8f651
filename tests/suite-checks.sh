#!/usr/bin/env bash
# Secure mode, MALLOC_PERTURB_, glibc statistics and TIDEMALLOC_STATS.
set -u
cd "${TIDEMALLOC_ROOT:-$(dirname "$0")/..}"
lib=${TIDEMALLOC_LIB:-$PWD/build/libtidemalloc.so}
bin=build/checks
if ! out=$(make -s checks-tests 2>&1); then
  echo "FAIL checks/build $(echo "$out" | tail -1)"; exit 0
fi

# expect_abort NAME MESSAGE ENV... -- PROGRAM ARGS: dies by SIGABRT naming MESSAGE
expect_signal() {
  local name=$1 signal=$2 message=$3; shift 3
  local err; err=$(mktemp)
  env "$@" 2>"$err" >/dev/null; local rc=$?
  if [ $rc -ne $((128 + signal)) ]; then
    echo "FAIL checks/$name exit $rc, expected signal $signal: $(head -c 200 "$err")"
  elif [ -n "$message" ] && ! grep -q "$message" "$err"; then
    echo "FAIL checks/$name no '$message' on stderr: $(head -c 200 "$err")"
  else
    echo "PASS checks/$name"
  fi
  rm -f "$err"
}
expect_ok() {
  local name=$1; shift
  local err; err=$(mktemp)
  if env "$@" 2>"$err" >/dev/null; then echo "PASS checks/$name"; else echo "FAIL checks/$name $(head -c 200 "$err")"; fi
  rm -f "$err"
}

expect_signal secure-overflow 6 "free(): heap overflow detected" MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" overflow
expect_signal secure-overflow-huge 6 "free(): heap overflow detected" MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" overflow-huge
expect_signal secure-overflow-aligned 6 "free(): heap overflow detected" MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" overflow-aligned
expect_signal secure-write-after-free 6 "malloc(): write after free detected" MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" write-after-free
expect_signal secure-guard-page 11 "" TIDEMALLOC_SECURE=1 LD_PRELOAD="$lib" "$bin/secure" guard
expect_ok secure-clean-program MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" clean
# aggressive mode and malloc_trim give back no page inside a free block there
expect_ok secure-no-release-inside-free-blocks MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/secure" released
expect_ok perturb MALLOC_PERTURB_=165 LD_PRELOAD="$lib" "$bin/secure" perturb
expect_ok perturb-mallopt LD_PRELOAD="$lib" "$bin/secure" perturb-mallopt
expect_ok perturb-mallopt-race LD_PRELOAD="$lib" "$bin/secure" perturb-mallopt-race
# Without secure mode the same overflow goes unnoticed (the check is the mode's).
expect_ok default-mode-no-canary LD_PRELOAD="$lib" "$bin/secure" overflow

err=$(mktemp)
if LD_PRELOAD="$lib" "$bin/introspect" 2>"$err" >/dev/null; then
  missing=""
  for line in "Arena 0:" "system bytes     =" "in use bytes     =" "Total (incl. mmap):" \
              "max mmap regions =" "max mmap bytes   ="; do
    grep -qF "$line" "$err" || missing="$missing [$line]"
  done
  if [ -z "$missing" ]; then echo "PASS checks/mallinfo2-malloc_info-malloc_stats"
  else echo "FAIL checks/mallinfo2-malloc_info-malloc_stats malloc_stats lacks$missing"; fi
else
  echo "FAIL checks/mallinfo2-malloc_info-malloc_stats $(head -c 300 "$err")"
fi

# The same figures in secure mode, whose owner ids carry the slow-free mark
# (they read 0 before that mark was masked in the per-heap sums).
if MALLOC_CHECK_=3 LD_PRELOAD="$lib" "$bin/introspect" 2>"$err" >/dev/null; then
  in_use=$(grep -A2 -F "Total (incl. mmap):" "$err" | awk '/in use bytes/ {print $NF}')
  if [ "${in_use:-0}" -gt 0 ]; then echo "PASS checks/malloc_stats-secure-mode"
  else echo "FAIL checks/malloc_stats-secure-mode total in use bytes = ${in_use:-none}"; fi
else
  echo "FAIL checks/malloc_stats-secure-mode $(head -c 300 "$err")"
fi

# TIDEMALLOC_STATS=1: a summary at exit, also when the program closed stderr.
if TIDEMALLOC_STATS=1 LD_PRELOAD="$lib" ls / 2>"$err" >/dev/null &&
   grep -q "tidemalloc: peak RSS" "$err" && grep -q "tidemalloc: syscalls mmap" "$err" &&
   grep -q "tidemalloc: per class" "$err"; then
  echo "PASS checks/stats-at-exit"
else
  echo "FAIL checks/stats-at-exit $(head -c 300 "$err")"
fi
rm -f "$err"
exit 0
