/* Segments: aligned 4 MiB regions carved into 64 KiB slices. This file owns
 * the slice bitmaps (which slices are free, which may be resident), the
 * registry of all segments (for purging and trimming from any thread), the
 * cache of empty segments and the list of abandoned ones. Giving free slices
 * back to the kernel is segment_release.c's. */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"

/* The slices of `free_mask` at which a run of `count` of them starts. */
static inline uint64_t run_starts(uint64_t free_mask, unsigned count) {
    uint64_t starts = free_mask;
    for (unsigned i = 1; i < count && starts; i++)
        starts &= free_mask >> i;
    return starts;
}

/* One byte per possible segment in the 47-bit user address space: 32 MiB
 * mapped at start-up (os_segments_init), of which only the pages for addresses
 * in use are ever touched (one 4 KiB page of it covers 16 GiB). A byte rather
 * than a bit: free's test is then one load and compare (3 instructions fewer
 * a free). */
static _Atomic uint8_t segment_map_before_init; /* byte 0 of the map until it exists */
struct segment_map g_segment_map = {.bytes = &segment_map_before_init, .entries = 1};

struct spin_lock g_registry_lock = SPIN_LOCK_INIT;
struct segment *g_registry; /* all live segments (registry lock) */
struct spin_lock g_abandoned_lock = SPIN_LOCK_INIT;
/* segments whose thread exited: changed under the abandoned lock, with atomic
 * stores so that abandoned_pop may peek without it */
static struct segment *abandoned_list;
struct spin_lock g_segment_cache_lock = SPIN_LOCK_INIT;
/* Empty segments kept for reuse (cache lock), in two lists. Those on
 * segment_cache, at most SEGMENT_CACHE_MAX, keep their memory: a thread that
 * comes next reuses it without a fault, so they are taken first. Past them,
 * up to SEGMENT_CACHE_CLEAN_MAX more are released at once (madvise) and go
 * on segment_cache_released with only their address range, so that a wave
 * of threads that exit together and the wave after them reuse mappings
 * instead of each unmapping and mapping 4 MiB: munmap and mmap take the
 * kernel's mmap lock for writing, and 200 threads doing so at once spent
 * most of their run waiting for it (docs/tuning.md). A clean one goes back
 * to the kernel once it has stayed unused for the purge delay
 * (segment_cache_trim). */
struct segment_cache_list {
    struct segment *head; /* linked through `next` */
    unsigned count;
};
static struct segment_cache_list segment_cache, segment_cache_released;
#define SEGMENT_CACHE_MAX       16
#define SEGMENT_CACHE_CLEAN_MAX 1024

_Atomic uint64_t g_segment_count;
_Atomic uint64_t g_retained_bytes;
_Atomic uint64_t g_page_slice_bytes;
_Atomic uint64_t g_remote_freed_page_bytes;

/* A page's thread_free reached, or lost, a count of `reserved`: the pusher
 * that filled it, and whoever takes a full list (the owner, a purger). */
void remote_freed_page_note(uint64_t bytes, bool add) {
    /* relaxed: a purge trigger, as g_retained_bytes (the owner's subtraction
     * may come first: remote_freed_page_bytes reads it as signed) */
    if (add)
        atomic_fetch_add_explicit(&g_remote_freed_page_bytes, bytes, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&g_remote_freed_page_bytes, bytes, memory_order_relaxed);
}

static void segment_map_set(struct segment *segment, bool present) {
    /* release: a reader that sees the byte set also sees the initialised
     * header. Each byte has one writer at a time: the segment's creator or
     * its destroyer. */
    atomic_store_explicit(&g_segment_map.bytes[(uintptr_t)segment >> SEGMENT_SHIFT], present,
                          memory_order_release);
}

/* Called under a lock that fork_prepare takes: the segment's, where its free
 * or dirty slices change, or the registry's, where it comes or goes. A fork
 * child's count then matches its segments (a note made just after an unlock
 * was lost or doubled in a child forked between them). */
void retained_slices_note(uint64_t slices_mask, bool add) {
    retained_bytes_note((uint64_t)bit_count(slices_mask) * SLICE_SIZE, add);
}

void retained_bytes_note(uint64_t bytes, bool add) {
    /* relaxed: a statistic and a purge trigger; exact ordering is not needed. */
    if (add)
        atomic_fetch_add_explicit(&g_retained_bytes, bytes, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&g_retained_bytes, bytes, memory_order_relaxed);
}

RARE static void *map_segment(size_t size) {
    (void)size; /* always SEGMENT_SIZE */
    return os_map_segment();
}

/* A segment from the arena's free address space, which it splits: every
 * page set up in it goes back once empty, a class's last one too
 * (PAGE_LENT, which page_init leaves), so that an idle thread's empty page
 * does not keep the chunk's free run cut in two until the thread exits
 * (oom lent, round 3). Lent segments exist only where address space ran
 * short, where the thrash this allows in a malloc/free loop is the lesser
 * cost. Marking every descriptor here touches their four OS pages, as a
 * lent segment's first pages would. */
static _Atomic uint32_t last_lend_ms; /* clock_ms() of the last segment_lend, even failed */

RARE static NOINLINE struct segment *segment_lend(void) {
    struct segment *segment = arena_lend(SEGMENT_SIZE, SEGMENT_SIZE);
    if (segment != NULL)
        for (unsigned i = 0; i < SLICES_PER_SEGMENT; i++) {
            segment->pages[i].flags = PAGE_LENT;
            segment->pages[i].in_lent_segment = 1;
        }
    /* relaxed: a time stamp, read as a hint (segment_lent_stale) */
    atomic_store_explicit(&last_lend_ms, clock_ms(), memory_order_relaxed);
    return segment;
}

/* An empty lent segment goes back to its chunk instead of the cache once no
 * segment was lent for the purge delay: address space may be back, and a
 * thread that takes a segment again then maps one of its own. From the
 * cache, a thread whose class page empties at each free (a malloc/free loop
 * with nothing else live) kept taking the lent one back, giving it back at
 * each free (PAGE_LENT) long after the shortage: 250-430 ns a malloc(48)
 * and free instead of 11 (build/bench/lent_loop). Under a lasting shortage
 * the next segment is lent again, which stamps the time. */
RARE static NOINLINE bool segment_lent_stale(void) {
    /* relaxed: a hint; a stale stamp only caches or returns one segment */
    return clock_ms() - atomic_load_explicit(&last_lend_ms, memory_order_relaxed) >=
           OPTION(purge_delay_ms);
}

static struct segment *segment_create(void) {
    uint64_t generation = os_unmapping_generation();
    struct segment *segment = os_map_segment();
    /* memory is short: the arena's free chunks hold address space too, and
     * another thread may be unmapping what it took off a cache: the 4-thread
     * RLIMIT_AS test (`oom mt`) failed 31 runs in 120 on the segments a huge
     * block's trim held, 3 in 120 with the wait */
    if (segment == NULL && arena_release(true, 0)) segment = os_map_segment();
    if (segment == NULL) segment = os_map_after_trims(map_segment, SEGMENT_SIZE, generation);
    /* Still none: the arena's chunks, which stay mapped while any block
     * lies in them, may hold the free address space (a program that freed
     * most of its 300 KB buffers under RLIMIT_AS, then wants small blocks). */
    bool lent = false;
    if (segment == NULL) {
        segment = segment_lend();
        lent = segment != NULL;
    }
    if (segment == NULL) return NULL;
    if (!os_segment_map_writable((uintptr_t)segment >> SEGMENT_SHIFT)) {
        if (lent)
            arena_lent_back((uintptr_t)segment, SEGMENT_SIZE);
        else
            os_unmap(segment, SEGMENT_SIZE);
        return NULL;
    }
    segment->lent = lent;
    /* The header reads as zero: only the non-zero fields need setting. The
     * descriptors stay untouched (16 KiB, four OS pages): a slice never part
     * of a page reads zero, whose block test accepts nothing. */
    free_slices_set(segment, ~(uint64_t)1); /* every slice but the header */
    segment->dirty_slices = 1;
    spin_lock(&g_registry_lock);
    segment->all_next = g_registry;
    if (g_registry) g_registry->all_prev = segment;
    g_registry = segment;
    spin_unlock(&g_registry_lock);
    segment_map_set(segment, true);
    atomic_fetch_add_explicit(&g_segment_count, 1, memory_order_relaxed); /* statistic */
    return segment;
}

static COLD void segment_destroy(struct segment *segment) {
    spin_lock(&g_registry_lock);
    if (segment->all_prev)
        segment->all_prev->all_next = segment->all_next;
    else
        g_registry = segment->all_next;
    if (segment->all_next) segment->all_next->all_prev = segment->all_prev;
    retained_slices_note(segment->free_slices & segment->dirty_slices & ~(uint64_t)1, false);
    spin_unlock(&g_registry_lock);
    segment_map_set(segment, false);
    atomic_fetch_sub_explicit(&g_segment_count, 1, memory_order_relaxed); /* statistic */
    if (segment->lent)
        arena_lent_back((uintptr_t)segment, SEGMENT_SIZE);
    else
        os_unmap(segment, SEGMENT_SIZE);
}

static void list_push(struct segment **list, struct segment *segment) {
    segment->prev = NULL;
    segment->next = *list;
    if (*list) (*list)->prev = segment;
    *list = segment;
}

static void list_remove(struct segment **list, struct segment *segment) {
    if (segment->prev)
        segment->prev->next = segment->next;
    else
        *list = segment->next;
    if (segment->next) segment->next->prev = segment->prev;
    segment->next = segment->prev = NULL;
}

/* An avail list longer than this is searched from its front only: a segment
 * that gets slices back moves there. With 2000 live blocks of 100-200 KB
 * (94 segments), a search read each segment's header, a cache miss apiece
 * (their headers all fall in one cache set), and a free and a malloc took
 * 1.13 us, 0.36 us now (glibc 1.26, mimalloc 0.31, tcmalloc 0.14). A short
 * list is searched whole for the most resident run: moving segments to its
 * front too cost `large` 3 MiB of its 104 MiB peak. */
#define AVAIL_LIST_LONG 32

/* The avail list keeps its length (heap->segments_avail_count). */
static void avail_push(struct heap *heap, struct segment *segment) {
    list_push(&heap->segments_avail, segment);
    heap->segments_avail_count++;
}
static void avail_remove(struct heap *heap, struct segment *segment) {
    list_remove(&heap->segments_avail, segment);
    heap->segments_avail_count--;
}

/* No free slice left (segment lock held). Slices a purger holds come back
 * free, so they do not count as taken. */
static bool segment_full_locked(const struct segment *segment) {
    return (segment->free_slices | segment->purging_slices) == 0;
}

/* An owned segment with no free slice goes to the heap's full list. The flag,
 * not a guess, says where it is: an adopted segment can be on the full list
 * already, and unlinking it from the avail list instead left a dangling head
 * once it was released (malloc_trim under load: heap corruption). */
static void segment_move_to_full(struct heap *heap, struct segment *segment) {
    if (segment->in_full_list) return;
    avail_remove(heap, segment);
    list_push(&heap->segments_full, segment);
    segment->in_full_list = 1;
}

static void segment_take_ownership(struct heap *heap, struct segment *segment) {
    /* relaxed store: a purger reads it without the owner's order (purge.c) */
    __atomic_store_n(&segment->heap, heap, __ATOMIC_RELAXED);
    /* relaxed: other threads only compare it with their own id; a stale value
     * sends them down the remote-free path, which is always correct. */
    uint64_t owner = heap->id | (OPTION(free_slow) ? OWNER_CHECKED_BIT : 0);
    atomic_store_explicit(&segment->owner_id, owner, memory_order_relaxed);
    segment->in_full_list = 0;
    avail_push(heap, segment);
}

/* mallopt turned aggressive mode on or off: the owners' frees of segments
 * already owned take the slow path, or the fast one again. A CAS, so that an
 * owner id cleared or set meanwhile (abandonment, adoption) is never marked
 * by mistake; an adoption that read free_slow before it changed may leave
 * one segment unmarked, which only skips the per-block release there. */
void segments_mark_slow_frees(bool slow) {
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next) {
        /* relaxed: as in segment_take_ownership, any value routes frees correctly */
        uint64_t owner = atomic_load_explicit(&s->owner_id, memory_order_relaxed);
        uint64_t marked;
        do {
            if (owner == 0) break; /* abandoned: its next owner reads free_slow */
            marked = slow ? owner | OWNER_CHECKED_BIT : owner & ~OWNER_CHECKED_BIT;
        } while (marked != owner &&
                 !atomic_compare_exchange_weak_explicit(
                     &s->owner_id, &owner, marked, memory_order_relaxed, memory_order_relaxed));
    }
    spin_unlock(&g_registry_lock);
}

static struct segment *cache_list_pop(struct segment_cache_list *list) {
    struct segment *segment = list->head;
    if (segment) {
        list->head = segment->next;
        list->count--;
    }
    return segment;
}

static void cache_list_push(struct segment_cache_list *list, struct segment *segment,
                            uint32_t now) {
    segment->cached_ms = now;
    segment->next = list->head;
    list->head = segment;
    list->count++;
}

/* Yields a page allocation waits for a purge releasing slices it could
 * take. A count, not a time: the wait comes before a new segment is mapped,
 * on any allocation that misses, so it must stay short (a fork child's
 * releases that will never end are undone by heap_atfork_child). */
#define PURGE_WAIT_MAX 1000
/* Out of memory, a wait is for a time: nothing else would serve anyway. */
#define PURGE_WAIT_OOM_MS 200

/* Some of its slices are out of the free mask while a purge releases them. */
static bool segment_purging(struct segment *segment) {
    spin_lock(&segment->lock);
    bool purging = segment->purging_slices != 0;
    spin_unlock(&segment->lock);
    return purging;
}

/* A heap needs room: adopt an abandoned segment, reuse a cached one, or map. */
COLD struct segment *segment_acquire(struct heap *heap, enum segment_source source) {
    struct segment *segment = source == SEGMENT_ANY ? segment_try_adopt(heap) : NULL;
    /* a used segment has its slices' pages where their classes put them
     * (segment_take_run): a young heap would carve past them */
    if (segment) {
        heap_young_end(heap);
        return segment;
    }
    if (source != SEGMENT_NEW) {
        spin_lock(&g_segment_cache_lock);
        segment = cache_list_pop(&segment_cache);
        bool dirty = segment != NULL; /* a released one reads as zero, as a new one */
        if (segment == NULL) segment = cache_list_pop(&segment_cache_released);
        spin_unlock(&g_segment_cache_lock);
        if (dirty) heap_young_end(heap);
    }
    if (segment == NULL) segment = segment_create();
    if (segment == NULL) return NULL;
    segment->used_pages = 0;
    segment_take_ownership(heap, segment);
    return segment;
}

/* Where a page of `count` slices goes in a segment: the run of free slices
 * that holds the most resident (dirty) ones. Taking
 * clean slices while dirty ones stay free would fault in new memory while
 * resident memory idles: with the lowest run starting on a dirty slice
 * instead, `large` took 4409 clean slices while enough dirty ones were free
 * (RSS 120 MiB against glibc's 84). A one-slice class page prefers a dirty
 * slice that last held a page of its class: the blocks fall where they fell
 * before, so the OS pages it touches are those already resident (threads
 * that come and go otherwise spread every class over every slice in turn:
 * threadchurn's RSS grew with the waves). Among runs wholly dirty, or
 * wholly clean, a run goes in the shortest stretch of free slices that holds
 * it (best fit): placed at the lowest one, shorter runs broke up the long
 * stretches that 2-4 MiB blocks need, and those blocks then took fresh
 * memory (`large`: peak RSS 107.8 -> 104.4 MiB, CPU even). With `place`
 * false (a search that only weighs segments) the start is not chosen. */
struct run_choice {
    int8_t first;    /* first slice, -1 if no run fits */
    uint8_t dirty;   /* dirty slices in the run */
    bool same_class; /* one slice that last held a page of the class asked for */
};

/* Of the candidate starts, one in the shortest stretch of free slices
 * (best fit), the lowest there: long stretches stay whole for long runs. */
static inline int tightest_start(uint64_t free_mask, uint64_t candidates) {
    int best = -1;
    unsigned best_length = 65;
    for (uint64_t rest = candidates; rest;) {
        unsigned first = (unsigned)__builtin_ctzll(rest);
        uint64_t above = ~(free_mask >> first);
        unsigned end = above ? first + (unsigned)__builtin_ctzll(above) : 64;
        uint64_t below = ~free_mask & (((uint64_t)1 << first) - 1);
        unsigned begin = below ? 64 - (unsigned)__builtin_clzll(below) : 0;
        if (end - begin < best_length) {
            best = (int)first;
            best_length = end - begin;
        }
        /* the stretch's other candidates weigh the same */
        rest = end < 64 ? rest & ~(((uint64_t)1 << end) - 1) : 0;
    }
    return best;
}

static inline __attribute__((always_inline)) struct run_choice
find_free_run(const struct segment *segment, unsigned count, unsigned cls, bool place) {
    uint64_t free_mask = segment->free_slices, dirty = segment->dirty_slices & free_mask;
    struct run_choice choice = {-1, 0, false};
    uint64_t starts = run_starts(free_mask, count);
    if (starts == 0) return choice;
    if (dirty == 0) {
        /* the first start of each stretch */
        choice.first = (int8_t)(place ? tightest_start(free_mask, starts & ~(starts << 1))
                                      : __builtin_ctzll(starts));
        return choice;
    }
    if (count == 1) {
        choice.first = (int8_t)__builtin_ctzll(dirty);
        choice.dirty = 1;
        if (cls == LARGE_CLASS) return choice;
        for (uint64_t rest = dirty; rest; rest &= rest - 1) {
            unsigned i = (unsigned)__builtin_ctzll(rest);
            if (segment->pages[i].class_index == cls) {
                choice.first = (int8_t)i;
                choice.same_class = true;
                break;
            }
        }
        return choice;
    }
    /* A run wholly dirty is the best there is: found with count shifts. */
    uint64_t dirty_starts = starts & run_starts(dirty, count);
    if (dirty_starts) {
        choice.first = (int8_t)(place ? tightest_start(free_mask, dirty_starts)
                                      : __builtin_ctzll(dirty_starts));
        choice.dirty = (uint8_t)count;
        return choice;
    }
    /* Else the most dirty run. One that starts on a clean slice holds no
     * more than the run one slice later, if there is one: only runs that
     * start on a dirty slice, or that are the last of their stretch, need
     * weighing (weighing every start was half of a loop of 100-200 KB
     * mallocs and frees). */
    for (uint64_t rest = starts & (dirty | ~(starts >> 1)); rest; rest &= rest - 1) {
        unsigned first = (unsigned)__builtin_ctzll(rest);
        unsigned n = bit_count(dirty & run_mask(first, count));
        if (choice.first < 0 || n > choice.dirty) {
            choice.first = (int8_t)first;
            choice.dirty = (uint8_t)n;
        }
    }
    return choice;
}

/* Takes the free slices in `mask` for a page: called with the segment lock
 * held, which it releases. Returns those of them that were resident. */
static uint64_t segment_take_slices(struct heap *heap, struct segment *segment, uint64_t mask) {
    uint64_t was_dirty = segment->dirty_slices & mask;
    free_slices_set(segment, segment->free_slices & ~mask);
    segment->dirty_slices |= mask;
    bool now_full = segment_full_locked(segment);
    retained_slices_note(was_dirty, false); /* under the lock: see retained_slices_note */
    spin_unlock(&segment->lock);
    /* relaxed: a statistic and a purge trigger, as g_retained_bytes */
    atomic_fetch_add_explicit(&g_page_slice_bytes, (uint64_t)bit_count(mask) << SLICE_SHIFT,
                              memory_order_relaxed);
    if (now_full) segment_move_to_full(heap, segment);
    return was_dirty;
}

static struct page *segment_take_run(struct heap *heap, struct segment *segment, unsigned count,
                                     unsigned cls) {
    spin_lock(&segment->lock);
    int first = find_free_run(segment, count, cls, true).first;
    if (first < 0) {
        spin_unlock(&segment->lock);
        return NULL;
    }
    uint64_t was_dirty = segment_take_slices(heap, segment, run_mask((unsigned)first, count));
    struct page *page = &segment->pages[first];
    for (unsigned i = 0; i < count; i++)
        page[i].first = page;
    page->slice_count = (uint8_t)count;
    if (was_dirty == 0) page->touched_end = 0;
    __atomic_store_n(&page->is_zero, was_dirty == 0, __ATOMIC_RELAXED); /* as calloc reads it */
    page->clean_slices = (run_mask((unsigned)first, count) & ~was_dirty) >> first;
    segment->used_pages++;
    return page;
}

/* Owned segments weighed for a page: the search stops after this many that
 * have a run long enough (each costs its lock and a run search; those that
 * have none are passed on a lock-free look at their free mask). */
#define RUN_SEARCH_SEGMENTS 8

/* The segment's free slices as last stored, read without its lock: a hint
 * that spares the lock of a segment with no run long enough. */
static inline bool segment_may_fit(const struct segment *segment, unsigned count) {
    /* relaxed: a stale mask only sends this search on or makes it lock in
     * vain; what the lock then reads decides */
    return run_starts(__atomic_load_n(&segment->free_slices, __ATOMIC_RELAXED), count) != 0;
}

/* A run in one of the heap's own segments, waiting while purges hold slices
 * of some: up to PURGE_WAIT_MAX yields, or wait_ms if not 0. NULL if none. */
static struct page *owned_take_run(struct heap *heap, unsigned count, unsigned cls,
                                   uint32_t wait_ms) {
    uint32_t start = wait_ms ? clock_ms() : 0;
    for (unsigned wait = 0;; wait++) {
        bool purging = false;
        for (struct segment *s = heap->segments_avail; s; s = s->next) {
            if (segment_may_fit(s, count)) {
                struct page *page = segment_take_run(heap, s, count, cls);
                if (page) return page;
            }
            purging = purging || segment_purging(s);
        }
        if (!purging) return NULL;
        if (wait_ms ? (uint32_t)(clock_ms() - start) >= wait_ms : wait == PURGE_WAIT_MAX)
            return NULL;
        os_yield();
    }
}

struct page *segment_page_alloc(struct heap *heap, unsigned count, unsigned cls) {
    /* Of the first owned segments that can hold it, the one whose best run
     * is the most resident: a fully dirty run (of the same class, for a
     * one-slice class page) ends the search. */
    struct segment *best = NULL;
    struct run_choice best_run = {-1, 0, false};
    bool class_matters = count == 1 && cls != LARGE_CLASS; /* as in find_free_run */
    unsigned weighed = 0;
    for (struct segment *s = heap->segments_avail; s && weighed < RUN_SEARCH_SEGMENTS;
         s = s->next) {
        if (!segment_may_fit(s, count)) continue;
        weighed++;
        spin_lock(&s->lock);
        struct run_choice run = find_free_run(s, count, cls, false);
        spin_unlock(&s->lock);
        if (run.first >= 0 &&
            (best == NULL || run.dirty > best_run.dirty ||
             (run.dirty == best_run.dirty && run.same_class && !best_run.same_class))) {
            best = s;
            best_run = run;
            if (run.dirty == count && (run.same_class || !class_matters)) break;
        }
    }
    if (best != NULL) {
        struct page *page = segment_take_run(heap, best, count, cls);
        if (page) return page;
    }
    /* A pass releasing slices gives them back within its madvise: waiting
     * for it beats taking one segment more (threads of a wave whose cached
     * segments a pass was releasing each mapped another one). */
    struct page *page = owned_take_run(heap, count, cls, 0);
    if (page) return page;
    /* An adopted segment may lack a long enough run, and so may a cached one
     * while a purger holds some of its slices (a pass takes them out of the
     * free mask during its madvise; a large block can need all 63). A new
     * one has every slice free and nothing for a purger: the last attempt
     * maps one (the soak saw malloc(3.6 MiB) fail with ENOMEM without it). */
    /* blocks this thread freed may empty a segment that it could adopt */
    remote_batches_flush(heap);
    /* Large blocks that other threads freed wait on their pages until a
     * collect, every COLLECT_INTERVAL slow paths: reuse their slices before
     * taking a segment. (The exit heap, whose every free is remote, took the
     * cached segments one after another: 5 of them full of freed 200 KB
     * blocks in test_tsd_exit, whose threads then mapped new ones.) */
    if (heap_large_pages_collect(heap, NULL) != 0) {
        page = owned_take_run(heap, count, cls, 0);
        if (page) return page;
    }
    static const enum segment_source sources[] = {SEGMENT_ANY, SEGMENT_ANY, SEGMENT_CACHED_OR_NEW,
                                                  SEGMENT_NEW};
    for (unsigned attempt = 0; attempt < sizeof sources / sizeof sources[0]; attempt++) {
        struct segment *s = segment_acquire(heap, sources[attempt]);
        if (s == NULL) break;
        page = segment_take_run(heap, s, count, cls);
        for (unsigned wait = 0; page == NULL && wait < PURGE_WAIT_MAX && segment_purging(s);
             wait++) {
            os_yield();
            page = segment_take_run(heap, s, count, cls);
        }
        if (page) return page;
    }
    /* No address space for a new segment: those taken from the cache above
     * may be in a purge whose madvise outlasts the yields on a loaded
     * machine (oom mt under RLIMIT_AS: 5 failures in 150 runs, each with
     * three cached segments 48-60 slices of which a pass was releasing). */
    return owned_take_run(heap, count, cls, PURGE_WAIT_OOM_MS);
}

/* Grows a large page in place over the free slices right after it (owner
 * only). False when they are not all free (or a purger holds one): the
 * caller moves the block instead. */
WARM bool segment_page_grow(struct heap *heap, struct page *page, unsigned slices) {
    struct segment *segment = segment_of(page);
    unsigned first = (unsigned)(page - segment->pages), old = page->slice_count;
    if (slices <= old || first + slices > SLICES_PER_SEGMENT) return false;
    uint64_t mask = run_mask(first + old, slices - old);
    spin_lock(&segment->lock);
    if ((segment->free_slices & mask) != mask) {
        spin_unlock(&segment->lock);
        return false;
    }
    segment_take_slices(heap, segment, mask);
    for (unsigned i = old; i < slices; i++)
        page[i].first = page;
    page->slice_count = (uint8_t)slices;
    page_block_test_set(page, page->block_size_inverse); /* the new slices' copies */
    return true;
}

/* Slices [first, first + count) go back to their segment's free set: no
 * pointer into them is a block any more, and they join the retained memory
 * (unless `clean`: they read as zero). `first_touched`: how much of the
 * first slice may be resident (touched_end; the others: all of it). The
 * caller updates the page, and the owner's segment lists if there is an
 * owner. */
static void segment_slices_free(struct segment *segment, unsigned first, unsigned count, bool clean,
                                uint32_t first_touched, uint32_t now) {
    uint64_t mask = run_mask(first, count);
    for (unsigned i = first; i < first + count; i++) {
        struct page *slice = &segment->pages[i];
        slice->first = slice;
        slice->area_size = 0;
        slice->block_size_inverse = 0; /* free() accepts no pointer into it */
        slice->touched_end = i == first ? first_touched : SLICE_SIZE;
        segment->slice_freed_ms[i] = now;
    }
    spin_lock(&segment->lock);
    free_slices_set(segment, segment->free_slices | mask);
    if (clean)
        segment->dirty_slices &= ~mask;
    else
        segment->dirty_slices |= mask;
    if (!clean) retained_slices_note(mask, true);
    spin_unlock(&segment->lock);
    /* relaxed: as in segment_take_slices */
    atomic_fetch_sub_explicit(&g_page_slice_bytes, (uint64_t)count << SLICE_SHIFT,
                              memory_order_relaxed);
}

/* Slices of an owned segment went back: its place in the owner's lists
 * may change. */
static void segment_lists_slices_returned(struct heap *heap, struct segment *segment) {
    if (segment->in_full_list) {
        list_remove(&heap->segments_full, segment);
        avail_push(heap, segment);
        segment->in_full_list = 0;
    } else if (heap->segments_avail_count > AVAIL_LIST_LONG && heap->segments_avail != segment) {
        /* A long list: to its front, where the next search starts and
         * stops at the first wholly resident run that fits, which this one
         * is for a page of the size just freed (segment_page_alloc). */
        avail_remove(heap, segment);
        avail_push(heap, segment);
    }
}

/* An empty page's slices go back to its segment's free set (`clean`: they
 * read as zero; so does a reclaimed page, reset and not carved again).
 * Returns the segment; its owner's lists are the caller's business. */
static struct segment *segment_page_slices_free(struct page *page, bool clean, uint32_t now) {
    struct segment *segment = segment_of(page);
    unsigned first = (unsigned)(page - segment->pages), count = page->slice_count;
    clean |= page->capacity == 0;
    /* a one-slice class page touched memory up to its last carved block,
     * and earlier pages on the slice up to touched_end */
    uint32_t touched = SLICE_SIZE;
    if (page_tracks_touched(page)) {
        uint32_t carved = page_carved_end(page, page->capacity);
        touched = carved > page->touched_end ? carved : page->touched_end;
    }
    page->slice_count = 0;
    page->block_size = 0;
    segment_slices_free(segment, first, count, clean, touched, now);
    segment->used_pages--;
    return segment;
}

/* Aggressive mode, owner only (so the segment stays mapped): every free
 * resident slice of the segment goes back now. */
static void segment_purge_now(struct segment *segment, uint32_t now) {
    struct purge_batch batch;
    batch.count = 0;
    segment_purge(segment, now, 0, &batch);
    purge_batch_flush(&batch);
}

/* realloc shrinking a large block: the slices past `slices` go back. */
WARM void segment_page_shrink(struct heap *heap, struct page *page, unsigned slices) {
    struct segment *segment = segment_of(page);
    unsigned first = (unsigned)(page - segment->pages), old = page->slice_count;
    page->slice_count = (uint8_t)slices;
    uint32_t now = clock_ms();
    segment_slices_free(segment, first + slices, old - slices, false, SLICE_SIZE, now);
    segment_lists_slices_returned(heap, segment);
    if (OPTION(aggressive_madvise)) segment_purge_now(segment, now);
}

void segment_page_free(struct heap *heap, struct page *page) {
    uint32_t now = clock_ms();
    struct segment *segment = segment_page_slices_free(page, false, now);
    segment_lists_slices_returned(heap, segment);
    if (OPTION(aggressive_madvise)) segment_purge_now(segment, now);
    /* A heap keeps its one avail segment, unless the arena lent it: the
     * cache holds that one, where an allocation short of address space
     * finds it (huge.c): it splits a chunk's free space, which blocks too
     * big for a mapping of their own need whole (oom mt failed a run in six
     * on four threads' empty segments, one in each of four chunks). */
    if (segment->used_pages == 0 &&
        (heap->segments_avail != segment || segment->next != NULL || segment->lent))
        segment_release_empty(heap, segment);
}

/* Fork child: an empty page that a thread the child lacks had cached. Its
 * segment is frozen (heap_atfork_child): the slices go back to its free set,
 * where purge passes and malloc_trim reach them, and no heap's lists change. */
void segment_page_free_frozen(struct page *page, bool clean) {
    segment_page_slices_free(page, clean, clock_ms());
}

/* An owned segment with no page in use goes to the cache (or the kernel). */
COLD void segment_release_empty(struct heap *heap, struct segment *segment) {
    if (segment->in_full_list)
        list_remove(&heap->segments_full, segment);
    else
        avail_remove(heap, segment);
    __atomic_store_n(&segment->heap, NULL, __ATOMIC_RELAXED); /* read by purgers */
    /* relaxed: see segment_take_ownership. */
    atomic_store_explicit(&segment->owner_id, 0, memory_order_relaxed);
    /* the lent test first: other segments run no rare code here */
    bool keep = !OPTION(aggressive_madvise) && !(segment->lent && segment_lent_stale());
    if (keep) {
        spin_lock(&g_segment_cache_lock);
        bool release = segment_cache.count >= SEGMENT_CACHE_MAX;
        spin_unlock(&g_segment_cache_lock);
        /* Before it is in the cache, where another thread could take it,
         * empty it and have it destroyed under a purge that is not holding
         * the registry lock. Passes may purge it meanwhile: the segment lock
         * keeps each slice to one of them. */
        uint32_t now = clock_ms();
        if (release) segment_purge_now(segment, now);
        spin_lock(&g_segment_cache_lock);
        /* a segment not released here (the count rose meanwhile) waits on
         * the second list for the passes, as any retained memory */
        if (!release && segment_cache.count < SEGMENT_CACHE_MAX)
            cache_list_push(&segment_cache, segment, now);
        else if (segment_cache_released.count < SEGMENT_CACHE_CLEAN_MAX)
            cache_list_push(&segment_cache_released, segment, now);
        else
            keep = false;
        spin_unlock(&g_segment_cache_lock);
    }
    if (!keep) segment_destroy(segment);
}

/* Moves to *victims the segments of `list` to unmap: all of them
 * (everything), or clean ones that have stayed unused for the purge delay,
 * while the cache holds more than a few. Cache lock held. */
static void cache_list_trim(struct segment_cache_list *list, bool everything, uint32_t now,
                            struct segment **victims) {
    for (struct segment **link = &list->head;
         *link && (everything ||
                   segment_cache.count + segment_cache_released.count > SEGMENT_CACHE_MAX / 4);) {
        struct segment *s = *link;
        /* no purger can be at work on it: passes hold the registry lock,
         * which segment_destroy needs too */
        spin_lock(&s->lock);
        bool clean = (s->dirty_slices & s->free_slices & ~(uint64_t)1) == 0;
        spin_unlock(&s->lock);
        /* signed: a pass may have read its clock before the segment came */
        if (everything ||
            (clean && (int32_t)(now - s->cached_ms) >= (int32_t)OPTION(purge_delay_ms))) {
            *link = s->next;
            list->count--;
            s->next = *victims;
            *victims = s;
        } else {
            link = &s->next;
        }
    }
}

/* Unmaps cached empty segments: all of them, or those fully purged already
 * (they hold no memory, only address space) that have stayed unused for the
 * purge delay, keeping a few mapped: reusing them costs no syscall. Returns
 * true if any went. */
bool segment_cache_trim(bool everything, uint32_t now) {
    struct segment *victims = NULL;
    os_unmapping_begin(); /* before the victims leave the cache */
    spin_lock(&g_segment_cache_lock);
    cache_list_trim(&segment_cache_released, everything, now, &victims);
    cache_list_trim(&segment_cache, everything, now, &victims);
    spin_unlock(&g_segment_cache_lock);
    bool released = victims != NULL;
    while (victims) {
        struct segment *s = victims;
        victims = s->next;
        segment_destroy(s);
    }
    os_unmapping_end();
    return released;
}

/* The segment belongs to no heap and is on no list: its blocks are freed
 * remotely. A fork child leaves its vanished threads' segments so
 * (heap_atfork_child); segment_abandon then puts one up for adoption. */
void segment_orphan(struct segment *segment) {
    __atomic_store_n(&segment->heap, NULL, __ATOMIC_RELAXED); /* read by purgers */
    /* relaxed: see segment_take_ownership; in a fork child nothing races, and
     * for an abandoned segment the list lock publishes the rest. */
    atomic_store_explicit(&segment->owner_id, 0, memory_order_relaxed);
    segment->next = segment->prev = NULL;
    segment->in_full_list = 0;
    segment->abandoned = 0;
}

void segment_abandon(struct segment *segment) {
    segment_orphan(segment);
    spin_lock(&g_abandoned_lock);
    segment->abandoned = 1;
    struct segment *head = __atomic_load_n(&abandoned_list, __ATOMIC_RELAXED);
    segment->next = head;
    if (head) head->prev = segment;
    __atomic_store_n(&abandoned_list, segment, __ATOMIC_RELAXED); /* the lock orders it */
    spin_unlock(&g_abandoned_lock);
}

static struct segment *abandoned_pop(void) {
    /* relaxed: a racy peek that only skips the lock when the list looks empty;
     * a stale answer makes the caller map a segment instead, which is correct. */
    if (__atomic_load_n(&abandoned_list, __ATOMIC_RELAXED) == NULL) return NULL;
    spin_lock(&g_abandoned_lock);
    struct segment *segment = __atomic_load_n(&abandoned_list, __ATOMIC_RELAXED);
    if (segment) {
        __atomic_store_n(&abandoned_list, segment->next, __ATOMIC_RELAXED);
        if (segment->next) segment->next->prev = NULL;
        segment->abandoned = 0;
    }
    spin_unlock(&g_abandoned_lock);
    return segment;
}

COLD struct segment *segment_try_adopt(struct heap *heap) {
    struct segment *segment;
    while ((segment = abandoned_pop()) != NULL) {
        segment_take_ownership(heap, segment);
        spin_lock(&segment->lock);
        bool full = segment_full_locked(segment);
        spin_unlock(&segment->lock);
        if (full) segment_move_to_full(heap, segment);
        /* Take over its pages, collecting what other threads freed meanwhile.
         * The extra use keeps the segment from being released mid-walk. */
        segment->used_pages++;
        for (unsigned i = 1; i < SLICES_PER_SEGMENT;) {
            struct page *page = &segment->pages[i];
            unsigned count = page->area_size ? page->slice_count : 1;
            if (page->area_size) heap_adopt_page(heap, page); /* may free the page */
            i += count;
        }
        segment->used_pages--;
        if (segment->used_pages > 0) return segment;
        segment_release_empty(heap, segment);
    }
    return NULL;
}
