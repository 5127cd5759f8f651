/* A freed huge block that the cache kept (it was allocated below the mmap
 * threshold) serves the next new segment: its pages are resident already, so
 * slices need no new mapping and no fault, instead of the two pools idling
 * side by side (`large`: 110.6 -> 106.1 MiB peak RSS). The blocks carved
 * from it are usable and zeroed by calloc. Asserted for tidemalloc only
 * (TEST_EXPECT_TIDEMALLOC=1); with another allocator the content checks run. */
#include <malloc.h>

#include "common.h"

#define MB ((size_t)1 << 20)

static struct tidemalloc_stats stats_now(tm_stats_fn fn) {
    struct tidemalloc_stats s = {0};
    if (fn) fn(&s);
    return s;
}

int main(void) {
    tm_stats_fn fn = tm_stats_required_if_expected();
    /* 6 MiB: over the slices' limit, under the threshold: cached when freed */
    CHECK(mallopt(M_MMAP_THRESHOLD, 32 * MB) == 1);
    unsigned char *huge = malloc(6 * MB);
    CHECK(huge != NULL);
    memset(huge, 0xA5, 6 * MB);
    free(huge);

    struct tidemalloc_stats before = stats_now(fn);
    /* a block of a whole segment's slices needs a new segment */
    unsigned char *big = calloc(1, 4000 * 1024);
    CHECK(big != NULL);
    for (size_t i = 0; i < 4000 * 1024; i += 4096)
        CHECKF(big[i] == 0, "calloc'd byte %zu is %#x", i, big[i]);
    struct tidemalloc_stats after = stats_now(fn);
    if (fn) {
        CHECKF(after.segments == before.segments + 1, "segments %llu -> %llu",
               (unsigned long long)before.segments, (unsigned long long)after.segments);
        CHECKF(after.mmap_calls == before.mmap_calls,
               "the new segment was mapped afresh (%llu -> %llu mmap calls) with a cached 6 MiB "
               "mapping",
               (unsigned long long)before.mmap_calls, (unsigned long long)after.mmap_calls);
    }
    pat_fill_k(big, 4000 * 1024, 9);
    /* small blocks in it, and the block itself, work as any */
    void *small[1000];
    for (int i = 0; i < 1000; i++) {
        small[i] = malloc(100 + (size_t)i);
        CHECK(small[i] != NULL);
        memset(small[i], i & 0xff, 100 + (size_t)i);
    }
    CHECK(pat_check_k(big, 4000 * 1024, 9) == (size_t)-1);
    for (int i = 0; i < 1000; i++)
        free(small[i]);
    free(big);
    printf("huge to segment: ok\n");
    return 0;
}
