/* Issue 3 check c: malloc_trim(0). 4 threads each allocate 25 MiB (100 MiB in
 * all) in blocks of 1 KiB..256 KiB and touch every page; the blocks are freed,
 * then the main thread calls malloc_trim(0) while the 4 threads are still
 * alive (their heaps are not abandoned): RSS (/proc/self/statm) must be back
 * within 2 MiB of the RSS measured before the allocation, and malloc_trim must
 * return 1.
 *   rel_trim own    each thread frees its own blocks
 *   rel_trim cross  each thread frees the blocks of the next thread (remote frees)
 *   rel_trim exited each thread frees its own blocks and exits before the trim
 * Background purge is irrelevant here: the test trims at once. */
#include <string.h>
#include <malloc.h>
#include <pthread.h>

#include "release.h"

#define THREADS    4
#define PER_THREAD ((size_t)25 << 20)
#define MAX_BLOCKS 8192
/* Issue 3 check c, in every mode. Blocks another thread freed into a live,
 * idle thread's pages wait on their page's remote list until that thread
 * runs again; malloc_trim reclaims the pages whose every block is there, and
 * releases the whole OS pages inside the blocks of the others (their first
 * OS page, with the list link, stays: before pages were reclaimed, cross
 * mode ended +2.0 MiB, now +0.6). */
#define SLACK ((size_t)2 << 20)

static void *blocks[THREADS][MAX_BLOCKS];
static size_t nblocks[THREADS];
static pthread_barrier_t barrier;
static int cross, exited;

static void wait_all(void) {
    int rc = pthread_barrier_wait(&barrier);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) REL_FAIL("pthread_barrier_wait failed");
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(me + 1);
    wait_all(); /* 1: main measured the baseline */
    size_t total = 0, n = 0;
    while (total < PER_THREAD && n < MAX_BLOCKS) {
        size_t size = 1024 + (size_t)(rel_rand(&seed) % (256 * 1024 - 1024 + 1));
        if (total + size > PER_THREAD) size = PER_THREAD - total;
        void *p = malloc(size);
        if (p == NULL) REL_FAIL("thread %d: malloc(%zu) failed", me, size);
        memset(p, 0x5a, size);
        blocks[me][n++] = p;
        total += size;
    }
    nblocks[me] = n;
    wait_all(); /* 2: everything allocated */
    wait_all(); /* 2b: main measured the peak */
    int victim = cross ? (me + 1) % THREADS : me;
    for (size_t i = 0; i < nblocks[victim]; i++)
        free(blocks[victim][i]);
    wait_all(); /* 3: everything freed */
    if (exited) return NULL;
    wait_all(); /* 4: main trimmed and measured */
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "own") != 0 && strcmp(argv[1], "cross") != 0 &&
                      strcmp(argv[1], "exited") != 0)) {
        fprintf(stderr, "usage: rel_trim own|cross|exited\n");
        return 2;
    }
    cross = strcmp(argv[1], "cross") == 0;
    exited = strcmp(argv[1], "exited") == 0;
    memset(blocks, 0, sizeof blocks); /* resident before the baseline */
    struct tidemalloc_stats s0 = rel_stats();
    REL_CHECK(pthread_barrier_init(&barrier, NULL, THREADS + 1) == 0, "barrier init failed");
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        REL_CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0,
                  "pthread_create failed");
    size_t rss0 = rel_rss();
    wait_all(); /* 1 */
    wait_all(); /* 2 */
    size_t rss_peak = rel_rss();
    wait_all(); /* 2b */
    wait_all(); /* 3 */
    if (exited)
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    size_t rss_freed = rel_rss();
    struct tidemalloc_stats s1 = rel_stats();
    int trimmed = malloc_trim(0);
    size_t rss_trim = rel_rss();
    struct tidemalloc_stats s2 = rel_stats();
    if (!exited) {
        wait_all(); /* 4 */
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    }
    REL_FIGURES("mode=%s rss_before=%.2fMiB peak=+%.2fMiB after_free=+%.2fMiB "
                "after_trim=%+.2fMiB trim_returned=%d retained_before_trim=%.2fMiB "
                "retained_after_trim=%.2fMiB trim_munmap=%llu trim_madvise=%llu "
                "run_munmap=%llu run_madvise=%llu",
                argv[1], rel_mib(rss0), rel_dmib(rss_peak, rss0), rel_dmib(rss_freed, rss0),
                rel_dmib(rss_trim, rss0), trimmed, rel_mib(s1.bytes_retained),
                rel_mib(s2.bytes_retained), (unsigned long long)(s2.munmap_calls - s1.munmap_calls),
                (unsigned long long)(s2.madvise_calls - s1.madvise_calls),
                (unsigned long long)(s1.munmap_calls - s0.munmap_calls),
                (unsigned long long)(s1.madvise_calls - s0.madvise_calls));
    REL_CHECK(rss_peak >= rss0 + (size_t)90 * 1024 * 1024,
              "the workload did not become resident (peak +%.2f MiB)", rel_dmib(rss_peak, rss0));
    REL_CHECK(trimmed == 1, "malloc_trim(0) returned %d, expected 1", trimmed);
    REL_CHECK(rss_trim <= rss0 + SLACK,
              "RSS after malloc_trim(0) is %+.2f MiB from before the allocation (limit +%zu MiB)",
              rel_dmib(rss_trim, rss0), SLACK >> 20);
    return 0;
}
