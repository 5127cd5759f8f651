/* The arena: one pool for every block too big for a segment's slices pool
 * (over ARENA_MIN) and under the mmap threshold. Chunks of address space are
 * mapped once and carved at page granularity; a freed block goes back to the
 * free extents, coalesced with its neighbours, and stays resident ("dirty")
 * until the release policy gives it back. A block then grows into the free
 * extent after it without a copy or a move, and a new block takes resident
 * memory that a freed one of another size left, best fit, from its thread's
 * own chunk first.
 *
 * Why not a mapping per block with a cache of freed mappings (what this
 * replaced): a mapping that fits exactly is rare, so blocks either took a
 * fresh mapping (every page a fault) or had a cached one grown or moved with
 * mremap, and on a host with shadow page tables a page that mremap moved
 * costs microseconds at its next write. `large`: 1.26 -> 0.78 s, peak RSS
 * 104.4 -> 89.7 MiB, faults 60k -> 45k (docs/benchmark-history.md, 24th session).
 *
 * Everything here runs under g_huge_lock, which fork takes, except the
 * system calls of a release, made on extents taken off the list first. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/uio.h>

#include "internal.h"

/* A free extent. Invariants: a chunk's extents are sorted by start, never
 * overlap, lie within the chunk past its header; two adjacent extents differ
 * in `dirty` (those that agree are merged). */
struct arena_extent {
    uintptr_t start;   /* page aligned */
    size_t size;       /* a multiple of the page size, > 0 */
    uint32_t freed_ms; /* when the newest part was freed (dirty extents) */
    bool dirty;        /* may hold resident pages: counted in g_arena_dirty_bytes */
};

/* A chunk: address space the arena carves. Blocks never span two chunks
 * (two may lie side by side), so a chunk that is wholly free can go back.
 * Each keeps its own list of free extents in its first pages (its header):
 * a thread that carves its home chunk reads and shifts that list alone. One
 * list for every chunk had a thread scan and shift the extents of all of
 * them under the huge lock, lines the other threads had just written:
 * ebizzy, 16 threads of 192 KiB-1 MiB buffers on 16 CPUs, ran 1.21 times
 * glibc's time a record (docs/benchmark-history.md, fortieth session). */
struct arena_chunk {
    uintptr_t base;               /* 0: empty slot; the header starts here */
    size_t size;                  /* bytes mapped, the header's included */
    struct heap *home_of;         /* the thread heap that carves here first, or NULL
                                     (invariant: home_of->arena_home is this slot + 1) */
    struct arena_extent *extents; /* the header: the free extents, sorted by start */
    unsigned extent_count;        /* extents in use */
};

/* Address space, not memory (NORESERVE). 64 MiB chunks left `large` (blocks
 * up to 8 MiB, grown by realloc) at 131 MiB of peak RSS against 89.8 with
 * 256 MiB: blocks cannot span chunks, so smaller ones fragment. */
#define ARENA_CHUNK_SIZE  ((size_t)256 << 20)
#define ARENA_CHUNK_MIN   ((size_t)16 << 20) /* smallest tried when address space is short */
#define ARENA_CHUNKS_MAX  256
#define CHUNK_EXTENTS_MAX 1024
/* The header's pages are touched only as its list grows: one for the first 170 extents. */
#define CHUNK_HEADER_SIZE                                                                          \
    ((CHUNK_EXTENTS_MAX * sizeof(struct arena_extent) + OS_PAGE_SIZE - 1) &                        \
     ~(size_t)(OS_PAGE_SIZE - 1))
#define RELEASE_BATCH 32 /* extents released per round of system calls */

static struct arena_chunk chunks[ARENA_CHUNKS_MAX]; /* huge lock */
static unsigned chunk_slots_used;                   /* huge lock; slots below it may be in use */
_Atomic uint64_t g_arena_dirty_bytes;               /* bytes of dirty extents */
_Atomic uint64_t g_arena_used_bytes;                /* bytes in blocks handed out */

/* A load and a store, not a read-modify-write: every writer holds the huge
 * lock, so no update is lost, and a locked instruction on a line every
 * thread writes would only lengthen the lock's hold. */
static void counter_add(_Atomic uint64_t *counter, size_t bytes, bool add) {
    /* relaxed: statistics and a purge trigger, read without the lock; the
     * huge lock orders the writes */
    uint64_t value = atomic_load_explicit(counter, memory_order_relaxed);
    atomic_store_explicit(counter, add ? value + bytes : value - bytes, memory_order_relaxed);
}
#define used_bytes_add(bytes, add)  counter_add(&g_arena_used_bytes, bytes, add)
#define dirty_bytes_add(bytes, add) counter_add(&g_arena_dirty_bytes, bytes, add)

/* The first extent of chunk c that starts at or after `address`. */
static unsigned extent_index_from(const struct arena_chunk *c, uintptr_t address) {
    unsigned low = 0, high = c->extent_count;
    while (low < high) {
        unsigned mid = (low + high) / 2;
        if (c->extents[mid].start < address)
            low = mid + 1;
        else
            high = mid;
    }
    return low;
}

/* Shifts by hand: libc's memmove would be one more import to map (tests/suite-static.sh). */
static void extent_remove(struct arena_chunk *c, unsigned i) {
    for (; i + 1 < c->extent_count; i++)
        c->extents[i] = c->extents[i + 1];
    c->extent_count--;
}

/* Whether extent i is followed, without a gap, by extent i + 1. */
static bool extent_joins_next(const struct arena_chunk *c, unsigned i) {
    return i + 1 < c->extent_count &&
           c->extents[i].start + c->extents[i].size == c->extents[i + 1].start;
}

/* Adds a free range (not on the list) of chunk c, merging it with
 * neighbours in the same state. False: the list is full (the caller keeps
 * the range). */
static bool extent_insert(struct arena_chunk *c, uintptr_t start, size_t size, bool dirty,
                          uint32_t now) {
    struct arena_extent *extents = c->extents;
    unsigned i = extent_index_from(c, start);
    bool joins_previous = i > 0 && extents[i - 1].dirty == dirty &&
                          extents[i - 1].start + extents[i - 1].size == start;
    bool joins_next =
        i < c->extent_count && extents[i].dirty == dirty && start + size == extents[i].start;
    if (joins_previous) {
        extents[i - 1].size += size;
        extents[i - 1].freed_ms = now;
        if (joins_next) {
            extents[i - 1].size += extents[i].size;
            extent_remove(c, i);
        }
    } else if (joins_next) {
        extents[i].start = start;
        extents[i].size += size;
        extents[i].freed_ms = now;
    } else {
        if (c->extent_count == CHUNK_EXTENTS_MAX) return false;
        for (unsigned j = c->extent_count; j > i; j--)
            extents[j] = extents[j - 1];
        c->extent_count++;
        extents[i] = (struct arena_extent){start, size, now, dirty};
    }
    if (dirty) dirty_bytes_add(size, true);
    return true;
}

/* Takes `size` bytes from the run of adjacent extents that starts at extent
 * i (the caller checked that it is long enough). *dirty_end: the end of the
 * last dirty part taken (0: all of it was clean, so it reads as zeros). */
static void run_carve(struct arena_chunk *c, unsigned i, size_t size, uintptr_t *dirty_end) {
    *dirty_end = 0;
    while (size) {
        struct arena_extent *e = &c->extents[i];
        size_t take = e->size < size ? e->size : size;
        if (e->dirty) {
            dirty_bytes_add(take, false);
            *dirty_end = e->start + take;
        }
        e->start += take;
        e->size -= take;
        size -= take;
        if (e->size == 0) extent_remove(c, i); /* the next extent is now at i */
    }
}

/* Bytes of the run of adjacent extents that starts at extent i. */
static size_t run_bytes(const struct arena_chunk *c, unsigned i, unsigned *after) {
    size_t bytes = c->extents[i].size;
    while (extent_joins_next(c, i)) {
        i++;
        bytes += c->extents[i].size;
    }
    *after = i + 1;
    return bytes;
}

/* Maps a chunk for a request of `size` bytes: a standard one, or one of the
 * request's size (and a header) for a request over half of that. Only that
 * one is charged to the commit, as a mapping of glibc's is, so an impossible
 * request still fails under the kernel's overcommit heuristic. Returns its
 * slot, -1: no address space. */
static int chunk_add(size_t size) {
    int slot = -1;
    for (int i = 0; i < ARENA_CHUNKS_MAX && slot < 0; i++)
        if (chunks[i].base == 0) slot = i;
    if (slot < 0 || size > SIZE_MAX - CHUNK_HEADER_SIZE) return -1;
    size += CHUNK_HEADER_SIZE;
    /* Address space short (RLIMIT_AS): halve the chunk down to 16 MiB, then
     * one of the request's size. Under such a limit (ulimit -v or -d, a
     * batch scheduler's, a sandbox's) a chunk starts at a sixteenth of it: a
     * chunk's address space counts in full, and one of 256 MiB for a 300 KB
     * block would leave the program's own mappings (thread stacks, files)
     * without room. */
    size_t chunk_size = ARENA_CHUNK_SIZE;
    for (uint64_t limit = os_mapping_limit();
         chunk_size > ARENA_CHUNK_MIN && chunk_size > limit / 16;)
        chunk_size /= 2;
    void *base = NULL;
    for (; base == NULL && chunk_size >= ARENA_CHUNK_MIN && chunk_size / 2 >= size; chunk_size /= 2)
        base = os_map(chunk_size);
    if (base) {
        chunk_size *= 2; /* the loop halved it once more */
    } else {
        chunk_size = size;
        base = os_map_block(size);
    }
    if (base == NULL) return -1;
    os_advise_arena_chunk(base, chunk_size);
    struct arena_chunk *c = &chunks[slot];
    *c = (struct arena_chunk){(uintptr_t)base, chunk_size, NULL, base, 0};
    if ((unsigned)slot >= chunk_slots_used) chunk_slots_used = (unsigned)slot + 1;
    extent_insert(c, (uintptr_t)base + CHUNK_HEADER_SIZE, chunk_size - CHUNK_HEADER_SIZE, false, 0);
    return slot;
}

#define CHUNK_UNOWNED (-1) /* run_best: chunks that are no thread's home */
#define CHUNK_ANY     (-2)

static struct arena_chunk *chunk_of(uintptr_t address) {
    for (unsigned i = 0; i < chunk_slots_used; i++)
        if (address - chunks[i].base < chunks[i].size) return &chunks[i];
    fatal_error("free(): arena block outside the arena");
}

/* A range of chunk c back on its free list (huge lock held); `now`: the
 * time it was freed. */
static void range_return(struct arena_chunk *c, uintptr_t start, size_t size, bool dirty,
                         uint32_t now) {
    if (!extent_insert(c, start, size, dirty, now) && dirty)
        os_release((void *)start, size); /* the list is full: the range stays out of use */
}

static uintptr_t align_up(uintptr_t address, size_t alignment) {
    return (address + alignment - 1) & ~(uintptr_t)(alignment - 1);
}

/* A run found by run_best: its chunk and its first extent there. */
struct arena_run {
    struct arena_chunk *chunk;
    unsigned index;
};

/* The smallest run in chunk `want` (a slot, or one of the kinds above)
 * that holds `size` bytes from its first `alignment`-aligned address; true
 * and the run in *best if there is one. The room before that address goes
 * back on the list, so it needs a slot there when the list is full. */
static bool run_best(size_t size, size_t alignment, int want, struct arena_run *best) {
    size_t best_bytes = 0;
    unsigned from = want >= 0 ? (unsigned)want : 0;
    unsigned to = want >= 0 ? (unsigned)want + 1 : chunk_slots_used;
    for (unsigned slot = from; slot < to; slot++) {
        struct arena_chunk *c = &chunks[slot];
        if (c->base == 0 || (want == CHUNK_UNOWNED && c->home_of != NULL)) continue;
        for (unsigned i = 0, next; i < c->extent_count; i = next) {
            size_t bytes = run_bytes(c, i, &next);
            size_t head = align_up(c->extents[i].start, alignment) - c->extents[i].start;
            if (head && c->extent_count == CHUNK_EXTENTS_MAX) continue;
            if (bytes >= head + size && (best_bytes == 0 || bytes < best_bytes)) {
                *best = (struct arena_run){c, i};
                best_bytes = bytes;
            }
        }
    }
    return best_bytes != 0;
}

/* Takes `size` bytes at the first `alignment`-aligned address of the run
 * (run_best found it long enough); the room before it goes back on the list. */
static uintptr_t run_carve_aligned(struct arena_run run, size_t size, size_t alignment,
                                   uintptr_t *dirty_end) {
    uintptr_t start = run.chunk->extents[run.index].start, aligned = align_up(start, alignment);
    run_carve(run.chunk, run.index, aligned - start + size, dirty_end);
    if (aligned > start)
        range_return(run.chunk, start, aligned - start, *dirty_end > start, clock_ms());
    return aligned;
}

/* The block of run_carve_aligned, counted as handed out. */
static void *run_take(struct arena_run run, size_t size, size_t alignment, uintptr_t *dirty_end) {
    uintptr_t start = run_carve_aligned(run, size, alignment, dirty_end);
    used_bytes_add(size, true);
    return (void *)start;
}

static void chunk_make_home(struct arena_chunk *c, struct heap *heap) {
    if (heap->arena_home) chunks[heap->arena_home - 1].home_of = NULL;
    c->home_of = heap;
    heap->arena_home = (uint16_t)(c - chunks + 1);
}

/* Each thread carves its own chunk first (its "home"), then chunks that are
 * no thread's home, then a new chunk, then any: a block freed by the thread
 * that allocates next is in its cache still, where another thread's is not
 * (ebizzy, 2 threads of 192 KiB-1 MiB buffers: 101k records/s with one
 * shared pool against 127-131k with homes or per-thread segments). */
void *arena_take(size_t size, size_t alignment, uintptr_t *dirty_end, struct heap *heap) {
    bool can_own = heap != &g_empty_heap; /* not a thread past its exit */
    int home = can_own ? (int)heap->arena_home - 1 : -1;
    struct arena_run best;
    bool found = home >= 0 && run_best(size, alignment, home, &best);
    if (!found && run_best(size, alignment, CHUNK_UNOWNED, &best)) {
        found = true;
        if (home < 0 && can_own) chunk_make_home(best.chunk, heap);
    }
    if (!found) {
        /* a new chunk's first extent is only page aligned */
        int slot = chunk_add(size + alignment - OS_PAGE_SIZE);
        if (slot >= 0) {
            if (can_own) chunk_make_home(&chunks[slot], heap);
            found = run_best(size, alignment, slot, &best);
        }
    }
    if (!found && !run_best(size, alignment, CHUNK_ANY, &best)) return NULL;
    return run_take(best, size, alignment, dirty_end);
}

/* A block the mmap threshold would map on its own, from memory the arena
 * holds resident: `size` bytes from the start of a dirty extent on, at most
 * an eighth of them clean (the most dirty such place; the smallest extent
 * among equals), or NULL. Mapping such a block while that much freed memory
 * idles here faults in new pages for nothing: `large`, whose biggest blocks
 * keep passing a threshold that only their own frees raise, mapped and
 * unmapped a dozen 8 MB blocks, half its page faults. A block that would be
 * more than an eighth fresh pages still gets a mapping of its own, which its
 * free unmaps at once (with half, `large` faulted 16% less again, but held
 * 3% more at its peak: the fresh pages stay with the arena after the free). */
void *arena_take_resident(size_t size, uintptr_t *dirty_end) {
    struct arena_run best = {NULL, 0};
    size_t best_dirty = 0, best_size = 0;
    for (unsigned slot = 0; slot < chunk_slots_used; slot++) {
        struct arena_chunk *c = &chunks[slot];
        for (unsigned i = 0; c->base && i < c->extent_count; i++) {
            const struct arena_extent *extents = c->extents;
            if (!extents[i].dirty) continue;
            size_t covered = 0, dirty = 0;
            /* stops once too much of it is clean: the walk stays short */
            for (unsigned j = i;; j++) {
                size_t take = extents[j].size < size - covered ? extents[j].size : size - covered;
                if (extents[j].dirty) dirty += take;
                covered += take;
                if (covered == size || covered - dirty > size / 8 || !extent_joins_next(c, j))
                    break;
            }
            if (covered < size || dirty < size - size / 8) continue;
            if (dirty > best_dirty || (dirty == best_dirty && extents[i].size < best_size)) {
                best = (struct arena_run){c, i};
                best_dirty = dirty;
                best_size = extents[i].size;
            }
        }
    }
    return best.chunk == NULL ? NULL : run_take(best, size, OS_PAGE_SIZE, dirty_end);
}

void arena_disown(struct heap *heap) {
    if (heap->arena_home) chunks[heap->arena_home - 1].home_of = NULL;
    heap->arena_home = 0;
}

void arena_give(uintptr_t start, size_t size, bool dirty, uint32_t now) {
    used_bytes_add(size, false);
    range_return(chunk_of(start), start, size, dirty, now);
}

/* Address space is short and a segment cannot be mapped: the chunks' free
 * address space holds it instead, taken from any chunk, its pages released
 * so that it reads as zero as a fresh mapping does. Not counted as the
 * arena's: the segment counts itself. */
void *arena_lend(size_t size, size_t alignment) {
    uintptr_t lent = 0, dirty_end;
    struct arena_run best;
    spin_lock(&g_huge_lock);
    if (run_best(size, alignment, CHUNK_ANY, &best))
        lent = run_carve_aligned(best, size, alignment, &dirty_end);
    spin_unlock(&g_huge_lock);
    if (lent && !os_release((void *)lent, size)) {
        arena_lent_back(lent, size);
        lent = 0;
    }
    return (void *)lent;
}

void arena_lent_back(uintptr_t start, size_t size) {
    spin_lock(&g_huge_lock);
    range_return(chunk_of(start), start, size, true, clock_ms());
    spin_unlock(&g_huge_lock);
}

bool arena_grow(uintptr_t start, size_t old_size, size_t new_size) {
    struct arena_chunk *c = chunk_of(start);
    unsigned i = extent_index_from(c, start + old_size);
    if (i == c->extent_count || c->extents[i].start != start + old_size) return false;
    unsigned after;
    if (run_bytes(c, i, &after) < new_size - old_size) return false;
    uintptr_t dirty_end;
    run_carve(c, i, new_size - old_size, &dirty_end);
    used_bytes_add(new_size - old_size, true);
    return true;
}

/* Unmaps the chunks that are one clean extent from end to end (huge lock
 * held; taken again around each munmap). */
static void chunks_unmap_free(void) {
    for (unsigned slot = 0; slot < chunk_slots_used; slot++) {
        struct arena_chunk c = chunks[slot];
        if (c.base == 0 || c.extent_count != 1 || c.extents[0].dirty ||
            c.extents[0].size != c.size - CHUNK_HEADER_SIZE)
            continue;
        if (c.home_of) arena_disown(c.home_of);
        chunks[slot].base = 0;
        chunks[slot].extent_count = 0;
        spin_unlock(&g_huge_lock);
        os_unmap((void *)c.base, c.size);
        spin_lock(&g_huge_lock);
    }
}

/* Takes up to RELEASE_BATCH dirty extents idle for the purge delay (all
 * dirty ones: everything) off the lists, into ranges[] and their chunks into
 * owner[]; returns how many. */
static unsigned release_batch_take(bool everything, uint32_t now, struct iovec *ranges,
                                   struct arena_chunk **owner) {
    unsigned count = 0;
    for (unsigned slot = 0; slot < chunk_slots_used && count < RELEASE_BATCH; slot++) {
        struct arena_chunk *c = &chunks[slot];
        for (unsigned i = 0; c->base && i < c->extent_count && count < RELEASE_BATCH;) {
            struct arena_extent *e = &c->extents[i];
            if (!e->dirty ||
                (!everything && (uint32_t)(now - e->freed_ms) < OPTION(purge_delay_ms))) {
                i++;
                continue;
            }
            ranges[count] = (struct iovec){(void *)e->start, e->size};
            owner[count++] = c;
            dirty_bytes_add(e->size, false);
            extent_remove(c, i);
        }
    }
    return count;
}

bool arena_release(bool everything, uint32_t now) {
    bool released = false;
    os_unmapping_begin();
    spin_lock(&g_huge_lock);
    for (;;) {
        /* Off the lists while the kernel releases them, so no block is
         * carved from a range being zeroed, and its chunk stays mapped. */
        struct iovec ranges[RELEASE_BATCH];
        struct arena_chunk *owner[RELEASE_BATCH];
        unsigned count = release_batch_take(everything, now, ranges, owner);
        if (count == 0) break;
        spin_unlock(&g_huge_lock);
        uint64_t went = os_release_ranges(ranges, count);
        spin_lock(&g_huge_lock);
        for (unsigned k = 0; k < count; k++) {
            bool clean = went >> k & 1;
            released |= clean;
            /* a range the list has no room for stays out of use, released */
            if (!extent_insert(owner[k], (uintptr_t)ranges[k].iov_base, ranges[k].iov_len, !clean,
                               now) &&
                !clean)
                os_release(ranges[k].iov_base, ranges[k].iov_len);
        }
        if (count < RELEASE_BATCH || went == 0) break;
    }
    chunks_unmap_free();
    spin_unlock(&g_huge_lock);
    os_unmapping_end();
    return released;
}
