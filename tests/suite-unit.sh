#!/usr/bin/env bash
# Own behaviour tests: builds build/tests/test_* (make unit-tests) and runs each
# with the allocator under test preloaded.
#   TEST_PRELOAD  library to preload; defaults to $TIDEMALLOC_LIB. Set it to a
#                 peer (e.g. /usr/lib/x86_64-linux-gnu/libjemalloc.so.2) or to
#                 the empty string (glibc) to validate the tests themselves.
#   TEST_TIMEOUT  seconds per test (default 120).
#   TEST_FILTER   run only tests whose name contains this string.
# Prints PASS/FAIL/SKIP lines; always exits 0.
set -u
root=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 0
lib_default=${TIDEMALLOC_LIB:-$root/build/libtidemalloc.so}
preload=${TEST_PRELOAD-$lib_default}
tmo=${TEST_TIMEOUT:-120}
filter=${TEST_FILTER:-}
bdir=$root/build/tests
. "$root/tests/report.sh"

if ! out=$(make -s unit-tests 2>&1); then
  echo "FAIL unit-build make unit-tests failed: $(echo "$out" | grep -m1 -E 'error|Error' || echo "$out" | tail -1)"
  exit 0
fi

if [ -n "$preload" ] && [ ! -e "$preload" ]; then
  for t in "$bdir"/test_*; do
    [ -x "$t" ] || continue
    echo "SKIP $(basename "$t") library $preload not built"
  done
  exit 0
fi

# Tests assert that tidemalloc_stats exists when the library under test is ours.
expect=0
if [ -n "$preload" ] && [ -e "$preload" ] && \
   nm -D --defined-only "$preload" 2>/dev/null | grep -qw tidemalloc_stats; then
  expect=1
fi

for t in "$bdir"/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  case "$name" in *"$filter"*) ;; *) continue ;; esac
  log=$(mktemp)
  # (in a command substitution with stderr closed off, so that bash's own
  # "Segmentation fault" report does not end up in the suite's output)
  rc=$( { TEST_EXPECT_TIDEMALLOC=$expect TEST_PRELOAD_LIB=$preload TEST_BUILD_DIR=$bdir \
      timeout -k 5 "$tmo" env ${preload:+LD_PRELOAD=$preload} "$t" >"$log" 2>&1 </dev/null
    echo $?; } 2>/dev/null )
  why=$(grep -v '^SKIP ' "$log" | tr '\n' ' ' | cut -c1-300)
  report_result "$name" "$rc" "$tmo" "$why" "" "$(grep -m1 '^SKIP ' "$log" | cut -c6-300)"
  rm -f "$log"
done
exit 0
