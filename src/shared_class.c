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
 * of SHARED_CACHE_BYTES_ALL; past those, the oldest blocks go as one list
 * to the depot, whose lists wait whole for the next thread that runs out
 * of the class (a lock per class, and nothing read under it: on 4 threads
 * the one lock took a quarter of the time), or, the depot full, back to
 * their pages under the shared heap's lock, as its owner would free them.
 * A thread's exit gives back its whole cache to the pages, malloc_trim the
 * calling thread's and the depot's. The caches live beside struct heap
 * (struct thread_heap), not in it; the pop and the push are in
 * internal.h, inline in malloc's and free's paths. */
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
 * SHARED_LIMIT_MAX blocks). A class over its limit keeps three quarters of
 * it. A cache's length wanders as the thread frees and allocates blocks of
 * its classes in turn, and each time it hits the limit or zero, blocks
 * that another thread last wrote come in: `medmt 4 4000000` (four threads,
 * each freeing and allocating 1-8 KiB blocks of its own) made 173k
 * refills and 142k give-backs with 64 KiB a class, kept half, and ran in
 * 0.143 s; with 256 KiB, three quarters kept, 62k of each, 0.104 s
 * (tcmalloc 0.073). `mstress`'s peak RSS stayed (13.4 MiB). The thread's
 * share is what bounds its memory: at 1 MiB a thread, `medmt` took 0.094 s
 * but `mstress` 1 MiB more. */
#define SHARED_BATCH_BYTES ((uint32_t)16 << 10)
#define SHARED_BATCH_MAX   8
#define SHARED_LIMIT_BYTES ((uint32_t)256 << 10)
#define SHARED_LIMIT_MAX   64
/* Bytes that the depot holds at most, of one class and of all (`medmt 4
 * 1000000`, with caches of 64 KiB a class: 64 KiB a class and no total,
 * 0.048 s; 128 KiB, 0.044 s, and `mstress` 1.6% more peak RSS; with a
 * total of 256 KiB, 0.045 s and no more RSS). */
#define SHARED_DEPOT_CLASS_BYTES ((uint32_t)128 << 10)
#define SHARED_DEPOT_BYTES       ((uint64_t)256 << 10)

/* The depot: mapped with the shared heap (exit heap lock), and never
 * unmapped; a fork child that did not take every lock forgets it. Read
 * without the lock (acquire: its zeroed mapping before the pointer). */
static struct shared_depot *_Atomic shared_depot;

static inline unsigned clamp_unsigned(unsigned n, unsigned low, unsigned high) {
    return n < low ? low : n > high ? high : n;
}
static inline unsigned shared_batch(unsigned cls) {
    return clamp_unsigned(SHARED_BATCH_BYTES / shared_class_size(cls), 1, SHARED_BATCH_MAX);
}
static inline unsigned shared_limit_max(unsigned cls) {
    return clamp_unsigned(SHARED_LIMIT_BYTES / shared_class_size(cls), 2, SHARED_LIMIT_MAX);
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

static inline struct shared_depot_class *depot_class(struct shared_depot *depot, unsigned cls) {
    return &depot->classes[cls - SHARED_CLASS_FIRST];
}

/* The list `b` of `count` blocks of class cls into the depot, if it has
 * room: a free slot, and the bounds on bytes. */
static bool shared_depot_put(unsigned cls, struct block *b, uint32_t count) {
    struct shared_depot *depot = atomic_load_explicit(&shared_depot, memory_order_acquire);
    if (depot == NULL) return false;
    struct shared_depot_class *slot = depot_class(depot, cls);
    uint32_t size = shared_class_size(cls), bytes = count * size;
    bool room;
    spin_lock(&slot->lock);
    /* relaxed: a bound; classes under other locks move the total meanwhile,
     * and a stale one lets the depot hold a list more or less */
    room = slot->used < SHARED_DEPOT_SLOTS &&
           slot->blocks * size + bytes <= SHARED_DEPOT_CLASS_BYTES &&
           atomic_load_explicit(&depot->bytes, memory_order_relaxed) + bytes <= SHARED_DEPOT_BYTES;
    if (room) {
        /* relaxed: as the load */
        atomic_fetch_add_explicit(&depot->bytes, bytes, memory_order_relaxed);
        slot->lists[slot->used] = b;
        slot->counts[slot->used++] = (uint8_t)count;
        slot->blocks = (uint16_t)(slot->blocks + count);
    }
    spin_unlock(&slot->lock);
    return room;
}

/* A list of class cls from the depot, its count in *count; NULL if none. */
static struct block *shared_depot_take(unsigned cls, unsigned *count) {
    struct shared_depot *depot = atomic_load_explicit(&shared_depot, memory_order_acquire);
    if (depot == NULL) return NULL;
    struct shared_depot_class *slot = depot_class(depot, cls);
    struct block *b = NULL;
    spin_lock(&slot->lock);
    if (slot->used > 0) {
        b = slot->lists[--slot->used];
        *count = slot->counts[slot->used];
        slot->blocks = (uint16_t)(slot->blocks - *count);
        /* relaxed: as in shared_depot_put */
        atomic_fetch_sub_explicit(&depot->bytes, *count * shared_class_size(cls),
                                  memory_order_relaxed);
    }
    spin_unlock(&slot->lock);
    return b;
}

/* Exit heap lock held: the list `b` of `count` blocks onto their pages'
 * lists, as the shared heap's owner frees; true if a purge is due. A block
 * of a page that is not the shared heap's (a segment that a fork froze)
 * goes on its thread_free list. */
static bool shared_list_free_locked(struct block *b, uint32_t count) {
    bool purge_due = false;
    for (; count > 0; count--) {
        struct block *next = count > 1 ? shared_cache_link_get(b) : NULL;
        struct segment *segment = segment_of(b);
        struct page *page = page_of_block(b, g_free_invalid_pointer);
        /* relaxed: the shared heap's segments stay its own, and this lock
         * orders what its owner wrote */
        if (atomic_load_explicit(&segment->owner_id, memory_order_relaxed) == EXIT_HEAP_ID)
            purge_due |= free_shared_locked(segment, page, b);
        else
            thread_free_push_blocks(page, b, b, 1);
        b = next;
    }
    return purge_due;
}

/* The block just cached is of a page in a lent segment (PAGE_LENT): no cache
 * keeps it, and its page takes it back at once, to go back to its segment
 * once empty. A thread's cache (of a thread that then idles) or the page's
 * thread_free list kept the segment, and the chunk's free run cut in two
 * (oom lent, round 4); a refill takes one block of such a page. */
static RARE NOINLINE void shared_cache_lent_leaves(struct heap *heap, unsigned cls) {
    struct block *b = shared_class_pop(heap, cls); /* the cache holds it: no refill */
    spin_lock(&g_exit_heap_lock);
    bool purge_due = shared_list_free_locked(b, 1);
    spin_unlock(&g_exit_heap_lock);
    if (purge_due) purge_after_free();
}

/* Gives back the cached blocks of one class past the first `keep`: to the
 * depot as one list if `to_depot` and it has room, else onto their pages'
 * lists under the shared heap's lock, as its owner would (a
 * push on the pages' thread_free lists instead let whole pages wait there,
 * counted as retained, for a purge pass to take them back and the next
 * refill to fault them in again: `sqlite3`, 11k more faults and 16% more
 * time). A block of a page that is not the shared heap's (a segment that a
 * fork froze) goes on its thread_free list. */
static void shared_cache_trim(struct heap *heap, struct shared_cache *cache, uint32_t keep,
                              bool to_depot) {
    if (cache->count <= keep) return;
    shared_cache_bound_update(heap);
    struct block *b = cache->head;
    for (uint32_t i = 0; i < keep; i++)
        b = shared_cache_link_get(b);
    uint32_t left = cache->count - keep;
    cache->count = (uint16_t)keep;
    if (keep == 0) cache->head = NULL;
    unsigned cls = (unsigned)(cache - caches_of(heap)->classes) + SHARED_CLASS_FIRST;
    caches_of(heap)->bytes -= left * shared_class_size(cls);
    if (to_depot && shared_depot_put(cls, b, left)) {
        /* the retention bound runs at a give-back to the depot as at a page
         * that empties: a loop whose give-backs all went there emptied no
         * page, and memory over the bound stayed (rel_retain_bound) */
        purge_after_free();
        return;
    }
    spin_lock(&g_exit_heap_lock);
    /* the shared heap's periodic collect, as a thread's slow paths have: the
     * pages whose blocks all came back on their thread_free lists go back */
    struct heap *shared = exit_heap_locked(false);
    if (shared != NULL) heap_shared_slow_path_note(shared);
    bool purge_due = shared_list_free_locked(b, left);
    spin_unlock(&g_exit_heap_lock);
    if (purge_due) purge_after_free();
}

void shared_caches_release(struct heap *heap) {
    for (unsigned i = 0; i < SHARED_CLASS_COUNT; i++)
        shared_cache_trim(heap, &caches_of(heap)->classes[i], 0, false);
}

/* Over the bound (or the bound not computed yet): computed, and if the
 * thread is over its share, every class keeps half its blocks, and half its
 * limit. */
static NOINLINE void shared_caches_bound(struct heap *heap) {
    shared_cache_bound_update(heap);
    if (caches_of(heap)->bytes <= caches_of(heap)->bound) return;
    for (unsigned i = 0; i < SHARED_CLASS_COUNT; i++) {
        struct shared_cache *cache = &caches_of(heap)->classes[i];
        shared_cache_trim(heap, cache, cache->count / 2u, true);
        if (cache->limit > 1) cache->limit = (uint16_t)(cache->limit / 2u);
    }
}

/* Exit heap lock held: the depot mapped (none: the caches give back to the
 * pages, as before it). Relaxed load by the lock holder, which alone
 * stores it. */
static NOINLINE void shared_depot_create(void) {
    struct shared_depot *depot = os_map(sizeof(struct shared_depot));
    if (depot != NULL) atomic_store_explicit(&shared_depot, depot, memory_order_release);
}

/* Exit heap lock held: every list in the depot onto its pages (malloc_trim:
 * the pages may then empty and go back). */
static RARE void shared_depot_flush_locked(void) {
    /* relaxed: the lock holder stores it */
    struct shared_depot *depot = atomic_load_explicit(&shared_depot, memory_order_relaxed);
    if (depot == NULL) return;
    for (unsigned cls = SHARED_CLASS_FIRST; cls < CLASS_COUNT; cls++) {
        unsigned count;
        struct block *b;
        while ((b = shared_depot_take(cls, &count)) != NULL)
            shared_list_free_locked(b, count); /* the caller collects the emptied pages */
    }
}

/* fork: the depot's locks, after the exit heap's (whose holder takes them
 * inside it: shared_heap_collect), released in the parent and the child. */
void shared_depot_fork_lock(void) {
    /* relaxed: the exit heap lock is held, and the lock holder stores it */
    struct shared_depot *depot = atomic_load_explicit(&shared_depot, memory_order_relaxed);
    for (unsigned i = 0; depot != NULL && i < SHARED_CLASS_COUNT; i++)
        spin_lock(&depot->classes[i].lock);
}
void shared_depot_fork_unlock(void) {
    /* relaxed: as in shared_depot_fork_lock */
    struct shared_depot *depot = atomic_load_explicit(&shared_depot, memory_order_relaxed);
    for (unsigned i = 0; depot != NULL && i < SHARED_CLASS_COUNT; i++)
        spin_unlock(&depot->classes[i].lock);
}

/* Fork child that did not take the locks: a list or lock may be torn, so
 * the depot is forgotten with the shared heap (its blocks stay counted in
 * use, as those of the other threads' caches). Single-threaded now. */
void shared_depot_forget(void) {
    atomic_store_explicit(&shared_depot, NULL, memory_order_relaxed);
}

/* The cache of class cls is empty: a whole list from the depot if it
 * has one, else blocks from the shared heap. A class this thread takes
 * often gets more at a time (tcmalloc's slow start): one block the first
 * time, then one more a refill, up to its batch. Under the shared heap's
 * lock, one block and a run of its page's list; the run's links are read
 * out of the lock where the run is the whole list (each block is likely a
 * cache miss, last written by the thread that freed it), and the run is
 * the whole list if that is at most twice what is wanted. */
void *shared_class_refill(struct heap *heap, unsigned cls) {
    struct shared_cache *cache = &caches_of(heap)->classes[cls - SHARED_CLASS_FIRST];
    unsigned want = cache->limit < shared_batch(cls) ? cache->limit : shared_batch(cls);
    if (cache->limit < shared_limit_max(cls)) cache->limit++;
    unsigned count;
    struct block *b = shared_depot_take(cls, &count);
    if (b != NULL) {
        /* a thread that runs out takes a whole list: its limit grows to it */
        if (cache->limit < count) cache->limit = (uint16_t)count;
        cache->head = count > 1 ? shared_cache_link_get(b) : NULL;
        cache->count = (uint16_t)(count - 1);
        caches_of(heap)->bytes += (count - 1) * shared_class_size(cls);
        block_free_mark_clear(b);
        return b;
    }
    struct page *page = NULL;
    struct block *run = NULL;
    unsigned run_count = 0;
    spin_lock(&g_exit_heap_lock);
    struct heap *shared = exit_heap_locked(true);
    if (shared != NULL && atomic_load_explicit(&shared_depot, memory_order_relaxed) == NULL)
        shared_depot_create();
    if (shared != NULL) {
        fitted_class_note();
        b = heap_malloc_class(shared, cls);
    }
    if (b != NULL) page = shared->pages_direct[cls];
    /* a page in a lent segment caches no block (PAGE_LENT) */
    if (b != NULL && want > 1 && !(page->flags & PAGE_LENT)) {
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

/* A push of a block of `page` made its class's cache longer than its limit
 * (or the thread's cached bytes more than its bound), or the page lies in a
 * lent segment. */
void shared_class_over(struct heap *heap, const struct page *page) {
    unsigned cls = page->class_index;
    struct shared_cache *cache = &caches_of(heap)->classes[cls - SHARED_CLASS_FIRST];
    if (page->in_lent_segment) shared_cache_lent_leaves(heap, cls);
    if (cache->count > cache->limit) {
        if (cache->limit == 0) cache->limit = 1; /* a block this thread never took */
        shared_cache_trim(heap, cache, (cache->limit * 3u + 3u) / 4u, true);
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

RARE bool shared_heap_collect(void) {
    spin_lock(&g_exit_heap_lock);
    struct heap *shared = exit_heap_locked(false);
    if (shared != NULL) {
        shared_depot_flush_locked();
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
    return shared != NULL;
}

/* Memory is short (a mapping failed): the depot's lists back on their pages
 * and the shared heap's empty pages back to their segments, which may then
 * go (the 4-thread RLIMIT_AS test, `oom mt`, failed 5 runs in 6 with a
 * depot of blocks spread over the segments). Not while this thread holds
 * one of our locks: the collect takes the exit heap's and the segments'.
 * Whether or not the depot exists: mapped at the first refill, it can fail
 * to map when address space is short, and waiting on this test, the shared
 * heap's emptied pages stayed (oom lent, round 4). */
RARE bool shared_heap_give_back(void) {
    return t_locks_held == 0 && shared_heap_collect();
}
