/* Secure mode (MALLOC_CHECK_=3 or TIDEMALLOC_SECURE=1), MALLOC_PERTURB_, and
 * aggressive mode's release of freed blocks.
 * Both are chosen at startup; then every malloc and free takes these paths
 * (the fast paths are bypassed, not burdened):
 *   - a class block ends with a canary (at least one byte) and the requested
 *     size; free checks the canary, catching a 1-byte overflow;
 *   - a freed block is filled, and the fill is checked when it is reused,
 *     catching writes after free;
 *   - blocks too big for a class get their own mapping with a guard page
 *     right after them. */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"

#define FREE_FILL  0xdf
#define LINK_WORDS sizeof(struct block) /* the free-list words are not filled */

static void secure_write_trailer(unsigned char *p, size_t usable, size_t size) {
    memset(p + size, CANARY_BYTE, usable - 4 - size);
    uint32_t stored = (uint32_t)size;
    __builtin_memcpy(p + usable - 4, &stored, 4);
}

RARE void *checked_malloc(struct heap *heap, size_t size, size_t alignment, bool *is_zero) {
    size_t need = size;
    if (g_options.secure && __builtin_add_overflow(size, SECURE_TRAILER, &need)) return NULL;
    if (alignment > need) need = alignment;
    void *p = NULL;
    size_t usable = 0;
    bool small = need <= SMALL_MAX && (alignment <= SLICE_SIZE) &&
                 (g_options.secure || size < OPTION(mmap_threshold));
    if (small) {
        unsigned cls = size_class_of(need);
        if (alignment > ALIGNMENT) cls = class_aligned_from(cls, alignment);
        if (cls >= SMALL_CLASS_COUNT)
            small = false;
        else {
            p = heap_malloc_class_checked(heap, cls);
            usable = g_class_size[cls];
        }
    }
    if (!small) {
        if (g_options.secure)
            p = huge_alloc_guarded(size, alignment > 0 ? alignment : ALIGNMENT);
        else
            p = huge_alloc(size, alignment, is_zero != NULL, size < OPTION(mmap_threshold));
        if (p && is_zero) *is_zero = true; /* fresh mapping, or zeroed by huge_alloc */
        if (p && !is_zero && OPTION(perturb)) memset(p, OPTION(perturb) ^ 0xff, size);
        return p;
    }
    if (p == NULL) return NULL;
    if (is_zero) {
        memset(p, 0, size);
        *is_zero = true;
    } else if (OPTION(perturb)) {
        memset(p, OPTION(perturb) ^ 0xff, size);
        /* no longer a page of zeros: a calloc that read the size limit
         * before another thread's mallopt(M_PERTURB) turned checked mode on
         * came here through malloc and trusts that flag (mt_tsan caught a
         * calloc returning the fill) */
        __atomic_store_n(&page_of(segment_of(p), p)->is_zero, 0,
                         __ATOMIC_RELAXED); /* as calloc reads it */
    }
    if (g_options.secure) secure_write_trailer(p, usable, size);
    return p;
}

RARE void checked_before_free(struct page *page, struct block *b) {
    if (!CHECKS_ON) b->free_key = free_key_of(page); /* checked_before_reuse reads it */
    unsigned char *p = (unsigned char *)b;
    size_t usable = page->block_size;
    size_t size = usable;
    if (g_options.secure && page->class_index != LARGE_CLASS) {
        uint32_t stored;
        __builtin_memcpy(&stored, p + usable - 4, 4);
        if (stored > usable - SECURE_TRAILER) fatal_error(g_free_heap_overflow); /* size word */
        for (size_t i = stored; i < usable - 4; i++)
            if (p[i] != CANARY_BYTE) fatal_error(g_free_heap_overflow);
        size = stored;
    }
    if (g_options.secure)
        memset(p + LINK_WORDS, FREE_FILL, usable - LINK_WORDS);
    else if (OPTION(perturb))
        memset(p, OPTION(perturb), size);
}

RARE void checked_before_reuse(struct page *page, struct block *b) {
    if (b->free_key != free_key_of(page)) return; /* freshly carved, never freed */
    const unsigned char *p = (const unsigned char *)b;
    for (size_t i = LINK_WORDS; i < page->block_size; i++)
        if (p[i] != FREE_FILL) fatal_error("malloc(): write after free detected");
}

RARE size_t checked_usable_size(const struct page *page, const void *p) {
    if (page->class_index == LARGE_CLASS) return page->block_size;
    uint32_t stored;
    __builtin_memcpy(&stored, (const unsigned char *)p + page->block_size - 4, 4);
    return stored;
}

/* Aggressive mode (seed 001): the whole OS pages inside a freed block, past
 * its free-list words, go back at once. Only blocks that span such pages. */
RARE void aggressive_release_block(const struct page *page, struct block *b) {
    uintptr_t from =
        ((uintptr_t)b + LINK_WORDS + OS_PAGE_SIZE - 1) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    uintptr_t to = ((uintptr_t)b + page->block_size) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    if (to > from) os_release((void *)from, to - from);
}
