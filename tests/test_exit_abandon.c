/* Thread exit hands segments that still hold blocks to the other threads
 * (abandoned, adopted later) and gives empty ones back. Here an exiting
 * thread owns a segment in use followed by an empty one; two segments of an
 * earlier thread wait, abandoned. Once every block is freed (remotely, from
 * the main thread), large allocations adopt the abandoned segments and
 * malloc_trim(0) unmaps what is empty: no segment may stay behind. (Blocks
 * of 256 KiB at most: bigger ones come from the arena.) (A bug
 * that unlinked the empty segment from a list whose neighbour was already
 * abandoned cut the abandoned list short: the earlier thread's segments were
 * never adopted, and their memory never came back.) */
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>

#include "common.h"

#define KIB    ((size_t)1 << 10)
#define SLICE  (64 * KIB)
#define BLOCKS 64
#define BIG    (4 * SLICE - 64) /* the largest block a segment serves */

static tm_stats_fn stats;
static sem_t b_ready, b_go;
static void *published[3 * BLOCKS + 4];
static unsigned published_count;

static uint64_t segments(void) {
    struct tidemalloc_stats s;
    stats(&s);
    return s.segments;
}

static void publish(void *p) {
    if (p == NULL) FAILF("allocation failed");
    published[published_count++] = p;
}

/* Leaves its heap with the segment list [in use, empty] and waits. */
static void *thread_b(void *unused) {
    (void)unused;
    publish(malloc(100));
    void *big[12]; /* 48 slices */
    for (int i = 0; i < 12; i++)
        if ((big[i] = malloc(BIG)) == NULL) FAILF("malloc of 256 KiB failed");
    /* one-slice large blocks fill the first segment; the one that needs a
     * second segment is freed, which leaves that segment empty but kept */
    uint64_t before = segments();
    for (int i = 0; i < BLOCKS; i++) {
        void *p = malloc(SLICE - 64);
        if (p == NULL) FAILF("malloc of 64 KiB failed");
        if (segments() > before) {
            free(p);
            break;
        }
        publish(p);
        if (i == BLOCKS - 1) FAILF("no second segment after %d blocks", BLOCKS);
    }
    for (int i = 0; i < 12; i++)
        free(big[i]); /* the first segment goes back in front of the empty one */
    sem_post(&b_ready);
    sem_wait(&b_go);
    return NULL;
}

/* Two segments with blocks, abandoned at exit. */
static void *thread_a(void *unused) {
    (void)unused;
    publish(malloc(BIG));
    uint64_t first = segments();
    for (int i = 0; segments() == first; i++) {
        if (i == BLOCKS) FAILF("no second segment after %d blocks", BLOCKS);
        publish(malloc(BIG));
    }
    return NULL;
}

int main(void) {
    stats = tm_stats_required_if_expected();
    if (stats == NULL) SKIP("needs tidemalloc_stats");
    /* segment-backed large blocks, whatever the dynamic threshold would do */
    CHECK(mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1);
    free(malloc(16));
    malloc_trim(0);
    uint64_t baseline = segments();

    pthread_t a, b;
    CHECK(sem_init(&b_ready, 0, 0) == 0 && sem_init(&b_go, 0, 0) == 0);
    CHECK(pthread_create(&b, NULL, thread_b, NULL) == 0);
    sem_wait(&b_ready);
    CHECK(pthread_create(&a, NULL, thread_a, NULL) == 0);
    CHECK(pthread_join(a, NULL) == 0);
    sem_post(&b_go);
    CHECK(pthread_join(b, NULL) == 0);

    for (unsigned i = 0; i < published_count; i++)
        free(published[i]);
    /* more blocks than the main thread's segment holds: adopts the abandoned ones */
    void *many[4 * 16];
    for (int i = 0; i < 4 * 16; i++)
        CHECK((many[i] = malloc(BIG)) != NULL);
    for (int i = 0; i < 4 * 16; i++)
        free(many[i]);
    malloc_trim(0);
    uint64_t after = segments();
    CHECKF(after <= baseline, "%llu segments after everything was freed and trimmed, %llu before",
           (unsigned long long)after, (unsigned long long)baseline);
    return 0;
}
