/* Public allocation entry points. malloc's fast path is inline here: one TLS
 * load, a class lookup, a pop from the page's free list. Everything else is
 * in heap.c's slow paths. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Largest size served from size classes: SMALL_MAX, or less when the user set
 * a lower mmap threshold (options.c keeps it in step). */
_Atomic size_t g_small_limit = SMALL_MAX;

/* A block of class cls from the thread's current page of it, or NULL (an
 * empty list, or a corrupt link, which the slow path reports). With the
 * checks, an empty list is the sentinel, whose link fails the check.
 * calloc passes holds_zeros: whether the block reads as zero but for its
 * link and mark words. It does if its page was fresh from the kernel
 * (is_zero) and the block was never freed since: with the checks, a freed
 * block carries the double-free mark until it is handed out again, so free
 * needs no store of its own for calloc; without them, free clears is_zero. */
static inline __attribute__((always_inline)) struct block *
class_pop_inline(struct heap *heap, size_t cls, bool *holds_zeros) {
    struct page *page = heap->pages_direct[cls];
    struct block *b = page->free, *next;
    /* malloc returns b: bound to %rax from the load on. gcc otherwise
     * decoded the link there and copied b into it before ret (with the
     * checks: one instruction a malloc). */
    if (!holds_zeros) __asm__("" : "+a"(b));
    if (unlikely(!block_next_get(b, &next, true))) return NULL;
    if (holds_zeros) {
        bool freed = CHECKS_ON && b->free_key == free_key_of(page);
        /* relaxed: after an exit-heap malloc (under its lock) another
         * exiting thread may clear the flag meanwhile; it only goes from 1
         * to 0 while blocks are out, so either value is right for this one */
        *holds_zeros = !freed && __atomic_load_n(&page->is_zero, __ATOMIC_RELAXED);
    }
    page->free = next;
    page->used++;
    block_free_mark_clear(b);
    return b;
}

/* holds_zeros: as class_pop_inline's (false from the slow paths). shared:
 * a size over 1 KiB goes straight to its shared class (malloc only: calloc's
 * and realloc's copies of this took 54 bytes more of the common code) */
static inline __attribute__((always_inline)) void *malloc_inline(size_t size, bool *holds_zeros,
                                                                 bool shared) {
    struct heap *heap = t_heap;
    size_t cls; /* size_t: no zero-extension after the table load */
    /* relaxed, both: tunables; a stale value only routes one call another
     * way. Up to 1 KiB the heap's table holds the limit
     * (size_class_table_limit): the common sizes skip the limit's load and
     * compare. g_empty_heap's table is all 0: the empty class. */
    if (likely(size <= 1024)) {
        cls = atomic_load_explicit(&heap->class_of_small[(size + 15) >> 4], memory_order_relaxed);
    } else if (likely(size <= atomic_load_explicit(&g_small_limit, memory_order_relaxed))) {
        cls = size_class_of(size);
        /* a shared class: straight to the thread's cache of it, not through
         * the empty page its queue holds (three dependent loads) */
        if (shared) return heap_malloc_shared(heap, size, cls);
    } else {
        goto slow;
    }
    struct block *b = class_pop_inline(heap, cls, holds_zeros);
    if (likely(b != NULL)) return b;
    if (holds_zeros) *holds_zeros = false;
    return heap_malloc_refill(size, heap, cls);
slow:
    if (holds_zeros) *holds_zeros = false;
    return heap_malloc_slow(heap, size);
}

API LINE_ALIGNED void *TM_NAME(malloc)(size_t size) {
    return malloc_inline(size, NULL, true);
}

API void *TM_NAME(calloc)(size_t count, size_t size) {
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (total <= atomic_load_explicit(&g_small_limit, memory_order_relaxed)) {
        bool holds_zeros;
        void *p = malloc_inline(total, &holds_zeros, false);
        if (p == NULL) return NULL;
        memset(p, 0, holds_zeros && total > sizeof(struct block) ? sizeof(struct block) : total);
        return p;
    }
    bool is_zero = false;
    void *p = heap_malloc_generic(t_heap, total, &is_zero);
    if (p && !is_zero) memset(p, 0, total);
    return p;
}

/* glibc's memalign: alignments up to 16 are plain malloc, others round up
 * to a power of two; an absurd alignment is EINVAL. */
RARE static void *memalign_internal(size_t alignment, size_t size) {
    if (alignment <= ALIGNMENT) return malloc_inline(size, NULL, false);
    /* Small blocks with a small power-of-two alignment (C++'s aligned new,
     * Rust's allocator past 16): the first class up from the size whose
     * block size is a multiple of the alignment gives aligned blocks, as in
     * heap_malloc_aligned, which does the rest (a pass through it took
     * about 100 instructions more than malloc). Class 0 is the table's
     * route to the slow path (checked mode, a lowered mmap threshold). */
    if (likely(size <= 1024 && alignment <= 1024 && (alignment & (alignment - 1)) == 0)) {
        size_t need = size < alignment ? alignment : size;
        /* relaxed: as in malloc_inline */
        unsigned cls =
            atomic_load_explicit(&g_class_of_small[(need + 15) >> 4], memory_order_relaxed);
        if (likely(cls != 0)) {
            /* a class exists: 1024 is a multiple of every alignment here */
            struct block *b = class_pop_inline(t_heap, class_aligned_from(cls, alignment), NULL);
            if (likely(b != NULL)) return b;
        }
    }
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (alignment & (alignment - 1)) alignment = (size_t)1 << (64 - __builtin_clzl(alignment));
    if (size > PTRDIFF_MAX || alignment > PTRDIFF_MAX - size) {
        errno = ENOMEM;
        return NULL;
    }
    return heap_malloc_aligned(t_heap, alignment, size);
}

RARE API void *TM_NAME(memalign)(size_t alignment, size_t size) {
    return memalign_internal(alignment, size);
}
RARE API void *TM_NAME(aligned_alloc)(size_t alignment, size_t size) {
    return memalign_internal(alignment, size);
}

RARE API int TM_NAME(posix_memalign)(void **result, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0)
        return EINVAL;
    void *p = memalign_internal(alignment, size);
    if (p == NULL) return ENOMEM; /* errno is ENOMEM too, as in glibc */
    *result = p;
    return 0;
}

RARE API void *TM_NAME(valloc)(size_t size) {
    return memalign_internal(OS_PAGE_SIZE, size);
}

RARE API void *TM_NAME(pvalloc)(size_t size) {
    if (size > SIZE_MAX - OS_PAGE_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t rounded = (size + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1);
    return memalign_internal(OS_PAGE_SIZE, rounded ? rounded : OS_PAGE_SIZE);
}

/* A block of usable size `usable` that `size` leaves in place as it is: it
 * still fits, and most of it would not idle. */
static inline bool realloc_fits(size_t size, size_t usable) {
    return size <= usable && (size >= usable / 2 || usable <= 64);
}

/* realloc's copies of at least POPULATE_COPY_MIN bytes look for pages of
 * the new block that are not resident, and populate them first if there
 * are POPULATE_PAGES_MIN or more (os_populate): one system call against a
 * fault a page. */
#define POPULATE_COPY_MIN  ((size_t)64 << 10)
#define POPULATE_PAGES_MIN 2

/* realloc's copy of `copy` bytes into `fresh`, a block just handed out:
 * the pages it will write that read as zeros, not resident, are made
 * present in one call. In `large 12` 5,286 pages, 16% of its faults, were
 * faulted in by 7 of its 2,054 big copies (the others land on resident
 * memory, where a call would only cost); populated, its realloc calls took
 * 0.150 s instead of 0.179 (2026-12-05, 10 µs a fault). Secure mode and
 * MALLOC_PERTURB_ fill blocks themselves: no call there. */
WARM static NOINLINE void populate_for_copy(void *fresh, size_t copy) {
    if (OPTION(checked)) return;
    uintptr_t start = (uintptr_t)fresh;
    uintptr_t clean;
    size_t usable;
    if (segment_map_contains(start))
        clean = large_clean_from(fresh);
    else if (!huge_usable_size(fresh, &usable, &clean))
        return;
    if (clean == UINTPTR_MAX) return;
    if (clean < start) clean = start;
    uintptr_t end = (start + copy + OS_PAGE_SIZE - 1) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    if (end > clean && end - clean >= POPULATE_PAGES_MIN * OS_PAGE_SIZE)
        os_populate((void *)clean, end - clean);
}

/* realloc's other cases: a mapped block grows with mremap or gives its spare
 * pages back (NULL: too small now), a large block takes or gives back
 * slices; then any block shrinks in place unless most of it would idle.
 * Else a copy. */
static NOINLINE void *realloc_change(void *p, size_t size) {
    size_t usable = block_usable_size(p, "realloc(): invalid pointer");
    if (!segment_map_contains((uintptr_t)p)) {
        void *same = huge_realloc(p, size);
        if (same) return same;
    } else if (usable > SMALL_MAX) { /* a large block */
        if (size > usable ? heap_large_grow(p, size) : heap_large_shrink(p, size)) return p;
    }
    if (realloc_fits(size, usable) && !OPTION(checked)) return p;
    void *fresh = malloc_inline(size, NULL, false);
    if (fresh == NULL) return NULL; /* errno is ENOMEM; p is untouched */
    size_t copy = size < usable ? size : usable;
    if (copy >= POPULATE_COPY_MIN) populate_for_copy(fresh, copy);
    /* glibc's memcpy code, without memcpy's version need (tests/suite-static.sh) */
    memmove(fresh, p, copy);
    free_internal(p);
    return fresh;
}

API void *TM_NAME(realloc)(void *p, size_t size) {
    if (p == NULL) return malloc_inline(size, NULL, false);
    if (size == 0) { /* glibc 2.36: frees and returns NULL */
        free_internal(p);
        return NULL;
    }
    /* The common case, with no call and no lock: a block in a segment that
     * stays as it is (a large one keeps its slices). Checked modes copy. */
    if (likely(segment_map_contains((uintptr_t)p)) && likely(!OPTION(checked))) {
        const struct page *page = page_of_block(p, "realloc(): invalid pointer");
        if (page->class_index != LARGE_CLASS ? realloc_fits(size, page->block_size)
                                             : size > SMALL_MAX && size <= page->block_size &&
                                                   slices_for_size(size) == page->slice_count) {
            /* a freed block kept in place would be handed out twice */
            if (CHECKS_ON && unlikely(((const struct block *)p)->free_key == free_key_of(page)))
                realloc_freed_check(p);
            return p;
        }
    }
    return realloc_change(p, size);
}

API void *TM_NAME(reallocarray)(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return TM_NAME(realloc)(p, total);
}

/* glibc exports these for programs and libraries that call them directly. */
#ifndef TIDEMALLOC_PREFIX
API void *__libc_malloc(size_t size) __attribute__((alias("malloc"), copy(malloc)));
API void *__libc_calloc(size_t count, size_t size) __attribute__((alias("calloc"), copy(calloc)));
API void *__libc_realloc(void *p, size_t size) __attribute__((alias("realloc"), copy(realloc)));
API void *__libc_memalign(size_t alignment, size_t size)
    __attribute__((alias("memalign"), copy(memalign)));
API void *__libc_valloc(size_t size) __attribute__((alias("valloc"), copy(valloc)));
API void *__libc_pvalloc(size_t size) __attribute__((alias("pvalloc"), copy(pvalloc)));
#endif
