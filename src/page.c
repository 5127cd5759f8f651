/* Pages: carving a run of slices into blocks of one size, lazily, and
 * collecting the blocks other threads freed into it. Owner thread only,
 * except the atomic exchange on thread_free. */
#include "internal.h"

void page_init(struct page *page, unsigned class_index, size_t block_size) {
    size_t area = (size_t)page->slice_count << SLICE_SHIFT;
    page->class_index = (uint8_t)class_index;
    page->block_size = (uint32_t)block_size;
    page->reserved = (uint32_t)(area / block_size);
    page->area_size = (uint32_t)(page->reserved * block_size);
    page->thread_free_full = (uint64_t)page->reserved << THREAD_FREE_COUNT_SHIFT;
    /* The slack goes first: a multiple of 16 (and of any power of two that
     * divides block_size), so alignment holds, and the last block ends at
     * the page's end, so free needs no range check. */
    page->start = page_slices_begin(page) + (area - page->area_size);
    /* A large page's one block starts at offset 0, and 1 accepts only 0: the
     * reciprocal is exact for offsets below 2^40 / block_size (every class
     * page), not for all of a 2 MiB block (1 MiB blocks accepted offset
     * size - 1). */
    page_block_test_set(page, class_index == LARGE_CLASS ? 1 : block_offset_inverse(block_size));
    page->capacity = 0;
    page->used = 0;
    page->free = list_end_of(page);
    page->flags &= ~PAGE_IN_FULL; /* PAGE_LENT stays: the segment's */
    /* relaxed: the page is not yet visible to any other thread. */
    atomic_store_explicit(&page->thread_free, thread_free_empty_word(page), memory_order_relaxed);
    page->next = page->prev = NULL;
}

UNPADDED void page_block_test_set(struct page *page, uint64_t inverse) {
    for (unsigned i = 0; i < page->slice_count; i++) {
        /* Only the owner opens a test, and only it writes `start`; a purger
         * closing a reclaimed page writes the inverse alone. */
        if (inverse != 0) page[i].start = page->start;
        /* relaxed: other threads' frees read it without a lock; one that
         * reads the previous value acts as one that ran a moment earlier */
        __atomic_store_n(&page[i].block_size_inverse, inverse, __ATOMIC_RELAXED);
    }
}

/* Carve the blocks that start in the next OS page (at least one) onto the
 * free list: writing their links touches that page and no other, so memory
 * that is never used is never touched. */
bool page_extend(struct page *page) {
    if (page->capacity >= page->reserved) return false;
    uintptr_t begin = page_start(page) + (size_t)page->capacity * page->block_size;
    uintptr_t page_end = (begin | (OS_PAGE_SIZE - 1)) + 1;
    uint32_t count = (uint32_t)((page_end - begin + page->block_size - 1) / page->block_size);
    uint32_t left = (uint32_t)page->reserved - page->capacity;
    if (count > left) count = left;
    /* Under the segment lock, so that a purger never reclaims a page whose
     * blocks are being carved; one it reclaimed is reset first. */
    struct segment *segment = segment_of(page);
    spin_lock(&segment->lock);
    bool reclaimed =
        atomic_load_explicit(&page->thread_free, memory_order_relaxed) == THREAD_FREE_RECLAIMED;
    uint32_t from = page->capacity;
    if (!reclaimed) page->capacity = (uint16_t)(from + count);
    spin_unlock(&segment->lock);
    if (reclaimed) return false;
    /* reopen the block test, which a reclaimed page closed (page_init
     * opened it on a page set up afresh) */
    if (from == 0 && __atomic_load_n(&page->block_size_inverse, __ATOMIC_RELAXED) == 0)
        page_block_test_set(page, block_offset_inverse(page->block_size));
    char *first = (char *)page_start(page) + (size_t)from * page->block_size;
    struct block *next = page->free;
    for (uint32_t i = count; i-- > 0;) {
        struct block *b = (struct block *)(first + (size_t)i * page->block_size);
        block_link_set(b, next);
        b->free_key = 0; /* slices may be reused dirty: no stale key may remain */
        next = b;
    }
    page->free = next;
    return true;
}

/* The stale tail of a one-slice class page: the memory past its carved
 * blocks that earlier pages on the slice touched (touched_end), in *range;
 * false if none. Owner only: heap_exit_trim gives it back. */
bool page_stale_tail(const struct page *page, struct iovec *range) {
    if (!page_tracks_touched(page)) return false;
    uint32_t carved = page_carved_end(page, page->capacity);
    if (page->touched_end <= carved) return false;
    range->iov_base = (void *)(page_slices_begin(page) + carved);
    range->iov_len = page->touched_end - carved;
    return true;
}

/* The last block of a list of `count` (links checked on the way). */
static struct block *list_tail(struct block *list, uint32_t count) {
    struct block *tail = list;
    while (--count > 0) {
        struct block *next = block_next_checked(tail);
        if (unlikely(list_is_end(next))) report_corrupt_free_list();
        tail = next;
    }
    return tail;
}

/* A purger reclaimed the page (segment_reclaim_pages): every block is free
 * and its memory reads as zero. Taking the segment lock waits out the
 * purger's madvise. The block test stays closed until blocks are carved
 * again (page_extend), so a late free of an old block aborts. */
static void page_reset_reclaimed(struct page *page) {
    struct segment *segment = segment_of(page);
    spin_lock(&segment->lock);
    page->capacity = 0;
    spin_unlock(&segment->lock);
    page->used = 0;
    page->free = list_end_of(page);
    __atomic_store_n(&page->is_zero, 1, __ATOMIC_RELAXED); /* relaxed: as calloc reads it */
}

/* Moves the blocks other threads freed onto the local free list. The push
 * word carries their count, so nothing is walked when the local list is
 * empty (the usual case: the owner collects when a page runs dry); else the
 * shorter list is walked to splice them, the local one (capacity - used
 * blocks, in this core's cache) when it ties. */
static NOINLINE uint32_t page_collect_remote_list(struct page *page) {
    /* acquire: pairs with the pushers' release, so their link writes are seen,
     * and with a purger's reclaim, so its madvise has begun. */
    uintptr_t word = atomic_exchange_explicit(&page->thread_free, thread_free_empty_word(page),
                                              memory_order_acquire);
    if (unlikely(word == THREAD_FREE_RECLAIMED)) {
        page_reset_reclaimed(page);
        return 0;
    }
    struct block *list = thread_free_head(word);
    uint32_t count = thread_free_count(word);
    if (count == 0) return 0; /* a purger took the list since the peek */
    if (unlikely(count == page->reserved))
        remote_freed_page_note((uint64_t)page->slice_count << SLICE_SHIFT, false);
    if (unlikely(count > page->used)) fatal_error("free(): double free detected (remote)");
    uint32_t local_count = (uint32_t)page->capacity - page->used;
    if (local_count == 0) {
        page->free = list;
    } else if (local_count <= count) {
        block_link_set(list_tail(page->free, local_count), list);
    } else {
        block_link_set(list_tail(list, count), page->free);
        page->free = list;
    }
    page->used = (uint16_t)(page->used - count);
    /* blocks with user data are on the list now; relaxed: as calloc reads it */
    __atomic_store_n(&page->is_zero, 0, __ATOMIC_RELAXED);
    return count;
}

uint32_t page_collect_remote(struct page *page) {
    /* relaxed peek: skipping an exchange when nothing is there is the common
     * case (larson: half a million calls a second), kept apart so that it
     * saves no registers; a block pushed just after is collected next time. */
    uintptr_t word = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    if (thread_free_count(word) == 0 && word != THREAD_FREE_RECLAIMED) return 0;
    return page_collect_remote_list(page);
}

/* Collects only if that empties the page: the periodic sweep looks for pages
 * to give back and leaves partial lists to be taken when the page runs dry. */
void page_collect_if_empties(struct page *page) {
    /* relaxed: a hint; the count only grows until the exchange, which takes
     * at most `used` blocks, so a match here is still a match then. */
    uintptr_t word = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    if (word == THREAD_FREE_RECLAIMED ||
        (thread_free_count(word) != 0 && thread_free_count(word) == page->used))
        page_collect_remote(page);
}

RARE void report_corrupt_free_list(void) {
    fatal_error("malloc(): corrupted free list (heap overflow or write after free)");
}
