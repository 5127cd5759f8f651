/* Every memory syscall the allocator makes goes through here and is counted,
 * so tests and benchmarks can assert the release behaviour (lesson 1). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>

#include "internal.h"

struct os_counters g_os;

/* relaxed: counters are statistics; readers want a recent value, not an order. */
#define COUNT(field, n) atomic_fetch_add_explicit(&g_os.field, (n), memory_order_relaxed)

void *os_map(size_t size) {
    int saved = errno;
    COUNT(mmap_calls, 1);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    errno = saved;
    if (p == MAP_FAILED) return NULL;
    COUNT(bytes_mapped, size);
    return p;
}

void os_unmap(void *address, size_t size) {
    int saved = errno;
    COUNT(munmap_calls, 1);
    munmap(address, size);
    errno = saved;
    atomic_fetch_sub_explicit(&g_os.bytes_mapped, size, memory_order_relaxed);
}

bool os_release(void *address, size_t size) {
    int saved = errno;
    COUNT(madvise_calls, 1);
    bool ok = madvise(address, size, MADV_DONTNEED) == 0;
    errno = saved;
    if (ok) COUNT(bytes_released, size);
    return ok;
}

void *os_remap(void *address, size_t old_size, size_t new_size) {
    int saved = errno;
    COUNT(mremap_calls, 1);
    void *p = mremap(address, old_size, new_size, MREMAP_MAYMOVE);
    errno = saved;
    if (p == MAP_FAILED) return NULL;
    if (new_size > old_size) COUNT(bytes_mapped, new_size - old_size);
    else atomic_fetch_sub_explicit(&g_os.bytes_mapped, old_size - new_size, memory_order_relaxed);
    return p;
}

/* Where the next segment probably fits aligned: the kernel hands out
 * addresses top-down, so asking just below the last segment usually gets an
 * aligned one in a single mmap. relaxed: only a hint, any value is safe. */
static _Atomic uintptr_t next_segment_hint;

void *os_map_segment(void) {
    int saved = errno;
    uintptr_t hint = atomic_load_explicit(&next_segment_hint, memory_order_relaxed);
    /* First segment: a slot well below this library, which the kernel's
     * top-down placement leaves free, saves the over-map and its two munmaps. */
    if (hint == 0) hint = ((uintptr_t)&next_segment_hint & ~(uintptr_t)SEGMENT_MASK) - 64 * SEGMENT_SIZE;
    /* MAP_FIXED_NOREPLACE fails instead of moving, so a taken hint costs one
     * failed mmap and no munmap; a few slots further down are tried. */
    for (int attempt = 0; hint != 0 && attempt < 4; attempt++, hint -= SEGMENT_SIZE) {
        COUNT(mmap_calls, 1);
        void *p = mmap((void *)hint, SEGMENT_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)hint) {
            atomic_store_explicit(&next_segment_hint, hint - SEGMENT_SIZE, memory_order_relaxed);
            COUNT(bytes_mapped, SEGMENT_SIZE);
            errno = saved;
            return p;
        }
        if (p != MAP_FAILED) { /* an old kernel ignored the flag */
            COUNT(munmap_calls, 1);
            munmap(p, SEGMENT_SIZE);
            break;
        }
        if (errno != EEXIST) break;
    }
    /* Over-map by one segment and cut the unaligned ends off. */
    size_t span = 2 * SEGMENT_SIZE;
    COUNT(mmap_calls, 1);
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (raw == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    char *aligned = (char *)(((uintptr_t)raw + SEGMENT_MASK) & ~(uintptr_t)SEGMENT_MASK);
    size_t head = (size_t)(aligned - raw), tail = span - head - SEGMENT_SIZE;
    if (head) {
        COUNT(munmap_calls, 1);
        munmap(raw, head);
    }
    if (tail) {
        COUNT(munmap_calls, 1);
        munmap(aligned + SEGMENT_SIZE, tail);
    }
    atomic_store_explicit(&next_segment_hint, (uintptr_t)aligned - SEGMENT_SIZE,
                          memory_order_relaxed);
    COUNT(bytes_mapped, SEGMENT_SIZE);
    errno = saved;
    return aligned;
}

bool os_protect_none(void *address, size_t size) {
    int saved = errno;
    bool ok = mprotect(address, size, PROT_NONE) == 0;
    errno = saved;
    return ok;
}
