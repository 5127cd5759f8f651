/* Young heaps (heap.c): a thread that starts while 8 or more threads hold
 * heaps serves the sizes up to 1 KiB from the power-of-two classes, until it
 * has carved 8 OS pages of blocks of those classes or taken a used segment,
 * and then from the fine classes; the blocks it got young stay valid. A thread that starts
 * with fewer heaps live uses the fine classes from its first block. And the
 * routing obeys mallopt: a lowered mmap threshold reaches a young heap's
 * table too (a size above it is mapped on its own). */
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>

#include "common.h"

#define FILLERS   10
#define OS_PAGE   ((uintptr_t)4096)
#define FINE_100  112 /* the class of 100 bytes */
#define YOUNG_100 128 /* the power-of-two class at or above it */

static pthread_barrier_t fillers_hold, fillers_release;

static void *filler(void *arg) {
    (void)arg;
    void *p = malloc(24); /* a heap of its own */
    CHECK(p != NULL);
    pthread_barrier_wait(&fillers_hold);
    pthread_barrier_wait(&fillers_release);
    free(p);
    return NULL;
}

/* Distinct OS pages among the blocks' starts: blocks of different classes
 * are on different pages, so this counts the classes they came from. */
static size_t distinct_pages(void *const *blocks, size_t count) {
    size_t distinct = 0;
    for (size_t i = 0; i < count; i++) {
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= (uintptr_t)blocks[j] / OS_PAGE == (uintptr_t)blocks[i] / OS_PAGE;
        distinct += !seen;
    }
    return distinct;
}

/* malloc(100)'s usable size must be `expected` (FINE_100 or YOUNG_100). */
static void check_usable_100(size_t expected, const char *when) {
    void *p = malloc(100);
    CHECK(p != NULL);
    CHECKF(malloc_usable_size(p) == expected, "%s: malloc_usable_size(malloc(100)) = %zu, not %zu",
           when, malloc_usable_size(p), expected);
    free(p);
}

/* `count` blocks of `size` bytes in blocks[], written. */
static void alloc_written(void **blocks, int count, size_t size) {
    for (int i = 0; i < count; i++) {
        blocks[i] = malloc(size);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, size);
    }
}

static void free_all(void **blocks, int count) {
    for (int i = 0; i < count; i++)
        free(blocks[i]);
}

static void *young_thread(void *arg) {
    (void)arg;
    /* sizes of 8 fine classes, 4 power-of-two ones: 16, 32, 64, 128 */
    void *blocks[8];
    for (size_t i = 0; i < 8; i++) {
        blocks[i] = malloc(16 + i * 16);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], (int)i, 16 + i * 16);
    }
    size_t pages = distinct_pages(blocks, 8);
    CHECKF(pages == 4, "blocks of 16..128 bytes of a young heap on %zu OS pages, not 4", pages);
    static const size_t sizes[][2] = {{100, YOUNG_100}, {300, 512}, {700, 1024}, {20, 32}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i][0]);
        CHECK(p != NULL);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable == sizes[i][1], "young heap: malloc_usable_size(malloc(%zu)) = %zu, not %zu",
               sizes[i][0], usable, sizes[i][1]);
        free(p);
    }
    /* bigger blocks are the same classes young or not: carving 60 KiB of
     * them leaves the heap young */
    void *big[20];
    alloc_written(big, 20, 3000);
    check_usable_100(YOUNG_100, "after 60 KiB of 3000-byte blocks");
    free_all(big, 20);
    /* grown: 64 KiB of 1000-byte blocks carves far more than 8 OS pages */
    void *grown[64];
    alloc_written(grown, 64, 1000);
    check_usable_100(FINE_100, "after growing");
    for (size_t i = 0; i < 8; i++) {
        const unsigned char *b = blocks[i];
        for (size_t j = 0; j < 16 + i * 16; j++)
            CHECKF(b[j] == (unsigned char)i, "a young block changed (size %zu, byte %zu)",
                   16 + i * 16, j);
        free(blocks[i]);
    }
    free_all(grown, 64);
    return NULL;
}

static void *fine_thread(void *arg) {
    (void)arg;
    check_usable_100(FINE_100, "few heaps");
    return NULL;
}

static pthread_barrier_t young_ready, threshold_set;

/* A young heap, then a lowered mmap threshold (set by main meanwhile): 300
 * bytes must be mapped on their own (4 KiB usable), 200 stay in a class. */
static void *threshold_thread(void *arg) {
    (void)arg;
    check_usable_100(YOUNG_100, "young heap"); /* its heap and segment, young */
    pthread_barrier_wait(&young_ready);
    pthread_barrier_wait(&threshold_set);
    void *q = malloc(300), *r = malloc(200);
    CHECK(q != NULL && r != NULL);
    CHECKF(malloc_usable_size(q) >= 4000,
           "mmap threshold 256: malloc_usable_size(malloc(300)) = %zu, not a mapping",
           malloc_usable_size(q));
    CHECKF(malloc_usable_size(r) == 256,
           "mmap threshold 256: malloc_usable_size(malloc(200)) = %zu", malloc_usable_size(r));
    free(q);
    free(r);
    return NULL;
}

int main(void) {
    if (tm_stats_required_if_expected() == NULL) SKIP("young heaps are tidemalloc's");
    if (getenv("MALLOC_CHECK_") || getenv("MALLOC_PERTURB_"))
        SKIP("checked mode takes every malloc through its own path");
    free(malloc(24));                 /* main's heap */
    run_in_thread(fine_thread, NULL); /* 1 heap live when it starts */

    pthread_t fillers[FILLERS];
    CHECK(pthread_barrier_init(&fillers_hold, NULL, FILLERS + 1) == 0);
    CHECK(pthread_barrier_init(&fillers_release, NULL, FILLERS + 1) == 0);
    for (int i = 0; i < FILLERS; i++)
        CHECK(pthread_create(&fillers[i], NULL, filler, NULL) == 0);
    pthread_barrier_wait(&fillers_hold); /* FILLERS + 1 heaps live */

    /* Each of the two young threads maps a segment of its own: the only
     * one released so far (fine_thread's) went to a filler. */
    pthread_t t;
    CHECK(pthread_barrier_init(&young_ready, NULL, 2) == 0);
    CHECK(pthread_barrier_init(&threshold_set, NULL, 2) == 0);
    CHECK(pthread_create(&t, NULL, threshold_thread, NULL) == 0);
    pthread_barrier_wait(&young_ready);
    run_in_thread(young_thread, NULL);
    CHECK(mallopt(M_MMAP_THRESHOLD, 256) == 1);
    pthread_barrier_wait(&threshold_set);
    CHECK(pthread_join(t, NULL) == 0);

    pthread_barrier_wait(&fillers_release);
    for (int i = 0; i < FILLERS; i++)
        CHECK(pthread_join(fillers[i], NULL) == 0);
    return 0;
}
