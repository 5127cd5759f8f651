/* The classes over 1 KiB: one heap for every thread, a small cache per thread.
 *
 * Blocks of 1-32 KiB are few in most programs, spread over 25 classes, and
 * a heap per thread kept a partly used page of each class it touched
 * (`mstress`: the threads' own pages of these classes held 4.5 MiB at the
 * peak for a few blocks each). Served from one heap that all threads share
 * (the exit heap, under its lock), every free block serves every thread.
 * A lock on each call does not scale (a loop of 1-8 KiB blocks on 4
 * threads ran 15 times slower), so each thread keeps the blocks it frees
 * of these classes in a small cache, and takes blocks from the shared heap
 * a few at a time: a thread that frees and allocates such blocks takes no
 * lock, and one that only allocates or only frees takes it once a batch.
 *
 * A cached block is free, but still counted in use by its page: it carries
 * its page's free key (so that a second free of it, by any thread, aborts)
 * and its link to the next cached block is encoded with its own address, as
 * free lists' are, but checked against the segment map, since the blocks
 * of one list may lie in different segments. A class keeps at most
 * SHARED_LIMIT_BYTES (its limit grows with its refills), a thread its share
 * of SHARED_CACHE_BYTES_ALL; past those, blocks go back to their pages
 * under the shared heap's lock, as its owner would free them. A thread's
 * exit gives back its whole cache, malloc_trim the calling thread's. The
 * caches live beside struct heap (struct thread_heap), not in it. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/uio.h>

#include "internal.h"

/* What one thread may keep cached, all classes together: a share of
 * SHARED_CACHE_BYTES_ALL among the live thread heaps, within these bounds. */
#define SHARED_CACHE_BYTES_ALL ((uint64_t)4 << 20)
#define SHARED_CACHE_BYTES_MIN ((uint32_t)64 << 10)
#define SHARED_CACHE_BYTES_MAX ((uint32_t)512 << 10)
/* Bytes a refill takes from the shared heap at most (at least one block, at
 * most SHARED_BATCH_MAX), and bytes a class may keep cached at most (2 to
 * SHARED_LIMIT_MAX blocks). */
#define SHARED_BATCH_BYTES ((uint32_t)16 << 10)
#define SHARED_BATCH_MAX   8
#define SHARED_LIMIT_BYTES ((uint32_t)64 << 10)
#define SHARED_LIMIT_MAX   32

static inline unsigned clamp_unsigned(unsigned n, unsigned low, unsigned high) {
    return n < low ? low : n > high ? high : n;
}
static inline unsigned shared_batch(unsigned cls) {
    return clamp_unsigned(SHARED_BATCH_BYTES / g_class_size[cls], 1, SHARED_BATCH_MAX);
}
static inline unsigned shared_limit_max(unsigned cls) {
    return clamp_unsigned(SHARED_LIMIT_BYTES / g_class_size[cls], 2, SHARED_LIMIT_MAX);
}

static inline void shared_cache_push(struct heap *heap, struct shared_cache *cache,
                                     struct page *page, struct block *b) {
    block_free_mark(b, page);
    shared_cache_link_set(b, cache->head);
    cache->head = b;
    cache->count++;
    caches_of(heap)->bytes += page->block_size;
}

/* The thread's share of SHARED_CACHE_BYTES_ALL, within the bounds: computed
 * on the paths that give blocks back, so that a change in the number of
 * threads reaches it soon, and free compares with a field. */
static inline void shared_cache_bound_update(struct heap *heap) {
    /* relaxed: a statistic; a stale count only moves the bound a little */
    uint64_t heaps = atomic_load_explicit(&g_heap_count, memory_order_relaxed);
    uint64_t share = SHARED_CACHE_BYTES_ALL / (heaps ? heaps : 1);
    caches_of(heap)->bound = (uint32_t)(share < SHARED_CACHE_BYTES_MIN   ? SHARED_CACHE_BYTES_MIN
                                        : share > SHARED_CACHE_BYTES_MAX ? SHARED_CACHE_BYTES_MAX
                                                                         : share);
}

/* Gives back the cached blocks of one class past the first `keep`: onto
 * their pages' lists under the shared heap's lock, as its owner would (a
 * push on the pages' thread_free lists instead let whole pages wait there,
 * counted as retained, for a purge pass to take them back and the next
 * refill to fault them in again: `sqlite3`, 11k more faults and 16% more
 * time). A block of a page that is not the shared heap's (a segment that a
 * fork froze) goes on its thread_free list. */
static void shared_cache_trim(struct heap *heap, struct shared_cache *cache, uint32_t keep) {
    if (cache->count <= keep) return;
    shared_cache_bound_update(heap);
    struct block *b = cache->head;
    for (uint32_t i = 0; i < keep; i++)
        b = shared_cache_link_get(b);
    uint32_t left = cache->count - keep;
    cache->count = (uint16_t)keep;
    if (keep == 0) cache->head = NULL;
    bool purge_due = false;
    spin_lock(&g_exit_heap_lock);
    /* the shared heap's periodic collect, as a thread's slow paths have: the
     * pages whose blocks all came back on their thread_free lists go back */
    struct heap *shared = exit_heap_locked(false);
    if (shared != NULL) heap_shared_slow_path_note(shared);
    for (; left > 0; left--) {
        struct block *next = left > 1 ? shared_cache_link_get(b) : NULL;
        struct segment *segment = segment_of(b);
        struct page *page = page_of_block(b, g_free_invalid_pointer);
        caches_of(heap)->bytes -= page->block_size;
        /* relaxed: the shared heap's segments stay its own, and this lock
         * orders what its owner wrote */
        if (atomic_load_explicit(&segment->owner_id, memory_order_relaxed) == EXIT_HEAP_ID)
            purge_due |= free_shared_locked(segment, page, b);
        else
            thread_free_push_blocks(page, b, b, 1);
        b = next;
    }
    spin_unlock(&g_exit_heap_lock);
    if (purge_due) purge_after_free();
}

void shared_caches_release(struct heap *heap) {
    for (unsigned i = 0; i < SHARED_CLASS_COUNT; i++)
        shared_cache_trim(heap, &caches_of(heap)->classes[i], 0);
}

/* Over the bound (or the bound not computed yet): computed, and if the
 * thread is over its share, every class keeps half its blocks, and half its
 * limit. */
static NOINLINE void shared_caches_bound(struct heap *heap) {
    shared_cache_bound_update(heap);
    if (caches_of(heap)->bytes <= caches_of(heap)->bound) return;
    for (unsigned i = 0; i < SHARED_CLASS_COUNT; i++) {
        struct shared_cache *cache = &caches_of(heap)->classes[i];
        shared_cache_trim(heap, cache, cache->count / 2u);
        if (cache->limit > 1) cache->limit = (uint16_t)(cache->limit / 2u);
    }
}

/* The cache of class cls is empty: blocks from the shared heap. A class
 * this thread takes often gets more at a time (tcmalloc's slow start): one
 * block the first time, then one more a refill, up to its batch. Under the
 * lock, one block and a run of its page's list; the run's links are read
 * out of the lock where the run is the whole list (each block is likely a
 * cache miss, last written by the thread that freed it), and the run is
 * the whole list if that is at most twice what is wanted. */
void *shared_class_refill(struct heap *heap, unsigned cls) {
    struct shared_cache *cache = &caches_of(heap)->classes[cls - SHARED_CLASS_FIRST];
    unsigned want = cache->limit < shared_batch(cls) ? cache->limit : shared_batch(cls);
    if (cache->limit < shared_limit_max(cls)) cache->limit++;
    struct page *page = NULL;
    struct block *run = NULL;
    unsigned run_count = 0;
    spin_lock(&g_exit_heap_lock);
    struct heap *shared = exit_heap_locked(true);
    struct block *b = NULL;
    if (shared != NULL) b = heap_malloc_class(shared, cls);
    if (b != NULL && want > 1) {
        page = shared->pages_direct[cls];
        unsigned left = page->capacity - page->used;
        run = page->free;
        if (left <= 2 * (want - 1)) {
            run_count = left;
            page->free = list_end_of(page);
        } else {
            struct block *last = run;
            for (run_count = 1; run_count < want - 1; run_count++)
                last = block_next_checked(last);
            page->free = block_next_checked(last);
        }
        page->used = (uint16_t)(page->used + run_count);
    }
    spin_unlock(&g_exit_heap_lock);
    if (b == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (; run_count > 0; run_count--) {
        struct block *next = run_count > 1 ? block_next_checked(run) : NULL;
        shared_cache_push(heap, cache, page, run);
        run = next;
    }
    return b;
}

/* A push made the cache of class cls longer than its limit (or the
 * thread's cached bytes more than its bound). */
void shared_class_over(struct heap *heap, unsigned cls) {
    struct shared_cache *cache = &caches_of(heap)->classes[cls - SHARED_CLASS_FIRST];
    if (cache->count > cache->limit) {
        if (cache->limit == 0) cache->limit = 1; /* a block this thread never took */
        shared_cache_trim(heap, cache, (cache->limit + 1u) / 2u);
    }
    if (caches_of(heap)->bytes > caches_of(heap)->bound) shared_caches_bound(heap);
}

/* malloc_trim: the OS pages inside the free blocks of one page of the
 * shared heap, past their link words, go back (as glibc's malloc_trim gives
 * back those inside its free chunks): its pages are shared by every thread,
 * and one block that a thread still uses or caches keeps a page of up to
 * 256 KiB in use. In ranges of up to RELEASE_BATCH a call. */
#define RELEASE_BATCH 32
struct free_interiors {
    struct iovec ranges[RELEASE_BATCH];
    unsigned count;
};

static RARE void free_interiors_flush(struct free_interiors *batch) {
    if (batch->count > 0) os_release_ranges(batch->ranges, batch->count);
    batch->count = 0;
}

static RARE void page_free_interiors_release(struct page *page, void *arg) {
    struct free_interiors *batch = arg;
    page_collect_remote(page);
    uint32_t steps = 0;
    for (struct block *b = page->free; !list_is_end(b); b = block_next_checked(b)) {
        uintptr_t from = ((uintptr_t)b + sizeof(struct block) + OS_PAGE_SIZE - 1) &
                         ~(uintptr_t)(OS_PAGE_SIZE - 1);
        uintptr_t to = ((uintptr_t)b + page->block_size) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
        if (to > from) {
            if (batch->count == RELEASE_BATCH) free_interiors_flush(batch);
            batch->ranges[batch->count].iov_base = (void *)from;
            batch->ranges[batch->count++].iov_len = to - from;
        }
        if (++steps > page->capacity) report_corrupt_free_list();
    }
}

RARE void shared_heap_collect(void) {
    spin_lock(&g_exit_heap_lock);
    struct heap *shared = exit_heap_locked(false);
    if (shared != NULL) {
        heap_collect(shared, false);
        page_cache_flush(shared, true);
        /* secure mode checks a free block's fill when it is reused */
        if (g_options.secure) goto out;
        struct free_interiors batch;
        batch.count = 0;
        heap_each_class_page(shared, SHARED_CLASS_FIRST, page_free_interiors_release, &batch);
        free_interiors_flush(&batch);
    }
out:
    spin_unlock(&g_exit_heap_lock);
}
