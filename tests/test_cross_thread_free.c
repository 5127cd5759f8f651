/* Cross-thread free: thread A allocates N blocks, thread B frees them all,
 * then A allocates again, for 100 rounds. The memory B freed must be reused:
 * mapped bytes (tidemalloc_stats, when present) and RSS stay flat. */
#include <malloc.h>
#include <pthread.h>

#include "common.h"

#define N      20000
#define ROUNDS 100
#define MB     ((size_t)1 << 20)

static void *blocks[N];
static size_t bsize[N];
static pthread_barrier_t bar;

static size_t block_size(int round, int i) {
    unsigned x = (unsigned)(i * 2654435761u) ^ (unsigned)round * 40503u;
    if (i % 500 == 0) return 64 * 1024 + (x % 200000); /* a few large ones */
    return 16 + (x % 1008);
}

static tm_stats_fn st;
static size_t mapped(void);
static size_t at_round10, at_end;

static void *thread_a(void *arg) {
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        if (r == 10) at_round10 = mapped();
        for (int i = 0; i < N; i++) {
            bsize[i] = block_size(r, i);
            blocks[i] = malloc(bsize[i]);
            CHECK(blocks[i] != NULL);
            pat_fill(blocks[i], bsize[i]);
        }
        pthread_barrier_wait(&bar); /* hand over to B */
        pthread_barrier_wait(&bar); /* B has freed them */
    }
    at_end = mapped();
    return NULL;
}

static void *thread_b(void *arg) {
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&bar);
        for (int i = 0; i < N; i++) {
            size_t bad = pat_check(blocks[i], bsize[i]);
            CHECKF(bad == (size_t)-1, "round %d block %d: byte %zu corrupted", r, i, bad);
            free(blocks[i]);
        }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static size_t mapped(void) {
    if (st) {
        struct tidemalloc_stats s;
        st(&s);
        return (size_t)s.bytes_mapped;
    }
    return rss_bytes();
}

int main(void) {
    st = tm_stats_required_if_expected();
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, thread_a, NULL) == 0);
    CHECK(pthread_create(&b, NULL, thread_b, NULL) == 0);
    CHECK(pthread_join(a, NULL) == 0);
    CHECK(pthread_join(b, NULL) == 0);
    /* One round's working set is about 17 MB; without reuse 90 more rounds
     * would add about 1.5 GB. */
    CHECKF(at_end <= at_round10 + 32 * MB, "%s grew from %zu to %zu bytes over 90 rounds",
           st ? "bytes_mapped" : "RSS", at_round10, at_end);
    return 0;
}
