/* realloc grows, shrinks and moves while keeping the contents:
 * small -> large -> huge -> small chains, byte-by-byte growth, growth while
 * neighbours are live (forcing moves), realloc(NULL, n) and realloc(p, 0)
 * (which frees p and returns NULL, as glibc 2.36 does). */
#include <errno.h>
#include <malloc.h>

#include "common.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

static size_t min_sz(size_t a, size_t b) {
    return a < b ? a : b;
}

/* Walks p through the given sizes; contents of the common prefix survive. */
static void *chain(void *p, size_t cur, const size_t *sizes, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++) {
        size_t next = sizes[i];
        void *q = realloc(p, next);
        CHECKF(q != NULL, "realloc(%p, %zu) failed", p, next);
        CHECKF(((uintptr_t)q & 15) == 0, "realloc result %p misaligned", q);
        CHECKF(malloc_usable_size(q) >= next, "usable %zu < %zu", malloc_usable_size(q), next);
        size_t bad = pat_check_k(q, min_sz(cur, next), key);
        CHECKF(bad == (size_t)-1, "realloc %zu -> %zu (%p -> %p): byte %zu lost", cur, next, p, q,
               bad);
        pat_fill_k(q, next, key);
        p = q;
        cur = next;
    }
    return p;
}

int main(void) {
    /* realloc(NULL, n) is malloc(n). */
    void *p = realloc(NULL, 100);
    CHECK(p != NULL && malloc_usable_size(p) >= 100);
    pat_fill_k(p, 100, 1);

    static const size_t up_down[] = {
        1,        24,       100,      1000,    4 * KB,     40 * KB,       200 * KB,
        1 * MB,   3 * MB,   20 * MB,  70 * MB, 20 * MB,    3 * MB,        300 * KB,
        40 * KB,  2000,     200,      16,      1,          64 * MB,       8,
        129 * KB, 130 * KB, 128 * KB, 5 * MB,  5 * MB + 1, 5 * MB - 4097, 48,
    };
    p = chain(p, 100, up_down, sizeof up_down / sizeof up_down[0], 1);
    free(p);

    /* Grow one byte at a time, then shrink one byte at a time. */
    p = malloc(1);
    pat_fill_k(p, 1, 2);
    for (size_t s = 2; s <= 5000; s++) {
        void *q = realloc(p, s);
        CHECK(q != NULL);
        CHECKF(pat_check_k(q, s - 1, 2) == (size_t)-1, "grow to %zu lost data", s);
        pat_fill_k(q, s, 2);
        p = q;
    }
    for (size_t s = 4999; s >= 1; s--) {
        void *q = realloc(p, s);
        CHECK(q != NULL);
        CHECKF(pat_check_k(q, s, 2) == (size_t)-1, "shrink to %zu lost data", s);
        p = q;
    }
    free(p);

    /* Grow while neighbours are live, so that blocks must move; interleave
     * several chains so that every block sits between others. */
    enum { N = 64 };
    void *b[N];
    size_t sz[N];
    for (int i = 0; i < N; i++) {
        sz[i] = 16 + (size_t)i * 8;
        b[i] = malloc(sz[i]);
        CHECK(b[i] != NULL);
        pat_fill_k(b[i], sz[i], 100 + (uint64_t)i);
    }
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < N; i++) {
            size_t ns = sz[i] * 2 + (size_t)(i % 7);
            if (round >= 8) /* shrink again, to small sizes */
                ns = sz[i] / 3 + 1;
            void *q = realloc(b[i], ns);
            CHECK(q != NULL);
            size_t bad = pat_check_k(q, min_sz(sz[i], ns), 100 + (uint64_t)i);
            CHECKF(bad == (size_t)-1, "chain %d round %d %zu->%zu: byte %zu lost", i, round, sz[i],
                   ns, bad);
            pat_fill_k(q, ns, 100 + (uint64_t)i);
            b[i] = q;
            sz[i] = ns;
        }
        for (int i = 0; i < N; i++)
            CHECKF(pat_check_k(b[i], sz[i], 100 + (uint64_t)i) == (size_t)-1,
                   "chain %d disturbed by another realloc in round %d", i, round);
    }
    for (int i = 0; i < N; i++)
        free(b[i]);

    /* Shrinking in place keeps the prefix; growing back keeps it too. */
    p = malloc(256 * KB);
    pat_fill_k(p, 256 * KB, 3);
    void *q = realloc(p, 100 * KB);
    CHECK(q != NULL && pat_check_k(q, 100 * KB, 3) == (size_t)-1);
    q = realloc(q, 256 * KB);
    CHECK(q != NULL && pat_check_k(q, 100 * KB, 3) == (size_t)-1);
    free(q);

    /* Huge growth and shrink (mremap territory). */
    static const size_t huge[] = {8 * MB, 64 * MB, 256 * MB, 16 * MB, 1 * MB, 300 * MB, 4 * KB};
    p = malloc(1 * MB);
    pat_fill_k(p, 1 * MB, 4);
    p = chain(p, 1 * MB, huge, sizeof huge / sizeof huge[0], 4);
    free(p);

    /* realloc(p, 0) frees p and returns NULL (glibc 2.36); doing it many
     * times must not leak. */
    size_t rss0 = 0;
    for (int i = 0; i < 200000; i++) {
        size_t s = (size_t)(i % 50) * 97 + 1;
        if (i % 1000 == 999) s = 300 * KB;
        void *r = malloc(s);
        CHECK(r != NULL);
        memset(r, 1, s);
        errno = 0;
        void *z = realloc(r, 0);
        CHECKF(z == NULL, "realloc(p, 0) returned %p, glibc 2.36 returns NULL", z);
        if (i == 10000) rss0 = rss_bytes();
    }
    size_t rss1 = rss_bytes();
    CHECKF(rss1 <= rss0 + 8 * MB, "realloc(p, 0) leaks: RSS %zu -> %zu", rss0, rss1);
    return 0;
}
