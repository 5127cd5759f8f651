/* Blocks too big for a segment and under the mmap threshold share one pool,
 * the arena: a freed block's memory serves the next block of any size with
 * no new mapping (calloc still zeroes it), a block grows into the free space
 * after it and shrinks by giving its tail back, with no mremap; malloc_trim
 * gives the free memory back. Then random sizes, reallocs and frees, each
 * block's pages stamped and checked, catch a block handed out twice.
 * Threads carve their own chunks and hand blocks to each other.
 * Asserted for tidemalloc only (TEST_EXPECT_TIDEMALLOC=1); with another
 * allocator the content checks run. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

static struct tidemalloc_stats stats_now(tm_stats_fn fn) {
    struct tidemalloc_stats s = {0};
    if (fn) fn(&s);
    return s;
}

/* One word per page: enough to see two blocks overlap. */
static void stamp(unsigned char *p, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i += 4096)
        memcpy(p + i, &(uint64_t){key ^ i}, sizeof(uint64_t));
}

static size_t stamp_check(const unsigned char *p, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i += 4096) {
        uint64_t v;
        memcpy(&v, p + i, sizeof v);
        if (v != (key ^ i)) return i;
    }
    return (size_t)-1;
}

/* Threads: each carves its own chunk first; blocks also go to another
 * thread through a shared slot and are freed there; threads exit while
 * their chunk still holds blocks another thread frees later. */
#define THREADS 4
static _Atomic(unsigned char *) exchange[THREADS];

static void *thread_steps(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
    unsigned char *mine[4] = {0};
    size_t mine_size[4] = {0};
    for (int step = 0; step < 400; step++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int i = (int)(rng % 4);
        size_t n = 256 * KB + (size_t)(rng >> 20) % (3 * MB);
        if (mine[i]) {
            CHECKF(stamp_check(mine[i], mine_size[i], 1000 + id) == (size_t)-1,
                   "thread %u: block changed", id);
            /* half go to the next thread's slot (its previous one is freed here) */
            if (rng >> 63) {
                unsigned to = (id + 1) % THREADS;
                stamp(mine[i], mine_size[i], 2000 + to);
                unsigned char *old = atomic_exchange(&exchange[to], mine[i]);
                if (old) free(old);
            } else {
                free(mine[i]);
            }
        }
        mine[i] = malloc(n);
        CHECK(mine[i] != NULL);
        mine_size[i] = n;
        stamp(mine[i], n, 1000 + id);
        unsigned char *given = atomic_exchange(&exchange[id], NULL);
        if (given) {
            /* its size stayed with the giver: the first page is enough */
            CHECKF(stamp_check(given, 4096, 2000 + id) == (size_t)-1,
                   "thread %u: a block handed over changed", id);
            free(given);
        }
    }
    for (int i = 0; i < 4; i++)
        free(mine[i]);
    return NULL;
}

int main(void) {
    tm_stats_fn fn = tm_stats_required_if_expected();
    CHECK(mallopt(M_MMAP_THRESHOLD, 32 * MB) == 1);  /* every block below: from the arena */
    CHECK(mallopt(M_TRIM_THRESHOLD, 256 * MB) == 1); /* nothing goes back but by malloc_trim */

    /* a freed 6 MiB block serves a 4000 KiB calloc: no mapping, zeroed */
    unsigned char *six = malloc(6 * MB);
    CHECK(six != NULL);
    memset(six, 0xA5, 6 * MB);
    free(six);
    struct tidemalloc_stats before = stats_now(fn);
    if (fn)
        CHECKF(before.bytes_retained >= 6 * MB, "a freed 6 MiB block: %llu bytes retained",
               (unsigned long long)before.bytes_retained);
    unsigned char *big = calloc(1, 4000 * KB);
    CHECK(big != NULL);
    for (size_t i = 0; i < 4000 * KB; i += 512)
        CHECKF(big[i] == 0, "calloc'd byte %zu is %#x", i, big[i]);
    struct tidemalloc_stats after = stats_now(fn);
    if (fn) {
        CHECKF(big == six, "4000 KiB at %p, the freed 6 MiB were at %p", (void *)big, (void *)six);
        CHECKF(after.mmap_calls == before.mmap_calls, "%llu mmap calls for a block the arena had",
               (unsigned long long)(after.mmap_calls - before.mmap_calls));
    }
    pat_fill_k(big, 4000 * KB, 9);

    /* grows in place into the free space after it */
    unsigned char *grown = realloc(big, 7 * MB);
    CHECK(grown != NULL && pat_check_k(grown, 4000 * KB, 9) == (size_t)-1);
    struct tidemalloc_stats grown_stats = stats_now(fn);
    if (fn) {
        CHECKF(grown == big, "4000 KiB -> 7 MiB moved (%p -> %p)", (void *)big, (void *)grown);
        CHECKF(grown_stats.mremap_calls == after.mremap_calls, "mremap for an arena block");
    }

    /* shrinks in place; the tail serves the next block */
    unsigned char *shrunk = realloc(grown, 3 * MB);
    CHECK(shrunk != NULL && pat_check_k(shrunk, 3 * MB, 9) == (size_t)-1);
    unsigned char *tail = malloc(2 * MB);
    CHECK(tail != NULL);
    if (fn) {
        CHECKF(shrunk == grown, "7 -> 3 MiB moved");
        CHECKF(malloc_usable_size(shrunk) < 3 * MB + 4096, "usable %zu after the shrink",
               malloc_usable_size(shrunk));
        CHECKF(tail == shrunk + 3 * MB, "2 MiB at %p, the freed tail starts at %p", (void *)tail,
               (void *)(shrunk + 3 * MB));
    }
    memset(tail, 0x5A, 2 * MB);
    CHECK(pat_check_k(shrunk, 3 * MB, 9) == (size_t)-1);
    free(tail);
    free(shrunk);

    /* malloc_trim gives the free memory back; what comes next reads zero */
    malloc_trim(0);
    struct tidemalloc_stats trimmed = stats_now(fn);
    if (fn)
        CHECKF(trimmed.bytes_retained < 1 * MB, "%llu bytes retained after malloc_trim",
               (unsigned long long)trimmed.bytes_retained);
    unsigned char *fresh = calloc(1, 5 * MB);
    CHECK(fresh != NULL);
    for (size_t i = 0; i < 5 * MB; i += 512)
        CHECKF(fresh[i] == 0, "calloc'd byte %zu after the trim is %#x", i, fresh[i]);
    free(fresh);

    /* random blocks of 256 KiB - 12 MiB: none overlaps another */
    enum { SLOTS = 24, STEPS = 1500 };
    unsigned char *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    uint64_t rng = 88172645463325252ull;
    for (int step = 0; step < STEPS; step++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int i = (int)(rng % SLOTS);
        size_t n = 256 * KB + (size_t)(rng >> 20) % (12 * MB);
        if (slot[i] == NULL) {
            slot[i] = malloc(n);
            CHECK(slot[i] != NULL);
            size[i] = n;
            stamp(slot[i], n, (uint64_t)i);
        } else if (rng >> 60 < 6) {
            size_t kept = stamp_check(slot[i], size[i], (uint64_t)i);
            CHECKF(kept == (size_t)-1, "step %d: block %d (%zu bytes) changed at %zu", step, i,
                   size[i], kept);
            unsigned char *r = realloc(slot[i], n);
            CHECK(r != NULL);
            size_t common = n < size[i] ? n : size[i];
            CHECKF(stamp_check(r, common, (uint64_t)i) == (size_t)-1,
                   "step %d: realloc %zu -> %zu lost the contents", step, size[i], n);
            slot[i] = r;
            size[i] = n;
            stamp(r, n, (uint64_t)i);
        } else {
            CHECKF(stamp_check(slot[i], size[i], (uint64_t)i) == (size_t)-1,
                   "step %d: block %d changed before its free", step, i);
            free(slot[i]);
            slot[i] = NULL;
        }
    }
    for (int i = 0; i < SLOTS; i++) {
        if (slot[i]) CHECK(stamp_check(slot[i], size[i], (uint64_t)i) == (size_t)-1);
        free(slot[i]);
    }
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, thread_steps, (void *)(uintptr_t)i) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        free(atomic_exchange(&exchange[i], NULL));
    malloc_trim(0);
    if (fn) {
        struct tidemalloc_stats end = stats_now(fn);
        CHECKF(end.bytes_retained < 1 * MB, "%llu bytes retained after the last trim",
               (unsigned long long)end.bytes_retained);
    }
    printf("arena: ok\n");
    return 0;
}
