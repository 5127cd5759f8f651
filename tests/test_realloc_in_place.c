/* realloc of a large block (32 .. 256 KiB, served from slices) by the
 * thread that owns it shrinks it in place, giving back the slices past its
 * new size (a mapped block gives back its pages), and grows it in place when
 * the slices right after it are free, and moves it otherwise: when a neighbour holds them, when the
 * block outgrows the slices (to the arena, where it grows in place again), or when another thread
 * reallocs it. The contents survive every
 * way, a neighbour is never overwritten, and a pointer into the grown part is still no block start
 * (free aborts). Growth in place and the abort are asserted for tidemalloc only
 * (TEST_EXPECT_TIDEMALLOC=1); with another allocator the content checks run. */
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "child_stderr.h"
#include "common.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

static void *volatile launder_slot;
static void *launder(void *p) {
    launder_slot = p;
    return launder_slot;
}

static void *grow(void *p, size_t from, size_t to, uint64_t key) {
    void *q = realloc(p, to);
    CHECKF(q != NULL, "realloc(%p, %zu) failed", p, to);
    CHECKF(malloc_usable_size(q) >= to, "usable %zu < %zu", malloc_usable_size(q), to);
    size_t bad = pat_check_k(q, from, key);
    CHECKF(bad == (size_t)-1, "realloc %zu -> %zu (%p -> %p): byte %zu lost", from, to, p, q, bad);
    pat_fill_k(q, to, key);
    return q;
}

struct handoff {
    void *p;
    size_t size;
};

static void *realloc_elsewhere(void *arg) {
    struct handoff *h = arg;
    h->p = grow(h->p, h->size, h->size * 2, 7);
    h->size *= 2;
    return NULL;
}

static void free_it(void *p) {
    free(p);
}

/* In a child: free a pointer into the grown part of a block; must abort
 * with "free(): invalid pointer" on stderr. */
static void expect_interior_free_aborts(char *block, size_t offset) {
    char msg[256];
    int status = run_in_child(free_it, launder(block + offset), msg, sizeof msg);
    CHECK(status != -1);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
           "free(block + %zu) after growth did not abort (status %#x)", offset, status);
    CHECKF(strstr(msg, "free(): invalid pointer") != NULL, "message was: %s", msg);
}

/* Nothing freed yet: a large block takes the lowest free slices, and those
 * after it are free, so it grows where it is; past the slices' limit it
 * moves to the arena, where the space after it is free, so it grows where
 * it is again. */
static char *grow_twice_in_place(int tidemalloc) {
    char *p = malloc(100 * KB);
    CHECK(p != NULL);
    pat_fill_k(p, 100 * KB, 1);
    char *q = grow(p, 100 * KB, 250 * KB, 1);
    if (tidemalloc)
        CHECKF(q == p, "100 KiB -> 250 KiB moved (%p -> %p) with free slices after it", p, q);
    char *arena = grow(q, 250 * KB, 600 * KB, 1);
    char *r = grow(arena, 600 * KB, 1500 * KB, 1);
    if (tidemalloc) CHECKF(r == arena, "600 KiB -> 1.5 MiB moved (%p -> %p)", arena, r);
    return r;
}

/* The same in aggressive mode, whose frees all take the slow path: growth in
 * place must not take that route's owner mark for another thread's. */
static void grow_in_place_aggressive(void *unused) {
    (void)unused;
    CHECK(mallopt(M_AGGRESSIVE_MADVISE, 1) == 1);
    free(grow_twice_in_place(1));
}

int main(void) {
    int tidemalloc = tm_expected();
    /* Blocks from 128 KiB up would be mapped on their own (glibc's default
     * threshold, until a mapped block is freed): keep them in the heap. */
    CHECK(mallopt(M_MMAP_THRESHOLD, 16 * MB) == 1);
    if (tidemalloc) {
        char msg[256];
        int status = run_in_child(grow_in_place_aggressive, NULL, msg, sizeof msg);
        CHECKF(status == 0, "in aggressive mode: %s (status %#x)", msg, status);
    }
    char *r = grow_twice_in_place(tidemalloc);
    if (tidemalloc) expect_interior_free_aborts(r, 1024 * KB);

    /* A neighbour right after the block: growing must move it and leave the
     * neighbour's bytes alone. */
    char *a = malloc(200 * KB);
    char *b = malloc(100 * KB);
    CHECK(a != NULL && b != NULL);
    pat_fill_k(a, 200 * KB, 2);
    pat_fill_k(b, 100 * KB, 3);
    a = grow(a, 200 * KB, 400 * KB, 2);
    CHECKF(pat_check_k(b, 100 * KB, 3) == (size_t)-1, "growing a block overwrote its neighbour");

    /* Out of the arena's range (over the threshold): mapped, contents kept. */
    r = grow(r, 1500 * KB, 20 * MB, 1);

    /* Another thread reallocs a block this thread owns. */
    struct handoff h = {malloc(300 * KB), 300 * KB};
    CHECK(h.p != NULL);
    pat_fill_k(h.p, h.size, 7);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, realloc_elsewhere, &h) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(pat_check_k(h.p, h.size, 7) == (size_t)-1);

    /* Shrinking a grown block, then growing it again. */
    a = realloc(a, 90 * KB);
    CHECK(a != NULL && pat_check_k(a, 90 * KB, 2) == (size_t)-1);
    a = grow(a, 90 * KB, 900 * KB, 2);
    CHECKF(pat_check_k(b, 100 * KB, 3) == (size_t)-1, "neighbour overwritten");

    /* Shrinking a large block gives the slices past its new size back where
     * it is: same pointer, a smaller usable size, no block start in the part
     * given back, and room to grow over it again. */
    char *s = malloc(1 * MB);
    CHECK(s != NULL);
    pat_fill_k(s, 1 * MB, 5);
    char *shrunk = realloc(s, 300 * KB);
    CHECK(shrunk != NULL && pat_check_k(shrunk, 300 * KB, 5) == (size_t)-1);
    if (tidemalloc) {
        CHECKF(shrunk == s, "1 MiB -> 300 KiB moved (%p -> %p)", s, shrunk);
        CHECKF(malloc_usable_size(shrunk) < 400 * KB, "usable %zu after shrinking 1 MiB to 300 KiB",
               malloc_usable_size(shrunk));
        expect_interior_free_aborts(shrunk, 700 * KB);
    }
    char *regrown = grow(shrunk, 300 * KB, 1 * MB, 5);
    if (tidemalloc) CHECKF(regrown == s, "300 KiB -> 1 MiB moved (%p -> %p)", s, regrown);
    /* Below the size classes' limit it moves to a small block. */
    char *small = realloc(regrown, 1000);
    CHECK(small != NULL && pat_check_k(small, 1000, 5) == (size_t)-1);
    if (tidemalloc)
        CHECKF(malloc_usable_size(small) < 2000, "1 MiB -> 1000 B kept %zu bytes",
               malloc_usable_size(small));

    /* A mapped block (above any mmap threshold) shrinking keeps its address
     * and gives the pages past its new size back, as glibc's mremap of its
     * mapped chunks does. */
    char *m = malloc(64 * MB);
    CHECK(m != NULL);
    pat_fill_k(m, 64 * MB, 6);
    size_t rss_full = rss_bytes();
    char *m2 = realloc(m, 40 * MB + 123);
    CHECK(m2 != NULL && pat_check_k(m2, 40 * MB + 123, 6) == (size_t)-1);
    if (tidemalloc) {
        CHECKF(m2 == m, "64 MiB -> 40 MiB moved (%p -> %p)", m, m2);
        CHECKF(rss_bytes() + 20 * MB < rss_full,
               "RSS %zu MiB after shrinking 64 MiB to 40, %zu before", rss_bytes() >> 20,
               rss_full >> 20);
        CHECKF(malloc_usable_size(m2) < 41 * MB, "usable %zu after the shrink",
               malloc_usable_size(m2));
    }
    free(m2);

    /* A block under the threshold may get a cached mapping bigger than it
     * asked for: growing within that mapping keeps it whole, with no mremap
     * (it must not be cut to the new size and grown again later). */
    char *c = malloc(12 * MB); /* under the 16 MiB threshold set above: cached when freed */
    CHECK(c != NULL);
    memset(c, 1, 12 * MB);
    free(c);
    char *d = malloc(5 * MB);
    CHECK(d != NULL);
    pat_fill_k(d, 5 * MB, 8);
    struct tidemalloc_stats s0 = {0}, s1 = {0};
    tm_stats_fn stats = tm_stats_lookup();
    if (stats) stats(&s0);
    size_t d_usable = malloc_usable_size(d);
    char *d2 = realloc(d, 6 * MB);
    CHECK(d2 != NULL && pat_check_k(d2, 5 * MB, 8) == (size_t)-1);
    if (stats) stats(&s1);
    if (tidemalloc && d_usable >= 6 * MB)
        CHECKF(d2 == d && s1.mremap_calls == s0.mremap_calls,
               "5 -> 6 MiB inside a %zu-byte mapping: %p -> %p, %llu mremap calls", d_usable, d, d2,
               (unsigned long long)(s1.mremap_calls - s0.mremap_calls));
    free(d2);

    free(small);
    free(h.p);
    free(a);
    free(b);
    free(r);
    printf("realloc in place: ok\n");
    return 0;
}
