/* Large blocks (32-256 KiB, a run of 64 KiB slices each) start their run,
 * so that blocks of varying sizes taking one run in turn begin on the same
 * OS pages: a buffer a program fills only in part (a capacity larger than
 * what it holds) keeps touching the pages it touched before. Checked here,
 * for tidemalloc only: 400 blocks of 128-192 KiB, each filled in its first
 * 32 KiB and freed, fault at most 2 pages in all once the first has run.
 * Blocks placed to end their run instead, on a 16 KiB step from its
 * start (tried on 2026-12-06 for programs that write only a block's two
 * ends), took 12 faults here, and `patterns large-heap 64 200000` (100-
 * 200 KB blocks written at their first byte) 960 faults and 4.9 MiB of
 * peak RSS against 347 and 2.5.
 * Alignment, calloc on dirtied runs and realloc of large blocks have their
 * own tests (test_alignment, test_calloc_zero, test_realloc_in_place). */
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

int main(void) {
    if (tm_stats_required_if_expected() == NULL) SKIP("the placement is tidemalloc's");
    /* nothing goes back to the kernel meanwhile, so the faults are the
     * placement's alone; and blocks of 128-256 KiB come from slices too,
     * not from mappings of their own */
    CHECK(mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1);
    CHECK(mallopt(M_RETAIN_PERCENT, 0) == 1);
    CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    check_prefix_pages_reused();
    return 0;
}
