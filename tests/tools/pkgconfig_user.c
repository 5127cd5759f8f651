/* Built by tests/suite-tools.sh against an installed tidemalloc with the flags
 * pkg-config gives, linked shared, fully static and with the archive. It checks
 * that the allocator in use is really ours: a 64 MiB block must show up in
 * tidemalloc_stats() as a live huge block, which cannot happen if the C
 * library's malloc served it. Prints "ok" and exits 0 on success. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tidemalloc.h>

#define HUGE_SIZE ((size_t)64 << 20)
#define NSMALL    1000

static int failures;

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "pkgconfig_user: check failed: %s\n", what);
        failures++;
    }
}

int main(int argc, char **argv) {
    const char *label = argc > 1 ? argv[1] : "user";
    struct tidemalloc_stats before, during, after;
    static void *small[NSMALL];

    tidemalloc_stats(&before);
    for (int i = 0; i < NSMALL; i++) {
        size_t n = (size_t)i * 8 + 1;
        small[i] = malloc(n);
        check(small[i] != NULL, "small malloc");
        if (small[i] == NULL) return 1;
        check(((uintptr_t)small[i] & 15) == 0, "16-byte alignment");
        memset(small[i], i & 0xff, n);
    }
    char *big = malloc(HUGE_SIZE);
    check(big != NULL, "64 MiB malloc");
    if (big == NULL) return 1;
    big[0] = 1;
    big[HUGE_SIZE - 1] = 2;
    check(malloc_usable_size(big) >= HUGE_SIZE, "malloc_usable_size of the huge block");

    tidemalloc_stats(&during);
    check(during.mmap_calls > 0, "mmap_calls > 0");
    check(during.huge_blocks >= before.huge_blocks + 1, "huge_blocks counts the 64 MiB block");
    check(during.huge_bytes >= before.huge_bytes + HUGE_SIZE, "huge_bytes counts the 64 MiB block");
    check(during.bytes_mapped > 0, "bytes_mapped > 0");

    free(big);
    for (int i = 0; i < NSMALL; i++)
        free(small[i]);
    tidemalloc_stats(&after);
    check(after.huge_blocks + 1 == during.huge_blocks, "huge_blocks drops when the block is freed");
    (void)tidemalloc_release_syscalls();

    if (failures != 0) return 1;
    printf("ok %s: mmap_calls=%llu huge_blocks=%llu segments=%llu heaps=%llu\n", label,
           (unsigned long long)during.mmap_calls, (unsigned long long)during.huge_blocks,
           (unsigned long long)during.segments, (unsigned long long)during.heaps);
    return 0;
}
