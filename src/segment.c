/* Segments: aligned 4 MiB regions carved into 64 KiB slices. This file owns
 * the slice bitmaps (which slices are free, which may be resident) and where
 * a page's run of slices goes; how a segment is made, owned, cached,
 * abandoned and adopted is segment_lifecycle.c's, and giving free slices
 * back to the kernel segment_release.c's. */
#define _GNU_SOURCE
#include "internal.h"

/* The slices of `free_mask` at which a run of `count` of them starts. */
static inline uint64_t run_starts(uint64_t free_mask, unsigned count) {
    uint64_t starts = free_mask;
    for (unsigned i = 1; i < count && starts; i++)
        starts &= free_mask >> i;
    return starts;
}

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
        /* the exit heap's pages are every thread's (shared classes) */
        segment_release_empty(heap, segment, heap->id != EXIT_HEAP_ID);
}

/* Fork child: an empty page that a thread the child lacks had cached. Its
 * segment is frozen (heap_atfork_child): the slices go back to its free set,
 * where purge passes and malloc_trim reach them, and no heap's lists change. */
void segment_page_free_frozen(struct page *page, bool clean) {
    segment_page_slices_free(page, clean, clock_ms());
}
