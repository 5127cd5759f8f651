/* The release policy, one for every heap (DESIGN.md lessons 1 and 2).
 * Free slices stay resident ("retained") while the process-wide retained
 * total is at most trim_threshold + top_pad. Above that, ranges that have
 * stayed free for purge_delay_ms are released in coalesced madvise calls by
 * one thread at a time, never from the free fast path; passes are at most
 * one per half delay, so release syscalls per second stay bounded. What the
 * delay may hold is bounded too, in proportion to the memory in use
 * (retain_percent). An idle process is served by a helper thread, started
 * only once something waits. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

struct spin_lock g_purge_lock = SPIN_LOCK_INIT; /* one purger at a time */
static _Atomic uint32_t last_pass_ms;           /* start of the latest pass */
static _Atomic int purger_state;                /* 0: none, 1: starting, 2: running,
                                                   3: its start failed */
static _Atomic uint32_t purger_failed_ms;       /* when it last failed to start */
/* A start that fails (clone refused: RLIMIT_NPROC, a cgroup's pids.max, a
 * seccomp filter) is tried again at most once a second: until the
 * seventy-third session every free past the trim threshold tried again
 * (2,302 clone calls in 1 s), each leaving a 64 KiB stack mapping behind. */
#define PURGER_RETRY_MS 1000
static _Atomic uint32_t purger_request; /* futex word: 1 = work waiting */
#define PURGER_IDLE_PASSES 3            /* empty passes before the helper sleeps for good */

static uint64_t retained_total(void) {
    /* relaxed: a trigger; a slightly stale total only shifts a pass a little. */
    return atomic_load_explicit(&g_retained_bytes, memory_order_relaxed) +
           atomic_load_explicit(&g_arena_dirty_bytes, memory_order_relaxed) +
           remote_freed_page_bytes();
}

static uint64_t retain_limit(void) {
    uint64_t limit = OPTION(trim_threshold) + OPTION(top_pad);
    return limit < OPTION(trim_threshold) ? UINT64_MAX : limit;
}

/* Releases what has been free for min_age_ms (everything: also the cached
 * segments and mappings), stopping between segments once retained slices are
 * at most `target` bytes (0: no stop). Returns true if anything went back. */
static bool purge_pass(uint32_t now, uint32_t min_age_ms, bool everything, uint64_t target) {
    size_t released = 0;
    spin_lock(&g_registry_lock);
    /* The scan reads a descriptor line per page in use: only when some page
     * filled with remote frees (or for malloc_trim, which also takes pages
     * whose blocks were not all carved). */
    if (everything || remote_freed_page_bytes() > 0)
        for (struct segment *s = g_registry; s; s = s->all_next)
            released += segment_reclaim_pages(s, now, min_age_ms);
    struct purge_batch batch;
    batch.count = 0;
    for (struct segment *s = g_registry; s; s = s->all_next) {
        released += segment_purge(s, now, min_age_ms, &batch);
        /* relaxed: a stopping hint */
        if (target && atomic_load_explicit(&g_retained_bytes, memory_order_relaxed) <=
                          target + purge_batch_bytes(&batch))
            break;
    }
    released += purge_batch_flush(&batch);
    spin_unlock(&g_registry_lock);
    spin_lock(&g_heaps_lock);
    for (struct heap *heap = g_heaps; heap; heap = heap->next_heap)
        released += heap_cache_purge(heap, now, min_age_ms);
    spin_unlock(&g_heaps_lock);
    bool any = released > 0;
    any |= arena_release(everything, now);
    any |= segment_cache_trim(everything, now);
    /* relaxed: statistic */
    if (any) atomic_fetch_add_explicit(&g_os.purge_runs, 1, memory_order_relaxed);
    return any;
}

/* The purger is a bare clone()d thread with its own small stack and no TLS
 * (it shares the creating thread's, and never touches it: os.c makes raw
 * syscalls, lock.h keeps no count on this stack). Unlike a pthread it does not
 * make glibc treat the process as multithreaded, so a single-threaded
 * program keeps fork() async-signal-safe (glibc's tst-mallocfork2). Its stack
 * is an array of the library's own, untouched (and not resident) until a
 * helper runs, at an address fixed at load time: until the seventy-third
 * session it was mapped at the start and its address kept in a word that
 * every lock read, a data race ThreadSanitizer saw, and a start that failed
 * left its mapping behind. A fork child's helper takes it again. */
LARGE_BSS __attribute__((aligned(64))) char g_purger_stack[PURGER_STACK_SIZE];

/* The retain bound's passes run on frees: when the frees stop, memory past
 * the bound that was too young for the last of them (PRESSURE_MIN_AGE_MS, or
 * longer beside other processes) waited for the whole delay. So the helper
 * sleeps out its delay on purger_request, which every free past the trim
 * threshold sets (purger_wake: one futex call at most each time the helper
 * takes the request); taking one, it naps PURGER_BOUND_MS and checks the
 * bound as a free would (retain_bound_pass), and asks itself again while
 * memory is over the bound or may be once a recent peak or a refault hold
 * has passed. `test_thread_waves` (a 60 s delay): 7 runs in 150 kept a
 * wave's 30 MiB to the end, when its 100 threads freed and exited within a
 * few milliseconds. Until the seventy-first session the helper napped
 * through the whole delay, so an idle process woke 10 times a second
 * (`rel_helper_wakeups idle`: 15 wakeups in 1.5 s with a 60 s delay; 0-1
 * now). */
#define PURGER_BOUND_MS 100 /* jemalloc's background thread sleeps as little */
/* M_BACKGROUND_PURGE 2: the frees only ask, and the helper makes the passes
 * they would have made, at their rate (PRESSURE_INTERVAL_MS apart while
 * asked) and with their age (PRESSURE_MIN_AGE_MS, not stretched by a CPU
 * share: the helper's own wait tells nothing of the program's threads'), so
 * that no call of the program waits for a release (`make bench-latency`,
 * two threads on two CPUs: frees over 100 us 34 a run by default, 4 with
 * 2; the helper's CPU time then comes out of the threads', docs/tuning.md
 * "Latency"). */
#define PURGER_ALL_NAP_MS 4
#define PURGER_ALL_AGE_MS 2
static bool retain_bound_pass(uint32_t now, uint32_t helper_age_ms);
static bool purge_passes_due(uint32_t now, uint32_t helper_age_ms);
static int purger_main(void *unused) {
    (void)unused;
    /* idle: passes in a row that found nothing; past PURGER_IDLE_PASSES,
     * the helper sleeps until a free asks */
    for (int idle = PURGER_IDLE_PASSES;;) {
        uint32_t delay = OPTION(purge_delay_ms);
        if (delay < 10) delay = 10;
        /* acquire: pairs with purger_wake's exchange; nothing else is shared */
        uint32_t asked = atomic_load_explicit(&purger_request, memory_order_acquire);
        bool all = OPTION(background_purge) == 2;
        uint32_t wait = asked ? (all ? PURGER_ALL_NAP_MS : PURGER_BOUND_MS) : delay;
        struct timespec t = {wait / 1000, (long)(wait % 1000) * 1000000L};
        /* asked: a nap no free cuts short, since they find the request set;
         * else until a free asks, or the delay ends (no end once idle) */
        long woke = raw_syscall6(SYS_futex, (long)&purger_request, FUTEX_WAIT_PRIVATE, asked,
                                 asked || idle < PURGER_IDLE_PASSES ? (long)&t : 0, 0, 0);
        if (asked) {
            /* relaxed, both: taken; the frees after this ask again, and so
             * does a look that leaves memory over the bound to come */
            atomic_store_explicit(&purger_request, 0, memory_order_relaxed);
            uint32_t now = clock_ms();
            if (all ? purge_passes_due(now, PURGER_ALL_AGE_MS)
                    : retain_bound_pass(now, PURGER_BOUND_MS))
                atomic_store_explicit(&purger_request, 1, memory_order_relaxed);
            idle = 0; /* the delay starts again after the look */
            continue;
        }
        if (woke != -ETIMEDOUT) continue; /* asked meanwhile */
        if (retained_total() <= retain_limit()) {
            idle = PURGER_IDLE_PASSES;
            continue;
        }
        spin_lock(&g_purge_lock);
        uint32_t now = clock_ms();
        atomic_store_explicit(&last_pass_ms, now, memory_order_relaxed); /* a hint */
        bool any = purge_pass(now, delay, false, 0);
        spin_unlock(&g_purge_lock);
        idle = any ? 0 : idle + 1;
    }
    return 0;
}

#ifdef TIDEMALLOC_PREFIX
static void *purger_pthread(void *unused) {
    purger_main(unused);
    return NULL;
}
#endif

static void purger_wake(void) {
    if (!OPTION(background_purge)) return;
    int state = atomic_load_explicit(&purger_state, memory_order_acquire);
    /* relaxed: a rate limit; the exchange below decides who tries */
    if (state == 3 &&
        (uint32_t)(clock_ms() - atomic_load_explicit(&purger_failed_ms, memory_order_relaxed)) <
            PURGER_RETRY_MS)
        return;
    if (state == 0 || state == 3) {
        if (!atomic_compare_exchange_strong_explicit(&purger_state, &state, 1, memory_order_acq_rel,
                                                     memory_order_acquire))
            return;
        /* every signal: glibc's pthread_sigmask keeps its own internal ones
         * unblocked, as sigfillset would (one import fewer) */
        sigset_t all, old;
        memset(&all, 0xff, sizeof all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* the purger takes no signals */
#ifdef TIDEMALLOC_PREFIX
        /* sanitizer test builds: ThreadSanitizer only understands pthreads
         * (which run on stacks of their own, so no lock counts as the
         * purger's) */
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        bool ok = pthread_create(&thread, &attr, purger_pthread, NULL) == 0;
        pthread_attr_destroy(&attr);
#else
        bool ok =
            clone(purger_main, g_purger_stack + PURGER_STACK_SIZE,
                  CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM,
                  NULL) > 0;
#endif
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        /* relaxed: a rate limit, published by the state's release */
        if (!ok) atomic_store_explicit(&purger_failed_ms, clock_ms(), memory_order_relaxed);
        atomic_store_explicit(&purger_state, ok ? 2 : 3, memory_order_release);
        if (!ok) return;
    } else if (state == 1) {
        return;
    }
    /* relaxed peek: a request already pending needs no second one. */
    if (atomic_load_explicit(&purger_request, memory_order_relaxed) != 0) return;
    /* release: the helper's acquire load sees the state that asked. */
    if (atomic_exchange_explicit(&purger_request, 1, memory_order_release) == 0)
        raw_syscall6(SYS_futex, (long)&purger_request, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

/* The bound on what is kept: free slices and cached pages past the trim
 * limit may be at most retain_percent of the memory in use (pages and huge
 * blocks), or RETAIN_FLOOR if that is more. A program whose threads free in
 * bursts (mstress) otherwise holds, for the whole purge delay, one idle pool
 * per heap: 25 MiB peak RSS for 8 MB live, against 18 MiB with the bound.
 * With a single heap, every free slice is that heap's to reuse, and the use
 * counted is its highest over the current window of PEAK_WINDOW_MS and the
 * one before it: trimming the troughs of a program whose use swings
 * (`large`) only had it fault the memory back at the next crest (174 MB
 * released in 0.5 s, 102k faults against tcmalloc's 28k); with the recent
 * peak it runs 20-25% faster for 2% more peak RSS. What the peak held and
 * the use no longer does is kept on top of the bound (the limit rises by
 * peak - use), so that RSS stays within the percentage of the recent peak
 * either way: a program whose use swings from all to nothing and back had
 * the bound give two thirds back at each trough and fault it in again
 * (`patterns cycles 64 200000 20`, 18 MiB 20 times: 22.5k faults and 0.112
 * s, now 4.5k and 0.067 s; tcmalloc 4.8k and 0.119 s). The use is read only
 * here, on frees, so a window that ended in a trough forgot the peak: hence
 * the window before (none after a quiet spell longer than a window).
 * With several heaps, each can reuse only its own slices, and the recent
 * peak cost mstress 9% more peak RSS: the current use counts, unless at most
 * one thread heap grew in the window before (retain_one_growing_heap). The
 * huge-block cache has its own cap (huge.c): its mappings are reused whole,
 * and releasing them early cost `large` half its time again. */
#define RETAIN_FLOOR   ((uint64_t)4 << 20)
#define PEAK_WINDOW_MS 100
static _Atomic uint64_t recent_peak_in_use;   /* highest use seen since recent_peak_ms */
static _Atomic uint64_t previous_peak_in_use; /* the highest in the window before */
static _Atomic uint32_t recent_peak_ms;       /* when the current window began */
/* Thread heaps that took more than GROWING_SLOW_PATHS malloc slow paths in
 * the window before the current one: those whose own pages grew (the exit
 * heap's serve every thread, and shared classes, 1-32 KiB, are its). A
 * program with one working thread and helpers that wait (a timer, a logger,
 * a main thread in pthread_join) is a single heap to the bound: the slices
 * the growing heap keeps are its own to reuse, and an idle heap's free
 * slices count as retained as before, within the same limit. A few slow
 * paths are a thread setting its heap up, or one that allocates now and
 * then: with none allowed, a helper's one malloc had the first 100-200 ms
 * of `patterns cycles 100 800000 20 1` under the rule for several heaps
 * (66k faults, 24k without the helper). Counted at most once a window,
 * under the heaps lock (one pass over the heaps every PEAK_WINDOW_MS). */
#define GROWING_SLOW_PATHS 8
/* Until a window has been counted with several heaps live (a second thread
 * has just started), the rule for several heaps holds. */
#define GROWING_HEAPS_UNCOUNTED 2
static _Atomic uint32_t growing_heaps = GROWING_HEAPS_UNCOUNTED;
static uint32_t growing_heaps_counted_ms; /* heaps lock */
static void growing_heaps_count(uint32_t now) {
    if (!spin_try_lock(&g_heaps_lock)) return; /* the last count stands */
    if (now - growing_heaps_counted_ms >= PEAK_WINDOW_MS) {
        growing_heaps_counted_ms = now;
        uint32_t growing = 0;
        for (struct heap *heap = g_heaps; heap; heap = heap->next_heap) {
            if (heap->id == EXIT_HEAP_ID) continue;
            /* relaxed: compared with the count of the last pass only */
            uint32_t slow_paths = __atomic_load_n(&heap->slow_paths, __ATOMIC_RELAXED);
            growing += slow_paths - heap->slow_paths_window > GROWING_SLOW_PATHS;
            heap->slow_paths_window = slow_paths;
        }
        /* relaxed: a hint, read by the bound and the segment cache */
        atomic_store_explicit(&growing_heaps, growing, memory_order_relaxed);
    }
    spin_unlock(&g_heaps_lock);
}
bool retain_one_growing_heap(void) {
    /* relaxed, all: statistics and a tunable; a thread starting or ending, a
     * count a window old, or a mallopt meanwhile only picks one of the two
     * rules for a window. The count is taken on the bound's passes: with the
     * bound turned off it would stand from before, so several heaps count
     * as several growing then. */
    return atomic_load_explicit(&g_heap_count, memory_order_relaxed) <= 1 ||
           (OPTION(retain_percent) != 0 &&
            atomic_load_explicit(&growing_heaps, memory_order_relaxed) <= 1);
}

/* True if retained memory is over the bound now (*target: what a pass
 * leaves); *later: over it, or held back from it for now (a refault hold, or
 * a recent peak above the use), so that it may be over it once that passes. */
static bool over_retain_bound(uint32_t now, uint64_t *target, bool *later) {
    uint64_t percent = OPTION(retain_percent);
    *later = percent != 0;
    if (percent == 0 || refault_hold(now)) return false;
    /* relaxed: a trigger, as in retained_total */
    uint64_t retained = atomic_load_explicit(&g_retained_bytes, memory_order_relaxed);
    /* pages: the few a heap caches empty count as in use, a small error */
    uint64_t in_use = atomic_load_explicit(&g_page_slice_bytes, memory_order_relaxed) +
                      atomic_load_explicit(&g_huge_bytes, memory_order_relaxed) +
                      atomic_load_explicit(&g_arena_used_bytes, memory_order_relaxed);
    /* Pages whose every block other threads freed are free memory: retained,
     * not in use. (Only subtracting them from the use left larson's main
     * thread's 4 MiB, freed by the workers while it waits in pthread_join,
     * under the bound until the 1 s delay: peak RSS 15.8 -> 13.0 MiB.) */
    uint64_t remote = remote_freed_page_bytes();
    in_use = in_use > remote ? in_use - remote : 0;
    retained += remote;
    uint64_t basis = in_use, limit = retain_limit(), base_limit = limit;
    /* relaxed, all: hints; racing updates only pick one of two close peaks,
     * or end a window a pass early */
    uint64_t peak = atomic_load_explicit(&recent_peak_in_use, memory_order_relaxed);
    uint64_t previous = atomic_load_explicit(&previous_peak_in_use, memory_order_relaxed);
    uint32_t age = now - atomic_load_explicit(&recent_peak_ms, memory_order_relaxed);
    if (age > PEAK_WINDOW_MS) {
        previous = age > 2 * PEAK_WINDOW_MS ? 0 : peak;
        atomic_store_explicit(&previous_peak_in_use, previous, memory_order_relaxed);
        atomic_store_explicit(&recent_peak_ms, now, memory_order_relaxed);
        peak = 0;
        /* relaxed, both: a statistic and a hint, as in retain_one_growing_heap */
        if (atomic_load_explicit(&g_heap_count, memory_order_relaxed) > 1)
            growing_heaps_count(now);
        else
            atomic_store_explicit(&growing_heaps, GROWING_HEAPS_UNCOUNTED, memory_order_relaxed);
    }
    if (in_use >= peak) {
        atomic_store_explicit(&recent_peak_in_use, in_use, memory_order_relaxed);
        peak = in_use;
    }
    if (retain_one_growing_heap()) {
        basis = peak > previous ? peak : previous;
        limit += basis - in_use;
    }
    uint64_t bound = basis / 100 * percent;
    if (bound < RETAIN_FLOOR) bound = RETAIN_FLOOR;
    *target = limit + bound / 2; /* half the bound: room before the next pass */
    bool over = retained > limit + bound && limit + bound >= limit;
    /* Once the peak has passed, the bound is at least the floor over the
     * trim limit: memory within that is never over it, and a look then would
     * find nothing (rel_helper_wakeups idle: 4-5 looks in the 400 ms after a
     * burst's frees with 3 MiB retained, before). */
    *later =
        over || (basis > in_use && retained > base_limit && retained - base_limit > RETAIN_FLOOR);
    return over;
}

/* Passes over the bound release free slices unused for PRESSURE_MIN_AGE_MS,
 * segment by segment until half the bound is left, at most one per
 * PRESSURE_INTERVAL_MS. The age spares memory a program frees and takes
 * back at once: seed 000's mixed case frees 58 MB and allocates it again
 * within about a millisecond, 8 times; with no age the bound cost it 89
 * release syscalls more, with 2 ms 17 more, with 5 ms none (mstress: peak
 * RSS 17.7, 17.4 and 19 MiB), when that was chosen. With the batched
 * releases and the idle-owner passes since, 2 ms costs that case 2 release
 * calls more than 5 ms (25 against 23, tests/suite-release.sh), and takes
 * mstress's peak RSS from 17.5 to 15.9 MiB for 8% more faults and 1-3%
 * more time (interleaved medians of 15-21); no other benchmark of the
 * suite moved. The interval keeps a program that frees and allocates past
 * the bound over and over from paying a syscall per free. */
#define PRESSURE_INTERVAL_MS 4
#define PRESSURE_MIN_AGE_MS  2
_Static_assert(PURGER_ALL_NAP_MS == PRESSURE_INTERVAL_MS &&
                   PURGER_ALL_AGE_MS == PRESSURE_MIN_AGE_MS,
               "the helper's passes in M_BACKGROUND_PURGE 2 are a free's");
#define PRESSURE_MAX_AGE_MS    100
#define PRESSURE_SHARE_SPAN_MS 20 /* longest span the CPU share is taken over */
static _Atomic uint32_t last_pressure_pass_ms;

/* Pages whose every block other threads freed go back after IDLE_OWNER_MS,
 * not the purge delay, when their owner has taken no malloc slow path since
 * the previous such pass: an owner blocked or busy elsewhere (larson's main
 * thread waits in pthread_join while the workers free its 4 MiB) is not
 * about to collect them (larson: peak RSS 12.8-13.0 -> 11.4-11.7 MiB). An
 * owner still allocating keeps them for the delay: it collects them when its
 * pages run dry. Passes 2 ms apart, pages 4 ms old: larson's workers free
 * its main thread's 4 MiB in the first 2-3 ms, and with 10 / 20 ms that
 * memory was still resident when they peaked, in a third of the runs (peak
 * RSS 11.2-14.2 MiB, median 11.6, 21 runs; now 9.4-12.0, median 11.0,
 * glibc's 11.1; time even). Purge lock held. */
#define IDLE_OWNER_INTERVAL_MS 2
#define IDLE_OWNER_MS          4
static _Atomic uint32_t last_idle_owner_pass_ms;
/* A pass reads every segment's owner, and an idle owner's every page: past
 * 16 segments the interval grows by 1 ms per 8, so that passes read at most
 * 8 segments a millisecond, as many as a heap of 80 segments did when
 * passes were 10 ms apart. */
static uint32_t idle_owner_interval_ms(void) {
    /* relaxed: a statistic, as a rate */
    uint64_t per_segments = atomic_load_explicit(&g_segment_count, memory_order_relaxed) / 8;
    return per_segments > IDLE_OWNER_INTERVAL_MS ? (uint32_t)per_segments : IDLE_OWNER_INTERVAL_MS;
}
static void reclaim_idle_owners(uint32_t now) {
    bool keep_live_owners = OPTION(retain_percent) == 0;
    /* the heaps lock throughout: no heap structure is recycled (and cleared)
     * while a segment's stale owner pointer leads to it */
    spin_lock(&g_heaps_lock);
    size_t released = 0;
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next) {
        /* relaxed, both: a stale owner or count only moves one segment's
         * pages to the next pass or to the delay; the reclaim itself is
         * decided by its CAS. Heap structures are never unmapped. No owner:
         * abandoned, idle. An owner is idle if its count has not moved since
         * the previous pass. With the retain bound off, a live owner's
         * pages wait for the delay: the user asked for the delay alone. */
        struct heap *owner = __atomic_load_n(&s->heap, __ATOMIC_RELAXED);
        if (owner != NULL &&
            (keep_live_owners ||
             __atomic_load_n(&owner->slow_paths, __ATOMIC_RELAXED) != owner->slow_paths_seen))
            continue;
        released += segment_reclaim_pages(s, now, IDLE_OWNER_MS);
    }
    spin_unlock(&g_registry_lock);
    for (struct heap *heap = g_heaps; heap; heap = heap->next_heap)
        heap->slow_paths_seen = __atomic_load_n(&heap->slow_paths, __ATOMIC_RELAXED);
    spin_unlock(&g_heaps_lock);
    /* relaxed: statistic */
    if (released) atomic_fetch_add_explicit(&g_os.purge_runs, 1, memory_order_relaxed);
}

/* The age is the program's own time, not the clock's. When the process got
 * less than one CPU since the previous pass (its CPU time over the span) and
 * the thread running this pass waited for a CPU meanwhile (schedstat),
 * PRESSURE_MIN_AGE_MS is stretched by span / (span - wait): a program slowed
 * down by other processes then keeps the memory it is about to reuse, while
 * one that slept (no wait) or whose threads only compete among themselves
 * (a full share) is treated as before. Seed 000's mixed case beside one busy
 * process made 23-179 release calls in 10-12 runs, where alone it makes 23.
 * Five system calls a pass, at most one pass per interval; the purge lock
 * guards the readings. */
static uint32_t pressure_min_age_ms(void) {
    static uint64_t last_cpu_us, last_now_us, last_wait_ns, last_thread;
    uint64_t cpu_us = os_process_cpu_us(), now_us = os_monotonic_us();
    uint64_t wait_ns = os_thread_run_wait_ns(), thread = current_thread_id();
    uint64_t span_us = now_us - last_now_us, ran_us = cpu_us - last_cpu_us;
    uint64_t waited_us = (wait_ns - last_wait_ns) / 1000u;
    bool comparable = last_now_us != 0 && now_us > last_now_us && thread == last_thread &&
                      span_us <= PRESSURE_SHARE_SPAN_MS * 1000u && wait_ns >= last_wait_ns;
    last_cpu_us = cpu_us;
    last_now_us = now_us;
    last_wait_ns = wait_ns;
    last_thread = thread;
    if (!comparable || ran_us >= span_us || waited_us == 0) return PRESSURE_MIN_AGE_MS;
    if (waited_us >= span_us) return PRESSURE_MAX_AGE_MS;
    uint64_t age = PRESSURE_MIN_AGE_MS * span_us / (span_us - waited_us);
    return age < PRESSURE_MAX_AGE_MS ? (uint32_t)age : PRESSURE_MAX_AGE_MS;
}

/* The refault hold. With several heaps growing, the bound counts the
 * current use and the segment cache keeps 16 empty segments resident: right
 * for mstress (a fifth less peak RSS), but a garbage collector's bulk frees
 * (`patterns collector`: a thread frees everything the workers made, and
 * they make it again) had each collection's memory go back and fault in
 * again: 498k faults and 2.4 times tcmalloc's CPU time. So, with several
 * heaps growing and memory retained past the trim threshold, a sample at
 * most every REFAULT_WINDOW_MS (once REFAULT_SAMPLE_BYTES more went back)
 * reads the kernel's count of minor faults and the process's CPU time. The
 * window's refaults are the smaller of its faults and the pages released in
 * it and the window before (a window that only gave back, a collection
 * freeing while its owners wait, keeps what went before it owed too). When
 * they, at REFAULT_COST_NS each, took more than refault_percent of the CPU
 * time, the memory was wanted back as soon as it went: for a purge delay
 * (at most REFAULT_HOLD_MAX_MS) the bound is off and the segment cache
 * keeps every segment a thread's own frees empty; the delay still releases
 * what stays unused. The collector then takes 0.68 of the time, for 16%
 * more peak RSS (each worker's heap keeps its own share). By window,
 * mstress spends at most 4-6% of its CPU time so (mostly fresh memory),
 * larson 8 20 11%, the collector 24-40%; threadwave 1000 4 20%, but a
 * window in which a thread exited starts no hold (below).
 * docs/benchmark-history.md, sixty-eighth session: the forms not kept.
 * A sample takes refault_lock, not the purge lock (see refault_sample).
 */
#define REFAULT_COST_NS     1000 /* a first-touch fault here: 1.7-2.0 us (hostprobe) */
#define REFAULT_WINDOW_MS   10
#define REFAULT_HOLD_MAX_MS 1000
_Atomic uint32_t g_refault_hold_until_ms;   /* 0: no hold */
static _Atomic uint32_t refault_sampled_ms; /* the last sample's time */
/* The next sample waits for bytes_released to reach this: REFAULT_SAMPLE_BYTES
 * more than at the last one, or none while pages are still owed (0). */
#define REFAULT_SAMPLE_BYTES ((uint64_t)16 << 20)
static _Atomic uint64_t refault_sample_bytes = REFAULT_SAMPLE_BYTES;
/* The sampler's own state: in the large-data section (internal.h,
 * LARGE_BSS), so that programs that never sample keep .bss on one page. */
LARGE_BSS static struct {
    uint32_t exit_seen_ms;                      /* when a sample last saw it move */
    uint64_t faults, cpu_us;                    /* the kernel's minor faults, the CPU time */
    uint64_t released_pages;                    /* bytes_released / 4 KiB */
    uint64_t released_pages_before;             /* in the window that ended then (and before) */
} refault_last;                                 /* refault_lock */
LARGE_BSS static struct spin_lock refault_lock; /* zero: SPIN_LOCK_INIT */
/* g_heap_exits at the last sample. A sample reads the process's counts,
 * which sums every thread's: while threads come and go in hundreds, at most
 * one a second (reading the process's CPU clock every 10 ms beside waves of
 * a thousand threads took `threadwave 1000 4` from 142 to 146-302 MiB of
 * peak RSS: their starts and exits wait for those reads). */
LARGE_BSS static _Atomic uint64_t refault_exits_seen;
/* Takes a sample; rare code (internal.h): only programs whose several
 * threads' heaps grow, and that gave 16 MiB back, run it. */
RARE static NOINLINE void refault_sample(uint32_t now) {
    struct rusage usage;
    /* relaxed, both: hints (see refault_exits_seen) */
    if ((uint32_t)(now - atomic_load_explicit(&refault_sampled_ms, memory_order_relaxed)) <
            REFAULT_HOLD_MAX_MS &&
        atomic_load_explicit(&g_heap_exits, memory_order_relaxed) !=
            atomic_load_explicit(&refault_exits_seen, memory_order_relaxed))
        return;
    /* Not the purge lock: getrusage sums every thread's counts, and with a
     * thousand threads the passes that found the purge lock taken meanwhile
     * were skipped (`threadwave 1000 4`: 141-302 MiB of peak RSS against
     * 142, even with the hold turned off). */
    if (!spin_try_lock(&refault_lock)) return;
    /* relaxed: rate limiting; checked again under the lock, so that a
     * thread that read the time before another's sample takes none */
    if ((uint32_t)(now - atomic_load_explicit(&refault_sampled_ms, memory_order_relaxed)) <
        REFAULT_WINDOW_MS) {
        spin_unlock(&refault_lock);
        return;
    }
    atomic_store_explicit(&refault_sampled_ms, now, memory_order_relaxed);
    raw_syscall6(SYS_getrusage, RUSAGE_SELF, (long)&usage, 0, 0, 0, 0); /* cannot fail */
    bool first = refault_last.cpu_us == 0;
    /* relaxed: a hint. Threads that exit leave their memory to new ones,
     * which use other pages of it: kept, it only grew RSS (waves of 100
     * threads beside two busy processes: 17 MiB against 6-12; `threadwave
     * 1000 4`, whose waves have windows without an exit: 141-293 MiB
     * against 142). No hold within REFAULT_HOLD_MAX_MS of an exit seen. */
    uint64_t exits = atomic_load_explicit(&g_heap_exits, memory_order_relaxed);
    if (exits != atomic_load_explicit(&refault_exits_seen, memory_order_relaxed))
        refault_last.exit_seen_ms = now;
    bool threads_exited = now - refault_last.exit_seen_ms < REFAULT_HOLD_MAX_MS;
    atomic_store_explicit(&refault_exits_seen, exits, memory_order_relaxed);
    uint64_t faults = (uint64_t)usage.ru_minflt - refault_last.faults;
    uint64_t cpu_us = os_process_cpu_us() - refault_last.cpu_us;
    /* relaxed: a statistic */
    uint64_t released = (atomic_load_explicit(&g_os.bytes_released, memory_order_relaxed) >> 12) -
                        refault_last.released_pages;
    uint64_t recently = released + refault_last.released_pages_before;
    refault_last.faults += faults;
    refault_last.cpu_us += cpu_us;
    refault_last.released_pages += released;
    /* A window that only gave back (a collection freeing, its owners
     * waiting) keeps what went before it owed too. */
    refault_last.released_pages_before = faults * 16 < released ? recently : released;
    /* relaxed: a trigger */
    atomic_store_explicit(&refault_sample_bytes,
                          refault_last.released_pages_before >= REFAULT_SAMPLE_BYTES >> 12
                              ? 0
                              : (refault_last.released_pages << 12) + REFAULT_SAMPLE_BYTES,
                          memory_order_relaxed);
    spin_unlock(&refault_lock);
    if (faults > recently) faults = recently;
    /* relaxed: a tunable. The first sample has no window; a fork child's
     * counts start again (a huge difference, unsigned): one sample. */
    uint64_t percent = OPTION(refault_percent);
    if (!first && !threads_exited && cpu_us < (uint64_t)1 << 40 &&
        faults * REFAULT_COST_NS * 100 > cpu_us * 1000u * percent && percent != 0) {
        /* a purge delay, at most a second: a longer delay would keep the
         * bound off long after the refaults stop */
        uint32_t span = OPTION(purge_delay_ms);
        uint32_t until = now + (span < REFAULT_HOLD_MAX_MS ? span : REFAULT_HOLD_MAX_MS);
        /* relaxed: a hint, read by the release rules */
        atomic_store_explicit(&g_refault_hold_until_ms, until ? until : 1, memory_order_relaxed);
    }
}

/* The bound's pass, at most one every PRESSURE_INTERVAL_MS, whoever runs
 * it. The helper's (helper_age_ms not 0) releases what has been free for
 * that long: its own wait for a CPU tells nothing of the program's
 * threads', and it must not read their thread-local words either
 * (pressure_min_age_ms). Returns true if the helper should look again: the
 * memory is over the bound or may be (over_retain_bound's `later`), or the
 * rate limit skipped the look. */
static bool retain_bound_pass(uint32_t now, uint32_t helper_age_ms) {
    /* relaxed: rate limiting only, as below */
    uint32_t last_pressure = atomic_load_explicit(&last_pressure_pass_ms, memory_order_relaxed);
    uint64_t target;
    bool later = true; /* a look skipped here owes one later */
    if ((uint32_t)(now - last_pressure) >= PRESSURE_INTERVAL_MS &&
        over_retain_bound(now, &target, &later) && spin_try_lock(&g_purge_lock)) {
        atomic_store_explicit(&last_pressure_pass_ms, now, memory_order_relaxed);
        purge_pass(now, helper_age_ms ? helper_age_ms : pressure_min_age_ms(), false, target);
        spin_unlock(&g_purge_lock);
    }
    return later;
}

void purge_after_free(void) {
    /* this thread's frees of other threads' blocks count in what a pass
     * sees; once per clock tick (mstress: 181k of 347k pushes were these
     * flushes, at 2.5 blocks a push, when every call flushed) */
    struct heap *heap = t_heap;
    if (unlikely(heap->remote_batches_open != 0)) {
        uint32_t now = clock_ms();
        if (now != heap->remote_batches_flushed_ms) {
            heap->remote_batches_flushed_ms = now;
            remote_batches_flush(heap);
        }
    }
    if (retained_total() <= retain_limit()) return;
    /* relaxed (the state): a helper that could not start leaves them here */
    if (OPTION(background_purge) != 2 ||
        atomic_load_explicit(&purger_state, memory_order_relaxed) != 2)
        purge_passes_due(clock_ms(), 0);
    if (retained_total() > retain_limit()) purger_wake();
}

/* The passes due past the trim limit: a free's (helper_age_ms 0) or the
 * helper's in M_BACKGROUND_PURGE 2 (see retain_bound_pass). Returns what
 * the bound's pass does. */
static bool purge_passes_due(uint32_t now, uint32_t helper_age_ms) {
    /* relaxed, all: rate limiting and a trigger (refault_sample checks the
     * time again under its own lock) */
    if ((uint32_t)(now - atomic_load_explicit(&refault_sampled_ms, memory_order_relaxed)) >=
            REFAULT_WINDOW_MS &&
        atomic_load_explicit(&g_os.bytes_released, memory_order_relaxed) >=
            atomic_load_explicit(&refault_sample_bytes, memory_order_relaxed) &&
        !retain_one_growing_heap())
        refault_sample(now);
    bool later = retain_bound_pass(now, helper_age_ms);
    /* relaxed: rate limiting only */
    uint32_t last_idle = atomic_load_explicit(&last_idle_owner_pass_ms, memory_order_relaxed);
    if (remote_freed_page_bytes() > 0 && (uint32_t)(now - last_idle) >= idle_owner_interval_ms() &&
        spin_try_lock(&g_purge_lock)) {
        atomic_store_explicit(&last_idle_owner_pass_ms, now, memory_order_relaxed);
        reclaim_idle_owners(now);
        spin_unlock(&g_purge_lock);
    }
    uint32_t delay = OPTION(purge_delay_ms);
    uint32_t interval = delay / 2 > 1 ? delay / 2 : 1;
    /* relaxed: rate limiting only; the purge lock serialises passes. */
    uint32_t last = atomic_load_explicit(&last_pass_ms, memory_order_relaxed);
    if ((uint32_t)(now - last) >= interval && spin_try_lock(&g_purge_lock)) {
        atomic_store_explicit(&last_pass_ms, now, memory_order_relaxed);
        purge_pass(now, delay, false, 0);
        spin_unlock(&g_purge_lock);
    }
    return later;
}

RARE bool purge_everything(size_t pad) {
    if (retained_total() <= pad) return false;
    spin_lock(&g_purge_lock);
    bool any = purge_pass(clock_ms(), 0, true, 0);
    spin_unlock(&g_purge_lock);
    return any;
}

void purge_atfork_child(void) {
    atomic_store_explicit(&purger_state, 0, memory_order_relaxed); /* no helper in the child */
    atomic_store_explicit(&purger_request, 0, memory_order_relaxed);
}

/* Gives ranges back (one call where the kernel allows); empties the array.
 * Returns the bytes that went. */
RARE static size_t release_ranges(struct iovec *ranges, unsigned *count) {
    uint64_t went = *count ? os_release_ranges(ranges, *count) : 0;
    size_t released = 0;
    for (unsigned i = 0; i < *count; i++)
        if (went >> i & 1) released += ranges[i].iov_len;
    *count = 0;
    return released;
}

/* malloc_trim: blocks that other threads freed into a live thread's pages
 * wait on the pages' thread_free lists until that thread collects them. Take
 * each list for a moment (one exchange: the owner, finding it empty, cannot
 * retire the page meanwhile, since those blocks still count as used), release
 * the whole OS pages inside its blocks past their link words, and push the
 * list back. Descriptors are read without the owner's cooperation: fields of
 * an in-use page are constant, and an exchange on a page that changed hands
 * only yields blocks of its new, equally constant, layout. */
RARE static size_t release_remote_freed_blocks(void) {
    size_t released = 0;
    /* Secure mode checks each free block's fill when it is reused: a page
     * given back would read zero there (a false "write after free"). */
    if (g_options.secure) return 0;
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next) {
        for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
            struct page *page = &s->pages[i];
            /* relaxed: a hint; the exchange below is what takes the list */
            uintptr_t seen = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
            /* reclaimed too (count zero); purge lock: stays so */
            if (thread_free_count(seen) == 0) continue;
            uintptr_t taken = atomic_exchange_explicit(
                &page->thread_free, thread_free_empty_word(page), memory_order_acquire);
            struct block *list = thread_free_head(taken);
            if (thread_free_count(taken) == 0) continue;
            size_t block_size = __atomic_load_n(&page->block_size, __ATOMIC_RELAXED);
            /* read while the list is out: its blocks keep the page in use */
            uint32_t reserved = page->reserved;
            uint64_t page_bytes = (uint64_t)page->slice_count << SLICE_SHIFT;
            struct block *tail = list;
            struct iovec ranges[PURGE_BATCH_MAX];
            unsigned count = 0;
            for (struct block *b = list; !list_is_end(b); b = block_link_decode(b)) {
                uintptr_t from = ((uintptr_t)b + sizeof(struct block) + OS_PAGE_SIZE - 1) &
                                 ~(uintptr_t)(OS_PAGE_SIZE - 1);
                uintptr_t to = ((uintptr_t)b + block_size) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
                if (to > from) ranges[count++] = (struct iovec){(void *)from, to - from};
                if (count == PURGE_BATCH_MAX) released += release_ranges(ranges, &count);
                tail = b;
            }
            released += release_ranges(ranges, &count);
            uintptr_t old = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
            uintptr_t word;
            do {
                word = thread_free_push_word(old, list, tail, thread_free_count(taken));
                /* release: as in free_remote */
            } while (!atomic_compare_exchange_weak_explicit(
                &page->thread_free, &old, word, memory_order_release, memory_order_relaxed));
            /* a full list taken is put back full; pushes meanwhile may fill one */
            bool was_full = thread_free_count(taken) == reserved;
            if (!was_full && thread_free_count(word) == reserved)
                remote_freed_page_note(page_bytes, true);
        }
    }
    spin_unlock(&g_registry_lock);
    return released;
}

RARE API int TM_NAME(malloc_trim)(size_t pad) {
    allocator_init();
    extern void heap_collect_current(void) INTERNAL;
    heap_collect_current();
    bool any = purge_everything(pad);
    spin_lock(&g_purge_lock); /* no purger reclaims a page while its list is out */
    if (release_remote_freed_blocks() > 0) any = true;
    spin_unlock(&g_purge_lock);
    return any ? 1 : 0;
}
