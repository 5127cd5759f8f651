/* Large blocks (32-256 KiB, a run of 64 KiB slices each) start their run,
 * so that blocks of varying sizes taking one run in turn begin on the same
 * OS pages: a buffer a program fills only in part (a capacity larger than
 * what it holds) keeps touching the pages it touched before. Checked here:
 *   - every large block is 16-byte aligned, usable for its size, and keeps
 *     its contents; memalign's alignments up to 64 KiB hold;
 *   - (tidemalloc) 400 blocks of 128-192 KiB, each filled in its first
 *     32 KiB and freed, fault at most 2 pages in all once the first has run.
 *     Blocks placed to end their run instead, on a 16 KiB step from its
 *     start (tried on 2026-12-06 for programs that write only a block's two
 *     ends), took 3 faults here, and `patterns large-heap 64 200000` (100-
 *     200 KB blocks written at their first byte) 960 faults and 4.9 MiB of
 *     peak RSS against 347 and 2.5;
 *   - calloc of such a block on memory an earlier block dirtied reads zero,
 *     and realloc grows and shrinks one, keeping its contents. */
#include <malloc.h>
#include <sys/resource.h>

#include "common.h"

#define KB ((size_t)1 << 10)

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static size_t rng_below(size_t n) {
    return (size_t)(test_rng_next(&rng_state) % n);
}

static void check_alignment_and_contents(void) {
    for (size_t size = 32 * KB + 1; size <= 256 * KB; size += 1000) {
        unsigned char *p = malloc(size);
        CHECKF(p != NULL, "malloc(%zu) failed", size);
        CHECKF(((uintptr_t)p & 15) == 0, "malloc(%zu) = %p: not 16-byte aligned", size, (void *)p);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable >= size, "malloc(%zu): usable %zu", size, usable);
        memset(p, 0x5a, usable);
        free(p);
    }
    for (size_t align = 16; align <= 64 * KB; align *= 2)
        for (size_t size = 33 * KB; size <= 250 * KB; size += 31 * KB) {
            void *p = NULL;
            CHECKF(posix_memalign(&p, align, size) == 0, "posix_memalign(%zu, %zu) failed", align,
                   size);
            CHECKF(((uintptr_t)p & (align - 1)) == 0, "posix_memalign(%zu, %zu) = %p", align, size,
                   p);
            memset(p, 0x33, size);
            free(p);
        }
}

#define PREFIX (32 * KB)

static void check_prefix_pages_reused(void) {
    unsigned char *first = malloc(160 * KB);
    CHECK(first != NULL);
    memset(first, 1, PREFIX);
    free(first);
    long before = minor_faults();
    for (int i = 0; i < 400; i++) {
        size_t size = 128 * KB + 1 + rng_below(64 * KB);
        unsigned char *p = malloc(size);
        CHECKF(p != NULL, "malloc(%zu) failed", size);
        memset(p, i, PREFIX);
        free(p);
    }
    long faults = minor_faults() - before;
    CHECKF(faults <= 2, "400 blocks of 128-192 KiB filled in their first %zu KiB took %ld faults",
           PREFIX / KB, faults);
}

static void check_calloc_and_realloc(void) {
    for (int round = 0; round < 50; round++) {
        size_t size = 40 * KB + rng_below(200 * KB);
        unsigned char *dirty = malloc(256 * KB);
        CHECK(dirty != NULL);
        memset(dirty, 0xff, 256 * KB);
        free(dirty);
        unsigned char *z = calloc(1, size);
        CHECKF(z != NULL, "calloc(1, %zu) failed", size);
        for (size_t i = 0; i < size; i++)
            CHECKF(z[i] == 0, "calloc(1, %zu): byte %zu reads %#x", size, i, z[i]);
        memset(z, 0x77, size);
        size_t grown = size + 20 * KB;
        unsigned char *g = realloc(z, grown);
        CHECKF(g != NULL, "realloc to %zu failed", grown);
        for (size_t i = 0; i < size; i++)
            CHECKF(g[i] == 0x77, "realloc %zu -> %zu: byte %zu lost", size, grown, i);
        memset(g, 0x11, grown);
        size_t shrunk = 33 * KB;
        unsigned char *s = realloc(g, shrunk);
        CHECKF(s != NULL, "realloc to %zu failed", shrunk);
        for (size_t i = 0; i < shrunk; i++)
            CHECKF(s[i] == 0x11, "realloc %zu -> %zu: byte %zu lost", grown, shrunk, i);
        CHECK(malloc_usable_size(s) >= shrunk);
        free(s);
    }
}

int main(void) {
    int ours = tm_stats_required_if_expected() != NULL;
    if (ours) {
        /* nothing goes back to the kernel meanwhile, so the faults are the
         * placement's alone; and blocks of 128-256 KiB come from slices too,
         * not from mappings of their own */
        CHECK(mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1);
        CHECK(mallopt(M_RETAIN_PERCENT, 0) == 1);
        CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    }
    /* first: the other checks write whole blocks, which leaves every page
     * of the runs resident */
    if (ours) check_prefix_pages_reused();
    check_alignment_and_contents();
    check_calloc_and_realloc();
    return 0;
}
