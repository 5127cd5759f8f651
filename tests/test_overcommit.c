/* A request larger than the machine's memory fails as it does with glibc:
 * under the kernel's default overcommit heuristic (vm.overcommit_memory=0)
 * and under strict accounting (2), a block mapped on its own is charged to
 * the commit, so the kernel refuses one larger than RAM and swap together,
 * and malloc returns NULL with errno ENOMEM instead of memory that faults
 * the process into the OOM killer once used. Mode 1 lets every mapping
 * through, glibc's as well: the test skips there. Every allocation function
 * is tried, a failed realloc leaves its block alone, and the process goes
 * on allocating afterwards. */
#include <errno.h>
#include <malloc.h>

#include "common.h"

/* The number after `key` in a /proc file, or 0. */
static unsigned long long proc_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[256];
    unsigned long long value = 0;
    size_t key_length = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, key_length) == 0) {
            value = strtoull(line + key_length, NULL, 10);
            break;
        }
    fclose(f);
    return value;
}

#define EXPECT_ENOMEM(expr)                                                                        \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *r_ = (expr);                                                                         \
        int e_ = errno;                                                                            \
        CHECKF(r_ == NULL, "%s returned %p for %llu GiB, expected NULL", #expr, r_,                \
               (unsigned long long)(too_big >> 30));                                               \
        CHECKF(e_ == ENOMEM, "%s: errno %d (%s), expected ENOMEM", #expr, e_, strerror(e_));       \
    } while (0)

int main(void) {
    FILE *mode_file = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (mode_file == NULL || fscanf(mode_file, "%d", &mode) != 1) SKIP("no overcommit mode");
    fclose(mode_file);
    if (mode == 1) SKIP("vm.overcommit_memory=1 lets every mapping through");
    unsigned long long memory_kib =
        proc_number("/proc/meminfo", "MemTotal:") + proc_number("/proc/meminfo", "SwapTotal:");
    CHECK(memory_kib > 0);
    /* Twice RAM and swap, and at least 1 TiB: beyond what the kernel lets
     * one mapping have, well within the 47-bit address space. */
    volatile size_t too_big = (size_t)memory_kib * 2048;
    if (too_big < ((size_t)1 << 40)) too_big = (size_t)1 << 40;
    CHECKF(too_big < ((size_t)1 << 46), "machine too large for this test (%llu KiB)", memory_kib);

    EXPECT_ENOMEM(malloc(too_big));
    EXPECT_ENOMEM(calloc(too_big / 16, 16));
    EXPECT_ENOMEM(memalign(4096, too_big));
    EXPECT_ENOMEM(aligned_alloc((size_t)2 << 20, too_big));
    EXPECT_ENOMEM(valloc(too_big));
    EXPECT_ENOMEM(reallocarray(NULL, too_big / 8, 8));
    void *m = NULL;
    CHECKF(posix_memalign(&m, 64, too_big) == ENOMEM, "posix_memalign(%zu) did not fail",
           (size_t)too_big);

    /* A failed realloc leaves the block as it was: a small one and one
     * mapped on its own (grown with mremap, which the kernel refuses too). */
    static const size_t sizes[] = {100, (size_t)8 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = malloc(sizes[i]);
        CHECK(p != NULL);
        memset(p, 0x5a, sizes[i]);
        EXPECT_ENOMEM(realloc(p, too_big));
        for (size_t j = 0; j < sizes[i]; j += 4093)
            CHECKF(p[j] == 0x5a, "failed realloc of %zu bytes changed byte %zu", sizes[i], j);
        CHECKF(p[sizes[i] - 1] == 0x5a, "failed realloc of %zu bytes changed its end", sizes[i]);
        free(p);
    }

    /* The process goes on: a big block that fits, and small ones. */
    unsigned char *big = malloc((size_t)64 << 20);
    CHECK(big != NULL);
    memset(big, 1, (size_t)64 << 20);
    free(big);
    for (int i = 0; i < 1000; i++) {
        void *q = malloc(16 + (size_t)i * 8);
        CHECK(q != NULL);
        free(q);
    }
    return 0;
}
