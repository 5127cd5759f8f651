/* A segment's life: mapped (or lent by the arena when address space is
 * short) and registered; owned by a heap, on its list of segments with free
 * slices or its full list; kept in the cache of empty segments, or unmapped,
 * once its last page goes; abandoned when its thread exits and adopted by
 * another. The slices and pages inside a segment are segment.c's. */
#define _GNU_SOURCE
#include "internal.h"

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

static void segment_map_set(struct segment *segment, bool present) {
    /* release: a reader that sees the byte set also sees the initialised
     * header. Each byte has one writer at a time: the segment's creator or
     * its destroyer. */
    atomic_store_explicit(&g_segment_map.bytes[(uintptr_t)segment >> SEGMENT_SHIFT], present,
                          memory_order_release);
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

/* An owned segment with no free slice goes to the heap's full list. The flag,
 * not a guess, says where it is: an adopted segment can be on the full list
 * already, and unlinking it from the avail list instead left a dangling head
 * once it was released (malloc_trim under load: heap corruption). */
void segment_move_to_full(struct heap *heap, struct segment *segment) {
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

/* Slices of an owned segment went back: its place in the owner's lists
 * may change. */
void segment_lists_slices_returned(struct heap *heap, struct segment *segment) {
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

/* How many empty segments the cache keeps resident. With one thread heap
 * growing they are all that heap's to reuse, and the retain bound governs
 * them as any free slice (purge.c: what the recent peak used is kept). With a
 * cap of 16, a program whose use swings past 64 MiB had each segment past the
 * 16 released as it emptied, and faulted in again (`patterns cycles 100
 * 800000 20`, 93 MiB 20 times: 119k faults and 0.81 s with the bound's change
 * alone, 24k and 0.70 s with this too; tcmalloc 25k, 0.76 s). With several
 * heaps growing the 16 bound what exiting threads leave resident for the next
 * ones (1024 cost `threadwave` 13% more peak RSS). */
static unsigned segment_cache_resident_max(bool own_frees) {
    /* the retain bound off: the delay alone governs them, as any free slice */
    if (OPTION(retain_percent) == 0) return SEGMENT_CACHE_CLEAN_MAX;
    /* The refault hold (purge.c) keeps those a thread heap's own frees
     * emptied: an exiting thread's or the exit heap's, kept dirty, are taken
     * by new threads that use a few pages of each (`threadwave 1000 4`: 142
     * -> 290 MiB peak RSS with every one kept, 199 with the exit heap's). */
    if (own_frees && refault_hold(clock_ms())) return SEGMENT_CACHE_CLEAN_MAX;
    return retain_one_growing_heap() ? SEGMENT_CACHE_CLEAN_MAX : SEGMENT_CACHE_MAX;
}

/* An owned segment with no page in use goes to the cache (or the kernel);
 * own_frees: a thread heap's own frees emptied it, the thread living on. */
COLD void segment_release_empty(struct heap *heap, struct segment *segment, bool own_frees) {
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
        unsigned resident_max = segment_cache_resident_max(own_frees);
        bool release = segment_cache.count >= resident_max;
        spin_unlock(&g_segment_cache_lock);
        /* Before it is in the cache, where another thread could take it,
         * empty it and have it destroyed under a purge that is not holding
         * the registry lock. Passes may purge it meanwhile: the segment lock
         * keeps each slice to one of them. */
        uint32_t now = clock_ms();
        if (release) segment_purge_now(segment, now);
        spin_lock(&g_segment_cache_lock);
        /* a segment not released here waits for the passes (the count may
         * have risen meanwhile, past resident_max by a few at most) */
        if (!release)
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
        segment_release_empty(heap, segment, false);
    }
    return NULL;
}
