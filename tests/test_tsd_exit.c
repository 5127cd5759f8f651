/* Allocation from thread-specific-data destructors. glibc runs destructors
 * in up to PTHREAD_DESTRUCTOR_ITERATIONS rounds; a destructor that re-arms
 * its key runs in every round, after the allocator's own (whose key is
 * older). Its blocks must be usable, freeable from another thread, and no
 * thread heap may outlive its thread: the heap count returns to where it was
 * after every join (asserted for tidemalloc only, TEST_EXPECT_TIDEMALLOC=1),
 * and the memory stays bounded over many such threads. */
#include <limits.h>
#include <pthread.h>

#include "common.h"

#define THREADS 200
#define ROUNDS  PTHREAD_DESTRUCTOR_ITERATIONS

static pthread_key_t key;
static __thread int round_seen;
/* blocks made in the destructor rounds of the current thread */
static unsigned char *made[ROUNDS + 1];
static size_t made_size[ROUNDS + 1];

static void destructor(void *value) {
    (void)value;
    int r = round_seen++;
    if (r > ROUNDS) return;
    size_t size = 100 + (size_t)r * 5000; /* small, then pages of 4-16 KiB classes */
    unsigned char *p = malloc(size);
    CHECKF(p != NULL, "malloc(%zu) in destructor round %d failed", size, r);
    pat_fill_k(p, size, (uint64_t)r);
    void *q = realloc(malloc(64), 200000); /* a large block too */
    CHECK(q != NULL);
    free(q);
    made[r] = p;
    made_size[r] = size;
    pthread_setspecific(key, (void *)1); /* again next round */
}

static void *worker(void *arg) {
    (void)arg;
    free(malloc(1000)); /* this thread has a heap */
    pthread_setspecific(key, (void *)1);
    return NULL;
}

static struct tidemalloc_stats stats_now(tm_stats_fn fn) {
    struct tidemalloc_stats s = {0};
    fn(&s);
    return s;
}

int main(void) {
    tm_stats_fn fn = tm_stats_required_if_expected();
    int tidemalloc = fn != NULL;
    free(malloc(16)); /* the allocator's key exists before ours */
    CHECK(pthread_key_create(&key, destructor) == 0);
    uint64_t heaps_before = 0, segments_bound = 0;
    if (tidemalloc) heaps_before = stats_now(fn).heaps;
    for (int t = 0; t < THREADS; t++) {
        pthread_t th;
        CHECK(pthread_create(&th, NULL, worker, NULL) == 0);
        CHECK(pthread_join(th, NULL) == 0);
        for (int r = 0; r <= ROUNDS; r++) {
            if (made[r] == NULL) continue;
            CHECKF(pat_check_k(made[r], made_size[r], (uint64_t)r) == (size_t)-1,
                   "thread %d: block of destructor round %d corrupted", t, r);
            free(made[r]);
            made[r] = NULL;
        }
        if (tidemalloc) {
            struct tidemalloc_stats s = stats_now(fn);
            CHECKF(s.heaps == heaps_before, "thread %d: %llu heaps alive after join, %llu before", t,
                   (unsigned long long)s.heaps, (unsigned long long)heaps_before);
            /* what the first 50 threads needed bounds the rest: a heap left
             * behind per thread would keep its segments */
            if (t < 50 && s.segments > segments_bound) segments_bound = s.segments;
            if (t >= 50)
                CHECKF(s.segments <= segments_bound + 1, "thread %d: %llu segments (at most %llu before)",
                       t, (unsigned long long)s.segments, (unsigned long long)segments_bound);
        }
    }
    printf("tsd exit: ok\n");
    return 0;
}
