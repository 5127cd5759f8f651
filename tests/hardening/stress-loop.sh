#!/usr/bin/env bash
# Runs the multithreaded UBSan test (mt_ubsan core and stats, alternately) RUNS
# times beside two CPU hogs and stops at the first failure, printing its
# report. Races that need a thread preempted at the wrong moment show up here
# and almost never on an idle machine: the thread-exit bug fixed on
# 2026-11-30 failed one run in 14-74 under load, none in 60 idle.
#   usage: stress-loop.sh MT_UBSAN_BINARY [RUNS]   (make stress: RUNS=80)
# Before the fix, a loop of 80 failed at run 66 ("malloc(): corrupted free
# list"); a run of 80 that passes is evidence, not proof.
# Exit 0 when every run is clean, 1 at the first failure.
set -u
bin=$1
runs=${2:-80}
[ -x "$bin" ] || { echo "stress-loop: $bin not built" >&2; exit 2; }
log=$(mktemp)
hogs=()
cleanup() {
    [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
    rm -f "$log"
}
trap cleanup EXIT
# yes(1), not a shell loop: its constant writes make the kernel switch tasks
# often, and a loop of 80 with busy shell loops as hogs missed the bug above.
for _ in 1 2; do
    yes >/dev/null &
    hogs+=($!)
done
start=$(date +%s)
for i in $(seq 1 "$runs"); do
    mode=core
    [ $((i % 2)) -eq 0 ] && mode=stats
    if ! UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 timeout 120 "$bin" "$mode" >"$log" 2>&1; then
        echo "stress: run $i ($mode) FAILED after $(($(date +%s) - start)) s:"
        grep -E 'runtime error|SUMMARY|invalid|corrupt|detected|mt_sanitize:|^ +#[0-9]+ ' "$log" | head -20
        exit 1
    fi
    [ -t 2 ] && printf '\rstress: %d/%d runs clean, %d s' "$i" "$runs" "$(($(date +%s) - start))" >&2
done
[ -t 2 ] && echo >&2
echo "stress: $runs runs of $(basename "$bin") clean under load in $(($(date +%s) - start)) s"
