/* A block aligned past a page holds only its own pages: the room its
 * alignment needed around it goes back.
 *
 *   mapped:  posix_memalign(64 MiB, 256 KiB) (above the mmap threshold: a
 *            mapping of its own) sixteen times adds about 4 MiB of address
 *            space, not 1 GiB; each block's usable size is 256 KiB; realloc
 *            grows one and keeps its contents;
 *   arena:   with the mmap threshold at 64 MiB, posix_memalign(2 MiB,
 *            64 KiB) thirty-two times (from the arena: usable size 64 KiB),
 *            then thirty-two malloc(1 MiB): these land in the room between
 *            the aligned blocks, which went back to the arena's free
 *            extents.
 *
 * tidemalloc only (glibc keeps a mapped chunk's whole mapping, and its heap
 * places blocks its own way): SKIP under another allocator. Until
 * 2026-12-03 the first held 64 MiB a block and read 1 GiB of growth, and
 * the second found the room still in use (usable size 2 MiB). */
#include <malloc.h>

#include "common.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

static size_t vm_size_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0;
    if (!f || fscanf(f, "%lu", &size) != 1) FAILF("cannot read /proc/self/statm");
    fclose(f);
    return (size_t)size * (size_t)sysconf(_SC_PAGESIZE);
}

static void *aligned_or_fail(size_t alignment, size_t size) {
    void *p = NULL;
    int r = posix_memalign(&p, alignment, size);
    CHECKF(r == 0 && p != NULL, "posix_memalign(%zu, %zu) = %d", alignment, size, r);
    CHECKF(((uintptr_t)p & (alignment - 1)) == 0, "%p not aligned to %zu", p, alignment);
    return p;
}

static void test_mapped(void) {
    enum { N = 16 };
    void *blocks[N];
    size_t before = vm_size_bytes();
    for (int i = 0; i < N; i++) {
        blocks[i] = aligned_or_fail(64 * MB, 256 * KB);
        size_t usable = malloc_usable_size(blocks[i]);
        CHECKF(usable == 256 * KB, "usable size %zu of a 256 KiB block aligned to 64 MiB", usable);
        pat_fill_k(blocks[i], 256 * KB, (uint64_t)i);
    }
    size_t grown = vm_size_bytes() - before;
    CHECKF(grown <= N * MB, "16 blocks of 256 KiB aligned to 64 MiB added %zu MiB of address space",
           grown / MB);
    for (int i = 0; i < N; i++)
        CHECKF(pat_check_k(blocks[i], 256 * KB, (uint64_t)i) == (size_t)-1, "block %d changed", i);
    /* realloc moves or grows it (mremap now that it starts its mapping) */
    void *grown_block = realloc(blocks[0], 8 * MB);
    CHECK(grown_block != NULL);
    CHECKF(pat_check_k(grown_block, 256 * KB, 0) == (size_t)-1, "realloc lost the contents");
    blocks[0] = grown_block;
    for (int i = 0; i < N; i++)
        free(blocks[i]);
}

static int compare_addresses(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static void test_arena(void) {
    enum { N = 32 };
    CHECK(mallopt(M_MMAP_THRESHOLD, 64 * MB) == 1); /* every block below: from the arena */
    char *aligned[N];
    void *big[N];
    for (int i = 0; i < N; i++) {
        aligned[i] = aligned_or_fail(2 * MB, 64 * KB);
        size_t usable = malloc_usable_size(aligned[i]);
        CHECKF(usable == 64 * KB, "usable size %zu of a 64 KiB block aligned to 2 MiB", usable);
        pat_fill_k(aligned[i], 64 * KB, (uint64_t)i);
    }
    /* Between two aligned blocks lie 2 MiB - 64 KiB of room, where one block
     * of 1 MiB fits: of the 32 such blocks, at least 30 go there (best fit
     * takes the smallest free run that fits; one may go before the first
     * aligned block, one after the last, where the chunk's free run goes on). */
    uintptr_t sorted[N];
    for (int i = 0; i < N; i++)
        sorted[i] = (uintptr_t)aligned[i];
    qsort(sorted, N, sizeof *sorted, compare_addresses);
    int between = 0;
    for (int i = 0; i < N; i++) {
        big[i] = malloc(MB);
        CHECK(big[i] != NULL);
        memset(big[i], 0xA5, MB);
        uintptr_t p = (uintptr_t)big[i];
        for (int j = 0; j + 1 < N; j++)
            if (p >= sorted[j] + 64 * KB && p + MB <= sorted[j + 1]) between++;
    }
    CHECKF(between >= N - 2, "%d of %d blocks of 1 MiB found room between the aligned blocks",
           between, N);
    for (int i = 0; i < N; i++) {
        CHECKF(pat_check_k(aligned[i], 64 * KB, (uint64_t)i) == (size_t)-1,
               "aligned block %d changed", i);
        free(aligned[i]);
        free(big[i]);
    }
}

int main(void) {
    if (!tm_expected()) SKIP("the placement checked is tidemalloc's");
    test_mapped();
    test_arena();
    return 0;
}
