#!/usr/bin/env bash
# glibc's own malloc benchmarks (benchtests/bench-malloc-thread.c and
# bench-malloc-simple.c, built by `make glibc-benchtests`) under glibc and
# each installed allocator.  Optional: not part of `make test`.
#
# usage: tests/glibc/bench.sh [THREADS...]     (default threads: 1 2)
#   bench-malloc-thread N runs 10 s per allocator and thread count and reports
#   ns per malloc/free iteration (random sizes 4..32768, working set 1024);
#   bench-malloc-simple 64 reports ns per op for 100 blocks of 64 bytes in
#   the main thread (st), with a second thread alive (mt) and in a thread.
# Raw JSON: build/glibc/bench/<allocator>-*.json.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
make -s glibc-benchtests || exit 1
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)

multiarch=/usr/lib/x86_64-linux-gnu
out=build/glibc/bench
mkdir -p "$out"
field() { # file key -> value
  sed -n "s/^ *\"$2\": \([0-9.e+-]*\).*/\1/p" "$1" | head -n 1
}
printf '%-11s %-8s %14s %12s %10s %10s %10s\n' allocator threads \
  'ns/iteration' 'max_rss_KiB' 'simple-st' 'simple-mt' 'simple-thr'
for pair in glibc: jemalloc:$multiarch/libjemalloc.so.2 \
            tcmalloc:$multiarch/libtcmalloc_minimal.so.4 \
            mimalloc:$multiarch/libmimalloc.so.2 \
            tidemalloc:$root/build/libtidemalloc.so; do
  name=${pair%%:*} lib=${pair#*:}
  if [ -n "$lib" ] && [ ! -f "$lib" ]; then continue; fi
  env=()
  [ -n "$lib" ] && env=(LD_PRELOAD="$lib")
  s=$out/$name-simple-64.json
  env "${env[@]}" build/glibc/bench-malloc-simple 64 > "$s" 2>&1
  for n in "${threads[@]}"; do
    f=$out/$name-thread-$n.json
    env "${env[@]}" build/glibc/bench-malloc-thread "$n" > "$f" 2>&1
    printf '%-11s %-8s %14s %12s %10s %10s %10s\n' "$name" "$n" \
      "$(awk -v v="$(field "$f" time_per_iteration)" 'BEGIN { printf "%.1f", v }')" \
      "$(field "$f" max_rss)" \
      "$(field "$s" main_arena_st_allocs_0100_time)" \
      "$(field "$s" main_arena_mt_allocs_0100_time)" \
      "$(field "$s" thread_arena__allocs_0100_time)"
  done
done
