/* A block over the mmap threshold takes freed memory the arena holds
 * resident instead of a mapping of its own, when that memory covers it:
 *
 *   reused:  after free(malloc(8 MiB)) (a mapping: the threshold moves to 8
 *            MiB) two blocks of 7 MiB come from the arena and are freed,
 *            leaving 14 MiB there, resident; malloc(12 MiB), over the
 *            threshold, then lands where the first of them was, with no
 *            mmap, and its free unmaps nothing;
 *   moves:   that free moves the threshold to 12 MiB, as a mapping's free
 *            would (glibc's rule): with 7 of the 14 MiB taken again,
 *            malloc(10 MiB) is under it and comes from the arena, no mmap
 *            (with the threshold left at 8 MiB it would be mapped: 7 MiB
 *            of resident memory do not cover it);
 *   zeroed:  calloc(16 MiB), over the threshold, on the 17 MiB those two
 *            leave when freed, reads as zeros;
 *   mapped:  a block over the threshold that the freed memory cannot cover
 *            (32 MiB) still gets a mapping of its own, which free unmaps.
 *
 * tidemalloc only (the placement and the syscall counts are ours): SKIP
 * under another allocator. Until 2026-12-03 the 12 MiB block was mapped on
 * its own while 14 MiB of freed memory sat resident beside it: `large`
 * mapped, faulted in and unmapped a dozen 8 MB blocks that way. */
#include <malloc.h>

#include "common.h"

#define MB ((size_t)1 << 20)

static struct tidemalloc_stats stats_now(tm_stats_fn stats) {
    struct tidemalloc_stats s;
    stats(&s);
    return s;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != 0 || p[i + 4095] != 0) return 0;
    return 1;
}

int main(void) {
    if (!tm_expected()) SKIP("the placement checked is tidemalloc's");
    tm_stats_fn stats = tm_stats_required_if_expected();

    /* a mapped block's free moves the dynamic threshold to its size */
    char *first = malloc(8 * MB);
    CHECK(first != NULL);
    memset(first, 1, 8 * MB);
    free(first);

    char *a = malloc(7 * MB), *b = malloc(7 * MB);
    CHECK(a != NULL && b != NULL);
    memset(a, 0x5A, 7 * MB);
    memset(b, 0x5A, 7 * MB);
    uintptr_t lowest = (uintptr_t)(a < b ? a : b);
    CHECKF((uintptr_t)(a < b ? b : a) == lowest + 7 * MB,
           "two 7 MiB arena blocks not side by side: %p %p", (void *)a, (void *)b);
    free(a);
    free(b);

    /* reused */
    struct tidemalloc_stats before = stats_now(stats);
    char *big = malloc(12 * MB);
    CHECK(big != NULL);
    struct tidemalloc_stats after = stats_now(stats);
    CHECKF((uintptr_t)big == lowest, "malloc(12 MiB) at %p, not in the freed 14 MiB at %p",
           (void *)big, (void *)lowest);
    CHECKF(after.mmap_calls == before.mmap_calls, "malloc(12 MiB) made %llu mmap calls",
           (unsigned long long)(after.mmap_calls - before.mmap_calls));
    CHECKF(malloc_usable_size(big) >= 12 * MB, "usable size %zu", malloc_usable_size(big));
    pat_fill_k(big, 12 * MB, 7);
    CHECK(pat_check_k(big, 12 * MB, 7) == (size_t)-1);
    before = stats_now(stats);
    free(big);
    after = stats_now(stats);
    CHECKF(after.munmap_calls == before.munmap_calls, "free of the reused block unmapped");

    /* moves */
    char *x = malloc(7 * MB);
    CHECK(x != NULL);
    CHECKF((uintptr_t)x == lowest, "malloc(7 MiB) at %p, not at %p", (void *)x, (void *)lowest);
    memset(x, 0x33, 7 * MB);
    before = stats_now(stats);
    char *y = malloc(10 * MB);
    CHECK(y != NULL);
    after = stats_now(stats);
    CHECKF(after.mmap_calls == before.mmap_calls,
           "malloc(10 MiB) after a 12 MiB block's free made %llu mmap calls",
           (unsigned long long)(after.mmap_calls - before.mmap_calls));
    memset(y, 0x44, 10 * MB);
    free(x);
    free(y);

    /* zeroed */
    unsigned char *zeroed = calloc(1, 16 * MB);
    CHECK(zeroed != NULL);
    CHECKF((uintptr_t)zeroed == lowest, "calloc(16 MiB) at %p, not at %p", (void *)zeroed,
           (void *)lowest);
    CHECKF(all_zero(zeroed, 16 * MB), "calloc on reused memory is not zero");
    free(zeroed);

    /* mapped: more than the arena holds resident */
    before = stats_now(stats);
    char *mapped = malloc(32 * MB);
    CHECK(mapped != NULL);
    after = stats_now(stats);
    CHECKF(after.mmap_calls > before.mmap_calls, "malloc(32 MiB) made no mmap call");
    mapped[0] = 1;
    mapped[32 * MB - 1] = 2;
    before = stats_now(stats);
    free(mapped);
    after = stats_now(stats);
    CHECKF(after.munmap_calls > before.munmap_calls, "free of a mapped 32 MiB block did not unmap");
    return 0;
}
