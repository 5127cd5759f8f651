/* Allocation from thread-specific-data destructors. glibc runs destructors
 * in up to PTHREAD_DESTRUCTOR_ITERATIONS rounds; a destructor that re-arms
 * its key runs in every round, after the allocator's own (whose key is
 * older). Its blocks must be usable, freeable from another thread, and no
 * thread heap may outlive its thread: the heap count returns to where it was
 * after every wave of threads is joined (asserted for tidemalloc only,
 * TEST_EXPECT_TIDEMALLOC=1), and the memory stays bounded over many waves. */
#include <limits.h>
#include <pthread.h>

#include "common.h"

#define WAVES  50
#define WAVE   4 /* threads exiting at once: they share the exit heap */
#define ROUNDS PTHREAD_DESTRUCTOR_ITERATIONS

static pthread_key_t key;
static __thread int round_seen;
static __thread int slot; /* the thread's row in made[] */
/* blocks made in the destructor rounds of each thread of a wave */
static unsigned char *made[WAVE][ROUNDS + 1];
static size_t made_size[WAVE][ROUNDS + 1];

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
    made[slot][r] = p;
    made_size[slot][r] = size;
    pthread_setspecific(key, (void *)1); /* again next round */
}

static void *worker(void *arg) {
    slot = (int)(intptr_t)arg;
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
    for (int t = 0; t < WAVES; t++) {
        pthread_t th[WAVE];
        for (int w = 0; w < WAVE; w++)
            CHECK(pthread_create(&th[w], NULL, worker, (void *)(intptr_t)w) == 0);
        for (int w = 0; w < WAVE; w++)
            CHECK(pthread_join(th[w], NULL) == 0);
        for (int w = 0; w < WAVE; w++) {
            for (int r = 0; r <= ROUNDS; r++) {
                if (made[w][r] == NULL) continue;
                CHECKF(pat_check_k(made[w][r], made_size[w][r], (uint64_t)r) == (size_t)-1,
                       "wave %d thread %d: block of destructor round %d corrupted", t, w, r);
                free(made[w][r]);
                made[w][r] = NULL;
            }
        }
        if (tidemalloc) {
            struct tidemalloc_stats s = stats_now(fn);
            CHECKF(s.heaps == heaps_before, "wave %d: %llu heaps alive after join, %llu before", t,
                   (unsigned long long)s.heaps, (unsigned long long)heaps_before);
            /* what the first waves needed bounds the rest, give or take a
             * segment for each thread of a wave (how many of them run at
             * once varies with the load): a heap left behind per thread
             * would keep its segments, 4 more a wave */
            if (t < WAVES / 4 && s.segments > segments_bound) segments_bound = s.segments;
            if (t >= WAVES / 4)
                CHECKF(s.segments <= segments_bound + WAVE,
                       "wave %d: %llu segments (at most %llu before)", t,
                       (unsigned long long)s.segments, (unsigned long long)segments_bound);
        }
    }
    printf("tsd exit: ok\n");
    return 0;
}
