/* A heap's page cache: pages its thread emptied, kept for reuse without
 * going back to their segment (a class page reused whole keeps its free
 * list). A lock, uncontended but for purgers, lets malloc_trim and the
 * purger release a cached page's memory while its thread sleeps. */
#define _GNU_SOURCE
#include <sys/uio.h>

#include "internal.h"

#define PAGE_CACHE_SLOTS (sizeof(((struct heap *)0)->page_cache) / sizeof(struct cached_page))

static uint64_t page_bytes(const struct page *page) {
    return (uint64_t)page->slice_count << SLICE_SHIFT;
}

/* A page leaving the cache goes back to its segment before the cache lock
 * is dropped: fork takes that lock, so a child finds every page either in
 * its cache (given back by heap_atfork_child) or freed, never in between,
 * where it stayed in use for good. The segment locks come after the cache
 * locks in fork's order. */
void page_cache_push(struct heap *heap, struct page *page) {
    spin_lock(&heap->cache_lock);
    if (heap->page_cache_count == PAGE_CACHE_SLOTS) {
        struct cached_page oldest = heap->page_cache[0];
        for (unsigned i = 1; i < PAGE_CACHE_SLOTS; i++)
            heap->page_cache[i - 1] = heap->page_cache[i];
        heap->page_cache_count--;
        if (!oldest.clean) retained_bytes_note(page_bytes(oldest.page), false);
        segment_page_free(heap, oldest.page);
    }
    heap->page_cache[heap->page_cache_count++] = (struct cached_page){page, clock_ms(), 0};
    /* under the lock, which fork takes: a child's count matches its caches */
    retained_bytes_note(page_bytes(page), true);
    spin_unlock(&heap->cache_lock);
}

/* A cached page for class `cls` (best: same class, free list intact), else one
 * of the same size in slices. NULL if none. *reusable: its free list can stay. */
struct page *page_cache_take(struct heap *heap, unsigned cls, unsigned slices, bool *reusable) {
    if (heap->page_cache_count == 0) return NULL; /* owner's own field: no lock to peek */
    spin_lock(&heap->cache_lock);
    int found = -1;
    for (int i = (int)heap->page_cache_count - 1; i >= 0; i--) {
        struct page *p = heap->page_cache[i].page;
        if (p->slice_count != slices) continue;
        if (p->class_index == cls && !heap->page_cache[i].clean) {
            found = i;
            break;
        }
        if (found < 0) found = i;
    }
    struct page *page = NULL;
    if (found >= 0) {
        struct cached_page entry = heap->page_cache[found];
        for (unsigned i = (unsigned)found + 1; i < heap->page_cache_count; i++)
            heap->page_cache[i - 1] = heap->page_cache[i];
        heap->page_cache_count--;
        page = entry.page;
        *reusable = !entry.clean && page->class_index == cls;
        if (!entry.clean) retained_bytes_note(page_bytes(page), false);
        __atomic_store_n(&page->is_zero, entry.clean, __ATOMIC_RELAXED); /* as calloc reads it */
    }
    spin_unlock(&heap->cache_lock);
    return page;
}

/* Gives cached pages back to their segments: those older than the purge
 * delay, or all of them. */
void page_cache_flush(struct heap *heap, bool everything) {
    if (heap->page_cache_count == 0) return;
    uint32_t now = clock_ms();
    for (;;) {
        struct cached_page entry = {NULL, 0, 0};
        spin_lock(&heap->cache_lock);
        if (heap->page_cache_count > 0 &&
            (everything ||
             (uint32_t)(now - heap->page_cache[0].freed_ms) >= OPTION(purge_delay_ms))) {
            entry = heap->page_cache[0];
            for (unsigned i = 1; i < heap->page_cache_count; i++)
                heap->page_cache[i - 1] = heap->page_cache[i];
            heap->page_cache_count--;
            if (!entry.clean) retained_bytes_note(page_bytes(entry.page), false);
            segment_page_free(heap, entry.page); /* under the lock: see page_cache_push */
        }
        spin_unlock(&heap->cache_lock);
        if (entry.page == NULL) return;
    }
}

/* Fork child: the emptied pages a thread the child lacks had cached go back
 * to their segments, which the child freezes: else nothing would ever reuse
 * or release them (they stayed resident and counted as retained, out of
 * malloc_trim's reach), and the heap structure, recycled for the child's
 * next thread, forgot them. */
void page_cache_give_back_frozen(struct heap *heap) {
    for (unsigned i = 0; i < heap->page_cache_count; i++) {
        struct cached_page entry = heap->page_cache[i];
        if (!entry.clean) retained_bytes_note(page_bytes(entry.page), false);
        segment_page_free_frozen(entry.page, entry.clean);
    }
    heap->page_cache_count = 0;
}

/* Owner: calls visit for each cached page whose memory no purger released,
 * under the cache lock (a purger may release one meanwhile otherwise). */
void page_cache_each_resident(struct heap *heap, void (*visit)(struct page *page, void *arg),
                              void *arg) {
    spin_lock(&heap->cache_lock);
    for (unsigned i = 0; i < heap->page_cache_count; i++)
        if (!heap->page_cache[i].clean) visit(heap->page_cache[i].page, arg);
    spin_unlock(&heap->cache_lock);
}

/* Purger or malloc_trim, any thread, heaps lock held: release the memory of
 * cached pages free for min_age_ms; they stay cached, clean. */
size_t heap_cache_purge(struct heap *heap, uint32_t now, uint32_t min_age_ms) {
    struct iovec ranges[sizeof heap->page_cache / sizeof heap->page_cache[0]];
    struct cached_page *entries[sizeof ranges / sizeof ranges[0]];
    unsigned count = 0;
    size_t released = 0;
    spin_lock(&heap->cache_lock);
    for (unsigned i = 0; i < heap->page_cache_count; i++) {
        struct cached_page *entry = &heap->page_cache[i];
        if (entry->clean || (uint32_t)(now - entry->freed_ms) < min_age_ms) continue;
        entries[count] = entry;
        ranges[count].iov_base = (void *)page_slices_begin(entry->page);
        ranges[count].iov_len = page_bytes(entry->page);
        count++;
    }
    uint64_t went = count ? os_release_ranges(ranges, count) : 0;
    for (unsigned i = 0; i < count; i++) {
        if (!(went >> i & 1)) continue;
        entries[i]->clean = 1;
        retained_bytes_note(ranges[i].iov_len, false);
        released += ranges[i].iov_len;
    }
    spin_unlock(&heap->cache_lock);
    return released;
}
