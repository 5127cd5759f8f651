/* Pages: carving a run of slices into blocks of one size, lazily, and
 * collecting the blocks other threads freed into it. Owner thread only,
 * except the atomic exchange on thread_free. */
#include "internal.h"

void page_init(struct page *page, unsigned class_index, size_t block_size) {
    size_t area = (size_t)page->slice_count << SLICE_SHIFT;
    page->class_index = (uint8_t)class_index;
    page->block_size = (uint32_t)block_size;
    page->block_size_inverse = (((uint64_t)1 << 40) / block_size) + 1;
    page->reserved = (uint32_t)(area / block_size);
    page->area_size = (uint32_t)(page->reserved * block_size);
    page->capacity = 0;
    page->used = 0;
    page->free = NULL;
    /* relaxed: the page is not yet visible to any other thread. */
    atomic_store_explicit(&page->thread_free, NULL, memory_order_relaxed);
    page->next = page->prev = NULL;
}

/* Carve about one OS page worth of new blocks (at least one) onto the free
 * list, so memory that is never used is never touched. */
bool page_extend(struct page *page) {
    if (page->capacity >= page->reserved) return false;
    uint32_t count = OS_PAGE_SIZE / page->block_size;
    if (count < 4) count = page->block_size >= OS_PAGE_SIZE ? 1 : 4;
    if (page->capacity == 0 && count < 16 && page->block_size < 1024) count = 16;
    uint32_t left = (uint32_t)page->reserved - page->capacity;
    if (count > left) count = left;
    char *first = (char *)page_start(page) + (size_t)page->capacity * page->block_size;
    struct block *next = page->free;
    for (uint32_t i = count; i-- > 0;) {
        struct block *b = (struct block *)(first + (size_t)i * page->block_size);
        block_link_set(b, next);
        b->free_key = 0; /* slices may be reused dirty: no stale key may remain */
        next = b;
    }
    page->free = next;
    page->capacity = (uint16_t)(page->capacity + count);
    return true;
}

/* Moves the blocks other threads freed onto the local free list. */
uint32_t page_collect_remote(struct page *page) {
    /* relaxed peek: skipping an exchange when nothing is there is the common case;
     * a block pushed just after is collected next time. */
    if (atomic_load_explicit(&page->thread_free, memory_order_relaxed) == NULL) return 0;
    /* acquire: pairs with the pushers' release, so their link writes are seen. */
    struct block *list = atomic_exchange_explicit(&page->thread_free, NULL, memory_order_acquire);
    if (list == NULL) return 0;
    uint32_t count = 1;
    struct block *tail = list;
    for (;;) {
        struct block *next = block_link_decode(tail);
        block_link_check(tail, next);
        if (next == NULL) break;
        tail = next;
        if (unlikely(++count > page->reserved)) report_corrupt_free_list();
    }
    block_link_set(tail, page->free);
    page->free = list;
    if (unlikely(count > page->used)) fatal_error("free(): double free detected (remote)");
    page->used -= count;
    page->is_zero = 0; /* blocks with user data are on the list now (calloc) */
    return count;
}

void report_corrupt_free_list(void) {
    fatal_error("malloc(): corrupted free list (heap overflow or write after free)");
}
