#!/usr/bin/env bash
# Release-policy checks of issue 3 (tests/release/rel_*.c, built by
# `make release-tests` into build/release/). Each test runs with the library in
# LD_PRELOAD and reads our counters through dlsym(tidemalloc_stats); its
# figures (counter deltas, RSS) are appended to the PASS/FAIL line. Seed 000's
# cases are confirmed with `strace -f -e trace=munmap,madvise,process_madvise`
# on the whole process (start-up included), counting the calls that release.
#   TEST_TIMEOUT  seconds per test (default 120)
#   TEST_FILTER   run only tests whose name contains this string
# Prints PASS/FAIL/SKIP lines; always exits 0.
set -u
root=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 0
lib=${TIDEMALLOC_LIB:-$root/build/libtidemalloc.so}
tmo=${TEST_TIMEOUT:-120}
filter=${TEST_FILTER:-}
bdir=$root/build/release
. "$root/tests/report.sh"

if ! out=$(make -s release-tests 2>&1); then
  echo "FAIL release-build make release-tests failed: $(echo "$out" | grep -m1 -E 'error|Error' || echo "$out" | tail -1)"
  exit 0
fi
if [ ! -e "$lib" ]; then
  echo "SKIP release-all library $lib not built"
  exit 0
fi
if ! nm -D --defined-only "$lib" 2>/dev/null | grep -qw tidemalloc_stats; then
  echo "SKIP release-all $lib has no tidemalloc_stats (not tidemalloc)"
  exit 0
fi

wanted() { case "$1" in *"$filter"*) return 0 ;; *) return 1 ;; esac; }

# run NAME [VAR=value ...] -- PROGRAM [ARGS...]
run() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  wanted "$name" || return 0
  local log; log=$(mktemp)
  timeout -k 5 "$tmo" env "${envs[@]}" LD_PRELOAD="$lib" "$bdir/$@" >"$log" 2>&1 </dev/null
  local rc=$?
  local figures; figures=$(grep -m1 '^FIGURES ' "$log" | cut -c9-)
  local why; why=$(grep -v -e '^FIGURES ' -e '^SKIP ' "$log" | tr '\n' ' ' | cut -c1-300)
  report_result "$name" "$rc" "$tmo" "${why}[${figures}]" "$figures" \
    "$(grep -m1 '^SKIP ' "$log" | cut -c6-300)"
  rm -f "$log"
}

# strace_check NAME LIMIT [VAR=value ...] -- PROGRAM [ARGS...]: whole-process
# munmap + madvise + process_madvise calls that release memory, as strace -f
# sees them, must be <= LIMIT. madvise calls that only advise (MADV_NOHUGEPAGE
# on new segments where the THP mode is "always", MADV_HUGEPAGE with
# glibc.malloc.hugetlb=1) release nothing: they are counted apart.
strace_check() {
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  wanted "$name" || return 0
  if ! command -v strace >/dev/null 2>&1; then
    echo "SKIP $name strace not installed (apt-get install strace)"
    return 0
  fi
  local sum log; sum=$(mktemp); log=$(mktemp)
  timeout -k 5 "$tmo" strace -f -e trace=munmap,madvise,process_madvise -o "$sum" \
    env "${envs[@]}" LD_PRELOAD="$lib" "$bdir/$@" >"$log" 2>&1 </dev/null
  local rc=$?
  if [ $rc -ne 0 ] && ! grep -q -e munmap -e madvise -e exited "$sum" 2>/dev/null; then
    if grep -qi -e 'ptrace' -e 'Operation not permitted' "$log" "$sum" 2>/dev/null; then
      echo "SKIP $name strace cannot trace here: $(head -c 200 "$sum")"
    else
      echo "FAIL $name strace run exit $rc: $(tr '\n' ' ' <"$log" | cut -c1-200)"
    fi
    rm -f "$sum" "$log"
    return 0
  fi
  # One line per call (a call another thread interrupts is split into an
  # "unfinished" line, which holds the name and arguments, and a "resumed" one).
  local munmap madvise vector advice
  munmap=$(grep -c 'munmap(' "$sum")
  madvise=$(grep 'madvise(' "$sum" | grep -v process_madvise | grep -c -e MADV_DONTNEED -e MADV_FREE)
  advice=$(grep 'madvise(' "$sum" | grep -v process_madvise | grep -c -e MADV_HUGEPAGE -e MADV_NOHUGEPAGE)
  vector=$(grep -c 'process_madvise(' "$sum")
  local total=$((munmap + madvise + vector))
  local figs="strace_munmap=$munmap strace_madvise=$madvise strace_process_madvise=$vector"
  figs="$figs strace_advice=$advice strace_total=$total limit=$limit"
  if [ "$total" -le "$limit" ]; then
    echo "PASS $name $figs"
  else
    echo "FAIL $name whole process made $total release syscalls, limit $limit: $figs"
  fi
  rm -f "$sum" "$log"
}

# a. Seed 000's worst case, three settings, counters then strace.
cfg_defaults=(TIDEMALLOC_UNUSED=1)
cfg_mmap=(MALLOC_MMAP_THRESHOLD_=262144)
cfg_trim=(MALLOC_TRIM_THRESHOLD_=1048576 MALLOC_MMAP_THRESHOLD_=262144)
run seed000-worst-defaults "${cfg_defaults[@]}" -- rel_seed000_worst
run seed000-worst-mmap262144 "${cfg_mmap[@]}" -- rel_seed000_worst
run seed000-worst-trim1M-mmap262144 "${cfg_trim[@]}" -- rel_seed000_worst
strace_check seed000-worst-defaults-strace 6 "${cfg_defaults[@]}" -- rel_seed000_worst
strace_check seed000-worst-mmap262144-strace 6 "${cfg_mmap[@]}" -- rel_seed000_worst
strace_check seed000-worst-trim1M-mmap262144-strace 6 "${cfg_trim[@]}" -- rel_seed000_worst

# b. Seed 000's mixed case (defaults; the 256 KiB threshold for comparison).
run seed000-mixed-defaults "${cfg_defaults[@]}" -- rel_seed000_mixed
run seed000-mixed-mmap262144 "${cfg_mmap[@]}" -- rel_seed000_mixed
strace_check seed000-mixed-defaults-strace 106 "${cfg_defaults[@]}" -- rel_seed000_mixed

# c. malloc_trim(0) over 4 threads' heaps (100 MiB).
run trim-own-heaps-threads-alive TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_trim own
run trim-cross-thread-frees TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_trim cross
# (the retain bound off: it would have released the exited heaps' memory already)
run trim-threads-exited TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 -- rel_trim exited

# A thread's exit gives back what earlier threads touched past its pages'
# carved blocks, from a slice's worth up (nothing else may release: no idle
# purger, no retain bound, a trim threshold out of reach).
cfg_exit=(TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 MALLOC_TRIM_THRESHOLD_=1073741824)
run exit-trim-gives-back "${cfg_exit[@]}" -- rel_exit_trim many
run exit-trim-under-a-slice-keeps "${cfg_exit[@]}" -- rel_exit_trim one

# d. Aggressive mode, no malloc_trim, no idle purger.
run aggressive-env MALLOC_AGGRESSIVE_MADVISE_=1 TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive env
run aggressive-mallopt TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive mallopt
run aggressive-env-segments MALLOC_AGGRESSIVE_MADVISE_=1 TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive env segments
run aggressive-mallopt-segments TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive mallopt segments
# the control keeps the 1 s delay alone: with the retain bound, freeing the
# whole working set gives it back in the default mode too
run aggressive-off-control-segments TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 -- rel_aggressive off segments
# the whole OS pages inside freed blocks of pages still in use
run aggressive-inside-env MALLOC_AGGRESSIVE_MADVISE_=1 TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive_inside env
run aggressive-inside-mallopt TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive_inside mallopt
run aggressive-inside-off-control TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive_inside off
# no syscall per free in a malloc/free loop of small blocks
run aggressive-small-loop MALLOC_AGGRESSIVE_MADVISE_=1 TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_aggressive_loop

# The bound on retained memory (M_RETAIN_PERCENT), and its control.
run retain-bound TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_retain_bound default
run retain-bound-top TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_retain_bound top
run retain-bound-off-control TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_retain_bound off
run retain-bound-quiet -- rel_retain_bound quiet
# A single heap keeps what its recent peak used through troughs, and so does
# one growing heap beside an idle one; with two heaps growing the bound counts
# the current use (the control).
run cycles-single TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_cycles single
run cycles-idle-helper TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_cycles idle-helper
# (the refault hold off: it may keep the troughs, see refault-hold below)
run cycles-two-growing-control TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_REFAULT_PERCENT=0 \
  -- rel_cycles two-growing
# The bound off: the delay alone, with several heaps too.
run cycles-two-growing-bound-off TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 \
  -- rel_cycles two-growing-delay
# A collector thread frees what two workers made, over and over: once the
# faults that our releases explain pass 12% of the CPU time, the bound and
# the segment cache hold the memory (the refault hold); the control turns the
# hold off, and the memory keeps going back and faulting in again.
run refault-hold -- rel_refault_hold hold
run refault-hold-off-control TIDEMALLOC_REFAULT_PERCENT=0 -- rel_refault_hold control

# e. An idle process gets its memory back; the switch turns that off. The
# switch's check runs with the retain bound off: the bound may give back part
# of the 64 MiB while a slow host still runs the frees (slices free for 2 ms),
# and the check needs them resident when the idle time starts.
run idle-release TIDEMALLOC_UNUSED=1 -- rel_idle release
run idle-background-purge-off TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 -- rel_idle retain
# With nothing due before a long delay, the helper sleeps instead of
# napping every 100 ms; memory past the bound still goes back soon.
run helper-wakeups-idle TIDEMALLOC_PURGE_DELAY_MS=60000 -- rel_helper_wakeups idle
run helper-wakeups-bound TIDEMALLOC_PURGE_DELAY_MS=60000 -- rel_helper_wakeups bound
# M_BACKGROUND_PURGE 2: the helper makes every release, none of the main
# thread's calls (a seccomp filter traps them); the default is the control
run background-all TIDEMALLOC_BACKGROUND_PURGE=2 -- rel_background_all helper
run background-all-mallopt -- rel_background_all mallopt
run background-all-control -- rel_background_all inline
# the helper cannot start (clone refused): tried again at most once a second,
# and the frees release in its stead
run helper-refused -- rel_helper_refused
run helper-refused-background-all TIDEMALLOC_BACKGROUND_PURGE=2 -- rel_helper_refused
# releases refused (a sandbox): not tried again at every pass
run release-refused -- rel_release_refused
# Blocks other threads freed into a sleeping (or exited) thread's pages. The
# retain bound is off where the idle path is tested: on a loaded machine the
# frees took over its age (5 ms then, 2 ms now) and it released the pages during them (seen
# once in make test: "RSS fell during the frees already"); the bound has its
# own test below.
run remote-freed-idle-owner TIDEMALLOC_RETAIN_PERCENT=0 -- rel_remote_reclaim idle
run remote-freed-exited-owner TIDEMALLOC_RETAIN_PERCENT=0 -- rel_remote_reclaim exited
run remote-freed-exited-worker TIDEMALLOC_RETAIN_PERCENT=0 -- rel_remote_reclaim worker-exited
run remote-freed-background-purge-off TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_RETAIN_PERCENT=0 \
  -- rel_remote_reclaim retain
run remote-freed-trim TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_remote_reclaim trim
run remote-freed-over-bound TIDEMALLOC_UNUSED=1 -- rel_remote_reclaim bound
run remote-freed-idle-owner-prompt TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_remote_reclaim prompt
run remote-freed-idle-owner-soon TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_remote_reclaim soon

# f. Tunables.
run tunables-mallopt-range TIDEMALLOC_UNUSED=1 -- rel_tunables range
run tunables-defaults TIDEMALLOC_UNUSED=1 -- rel_tunables defaults
run tunables-bad-env-trim-abc MALLOC_TRIM_THRESHOLD_=abc -- rel_tunables defaults
run tunables-bad-env-values MALLOC_MMAP_THRESHOLD_=-5 MALLOC_TOP_PAD_= MALLOC_MMAP_MAX_=12x \
  MALLOC_TRIM_THRESHOLD_=99999999999999999999999 MALLOC_AGGRESSIVE_MADVISE_=7 \
  TIDEMALLOC_PURGE_DELAY_MS=-1 TIDEMALLOC_BACKGROUND_PURGE=yes -- rel_tunables defaults
run tunables-bad-glibc-tunables \
  "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=zz:glibc.malloc.trim_threshold:=::glibc.malloc.:glibc.malloc.mmap_threshold=:x=1:glibc.malloc.top_pad=0x" \
  -- rel_tunables defaults
run tunables-glibc-tunables-mmap64k GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536 -- rel_tunables small64k
run tunables-env-mmap64k MALLOC_MMAP_THRESHOLD_=65536 -- rel_tunables small64k
# GLIBC_TUNABLES wins over the alias wherever each stands (env adds them in
# this order: the alias comes last), as in glibc
run tunables-glibc-tunables-over-alias GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536 \
  MALLOC_MMAP_THRESHOLD_=1048576 -- rel_tunables small64k
run tunables-glibc-tunables-over-alias-before MALLOC_MMAP_THRESHOLD_=1048576 \
  GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536 -- rel_tunables small64k
run tunables-env-mmap-over-32mib MALLOC_MMAP_THRESHOLD_=33554433 -- rel_tunables unmapped
run tunables-glibc-tunables-mmap-4gib GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296 \
  -- rel_tunables unmapped
run tunables-mmap-max-out-of-range GLIBC_TUNABLES=glibc.malloc.mmap_max=4294967297 -- rel_tunables defaults
run tunables-perturb-out-of-range MALLOC_PERTURB_=257 -- rel_tunables perturb 11
run tunables-perturb-in-range MALLOC_PERTURB_=1 -- rel_tunables perturb fe
run tunables-perturb-mallopt-256 TIDEMALLOC_UNUSED=1 -- rel_tunables perturb ff 256
run tunables-mallopt-tiny-threshold TIDEMALLOC_UNUSED=1 -- rel_tunables tiny
run tunables-dynamic-threshold TIDEMALLOC_UNUSED=1 -- rel_tunables dynamic
run tunables-fixed-threshold TIDEMALLOC_UNUSED=1 -- rel_tunables fixed
run tunables-aggressive-env-normal-program MALLOC_AGGRESSIVE_MADVISE_=1 -- rel_setuid on
# glibc.malloc.hugetlb: 1 transparent huge pages (madvise), 2 or a page size
# explicit huge pages where the kernel has them free, anything else nothing.
run tunables-hugetlb-off TIDEMALLOC_UNUSED=1 -- rel_hugetlb off
run tunables-hugetlb-thp GLIBC_TUNABLES=glibc.malloc.hugetlb=1 -- rel_hugetlb thp
run tunables-hugetlb-explicit GLIBC_TUNABLES=glibc.malloc.hugetlb=2 -- rel_hugetlb explicit
run tunables-hugetlb-explicit-size GLIBC_TUNABLES=glibc.malloc.hugetlb=2097152 -- rel_hugetlb explicit
run tunables-hugetlb-no-such-size GLIBC_TUNABLES=glibc.malloc.hugetlb=4194304 -- rel_hugetlb ignored
setuid_check() {
  local name=tunables-setuid-ignores-env
  wanted "$name" || return 0
  if [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1; then
    echo "SKIP $name needs root and a user nobody to make a set-uid binary"
    return 0
  fi
  local dir=$bdir/suid
  rm -rf "$dir" && mkdir -p "$dir" && cp "$bdir/rel_setuid_linked" "$dir/" &&
    chown nobody "$dir/rel_setuid_linked" && chmod 4755 "$dir/rel_setuid_linked" || {
    echo "SKIP $name cannot make a set-uid copy in $dir"
    return 0
  }
  local log; log=$(mktemp)
  # As root running a binary owned by nobody with the set-uid bit: AT_SECURE=1.
  timeout -k 5 "$tmo" env -u LD_PRELOAD MALLOC_AGGRESSIVE_MADVISE_=1 "$dir/rel_setuid_linked" off \
    >"$log" 2>&1 </dev/null
  local rc=$?
  local figures; figures=$(grep -m1 '^FIGURES ' "$log" | cut -c9-)
  case $rc in
    0) echo "PASS $name ${figures}" ;;
    77) echo "SKIP $name $(grep -m1 '^SKIP ' "$log" | cut -c6-300) (filesystem mounted nosuid?)" ;;
    *) echo "FAIL $name exit $rc: $(grep -v -e '^FIGURES ' "$log" | tr '\n' ' ' | cut -c1-300)[${figures}]" ;;
  esac
  rm -f "$log"
  rm -rf "$dir"
}
setuid_check

# Many ranges in one call (process_madvise), and madvise where it is refused.
run batched-release TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_batched_release batched
run batched-release-refused-enosys TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_batched_release refused
run batched-release-refused-eperm TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_batched_release refused eperm
# switched off, for a seccomp filter that kills on process_madvise
run batched-release-off-env TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_BATCHED_RELEASE=0 \
  -- rel_batched_release off env
run batched-release-off-mallopt TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_batched_release off mallopt

# realloc's copy populates the pages that are not resident, and only those.
run populate-copy TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_PURGE_DELAY_MS=60000 -- rel_populate default
run populate-copy-refused TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_populate refused
run populate-copy-secure TIDEMALLOC_BACKGROUND_PURGE=0 MALLOC_CHECK_=3 -- rel_populate checked
# switched off, for a seccomp filter that kills on MADV_POPULATE_WRITE
run populate-copy-off-env TIDEMALLOC_BACKGROUND_PURGE=0 TIDEMALLOC_POPULATE=0 -- rel_populate off env
run populate-copy-off-mallopt TIDEMALLOC_BACKGROUND_PURGE=0 -- rel_populate off mallopt

# g. Bounded release syscalls under a hostile pattern.
run hostile-trim0-delay0 MALLOC_TRIM_THRESHOLD_=0 TIDEMALLOC_PURGE_DELAY_MS=0 -- rel_hostile
run hostile-trim0-delay0-segments MALLOC_TRIM_THRESHOLD_=0 TIDEMALLOC_PURGE_DELAY_MS=0 \
  MALLOC_MMAP_THRESHOLD_=33554432 -- rel_hostile
run hostile-defaults TIDEMALLOC_UNUSED=1 -- rel_hostile

# The commit charge: the segment map's 32 MiB of .bss must not be charged.
run commit-charge TIDEMALLOC_UNUSED=1 -- rel_commit
exit 0
