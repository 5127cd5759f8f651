#!/usr/bin/env bash
# Runs every test suite (tests/suite-*.sh). A suite prints one line per test:
#   PASS name | FAIL name [why] | SKIP name why
# and this script prints the total as its last line: "N passed, M failed, K skipped".
set -u
cd "$(dirname "$0")/.."
export TIDEMALLOC_ROOT=$PWD
export TIDEMALLOC_LIB=$PWD/build/libtidemalloc.so
pass=0 fail=0 skip=0
failed=()
for suite in tests/suite-*.sh; do
  [ -f "$suite" ] || continue
  name=$(basename "$suite" .sh)
  echo "== ${name#suite-}"
  while IFS= read -r line; do
    echo "$line"
    case "$line" in
      PASS\ *) pass=$((pass + 1)) ;;
      FAIL\ *) fail=$((fail + 1)); failed+=("$line") ;;
      SKIP\ *) skip=$((skip + 1)) ;;
    esac
  done < <(bash "$suite" 2>&1; rc=$?; [ $rc -eq 0 ] || echo "FAIL $name (suite exited $rc)")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== failures"
  printf '%s\n' "${failed[@]}"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
