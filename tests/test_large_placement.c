/* Large blocks (32-256 KiB, a run of 64 KiB slices each) end near their
 * run's end and start on a 16 KiB step from its start, so that blocks of
 * varying sizes taking one run in turn, written only at their ends (a
 * header and a trailer), touch a few OS pages of it rather than a new one
 * each time. Checked here:
 *   - every large block is 16-byte aligned, usable for its size, and keeps
 *     its contents; memalign's alignments up to 64 KiB hold;
 *   - (tidemalloc) a block starts on a 16 KiB boundary and its usable size
 *     ends on a 64 KiB one, less than 16 KiB past the size asked for;
 *   - (tidemalloc) 400 blocks of 128-192 KiB, each written at its first and
 *     last byte and freed, fault at most 10 pages in all once the first has
 *     run: of 4 starts and 4 ends, 6 new at most (4 faults measured). With
 *     blocks at the run's start their ends fell on 16 pages (16 faults);
 *   - calloc of such a block on memory an earlier block dirtied reads zero,
 *     and realloc grows and shrinks one in place. */
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
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (size_t)(rng_state % n);
}

static void check_geometry(int ours) {
    for (size_t size = 32 * KB + 1; size <= 256 * KB; size += 1000) {
        unsigned char *p = malloc(size);
        CHECKF(p != NULL, "malloc(%zu) failed", size);
        CHECKF(((uintptr_t)p & 15) == 0, "malloc(%zu) = %p: not 16-byte aligned", size, (void *)p);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable >= size, "malloc(%zu): usable %zu", size, usable);
        memset(p, 0x5a, usable);
        if (ours) {
            CHECKF(((uintptr_t)p & (16 * KB - 1)) == 0, "malloc(%zu) = %p: not on a 16 KiB step",
                   size, (void *)p);
            CHECKF((((uintptr_t)p + usable) & (64 * KB - 1)) == 0,
                   "malloc(%zu) = %p, usable %zu: does not end its run", size, (void *)p, usable);
            CHECKF(usable - size < 16 * KB, "malloc(%zu): usable %zu, 16 KiB or more past it", size,
                   usable);
        }
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

static void check_few_pages_touched(void) {
    unsigned char *first = malloc(160 * KB);
    CHECK(first != NULL);
    first[0] = 1;
    first[160 * KB - 1] = 1;
    free(first);
    long before = minor_faults();
    for (int i = 0; i < 400; i++) {
        size_t size = 128 * KB + 1 + rng_below(64 * KB);
        unsigned char *p = malloc(size);
        CHECKF(p != NULL, "malloc(%zu) failed", size);
        p[0] = (unsigned char)i;
        p[size - 1] = (unsigned char)i;
        free(p);
    }
    long faults = minor_faults() - before;
    CHECKF(faults <= 10, "400 blocks of 128-192 KiB written at their ends took %ld faults", faults);
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
    /* nothing goes back to the kernel meanwhile: the fault count is the
     * placement's alone */
    if (ours) {
        CHECK(mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1);
        CHECK(mallopt(M_RETAIN_PERCENT, 0) == 1);
        /* blocks of 128-256 KiB from slices too, not mapped on their own */
        CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    }
    check_geometry(ours);
    if (ours) check_few_pages_touched();
    check_calloc_and_realloc();
    return 0;
}
