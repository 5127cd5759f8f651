/* The shared classes' depot (src/shared_class.c): the lists of blocks over
 * 1 KiB that threads give back past their caches' limits wait there, whole,
 * for the next thread whose cache of the class runs empty.
 * - Four threads trade blocks of 1-16 KiB through one array, each freeing
 *   the blocks of the others: every block keeps the pattern of its own
 *   allocation (a block handed to two owners at once, or a list torn
 *   between threads, shows as another allocation's pattern).
 * - malloc_trim gives the blocks waiting there back to their pages: after
 *   a live thread freed 1 MiB of 8000-byte blocks, some waited there, and
 *   after malloc_trim only the thread's cache is still counted in use. Not
 *   required of other allocators: with them only the contents are
 *   checked. */
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "common.h"

#define THREADS 4
#define STEPS   30000
#define SLOTS   512

/* A block's first words: its size and the key of its pattern. */
struct header {
    size_t size;
    uint64_t key;
};

static _Atomic(struct header *) slots[SLOTS];
static _Atomic uint64_t next_key = 1;

static void check_and_free(struct header *h) {
    size_t at = pat_check_k(h + 1, h->size - sizeof *h, h->key);
    if (at != (size_t)-1)
        FAILF("a block of %zu bytes (key %llu) changed at byte %zu", h->size,
              (unsigned long long)h->key, at + sizeof *h);
    free(h);
}

static void *trade(void *arg) {
    uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15u + 1;
    for (int step = 0; step < STEPS; step++) {
        test_rng_next(&x);
        size_t size = 1025 + (size_t)(x >> 20) % (16384 - 1024);
        struct header *h = malloc(size);
        if (h == NULL) FAILF("malloc(%zu) failed", size);
        h->size = size;
        h->key = atomic_fetch_add(&next_key, 1);
        pat_fill_k(h + 1, size - sizeof *h, h->key);
        struct header *old = atomic_exchange(&slots[x % SLOTS], h);
        if (old != NULL) check_and_free(old);
    }
    return NULL;
}

static void blocks_traded_between_threads(void) {
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, trade, (void *)(uintptr_t)(t + 1)) == 0);
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_join(threads[t], NULL) == 0);
    for (int i = 0; i < SLOTS; i++) {
        struct header *h = atomic_exchange(&slots[i], NULL);
        if (h != NULL) check_and_free(h);
    }
}

/* A thread that frees many blocks of one class and stays alive: what its
 * cache cannot keep goes to the depot (up to its bound) and to the pages.
 * mallinfo2 counts cached and waiting blocks in use (their pages do), and
 * is read without allocating. */
#define TRIM_SIZE   8000
#define TRIM_BLOCKS 128
static sem_t ready, go, freed, done;

static void *free_many(void *unused) {
    (void)unused;
    free(malloc(64)); /* its heap, before the first reading */
    sem_post(&ready);
    sem_wait(&go);
    void *blocks[TRIM_BLOCKS];
    for (int i = 0; i < TRIM_BLOCKS; i++) {
        blocks[i] = malloc(TRIM_SIZE);
        if (blocks[i] == NULL) FAILF("malloc(%d) failed", TRIM_SIZE);
        memset(blocks[i], 1, TRIM_SIZE);
    }
    for (int i = 0; i < TRIM_BLOCKS; i++)
        free(blocks[i]);
    sem_post(&freed);
    sem_wait(&done);
    return NULL;
}

static size_t in_use(void) {
    return mallinfo2().uordblks;
}

static void trim_gives_back_the_depot(int strict) {
    CHECK(sem_init(&ready, 0, 0) == 0 && sem_init(&go, 0, 0) == 0);
    CHECK(sem_init(&freed, 0, 0) == 0 && sem_init(&done, 0, 0) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_many, NULL) == 0);
    sem_wait(&ready);
    malloc_trim(0);
    size_t start = in_use();
    sem_post(&go);
    sem_wait(&freed);
    size_t freed_kept = in_use(); /* cached and waiting blocks count as in use */
    malloc_trim(0);
    size_t end = in_use();
    sem_post(&done);
    CHECK(pthread_join(t, NULL) == 0);
    if (!strict) return;
    /* the thread's cache keeps at most 256 KiB of the class
     * (SHARED_LIMIT_BYTES), at least 192 KiB here (three quarters of its
     * limit); the rest went to the depot (at most 128 KiB of a class) and to
     * the pages. The line between: 288 KiB. */
    CHECKF(freed_kept > start + (288 << 10),
           "after the frees, %zu bytes in use against %zu before: nothing waits in the depot",
           freed_kept, start);
    CHECKF(end <= start + (288 << 10),
           "after malloc_trim, %zu bytes in use against %zu before the blocks were allocated "
           "and freed: the depot kept its blocks",
           end, start);
}

int main(void) {
    int strict = tm_stats_required_if_expected() != NULL;
    blocks_traded_between_threads();
    trim_gives_back_the_depot(strict);
    return 0;
}
