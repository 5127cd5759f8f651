/* Thread churn: 100,000 short-lived threads, a few at a time, each allocating
 * and freeing blocks of many sizes and leaving one block for the main thread
 * to free after it has exited. RSS (and, with tidemalloc, mapped bytes and
 * live heaps) after all of them stays within a small bound of the figures
 * after the first 1,000 threads. */
#include <malloc.h>
#include <pthread.h>

#include "common.h"

#define THREADS 100000
#define BATCH   4
#define MB      ((size_t)1 << 20)

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *local[32];
    size_t n[32];
    for (int i = 0; i < 32; i++) {
        seed = seed * 1103515245u + 12345u;
        n[i] = 1 + (seed >> 8) % 600;
        if (i == 31) n[i] = 20000 + (seed >> 8) % 50000;
        local[i] = malloc(n[i]);
        if (!local[i]) return NULL;
        pat_fill(local[i], n[i]);
    }
    for (int i = 0; i < 32; i += 2) {
        if (pat_check(local[i], n[i]) != (size_t)-1) return NULL;
        free(local[i]);
    }
    for (int i = 1; i < 31; i += 2) {
        if (pat_check(local[i], n[i]) != (size_t)-1) return NULL;
        free(local[i]);
    }
    /* local[31] outlives the thread: the main thread frees it. */
    return local[31];
}

struct sample {
    size_t rss, mapped, heaps;
};

static struct sample take(tm_stats_fn st) {
    struct sample s = {rss_bytes(), 0, 0};
    if (st) {
        struct tidemalloc_stats t;
        st(&t);
        s.mapped = (size_t)t.bytes_mapped;
        s.heaps = (size_t)t.heaps;
    }
    return s;
}

int main(void) {
    tm_stats_fn st = tm_stats_required_if_expected();
    struct sample first = {0, 0, 0};
    for (int done = 0; done < THREADS; done += BATCH) {
        pthread_t t[BATCH];
        for (int k = 0; k < BATCH; k++) {
            int rc = pthread_create(&t[k], NULL, worker, (void *)(uintptr_t)(done + k + 1));
            CHECKF(rc == 0, "pthread_create failed (%d) after %d threads", rc, done + k);
        }
        for (int k = 0; k < BATCH; k++) {
            void *res = NULL;
            CHECK(pthread_join(t[k], &res) == 0);
            CHECKF(res != NULL, "thread %d saw a failed malloc or a corrupted block", done + k);
            unsigned char *c = res;
            CHECK(malloc_usable_size(c) >= 20000);
            free(res);
        }
        if (done + BATCH == 1000) first = take(st);
    }
    struct sample last = take(st);
    CHECKF(last.rss <= first.rss + 8 * MB, "RSS grew from %zu to %zu bytes", first.rss, last.rss);
    if (st) {
        CHECKF(last.mapped <= first.mapped + 8 * MB, "bytes_mapped grew from %zu to %zu",
               first.mapped, last.mapped);
        CHECKF(last.heaps <= first.heaps + 2 && last.heaps <= BATCH + 4,
               "live heaps %zu after 1000 threads, %zu at the end", first.heaps, last.heaps);
    }
    return 0;
}
