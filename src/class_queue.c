/* Class queues (a heap's pages of each size class, pages_direct[class]
 * the head of a circular list, and the full list beside it) and the malloc
 * slow path's search for a page with a free block once a class's current
 * page runs dry (heap_find_page). A heap's own: its thread, or the exit
 * heap's lock holder. Split from heap.c in the sixtieth session. Built for
 * speed: built for size, the search ran 1.16-1.7 times as long where it is
 * the work (`patterns cycles`, blocks of 1.5-8 KiB); what runs once a new
 * page (heap_new_class_page) or once a search missed (full_list_rescue) is
 * COLD instead. */
#define _GNU_SOURCE
#include "internal.h"

#define QUEUE_SEARCH_MAX 8 /* pages looked at before a fresh page is taken */
#define YOUNG_CARVES     8 /* OS pages a young heap carves before its fine classes (heap.c) */
/* Carves of a class over 1 KiB that skip the search after one that found
 * no free block. A carve reaches the end of the current OS page, one block
 * from 4 KiB up: in a growth phase each refill of a thread's cache (every
 * malloc of such a class) searched 8 queue and 8 full pages first
 * (`patterns cycles 4000 20000 5`: 98,766 searches for 100,000 mallocs, 61%
 * of 114.4 M instructions; now 80.7 M, tcmalloc 49.8 M). After a miss the
 * next carves take the head at once: `cycles 4000 20000 20` 0.69 of the
 * time, `8000 10000 20` 0.89, `1500 50000 20` 0.94, peak RSS even. A block
 * freed meanwhile waits for the next search, 3 carves at most (when every
 * carve took 16 KiB ahead instead, peak RSS rose 4-6% in `mstress`,
 * `threadchurn` and `python`). */
#define SEARCH_SKIPS 3

/* ---- class queues: circular lists whose head is pages_direct[class] ---- */

void queue_insert_head(struct page **head, struct page *page) {
    if (*head == &g_empty_page || *head == NULL) {
        page->next = page->prev = page;
    } else {
        page->next = *head;
        page->prev = (*head)->prev;
        page->prev->next = page;
        (*head)->prev = page;
    }
    *head = page;
}

void queue_insert_tail(struct page **head, struct page *page) {
    if (*head == &g_empty_page || *head == NULL) {
        queue_insert_head(head, page);
        return;
    }
    queue_insert_head(head, page);
    *head = page->next; /* the old head stays first; page is now last */
}

UNPADDED void queue_remove(struct page **head, struct page *page, struct page *empty) {
    if (page->next == page) {
        *head = empty;
    } else {
        page->prev->next = page->next;
        page->next->prev = page->prev;
        if (*head == page) *head = page->next;
    }
    page->next = page->prev = NULL;
}

/* Full lists (heap->pages_full): pages out of their class queue because a
 * search met them dry and carved whole (heap_find_page). */
UNPADDED void full_list_remove(struct heap *heap, struct page *page) {
    queue_remove(&heap->pages_full[page->class_index], page, NULL);
    page->flags &= ~PAGE_IN_FULL;
}
/* Whether a full page can serve again: blocks came back (collected here if
 * it is still dry) or room to carve (a reclaimed page, reset). */
UNPADDED bool full_page_refilled(struct page *page) {
    if (page_list_empty(page)) page_collect_remote(page);
    return !page_list_empty(page) || page->capacity < page->reserved;
}

/* page_extend for the heap's own pages: a young heap counts the carves of
 * its classes up to 1 KiB (a bigger class is the same young or not). */
static bool heap_page_extend(struct heap *heap, struct page *page) {
    if (unlikely(heap->young) && page->block_size <= 1024 && ++heap->young_carves >= YOUNG_CARVES)
        heap_young_end(heap);
    return page_extend(page);
}

COLD static struct page *heap_new_class_page(struct heap *heap, unsigned cls) {
    /* A heap that owns no segment yet adopts one first, if one waits: its
     * pages join the queues, and one of this class may have room. Taking a
     * run for a new page before looking (segment_page_alloc adopts when it
     * finds no room of its own) set up a second page of the class on the
     * slice of another, whose next page then went on a third's: threads that
     * allocate only small objects and exit in waves (`threadchurn` with its
     * pointer array static) spread every class over every slice in turn,
     * and each exit's trim gave back what the next thread carved again
     * (27.6k page faults against 2.3k; 0.89 s against 0.53). */
    if (heap->segments_avail == NULL && heap->segments_full == NULL &&
        segment_try_adopt(heap) != NULL) {
        heap_young_end(heap); /* as segment_acquire's adoption */
        if (heap->pages_direct[cls] != &g_empty_page) return heap_find_page(heap, cls);
    }
    bool reusable = false;
    unsigned slices = class_page_slices(heap->frees_others, cls);
    struct page *page = page_cache_take(heap, cls, slices, &reusable);
    if (page == NULL) page = segment_page_alloc(heap, slices, cls);
    if (page == NULL) return NULL;
    if (!reusable) {
        page_init(page, cls, class_block_size(cls));
        heap_page_extend(heap, page);
    }
    heap->pages_allocated[cls]++;
    queue_insert_head(&heap->pages_direct[cls], page);
    return page;
}

/* A page of the full list that has blocks again (freed by its owner, or by
 * other threads: collected here), or room to carve (reset after a reclaim),
 * back to the queue's head; NULL if none of the first QUEUE_SEARCH_MAX. */
COLD static struct page *full_list_rescue(struct heap *heap, unsigned cls) {
    struct page **full = &heap->pages_full[cls];
    struct page *page = *full;
    for (unsigned tries = 0; page != NULL && tries < QUEUE_SEARCH_MAX; tries++) {
        struct page *next = page->next;
        if (full_page_refilled(page)) {
            full_list_remove(heap, page);
            queue_insert_head(&heap->pages_direct[cls], page);
            return page;
        }
        page = next;
        if (page == *full) break;
    }
    if (page != NULL) *full = page; /* resume there */
    return NULL;
}

/* Finds a page of class `cls` with a free block and makes it the queue head.
 * Blocks already carved come first, those other threads freed included;
 * carving new ones while freed blocks wait further down the queue faults in
 * memory that was not needed (peak RSS: larson 14.0 -> 12.4 MiB, churn
 * 3.15 -> 2.74, mstress 18.6 -> 16.9, at the same time). In a long queue
 * the dry pages met go to the full list, so that the next search reaches
 * past them (sqlite3, 2,240 pages of one class: 202.6 -> 176.9 MiB); the
 * list is looked into before anything new is carved. */
struct page *heap_find_page(struct heap *heap, unsigned cls) {
    struct page **head = &heap->pages_direct[cls];
    struct page *page = *head;
    if (heap->search_skips[cls] != 0 && page->capacity < page->reserved &&
        heap_page_extend(heap, page)) {
        heap->search_skips[cls]--;
        return page;
    }
    if (page != &g_empty_page) {
        struct page *extendable = NULL, *dry[QUEUE_SEARCH_MAX];
        unsigned dry_count = 0;
        bool wrapped = false;
        for (unsigned tries = 0; tries < QUEUE_SEARCH_MAX; tries++) {
            /* only a dry page collects: nothing to splice, no walk */
            if (page_list_empty(page)) page_collect_remote(page);
            if (!page_list_empty(page)) {
                *head = page;
                return page;
            }
            if (page->capacity < page->reserved) {
                if (extendable == NULL) extendable = page;
            } else {
                dry[dry_count++] = page;
            }
            page = page->next;
            if (page == *head) {
                wrapped = true;
                break;
            }
        }
        /* A long queue whose pages met here are dry and carved whole: those
         * leave it, so that the next searches reach free blocks past them. */
        for (unsigned i = 0; !wrapped && i < dry_count; i++) {
            queue_remove(head, dry[i], &g_empty_page);
            dry[i]->flags |= PAGE_IN_FULL;
            queue_insert_head(&heap->pages_full[cls], dry[i]);
        }
        struct page *rescued = full_list_rescue(heap, cls);
        if (rescued != NULL && !page_list_empty(rescued)) return rescued;
        if (rescued != NULL) extendable = rescued;
        if (cls >= SHARED_CLASS_FIRST) heap->search_skips[cls] = SEARCH_SKIPS;
        if (extendable != NULL && heap_page_extend(heap, extendable)) {
            *head = extendable;
            return extendable;
        }
        if (*head != &g_empty_page) *head = page; /* resume the search here next time */
    } else {
        struct page *rescued = full_list_rescue(heap, cls);
        if (rescued != NULL && (!page_list_empty(rescued) || heap_page_extend(heap, rescued)))
            return rescued;
    }
    return heap_new_class_page(heap, cls);
}
