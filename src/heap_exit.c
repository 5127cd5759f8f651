/* A thread's end: its heap's exit (what it gives back, what it leaves for
 * other threads to adopt), the exit heap that serves it afterwards, and the
 * heaps of the threads a fork leaves behind in the child. */
#define _GNU_SOURCE
#include <errno.h>

#include "internal.h"

/* ---- the exit heap: a thread whose heap is gone (its key's destructor ran)
 * may still allocate, in destructors of other keys that run after ours.
 * glibc gives destructors at most PTHREAD_DESTRUCTOR_ITERATIONS rounds, so a
 * heap made for the thread in the last one would never be torn down: its
 * segments stayed owned by a dead thread for good. Such allocations come
 * from one shared heap instead, under a lock. It belongs to no thread (its
 * id is no thread's), so every free of its blocks takes the remote path,
 * and its mallocs collect them. ---- */

struct spin_lock g_exit_heap_lock = SPIN_LOCK_INIT;
static struct heap *exit_heap; /* exit heap lock */
__thread uint8_t t_heap_exited __attribute__((tls_model("initial-exec")));

/* Exit heap lock held: the exit heap, made at its first use if `create`
 * (NULL: none, or no memory) */
struct heap *exit_heap_locked(bool create) {
    if (exit_heap == NULL && create) exit_heap = heap_create(EXIT_HEAP_ID, false);
    return exit_heap;
}

/* malloc (alignment 0) or an aligned allocation from the exit heap. */
RARE COLD void *exit_heap_malloc(size_t alignment, size_t size, bool *is_zero) {
    spin_lock(&g_exit_heap_lock);
    exit_heap_locked(true);
    void *p = exit_heap == NULL ? NULL
              : alignment       ? heap_malloc_aligned(exit_heap, alignment, size)
                                : heap_malloc_generic(exit_heap, size, is_zero);
    spin_unlock(&g_exit_heap_lock);
    if (p == NULL) errno = ENOMEM;
    return p;
}

/* Fork child: the exit heap was abandoned with the other threads' heaps. */
static void exit_heap_forget(void) {
    exit_heap = NULL;
    shared_depot_forget();
}

/* Thread exit, before any page or segment can change hands: the class pages
 * give back the memory past their carved blocks that earlier pages on their
 * slices touched (page_stale_tail), in one call, if it comes to a slice
 * or more. Threads that come and go with a varying mix of sizes set up each
 * class's pages on the slices the class used before, and without this every
 * slice stayed at the most any of them carved: `threadchurn 2 2500`, peak
 * RSS (means of 40 runs) 3625 -> 3500 KiB. Giving back any amount, 3440, but
 * 25% more time (a call and its TLB flush at each exit, and the faults of
 * the next thread that carves further). Threads of a few blocks each pay
 * more in faults (`threadwave 4 1000`: RSS -21%, CPU +25%); keeping what
 * the page before each page reached too halved those faults but gave back
 * only a third as much in threadchurn. */
#define EXIT_TRIM_RANGES 64
struct exit_trim {
    struct iovec ranges[EXIT_TRIM_RANGES]; /* the stale tails found */
    struct page *pages[EXIT_TRIM_RANGES];  /* the page of each */
    unsigned count;                        /* tails found */
    size_t total;                          /* their bytes */
};

static void exit_trim_add(struct page *page, void *arg) {
    struct exit_trim *trim = arg;
    if (trim->count < EXIT_TRIM_RANGES && page_stale_tail(page, &trim->ranges[trim->count])) {
        trim->total += trim->ranges[trim->count].iov_len;
        trim->pages[trim->count++] = page;
    }
}

/* visit(page, arg) for every class page in the heap's queues and full
 * lists, of the classes from `first` on (the owner, or the lock holder). */
void heap_each_class_page(struct heap *heap, unsigned first,
                          void (*visit)(struct page *page, void *arg), void *arg) {
    for (unsigned cls = first; cls < CLASS_COUNT; cls++) {
        struct page *lists[2] = {heap->pages_direct[cls], heap->pages_full[cls]};
        for (int l = 0; l < 2; l++) {
            if (lists[l] == NULL || lists[l] == &g_empty_page) continue;
            struct page *page = lists[l];
            do {
                visit(page, arg);
                page = page->next;
            } while (page != lists[l]);
        }
    }
}

static COLD void heap_exit_trim(struct heap *heap) {
    struct exit_trim trim;
    trim.count = 0;
    trim.total = 0;
    heap_each_class_page(heap, 0, exit_trim_add, &trim);
    page_cache_each_resident(heap, exit_trim_add, &trim);
    if (trim.total < SLICE_SIZE) return;
    uint64_t done = os_release_ranges(trim.ranges, trim.count);
    for (unsigned i = 0; i < trim.count; i++)
        if (done >> i & 1)
            trim.pages[i]->touched_end =
                (uint32_t)((uintptr_t)trim.ranges[i].iov_base - page_slices_begin(trim.pages[i]));
}

COLD void heap_thread_exit(void *arg) {
    struct heap *heap = arg;
    int saved = errno;
    t_heap = &g_empty_heap;
    t_heap_exited = 1; /* later allocations: the exit heap */
    shared_caches_release(heap);
    heap_exit_trim(heap);
    heap_collect(heap, true);
    page_cache_flush(heap, true);
    /* Empty segments go back to the cache first, while the lists are whole:
     * unlinking one whose neighbour was already abandoned wrote into the
     * abandoned list, or into the list of a heap that had adopted the
     * neighbour meanwhile: segments were lost, or owned twice (heap
     * corruption under load, and memory never given back). */
    struct segment **lists[2] = {&heap->segments_avail, &heap->segments_full};
    for (int l = 0; l < 2; l++) {
        for (struct segment *s = *lists[l], *next; s; s = next) {
            next = s->next;
            if (s->used_pages == 0) segment_release_empty(heap, s, false);
        }
    }
    /* Pages still in use (blocks other threads hold) stay in their segments,
     * which other threads adopt. */
    for (int l = 0; l < 2; l++) {
        for (struct segment *s = *lists[l], *next; s; s = next) {
            next = s->next;
            segment_abandon(s);
        }
        *lists[l] = NULL;
    }
    arena_disown(heap, true); /* its arena chunk is for any thread now */
    heap_retire(heap);
    atomic_fetch_sub_explicit(&g_heap_count, 1, memory_order_relaxed); /* statistic */
    atomic_fetch_add_explicit(&g_heap_exits, 1, memory_order_relaxed); /* a hint: purge.c */
    purge_after_free();
    errno = saved;
}

/* Fork child: the other threads are gone, each stopped wherever it was, and
 * the pages they owned may be torn: a malloc that popped a block but did not
 * count it, a free that pushed one but did not uncount it, an extension that
 * counted blocks it had not carved, a page half set up. Only their owner ever
 * read that state, and adopting it did: `used` against the free list's
 * length, the block test of a page reset after a reclaim (a soak that forks
 * every 0.5 s crashed in the child within a minute, in the splice of
 * page_collect_remote_list or on malloc_usable_size of a live block). Their
 * segments are frozen instead: no heap owns them or takes pages from them, so
 * their blocks stay valid and freeing one is a remote free, which the purge
 * passes turn into released memory once a page's every carved block is back.
 * Segments abandoned before the fork (consistent: their threads finished)
 * stay adoptable. The child is single-threaded here, so nothing races.
 * `locked`: the fork took every lock first, so the page caches are whole
 * and no lock is held; a fork from a signal handler inside our locks did
 * not, and then the caches stay as they are (taking a segment's lock could
 * wait for good). */
COLD void heap_atfork_child(bool locked) {
    /* The exit heap, which serves every thread the classes over 1 KiB, stays
     * if the fork took its lock (whole, then): the blocks this thread caches
     * are its own, and go back to it. */
    struct heap *kept = locked ? exit_heap : NULL;
    if (!locked) exit_heap_forget();
    struct heap *self = t_heap;
    struct heap *heap = g_heaps;
    g_heaps = NULL;
    while (heap) {
        struct heap *next = heap->next_heap;
        if (heap == self || heap == kept) {
            heap->next_heap = g_heaps;
            heap->prev_heap = NULL;
            if (g_heaps != NULL) g_heaps->prev_heap = heap;
            g_heaps = heap;
        } else {
            if (locked) page_cache_give_back_frozen(heap);
            arena_disown(heap, false);    /* single-threaded now: no lock */
            heap_struct_recycle(heap);    /* heap_create clears the rest */
            if (heap->id != EXIT_HEAP_ID) /* statistic: thread heaps */
                atomic_fetch_sub_explicit(&g_heap_count, 1, memory_order_relaxed);
        }
        heap = next;
    }
    /* By owner, not by heap list: a segment in the middle of changing hands
     * is on no list yet. */
    for (struct segment *s = g_registry; s; s = s->all_next) {
        /* An owner's release (aggressive mode, or a segment going to a full
         * cache) takes no lock that fork_prepare waits for: the thread that
         * would return its slices is gone, and they stayed out of the free
         * mask for good (in test_fork_purge, 27-53 children of 100 kept
         * retained memory after malloc_trim). Back they come, as resident. */
        if (s->purging_slices) {
            free_slices_set(s, s->free_slices | s->purging_slices);
            s->purging_slices = 0;
        }
        /* relaxed: single-threaded now */
        if (s->heap == self || (kept != NULL && s->heap == kept) ||
            atomic_load_explicit(&s->owner_id, memory_order_relaxed) == 0)
            continue;
        segment_orphan(s);
    }
}
