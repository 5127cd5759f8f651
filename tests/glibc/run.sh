#!/usr/bin/env bash
# Run glibc's malloc tests (built by `make glibc-tests` into build/glibc/)
# under one allocator and print one line per test:
#   PASS glibc/NAME | FAIL glibc/NAME why | SKIP glibc/NAME why
#
# usage: run.sh [--lib PATH] [--label NAME] [--suffix S] [--jobs N] [TEST...]
#   --lib PATH   LD_PRELOAD this allocator into every test (default: none,
#                i.e. glibc's own malloc)
#   --label NAME names the log directory build/glibc/logs/NAME/ (default:
#                the library's file name, or "glibc")
#   --suffix S   appended to every name (glibc/NAME@aggressive: the same
#                tests again in another mode, set in the environment)
#   --jobs N     tests run N at a time (default: number of CPUs)
#   TEST...      a subset of tests.txt (default: all of it)
# Environment: GLIBC_TIMEOUTFACTOR (default 2) scales the glibc test
# driver's own per-test timeout (20 s, or the test's TIMEOUT), as glibc's
# TIMEOUTFACTOR does.  Always exits 0: the lines are the result.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bindir=${GLIBC_TEST_BINDIR:-$root/build/glibc}

lib="" label="" suffix="" jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    --suffix) suffix=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -gt 0 ]; then
  tests=("$@")
else
  mapfile -t tests < <(awk '/^[a-z]/ {print $1}' "$here/tests.txt")
fi
[ -n "$label" ] || label=$([ -n "$lib" ] && basename "$lib" || echo glibc)
factor=${GLIBC_TIMEOUTFACTOR:-2}
logdir=$root/build/glibc/logs/$label
rm -rf "$logdir" && mkdir -p "$logdir"

# Per-test environment from tests.txt (VAR=value words after the kind).
test_env() {
  awk -v t="$1" '$1 == t { for (i = 3; i <= NF; i++) if ($i ~ /^[A-Za-z_][A-Za-z0-9_]*=/) print $i }' \
    "$here/tests.txt"
}

if [ -n "$lib" ]; then
  if [ ! -f "$lib" ]; then
    for t in "${tests[@]}"; do echo "SKIP glibc/$t$suffix allocator not built: $lib"; done
    exit 0
  fi
  lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  # ld.so only warns when it cannot preload a library, after which every
  # test would silently run on glibc's malloc: check that it is loaded.
  probe=$bindir/mallocbug
  if [ -x "$probe" ] && LD_TRACE_LOADED_OBJECTS=1 LD_PRELOAD=$lib "$probe" 2>&1 | grep -qF "$lib"; then
    echo "PASS glibc/preload-applies$suffix"
  else
    echo "FAIL glibc/preload-applies$suffix $lib is not loaded by LD_PRELOAD into $probe"
    for t in "${tests[@]}"; do echo "SKIP glibc/$t$suffix preload does not apply"; done
    exit 0
  fi
fi

# One test: its status (exit code) goes to $logdir/NAME.rc, output to .log.
run_one() {
  local t=$1 bin=$bindir/$1
  local -a envs=(LC_ALL=C TIMEOUTFACTOR="$factor")
  mapfile -t extra < <(test_env "$t")
  envs+=("${extra[@]}")
  [ -n "$lib" ] && envs+=(LD_PRELOAD="$lib")
  if [ ! -x "$bin" ]; then
    echo "not built: $bin (make glibc-tests)" > "$logdir/$t.log"
    echo 126 > "$logdir/$t.rc"
    return
  fi
  # The driver enforces its own timeout (TIMEOUT x TIMEOUTFACTOR) and kills
  # the forked test; the outer limit only catches a driver that hangs.
  # `env` applies LD_PRELOAD to the test alone, not to timeout(1).
  (cd "$logdir" && timeout -k 10 $((100 * factor + 60)) \
      env "${envs[@]}" "$bin" > "$t.log" 2>&1)
  echo $? > "$logdir/$t.rc"
}

running=0
for t in "${tests[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait

# The most telling line of a log: a timeout, else the first error the test
# or the driver reported, else the last line.
reason() {
  local l
  l=$(grep -m1 -E '^Timed out|Didn.t expect signal|^error: |not true:|FAIL|Fatal|[Aa]borted' "$1" 2>/dev/null)
  [ -n "$l" ] || l=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)
  printf '%s' "$l" | tr -d '\r' | cut -c1-160
}
for t in "${tests[@]}"; do
  rc=$(cat "$logdir/$t.rc" 2>/dev/null || echo 255)
  why=$(reason "$logdir/$t.log")
  case "$rc" in
    0) echo "PASS glibc/$t$suffix" ;;
    77) echo "SKIP glibc/$t$suffix unsupported: ${why:-exit 77}" ;;
    124|137) echo "FAIL glibc/$t$suffix hung: killed by the outer timeout; log build/glibc/logs/$label/$t.log" ;;
    *)
      if [ "$rc" -gt 128 ] 2>/dev/null; then
        how="killed by signal $((rc - 128))"
      else
        how="exit $rc"
      fi
      echo "FAIL glibc/$t$suffix $how: ${why:-no output}; log build/glibc/logs/$label/$t.log" ;;
  esac
done
exit 0
