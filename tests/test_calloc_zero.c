/* calloc returns zeroed memory, also when it reuses dirty memory that was
 * just freed, for small, large and huge sizes, and for every shape of
 * (count, size). calloc(0, n) and calloc(n, 0) give unique freeable blocks. */
#include <malloc.h>
#include <pthread.h>

#include "common.h"

static void check_zero(const unsigned char *p, size_t n, size_t sz, int round) {
    for (size_t i = 0; i < n; i++)
        CHECKF(p[i] == 0, "calloc(%zu) round %d: byte %zu is 0x%02x", sz, round, i, p[i]);
}

/* A new thread's heap takes a new segment, so its pages come fresh from
 * the kernel and calloc skips clearing a block that was never freed: the
 * page's flag says the memory was fresh, and the block's double-free mark
 * (or, without the checks, the flag cleared by free) says it held data.
 * Half the blocks are freed by the thread itself, half by another. */
enum { FRESH = 64 };
static unsigned char *fresh_blocks[FRESH];

static void *free_odd_blocks(void *arg) {
    (void)arg;
    for (int i = 1; i < FRESH; i += 2)
        free(fresh_blocks[i]);
    return NULL;
}

static void *calloc_on_fresh_pages(void *arg) {
    (void)arg;
    static const size_t sizes[] = {24, 200, 1700, 6000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (int i = 0; i < FRESH; i++) {
            fresh_blocks[i] = malloc(n);
            CHECK(fresh_blocks[i] != NULL);
            memset(fresh_blocks[i], 0xC3, n);
        }
        for (int i = 0; i < FRESH; i += 2)
            free(fresh_blocks[i]);
        pthread_t other;
        CHECK(pthread_create(&other, NULL, free_odd_blocks, NULL) == 0);
        pthread_join(other, NULL);
        for (int i = 0; i < FRESH; i++) {
            fresh_blocks[i] = calloc(1, n);
            CHECK(fresh_blocks[i] != NULL);
            check_zero(fresh_blocks[i], n, n, (int)s);
        }
        for (int i = 0; i < FRESH; i++)
            free(fresh_blocks[i]);
    }
    return NULL;
}

int main(void) {
    pthread_t fresh;
    CHECK(pthread_create(&fresh, NULL, calloc_on_fresh_pages, NULL) == 0);
    pthread_join(fresh, NULL);

    static const size_t sizes[] = {1,      8,      16,     24,      48,      100,     128,
                                   200,    512,    1000,   1024,    2048,    3000,    4096,
                                   5000,   8192,   16384,  30000,   65536,   100000,  131072,
                                   200000, 262144, 500000, 1048576, 3000000, 8388608, 33554432};
    enum { K = 8 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        int k = n >= 1000000 ? 2 : K;
        for (int round = 0; round < 4; round++) {
            void *d[K];
            for (int i = 0; i < k; i++) { /* dirty some memory, then free it */
                d[i] = malloc(n);
                CHECK(d[i] != NULL);
                memset(d[i], 0xA5 + round, malloc_usable_size(d[i]));
            }
            for (int i = k - 1; i >= 0; i--)
                free(d[i]);
            unsigned char *c[K];
            for (int i = 0; i < k; i++) {
                /* several (count, size) shapes of the same total */
                if (i % 3 == 0)
                    c[i] = calloc(1, n);
                else if (i % 3 == 1)
                    c[i] = calloc(n, 1);
                else
                    c[i] = n % 8 == 0 ? calloc(n / 8, 8) : calloc(n, 1);
                CHECK(c[i] != NULL);
                check_zero(c[i], n, n, round);
                memset(c[i], 0x3C, n); /* dirty it for the next round */
            }
            for (int i = 0; i < k; i++)
                free(c[i]);
        }
    }

    /* Large blocks on runs of free slices partly dirty, partly never used
     * (calloc clears only the dirty slices): dirty blocks freed in between
     * live ones, then calloc'ed back at other sizes and offsets. */
    enum { L = 24 };
    unsigned seed = 12345;
    for (int round = 0; round < 40; round++) {
        void *live[L];
        for (int i = 0; i < L; i++) {
            seed = seed * 1103515245 + 12345;
            size_t n = (size_t)(40 + (seed >> 16) % 400) << 10;
            live[i] = malloc(n);
            CHECK(live[i] != NULL);
            memset(live[i], 0x5A, n);
        }
        for (int i = round % 2; i < L; i += 2) {
            free(live[i]);
            live[i] = NULL;
        }
        for (int i = 0; i < L; i++) {
            seed = seed * 1103515245 + 12345;
            size_t n = (size_t)(65 + (seed >> 16) % 3000) << 10;
            n += seed % 4096;
            unsigned char *c = calloc(1, n);
            CHECK(c != NULL);
            check_zero(c, n, n, round);
            memset(c, 0x6B, n);
            if (live[i] == NULL)
                live[i] = c;
            else
                free(c);
        }
        for (int i = 0; i < L; i++)
            free(live[i]);
    }

    /* Many small blocks freed in a mixed order, then calloc'ed back. */
    enum { M = 20000 };
    static void *blk[M];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < M; i++) {
            size_t n = 1 + (size_t)(i * 7919 % 700);
            blk[i] = malloc(n);
            CHECK(blk[i] != NULL);
            memset(blk[i], 0xFF, n);
        }
        for (int i = 0; i < M; i += 2)
            free(blk[i]);
        for (int i = 1; i < M; i += 2)
            free(blk[i]);
        for (int i = 0; i < M; i++) {
            size_t n = 1 + (size_t)(i * 104729 % 700);
            blk[i] = calloc(n, 1);
            CHECK(blk[i] != NULL);
            check_zero(blk[i], n, n, round);
            memset(blk[i], 0xEE, n);
        }
        for (int i = 0; i < M; i++)
            free(blk[i]);
    }

    /* calloc after realloc shrink of a dirty block. */
    for (int i = 0; i < 100; i++) {
        unsigned char *p = malloc(4096);
        memset(p, 0x99, 4096);
        p = realloc(p, 64);
        unsigned char *q = calloc(1, 4000);
        CHECK(p != NULL && q != NULL);
        check_zero(q, 4000, 4000, i);
        free(p);
        free(q);
    }

    /* Zero-sized callocs are unique and freeable. */
    void *z1 = calloc(0, 10), *z2 = calloc(10, 0), *z3 = calloc(0, 0);
    CHECK(z1 != NULL && z2 != NULL && z3 != NULL);
    CHECK(z1 != z2 && z2 != z3 && z1 != z3);
    free(z1);
    free(z2);
    free(z3);
    return 0;
}
