#!/usr/bin/env bash
# Run glibc's malloc tests under glibc and under each installed allocator
# (jemalloc, tcmalloc, mimalloc, and tidemalloc when built), and print a
# table of the results followed by why each failure failed.
#
# usage: tests/glibc/compare.sh [--jobs N] [TEST...]
# Logs: build/glibc/logs/compare-<allocator>/<test>.log.  Builds the tests first.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
make -s glibc-tests || exit 1

multiarch=/usr/lib/x86_64-linux-gnu
names=(glibc) libs=("")
for pair in jemalloc:$multiarch/libjemalloc.so.2 \
            tcmalloc:$multiarch/libtcmalloc_minimal.so.4 \
            mimalloc:$multiarch/libmimalloc.so.2 \
            tidemalloc:$root/build/libtidemalloc.so; do
  name=${pair%%:*} lib=${pair#*:}
  if [ -f "$lib" ]; then
    names+=("$name") libs+=("$lib")
  else
    echo "($name not found at $lib: left out)" >&2
  fi
done

opts=()
if [ "${1:-}" = "--jobs" ]; then opts=(--jobs "$2"); shift 2; fi
if [ $# -gt 0 ]; then
  tests=("$@")
else
  mapfile -t tests < <(awk '/^[a-z]/ {print $1}' "$here/tests.txt")
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in "${!names[@]}"; do
  echo "running under ${names[$i]} ..." >&2
  if [ -n "${libs[$i]}" ]; then
    bash "$here/run.sh" "${opts[@]}" --lib "${libs[$i]}" --label "compare-${names[$i]}" "${tests[@]}" > "$out/${names[$i]}"
  else
    bash "$here/run.sh" "${opts[@]}" --label compare-glibc "${tests[@]}" > "$out/glibc"
  fi
done

result() { # allocator test -> PASS/FAIL/SKIP
  awk -v t="glibc/$2" '$2 == t { print $1; exit }' "$out/$1"
}

printf '%-30s' test
for n in "${names[@]}"; do printf ' %-10s' "$n"; done
printf '\n'
declare -A npass nfail nskip
for t in "${tests[@]}"; do
  printf '%-30s' "$t"
  for n in "${names[@]}"; do
    r=$(result "$n" "$t")
    r=${r:-?}
    printf ' %-10s' "$r"
    case $r in
      PASS) npass[$n]=$(( ${npass[$n]:-0} + 1 )) ;;
      FAIL) nfail[$n]=$(( ${nfail[$n]:-0} + 1 )) ;;
      SKIP) nskip[$n]=$(( ${nskip[$n]:-0} + 1 )) ;;
    esac
  done
  printf '\n'
done
printf '%-30s' "passed/failed/skipped"
for n in "${names[@]}"; do
  printf ' %-10s' "${npass[$n]:-0}/${nfail[$n]:-0}/${nskip[$n]:-0}"
done
printf '\n'

for n in "${names[@]}"; do
  if grep -q '^\(FAIL\|SKIP\)' "$out/$n"; then
    printf '\n%s:\n' "$n"
    grep '^\(FAIL\|SKIP\)' "$out/$n" | sed 's/^/  /'
  fi
done
