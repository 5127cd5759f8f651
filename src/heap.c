/* Thread heaps: their structures, the per-thread class queues, the malloc
 * slow path and the handling of pages that become empty (a thread's exit and
 * the exit heap: heap_exit.c). A heap is touched by its own thread only;
 * other threads reach its pages through thread_free. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

/* The end of g_empty_page's list (list_is_end): its link word stays zero. */
struct block g_list_end;
/* never has a free block: the fast path falls through; a queue of itself
 * alone (the refill's look at the next page finds the head) */
struct page g_empty_page = {.free = CHECKS_ON ? &g_list_end : NULL, .next = &g_empty_page};
struct heap g_empty_heap = {
    .pages_direct = {[0 ... CLASS_COUNT - 1] = &g_empty_page},
    .id = UINT64_MAX, /* no segment is ever owned by it */
};
__thread struct heap *t_heap __attribute__((tls_model("initial-exec"))) = &g_empty_heap;

struct spin_lock g_heaps_lock = SPIN_LOCK_INIT;
struct heap *g_heaps;                   /* live heaps (heaps lock) */
static struct heap *heap_free_list;     /* recycled heap structures (heaps lock) */
static char *heap_pool, *heap_pool_end; /* carving area for new ones (heaps lock) */
_Atomic uint64_t g_heap_count;
_Atomic uint64_t g_heap_exits;
static pthread_key_t heap_key;
static _Atomic int heap_key_ready;

#define COLLECT_INTERVAL 256 /* fewest slow-path calls between full collections */

/* Large pages: a NULL-terminated list, so free()'s "only page" test
 * (page->next == page) never holds for them and they always go back. */
static void large_insert(struct heap *heap, struct page *page) {
    page->prev = NULL;
    page->next = heap->large_pages;
    if (heap->large_pages) heap->large_pages->prev = page;
    heap->large_pages = page;
}

static void large_remove(struct heap *heap, struct page *page) {
    if (page->prev)
        page->prev->next = page->next;
    else
        heap->large_pages = page->next;
    if (page->next) page->next->prev = page->prev;
    page->next = page->prev = NULL;
}

/* ---- heap creation ---- */

static struct heap *heap_struct_alloc(void) {
    spin_lock(&g_heaps_lock);
    struct heap *heap = heap_free_list;
    if (heap) {
        heap_free_list = heap->next_heap;
        /* cleared under the lock: a purger reads a recycled heap's slow-path
         * counts through a segment it owned (purge.c, reclaim_idle_owners);
         * the flag atomically, as a late free of the old owner's large block
         * may set it (then the new owner walks its large pages once) */
        memset(heap, 0, offsetof(struct heap, large_freed_remotely));
        atomic_store_explicit(&heap->large_freed_remotely, 0, memory_order_relaxed);
        memset(&((struct thread_heap *)heap)->caches, 0, sizeof(struct shared_caches));
    } else {
        size_t size = (sizeof(struct thread_heap) + 63) & ~(size_t)63;
        if (heap_pool == NULL || heap_pool + size > heap_pool_end) {
            spin_unlock(&g_heaps_lock);
            char *pool = os_map(SLICE_SIZE);
            if (pool == NULL) return NULL;
            spin_lock(&g_heaps_lock);
            heap_pool = pool;
            heap_pool_end = pool + SLICE_SIZE;
        }
        /* fresh from the kernel, so zero already: not cleared, a page of the
         * pool is resident only where a heap uses it (three heaps filled
         * three pages; without the memset, two) */
        heap = &((struct thread_heap *)(void *)heap_pool)->heap;
        heap_pool += size;
    }
    spin_unlock(&g_heaps_lock);
    return heap;
}

/* Heaps lock held (or the fork child, single-threaded): the structure of a
 * heap off the live list goes to the recycle list, which heap_struct_alloc
 * clears it from. Heap structures are never unmapped: a late free of the old
 * owner's large block may still set its flag. */
UNPADDED void heap_struct_recycle(struct heap *heap) {
    heap->next_heap = heap_free_list;
    heap_free_list = heap;
}

/* ---- young heaps ----
 * A class page costs its heap at least one OS page, so a thread that holds
 * a few blocks of many sizes pays a page for each size (500 threads holding
 * 100 blocks of 8 sizes: RssAnon 25.8 MiB, glibc's 9.3, whose threads share
 * arenas). A young heap serves the sizes up to 1 KiB from the power-of-two
 * classes (7 classes where there are 21), in blocks at most twice the size,
 * until it has carved YOUNG_CARVES (class_queue.c) OS pages of blocks of those classes (the
 * bigger ones are the same young or not) or taken a segment that another
 * heap left with its memory; then the fine classes, for good. What it handed
 * out stays where it is, and the pages serve their class as any other. A
 * heap starts young only when YOUNG_HEAPS_MIN others are live: with a few
 * threads the young pages' blocks that the fine classes no longer reach
 * cost more than they save (threadchurn, whose waves adopt the segments of
 * the waves before: peak RSS +2-4%). */
#define YOUNG_HEAPS_MIN 8

/* Heaps lock held, or the heap not yet on the heaps list. */
static void heap_class_table_fill(struct heap *heap) {
    for (size_t i = 0; i < CLASS_TABLE_SIZE; i++) {
        /* relaxed, both: the heaps lock orders the writers; the owner's
         * malloc may meanwhile use the old entry, a class that serves the
         * size too (0 only sends it to the slow path) */
        unsigned cls = atomic_load_explicit(&g_class_of_small[i], memory_order_relaxed);
        atomic_store_explicit(&heap->class_of_small[i],
                              (uint8_t)(heap->young ? class_young(cls) : cls),
                              memory_order_relaxed);
    }
}

COLD void heap_class_tables_refresh(void) {
    spin_lock(&g_heaps_lock);
    for (struct heap *heap = g_heaps; heap; heap = heap->next_heap)
        heap_class_table_fill(heap);
    spin_unlock(&g_heaps_lock);
}

COLD void heap_young_end(struct heap *heap) {
    if (likely(!heap->young)) return;
    spin_lock(&g_heaps_lock); /* against size_class_table_limit's rewrite */
    heap->young = 0;
    heap_class_table_fill(heap);
    spin_unlock(&g_heaps_lock);
}

/* The class the slow path serves a size of at most SMALL_MAX from. */
static inline unsigned heap_class_of(const struct heap *heap, size_t size) {
    unsigned cls = size_class_of(size);
    return unlikely(heap->young) ? class_young(cls) : cls;
}

/* A heap struct set up empty, owned by `id`, and on the heaps list. A thread's
 * heap (may_be_young) is young if enough others are live. */
COLD struct heap *heap_create(uint64_t id, bool may_be_young) {
    struct heap *heap = heap_struct_alloc();
    if (heap == NULL) return NULL;
    for (unsigned i = 0; i < CLASS_COUNT; i++)
        heap->pages_direct[i] = &g_empty_page;
    heap->id = id;
    heap->collect_countdown = COLLECT_INTERVAL;
    /* relaxed: a statistic; one heap more or less moves the threshold by one */
    heap->young = may_be_young &&
                  atomic_load_explicit(&g_heap_count, memory_order_relaxed) >= YOUNG_HEAPS_MIN;
    spin_lock(&g_heaps_lock);
    heap_class_table_fill(heap);
    heap->next_heap = g_heaps;
    if (g_heaps) g_heaps->prev_heap = heap;
    g_heaps = heap;
    spin_unlock(&g_heaps_lock);
    return heap;
}

/* heap_create's undoing: off the heaps list, onto the recycle list. */
COLD void heap_retire(struct heap *heap) {
    spin_lock(&g_heaps_lock);
    if (heap->prev_heap)
        heap->prev_heap->next_heap = heap->next_heap;
    else
        g_heaps = heap->next_heap;
    if (heap->next_heap) heap->next_heap->prev_heap = heap->prev_heap;
    heap_struct_recycle(heap);
    spin_unlock(&g_heaps_lock);
}

struct heap *heap_for_thread(void) {
    if (t_heap != &g_empty_heap) return t_heap;
    allocator_init();
    if (!atomic_load_explicit(&heap_key_ready, memory_order_acquire)) {
        spin_lock(&g_heaps_lock);
        if (!atomic_load_explicit(&heap_key_ready, memory_order_relaxed)) {
            pthread_key_create(&heap_key, heap_thread_exit);
            atomic_store_explicit(&heap_key_ready, 1, memory_order_release);
        }
        spin_unlock(&g_heaps_lock);
    }
    struct heap *heap = heap_create(current_thread_id(), true); /* unique among live threads */
    if (heap == NULL) return NULL;
    atomic_fetch_add_explicit(&g_heap_count, 1, memory_order_relaxed); /* statistic */
    t_heap = heap;
    pthread_setspecific(heap_key, heap);
    return heap;
}

/* Large pages whose block another thread freed go back to their segments
 * (such a block waits on its page's list until a collect). Adds the pages
 * looked at to *visited (NULL: not counted); returns those given back. */
uint32_t heap_large_pages_collect(struct heap *heap, uint32_t *visited) {
    uint32_t freed = 0;
    for (struct page *page = heap->large_pages, *next; page; page = next) {
        next = page->next;
        if (visited) (*visited)++;
        page_collect_if_empties(page);
        if (page->used == 0) {
            large_remove(heap, page);
            segment_page_free(heap, page);
            freed++;
        }
    }
    return freed;
}

/* Collects what other threads freed where that empties a page (every list
 * when exiting) and gives empty pages back. Returns the pages it looked at. */
COLD uint32_t heap_collect(struct heap *heap, bool exiting) {
    /* first: a batch may hold this heap's own blocks (a segment it adopted) */
    remote_batches_flush(heap);
    uint32_t visited = 0;
    heap_large_pages_collect(heap, &visited);
    /* Full pages first: freed if empty, else back to the queue if blocks
     * came back, where the walk below sees them. */
    for (unsigned cls = 0; cls < CLASS_COUNT; cls++) {
        struct page **full = &heap->pages_full[cls];
        if (*full == NULL) continue;
        struct page *last = (*full)->prev, *page = *full;
        for (bool done = false; !done;) {
            struct page *next = page->next;
            done = page == last;
            visited++;
            if (exiting) page_collect_remote(page);
            bool refilled = full_page_refilled(page);
            if (page->used == 0) {
                full_list_remove(heap, page);
                segment_page_free(heap, page);
            } else if (refilled) {
                full_list_remove(heap, page);
                queue_insert_tail(&heap->pages_direct[cls], page);
            }
            page = next;
        }
    }
    for (unsigned cls = 0; cls < CLASS_COUNT; cls++) {
        struct page **head = &heap->pages_direct[cls];
        if (*head == &g_empty_page) continue;
        /* One walk, the head last: removing the pages before it leaves the
         * walk's end in place. (Counting the queue first doubled the walk, a
         * cache miss per page: 80% of this function in redis's profile.) */
        struct page *last = *head;
        struct page *page = last->next;
        for (;;) {
            struct page *next = page->next;
            visited++;
            if (exiting)
                page_collect_remote(page);
            else
                page_collect_if_empties(page);
            if (page->used == 0 && (exiting || page_leaves_when_empty(page))) {
                queue_remove(head, page, &g_empty_page);
                segment_page_free(heap, page);
            }
            if (page == last) break;
            page = next;
        }
    }
    return visited;
}

/* An adopted segment's page joins this heap (or is freed if empty). */
void heap_adopt_page(struct heap *heap, struct page *page) {
    page_collect_remote(page);
    if (page->used == 0) {
        page->next = page->prev = NULL;
        page->flags &= ~PAGE_IN_FULL;
        segment_page_free(heap, page);
    } else if (page->class_index == LARGE_CLASS) {
        large_insert(heap, page);
    } else {
        page->flags &= ~PAGE_IN_FULL;
        queue_insert_tail(&heap->pages_direct[page->class_index], page);
    }
}

/* ---- the slow paths ---- */

/* The first block of a page that has one. may_be_secure: false where secure
 * mode cannot be on (it routes every allocation to checked_malloc). */
static inline __attribute__((always_inline)) void *class_page_pop(struct page *page,
                                                                  bool may_be_secure) {
    struct block *b = page->free;
    struct block *next = block_next_checked(b);
    if (may_be_secure && unlikely(g_options.secure)) checked_before_reuse(page, b);
    page->free = next;
    page->used++;
    b->free_key = 0;
    return b;
}

/* NULL with errno ENOMEM if no page can be had */
void *heap_malloc_class(struct heap *heap, unsigned cls) {
    if (cls == 0) cls = 1; /* class 0 stays empty: malloc(0) always comes here */
    /* checked mode's blocks stay in their heap: its frees take their own
     * path. The shared classes: malloc's refill pops the thread's cache. */
    if (cls >= SHARED_CLASS_FIRST && heap->id != EXIT_HEAP_ID && !OPTION(checked))
        return heap_malloc_refill(shared_class_size(cls), heap, cls);
    struct page *page = heap->pages_direct[cls];
    if (page_list_empty(page)) {
        page = heap_find_page(heap, cls);
        if (page == NULL) {
            errno = ENOMEM;
            return NULL;
        }
    }
    return class_page_pop(page, true);
}

RARE void *heap_malloc_class_checked(struct heap *heap, unsigned cls) {
    return heap_malloc_class(heap, cls);
}

/* calloc of a large block: clears the slices that may hold old data and
 * leaves those that read as zero alone, since a memset would fault them in
 * (a run is taken for its resident slices first, and may end on clean ones). */
static void large_clear_dirty(const struct page *page, size_t size) {
    char *start = (char *)page_slices_begin(page);
    unsigned slices = (unsigned)((size + SLICE_SIZE - 1) >> SLICE_SHIFT);
    for (unsigned i = 0; i < slices;) {
        if (page->clean_slices >> i & 1) {
            i++;
            continue;
        }
        unsigned end = i + 1;
        while (end < slices && !(page->clean_slices >> end & 1))
            end++;
        size_t to = (size_t)end << SLICE_SHIFT;
        memset(start + ((size_t)i << SLICE_SHIFT), 0,
               (to < size ? to : size) - ((size_t)i << SLICE_SHIFT));
        i = end;
    }
}

static void *heap_malloc_large(struct heap *heap, size_t size, bool *is_zero) {
    unsigned slices = slices_for_size(size);
    /* Large blocks that other threads freed wait on their pages: take them
     * back first (a thread whose buffers another one frees otherwise took
     * fresh slices for each until the periodic collect: `patterns handoff`).
     * A relaxed peek, then an acquire exchange: it pairs with the release
     * store after the push it reads, and a flag set after it stays set. */
    if (unlikely(atomic_load_explicit(&heap->large_freed_remotely, memory_order_relaxed)) &&
        atomic_exchange_explicit(&heap->large_freed_remotely, 0, memory_order_acquire))
        heap_large_pages_collect(heap, NULL);
    /* Straight from the segment, where freed large pages went (heap_page_empty). */
    struct page *page = segment_page_alloc(heap, slices, LARGE_CLASS);
    if (page == NULL) return NULL;
    page_init(page, LARGE_CLASS, (size_t)slices << SLICE_SHIFT);
    page->capacity = 1;
    page->used = 1;
    heap->large_allocs++;
    large_insert(heap, page);
    struct block *b = (struct block *)page_start(page);
    if (is_zero) {
        large_clear_dirty(page, size);
        *is_zero = true;
    } else if (!(page->clean_slices & 1)) {
        b->free_key = 0; /* a reused first slice may hold a stale key */
    }
    return b;
}

/* Where a large block of this thread's starts to hold only slices that read
 * as zeros and are not resident, as its run was taken (UINTPTR_MAX: another
 * thread's, or a class page's block): realloc's copy populates them. */
WARM uintptr_t large_clean_from(const void *p) {
    struct segment *segment = segment_of(p);
    if (segment_owner_thread(segment) != current_thread_id()) return UINTPTR_MAX;
    const struct page *page = page_of(segment, p);
    if (page->class_index != LARGE_CLASS) return UINTPTR_MAX;
    uint64_t run = page->slice_count >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << page->slice_count) - 1;
    uint64_t dirty = ~page->clean_slices & run;
    unsigned clean_first = dirty ? 64 - (unsigned)__builtin_clzll(dirty) : 0;
    return page_slices_begin(page) + ((uintptr_t)clean_first << SLICE_SHIFT);
}

/* realloc of a large block by its owner: take the free slices right after
 * it rather than copy into a new run. The copy faulted in the new run while
 * the old one was still resident, so peak RSS carried both. */
WARM bool heap_large_grow(void *p, size_t size) {
    struct segment *segment = segment_of(p);
    struct page *page = page_of(segment, p);
    if (page->class_index != LARGE_CLASS || size > LARGE_MAX || OPTION(checked)) return false;
    if (segment_owner_thread(segment) != current_thread_id()) return false;
    unsigned slices = slices_for_size(size);
    if (!segment_page_grow(segment->heap, page, slices)) return false;
    page->block_size = (uint32_t)slices << SLICE_SHIFT;
    page->area_size = page->block_size;
    return true;
}

/* realloc of a large block by its owner to a smaller one that still needs
 * slices: the slices past it go back to the segment instead of a copy. */
UNPADDED bool heap_large_shrink(void *p, size_t size) {
    struct segment *segment = segment_of(p);
    struct page *page = page_of(segment, p);
    if (page->class_index != LARGE_CLASS || size <= SMALL_MAX || OPTION(checked)) return false;
    if (segment_owner_thread(segment) != current_thread_id()) return false;
    unsigned slices = slices_for_size(size);
    if (slices >= page->slice_count) return slices == page->slice_count;
    page->block_size = (uint32_t)slices << SLICE_SHIFT;
    page->area_size = page->block_size;
    segment_page_shrink(segment->heap, page, slices);
    purge_after_free();
    return true;
}

UNPADDED static bool wants_direct_map(size_t size) {
    return size >= OPTION(mmap_threshold) &&
           /* 0 or less: never, as in glibc */
           OPTION(mmap_max) > 0 &&
           /* relaxed: a limit check on a statistic, glibc is no stricter */
           atomic_load_explicit(&g_huge_count, memory_order_relaxed) < (uint64_t)OPTION(mmap_max);
}

/* Every slow path of a thread's heap counts, for the idle-owner pass, and
 * every COLLECT_INTERVAL-th collects. */
static inline __attribute__((always_inline)) void heap_slow_path_note(struct heap *heap) {
    /* relaxed: a purger only compares it with the value it saw before */
    __atomic_store_n(&heap->slow_paths, heap->slow_paths + 1, __ATOMIC_RELAXED);
    if (--heap->collect_countdown == 0) {
        /* as many slow paths apart as it looks at pages: a large heap pays
         * for its walks no more than a small one (redis, 35 MB of values) */
        uint32_t visited = heap_collect(heap, false);
        heap->collect_countdown = visited > COLLECT_INTERVAL ? visited : COLLECT_INTERVAL;
        page_cache_flush(heap, false);
    }
}

/* The shared heap (its lock held) counts each cache's give-back as a slow
 * path: its periodic collect gives back the pages whose blocks all came
 * back on their thread_free lists. */
UNPADDED void heap_shared_slow_path_note(struct heap *heap) {
    heap_slow_path_note(heap);
}

/* Every allocation that the inline fast path could not serve. */
UNPADDED void *heap_malloc_generic(struct heap *heap, size_t size, bool *is_zero) {
    if (unlikely(heap == &g_empty_heap)) {
        if (unlikely(t_heap_exited)) return exit_heap_malloc(0, size, is_zero);
        heap = heap_for_thread();
        if (heap == NULL) goto out_of_memory;
    }
    heap_slow_path_note(heap);
    void *p;
    if (is_zero) *is_zero = false;
    if (unlikely(OPTION(checked))) {
        p = checked_malloc(heap, size, 0, is_zero);
        if (p == NULL) goto out_of_memory;
        return p;
    }
    if (wants_direct_map(size) || size > LARGE_MAX) {
        p = huge_alloc(size, 0, is_zero != NULL, !wants_direct_map(size));
        if (p && is_zero) *is_zero = true; /* huge_alloc zeroes what it reuses */
    } else if (size <= SMALL_MAX) {
        p = heap_malloc_class(heap, heap_class_of(heap, size));
    } else {
        p = heap_malloc_large(heap, size, is_zero);
    }
    if (p == NULL) goto out_of_memory;
    return p;
out_of_memory:
    errno = ENOMEM;
    return NULL;
}

void *heap_malloc_slow(struct heap *heap, size_t size) {
    return heap_malloc_generic(heap, size, NULL);
}

/* A block of shared class cls (over 1 KiB) for a malloc of `size`: from
 * malloc for the sizes over 1 KiB, and from the refill */
void *heap_malloc_shared(struct heap *heap, size_t size, size_t cls) {
    if (unlikely(heap == &g_empty_heap)) return heap_malloc_generic(heap, size, NULL);
    if (unlikely(fitted_class_active(cls))) return fitted_class_malloc(size, heap, cls);
    return shared_class_pop(heap, (unsigned)cls);
}

/* malloc's fast path found class cls's head page dry. A class other than 0
 * on a thread's own heap says what heap_malloc_generic would find out again:
 * the heap exists, checked mode is off (its table entries and size limit are
 * 0) and the size is served from a class, the young one included (the
 * heap's table holds it). So only the page search is left (larson 2 2: 78
 * instructions of dispatch a slow path before, 44 now). A class read stale
 * while mallopt changes the table routes one call another way, as the fast
 * path's own pop of it does. */
void *heap_malloc_refill(size_t size, struct heap *heap, size_t cls) {
    if (unlikely(cls == 0 || heap == &g_empty_heap)) return heap_malloc_generic(heap, size, NULL);
    if (cls >= SHARED_CLASS_FIRST) return heap_malloc_shared(heap, size, cls);
    heap_slow_path_note(heap);
    /* What heap_find_page's search finds at its second step, most of the
     * time (larson: 84% of the searches), found without its frame: the head
     * is dry (not a corrupt link, which the search's pop reports) and holds
     * no block that other threads freed, and the next page of the queue has
     * blocks. The queue turns to it. */
    struct page *head = heap->pages_direct[cls], *page = head->next;
    /* relaxed: as page_collect_remote's peek */
    uintptr_t word = atomic_load_explicit(&head->thread_free, memory_order_relaxed);
    if (likely(page != head && segment_page_list_empty(head) && thread_free_count(word) == 0 &&
               word != THREAD_FREE_RECLAIMED && !segment_page_list_empty(page))) {
        heap->pages_direct[cls] = page;
        return class_page_pop(page, false);
    }
    return heap_malloc_class(heap, (unsigned)cls);
}

/* alignment is a power of two above 16. */
RARE void *heap_malloc_aligned(struct heap *heap, size_t alignment, size_t size) {
    if (unlikely(heap == &g_empty_heap)) {
        if (unlikely(t_heap_exited)) return exit_heap_malloc(alignment, size, NULL);
        heap = heap_for_thread();
        if (heap == NULL) goto out_of_memory;
    }
    if (unlikely(OPTION(checked))) {
        void *p = checked_malloc(heap, size, alignment, NULL);
        if (p == NULL) goto out_of_memory;
        return p;
    }
    if (alignment <= SLICE_SIZE && !wants_direct_map(size)) {
        size_t need = size < alignment ? alignment : size;
        unsigned cls = need <= SMALL_MAX ? class_aligned_from(size_class_of(need), alignment)
                                         : SMALL_CLASS_COUNT;
        if (cls < SMALL_CLASS_COUNT) {
            void *p = heap_malloc_class(heap, cls);
            if (p == NULL) goto out_of_memory;
            return p;
        }
        if (need <= LARGE_MAX) {
            /* a large page starts on a slice: any alignment up to 64 KiB holds;
             * need, not size: memalign(64 KiB, 0) still takes one slice */
            void *p = heap_malloc_large(heap, need, NULL);
            if (p == NULL) goto out_of_memory;
            return p;
        }
    }
    void *p = huge_alloc(size, alignment, false, !wants_direct_map(size));
    if (p == NULL) goto out_of_memory;
    return p;
out_of_memory:
    errno = ENOMEM;
    return NULL;
}

/* free() saw a page's last block come back. Keep the only page of a class
 * if it is one slice (a malloc/free loop must not thrash; at most 64 KiB per
 * class stays with an idle thread, of which only the OS pages its blocks were
 * carved on are resident), give the others back to the segment, where the
 * release policy and malloc_trim reach them. Aggressive mode keeps it too:
 * releasing it made glibc's tst-malloc-too-large, a malloc(16)/free loop,
 * take 41 s in 422,721 madvise calls instead of 1.5 s. (Seed 001 released
 * only whole pages inside freed chunks, which a small block never holds.) */
void heap_page_empty(struct heap *heap, struct page *page) {
    if (heap_page_empty_quiet(heap, page)) purge_after_free(); /* last: it may start a thread */
}

/* heap_page_empty without the purge check, for a caller that holds a lock a
 * purge's thread start might want (the exit heap's): true if the caller
 * should call purge_after_free once it has let go. */
bool heap_page_empty_quiet(struct heap *heap, struct page *page) {
    int saved = errno;
    /* The page leaves: its callers asked page_leaves_when_empty. */
    if (page->class_index == LARGE_CLASS)
        large_remove(heap, page);
    else if (page->flags & PAGE_IN_FULL)
        full_list_remove(heap, page);
    else
        queue_remove(&heap->pages_direct[page->class_index], page, &g_empty_page);
    /* A large block's page goes straight back to its segment: its slices
     * coalesce with free neighbours and the lowest warm run is reused next, so
     * blocks of varying sizes keep landing on the same, cache-hot memory. */
    if (OPTION(aggressive_madvise) || page->class_index == LARGE_CLASS || (page->flags & PAGE_LENT))
        segment_page_free(heap, page);
    else
        page_cache_push(heap, page);
    errno = saved;
    return true;
}

/* The block carries the free key: freed already (free: a double free;
 * realloc: a use after free), or user data that happens to equal the key.
 * Owner only. Collect, then look for the block on the page's free list;
 * `message` is the abort's line. */
RARE COLD void heap_freed_block_check(struct page *page, struct block *b, const char *message) {
    /* before the walk: a batch pushed after this look is on the lists */
    if (remote_batch_open_for(page)) fatal_error(message);
    page_collect_remote(page);
    /* reclaimed meanwhile: every block of the page was free already */
    if (page->capacity == 0) fatal_error(message);
    uint32_t steps = 0;
    for (struct block *f = page->free; !list_is_end(f); f = block_next_checked(f)) {
        if (f == b) fatal_error(message);
        if (++steps > page->capacity) report_corrupt_free_list();
    }
}

/* malloc_trim: the calling thread's empty pages go back before the purge. */
RARE void heap_collect_current(void) {
    if (t_heap == &g_empty_heap) return;
    shared_caches_release(t_heap);
    shared_heap_collect();
    heap_collect(t_heap, false);
    page_cache_flush(t_heap, true);
}
