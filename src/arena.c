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
 * Locks: each chunk has its own, over its lists and its home; a block is
 * found from its address by the chunks' ranges, read without a lock. The
 * huge lock, taken before any chunk's, is held to add or remove a chunk and
 * to search several: a thread that carves and frees blocks in its home chunk
 * takes no lock another thread takes, as glibc's per-thread heaps. System
 * calls of a release are made on extents taken off the lists first
 * (arena_release.c, which gives dirty extents back and unmaps empty
 * chunks). The types and the helpers both files use are in arena.h. */
#define _GNU_SOURCE
#include "arena.h"

/* Address space, not memory (NORESERVE). 64 MiB chunks left `large` (blocks
 * up to 8 MiB, grown by realloc) at 131 MiB of peak RSS against 89.8 with
 * 256 MiB: blocks cannot span chunks, so smaller ones fragment. */
#define ARENA_CHUNK_SIZE ((size_t)256 << 20)
#define ARENA_CHUNK_MIN  ((size_t)16 << 20) /* smallest tried when address space is short */

LARGE_BSS struct chunk_range g_arena_ranges[ARENA_CHUNKS_MAX];
LARGE_BSS struct arena_chunk g_arena_chunks[ARENA_CHUNKS_MAX];
static _Atomic unsigned chunk_slots_used; /* slots below it may be in use; huge lock */
_Atomic uint64_t g_arena_dirty_bytes;     /* bytes of dirty extents */
_Atomic uint64_t g_arena_used_bytes;      /* bytes in blocks handed out */

WARM void counter_add(_Atomic uint64_t *counter, size_t bytes, bool add) {
    /* relaxed: statistics and a purge trigger; each chunk's lock orders its lists */
    if (add)
        atomic_fetch_add_explicit(counter, bytes, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(counter, bytes, memory_order_relaxed);
}
#define used_bytes_add(bytes, add)  counter_add(&g_arena_used_bytes, bytes, add)
#define dirty_bytes_add(bytes, add) counter_add(&g_arena_dirty_bytes, bytes, add)

unsigned slots_used(void) {
    /* acquire: a slot counted here was written before the count */
    return atomic_load_explicit(&chunk_slots_used, memory_order_acquire);
}

WARM uintptr_t chunk_base(const struct arena_chunk *c) {
    /* acquire: the chunk's header and size were written before its base */
    return atomic_load_explicit(&g_arena_ranges[c - g_arena_chunks].base, memory_order_acquire);
}

/* The first of `count` entries sorted by start that starts at or after
 * `address`; an entry is `stride` bytes, its start its first member (both
 * lists of a chunk, its extents and its blocks). */
static unsigned sorted_index_from(const void *entries, size_t stride, unsigned count,
                                  uintptr_t address) {
    unsigned low = 0, high = count;
    while (low < high) {
        unsigned mid = (low + high) / 2;
        if (*(const uintptr_t *)((const char *)entries + mid * stride) < address)
            low = mid + 1;
        else
            high = mid;
    }
    return low;
}

/* ---- a chunk's free extents (its lock held) ---- */

/* The first extent of chunk c that starts at or after `address`. */
static unsigned extent_index_from(const struct arena_chunk *c, uintptr_t address) {
    return sorted_index_from(c->header->extents, sizeof(struct arena_extent), c->extent_count,
                             address);
}

/* Shifts by hand: libc's memmove would be one more import to map (tests/suite-static.sh). */
WARM void extent_remove(struct arena_chunk *c, unsigned i) {
    for (; i + 1 < c->extent_count; i++)
        c->header->extents[i] = c->header->extents[i + 1];
    c->extent_count--;
}

/* Shifts extents i.. up by one: slot i is free to write (the list has room). */
static inline __attribute__((always_inline)) void extent_slot_open(struct arena_chunk *c,
                                                                   unsigned i) {
    for (unsigned j = c->extent_count; j > i; j--)
        c->header->extents[j] = c->header->extents[j - 1];
    c->extent_count++;
}

/* Whether extent i is followed, without a gap, by extent i + 1. */
WARM static bool extent_joins_next(const struct arena_chunk *c, unsigned i) {
    const struct arena_extent *extents = c->header->extents;
    return i + 1 < c->extent_count && extents[i].start + extents[i].size == extents[i + 1].start;
}

/* Adds a free range (not on the list) of chunk c, merging it with
 * neighbours in the same state. False: the list is full (the caller keeps
 * the range). */
WARM static bool extent_insert(struct arena_chunk *c, uintptr_t start, size_t size, bool dirty,
                               uint32_t now) {
    struct arena_extent *extents = c->header->extents;
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
        extent_slot_open(c, i);
        extents[i] = (struct arena_extent){start, size, now, dirty};
    }
    if (dirty) dirty_bytes_add(size, true);
    return true;
}

/* Takes `size` bytes from the run of adjacent extents that starts at extent
 * i (the caller checked that it is long enough). *dirty_end: the end of the
 * last dirty part taken (0: all of it was clean, so it reads as zeros). */
WARM static void run_carve(struct arena_chunk *c, unsigned i, size_t size, uintptr_t *dirty_end) {
    *dirty_end = 0;
    while (size) {
        struct arena_extent *e = &c->header->extents[i];
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
    size_t bytes = c->header->extents[i].size;
    while (extent_joins_next(c, i)) {
        i++;
        bytes += c->header->extents[i].size;
    }
    *after = i + 1;
    return bytes;
}

/* A range of chunk c back on its free list; `now`: the time it was freed. */
WARM void range_return(struct arena_chunk *c, uintptr_t start, size_t size, bool dirty,
                       uint32_t now) {
    if (!extent_insert(c, start, size, dirty, now) && dirty)
        os_release((void *)start, size); /* the list is full: the range stays out of use */
}

/* ---- a chunk's blocks (its lock held) ---- */

/* The first block of chunk c that starts at or after `address`. */
static unsigned block_index_from(const struct arena_chunk *c, uintptr_t address) {
    return sorted_index_from(c->header->blocks, sizeof(struct arena_block), c->block_count,
                             address);
}

/* The block handed out at `address`, or NULL. */
WARM static struct arena_block *block_find(const struct arena_chunk *c, uintptr_t address) {
    unsigned i = block_index_from(c, address);
    return i < c->block_count && c->header->blocks[i].start == address ? &c->header->blocks[i]
                                                                       : NULL;
}

/* dirty_end: run_carve's (0: the block reads as zeros) */
static void block_record(struct arena_chunk *c, uintptr_t start, size_t size, bool retain,
                         uintptr_t dirty_end) {
    struct arena_block *blocks = c->header->blocks;
    unsigned i = block_index_from(c, start);
    for (unsigned j = c->block_count; j > i; j--)
        blocks[j] = blocks[j - 1];
    c->block_count++;
    uint32_t dirty_pages =
        dirty_end > start ? (uint32_t)((dirty_end - start + OS_PAGE_SIZE - 1) / OS_PAGE_SIZE) : 0;
    blocks[i] = (struct arena_block){start, size, retain, dirty_pages};
}

static void block_forget(struct arena_chunk *c, struct arena_block *block) {
    unsigned i = (unsigned)(block - c->header->blocks);
    for (; i + 1 < c->block_count; i++)
        c->header->blocks[i] = c->header->blocks[i + 1];
    c->block_count--;
}

/* ---- chunks ---- */

/* Maps a chunk for a request of `size` bytes: a standard one, or one of the
 * request's size (and a header) for a request over half of that. Only that
 * one is charged to the commit, as a mapping of glibc's is, so an impossible
 * request still fails under the kernel's overcommit heuristic. Returns it,
 * locked, or NULL: no address space, or no slot (huge lock held). */
static struct arena_chunk *chunk_add(size_t size) {
    int slot = -1;
    for (int i = 0; i < ARENA_CHUNKS_MAX && slot < 0; i++)
        /* relaxed: the huge lock orders the slots' writers */
        if (atomic_load_explicit(&g_arena_ranges[i].base, memory_order_relaxed) == 0) slot = i;
    if (slot < 0 || size > SIZE_MAX - CHUNK_HEADER_SIZE) return NULL;
    size += CHUNK_HEADER_SIZE;
    /* Address space short (RLIMIT_AS): halve the chunk down to 16 MiB, then
     * one of the request's size. Under such a limit (ulimit -v or -d, a
     * batch scheduler's, a sandbox's) a chunk starts at a sixteenth of it: a
     * chunk's address space counts in full, and one of 256 MiB for a 300 KB
     * block would leave the program's own mappings (thread stacks, files)
     * without room. */
    size_t mapped = ARENA_CHUNK_SIZE;
    for (uint64_t limit = os_mapping_limit(); mapped > ARENA_CHUNK_MIN && mapped > limit / 16;)
        mapped /= 2;
    void *base = NULL;
    for (; base == NULL && mapped >= ARENA_CHUNK_MIN && mapped / 2 >= size; mapped /= 2)
        base = os_map(mapped);
    if (base) {
        mapped *= 2; /* the loop halved it once more */
    } else {
        mapped = size;
        base = os_map_block(size);
    }
    if (base == NULL) return NULL;
    os_arena_chunk_mapped(base, mapped);
    struct arena_chunk *c = &g_arena_chunks[slot];
    spin_lock(&c->lock);
    c->home_of = NULL;
    c->header = base;
    c->extent_count = c->block_count = c->freed_recent_next = 0;
    extent_insert(c, (uintptr_t)base + CHUNK_HEADER_SIZE, mapped - CHUNK_HEADER_SIZE, false, 0);
    /* relaxed: published by the release store of the base after it */
    atomic_store_explicit(&g_arena_ranges[slot].size, mapped, memory_order_relaxed);
    atomic_store_explicit(&g_arena_ranges[slot].base, (uintptr_t)base, memory_order_release);
    if ((unsigned)slot >= slots_used())
        atomic_store_explicit(&chunk_slots_used, (unsigned)slot + 1, memory_order_release);
    return c;
}

/* The chunk whose range holds `address`, locked, or NULL. */
WARM static struct arena_chunk *chunk_lock_holding(uintptr_t address) {
    for (unsigned i = 0, used = slots_used(); i < used; i++) {
        struct arena_chunk *c = &g_arena_chunks[i];
        uintptr_t base = chunk_base(c);
        if (base == 0 || address - base >= chunk_size(c)) continue;
        spin_lock(&c->lock);
        /* the chunk may have gone, and another come, before the lock */
        base = chunk_base(c);
        if (base != 0 && address - base < chunk_size(c)) return c;
        spin_unlock(&c->lock);
        return NULL;
    }
    return NULL;
}

static uintptr_t align_up(uintptr_t address, size_t alignment) {
    return (address + alignment - 1) & ~(uintptr_t)(alignment - 1);
}

/* The smallest run of chunk c (locked) that holds `size` bytes from its
 * first `alignment`-aligned address: true, its first extent in *index and
 * its bytes in *bytes. The room before that address goes back on the list,
 * so it needs a slot there when the list is full; the block, one in the
 * list of blocks. */
WARM static bool run_best(const struct arena_chunk *c, size_t size, size_t alignment,
                          unsigned *index, size_t *bytes) {
    size_t best_bytes = 0;
    if (c->block_count == CHUNK_BLOCKS_MAX) return false;
    for (unsigned i = 0, next; i < c->extent_count; i = next) {
        size_t run = run_bytes(c, i, &next);
        uintptr_t start = c->header->extents[i].start;
        size_t head = align_up(start, alignment) - start;
        if (head && c->extent_count == CHUNK_EXTENTS_MAX) continue;
        if (run >= head + size && (best_bytes == 0 || run < best_bytes)) {
            *index = i;
            best_bytes = run;
        }
    }
    *bytes = best_bytes;
    return best_bytes != 0;
}

/* Takes `size` bytes at the first `alignment`-aligned address of the run
 * that starts at extent i (run_best found it long enough); the room before
 * it goes back on the list. */
WARM static uintptr_t run_carve_aligned(struct arena_chunk *c, unsigned i, size_t size,
                                        size_t alignment, uintptr_t *dirty_end) {
    uintptr_t start = c->header->extents[i].start, aligned = align_up(start, alignment);
    run_carve(c, i, aligned - start + size, dirty_end);
    if (aligned > start) range_return(c, start, aligned - start, *dirty_end > start, clock_ms());
    return aligned;
}

/* The block of run_carve_aligned, recorded and counted as handed out. */
WARM static uintptr_t run_take(struct arena_chunk *c, unsigned i, size_t size, size_t alignment,
                               bool retain, uintptr_t *dirty_end) {
    uintptr_t start = run_carve_aligned(c, i, size, alignment, dirty_end);
    block_record(c, start, size, retain, *dirty_end);
    used_bytes_add(size, true);
    return start;
}

/* Chunk c (locked) becomes the home of `heap`, this thread's; the one it had
 * is no thread's now (huge lock held: no other thread holds two chunk locks). */
WARM static void chunk_make_home(struct arena_chunk *c, struct heap *heap) {
    if (heap->arena_home && &g_arena_chunks[heap->arena_home - 1] != c) {
        struct arena_chunk *old = &g_arena_chunks[heap->arena_home - 1];
        spin_lock(&old->lock);
        if (old->home_of == heap) old->home_of = NULL;
        spin_unlock(&old->lock);
    }
    c->home_of = heap;
    heap->arena_home = (uint16_t)(c - g_arena_chunks + 1);
}

/* The most dirty place of chunk c (locked) where `size` bytes from the start
 * of a dirty extent on are at most an eighth clean (the smallest extent
 * among equals): true, the extent in *index and the dirty bytes in *dirty. */
static bool resident_best(const struct arena_chunk *c, size_t size, unsigned *index,
                          size_t *dirty_best) {
    const struct arena_extent *extents = c->header->extents;
    size_t best_dirty = 0, best_size = 0;
    if (c->block_count == CHUNK_BLOCKS_MAX) return false;
    for (unsigned i = 0; i < c->extent_count; i++) {
        if (!extents[i].dirty) continue;
        size_t covered = 0, dirty = 0;
        /* stops once too much of it is clean: the walk stays short */
        for (unsigned j = i;; j++) {
            size_t take = extents[j].size < size - covered ? extents[j].size : size - covered;
            if (extents[j].dirty) dirty += take;
            covered += take;
            if (covered == size || covered - dirty > size / 8 || !extent_joins_next(c, j)) break;
        }
        if (covered < size || dirty < size - size / 8) continue;
        if (dirty > best_dirty || (dirty == best_dirty && extents[i].size < best_size)) {
            *index = i;
            best_dirty = dirty;
            best_size = extents[i].size;
        }
    }
    *dirty_best = best_dirty;
    return best_dirty != 0;
}

/* What chunk_best looks for: the smallest run that fits in a chunk that is
 * no thread's home, or in any, or the most resident place (resident_best). */
enum chunk_pick { PICK_UNOWNED, PICK_ANY, PICK_RESIDENT };

/* How well chunk c (locked) serves the request, lower better, 0 not at
 * all; the run in *index. */
WARM static size_t chunk_fit(const struct arena_chunk *c, size_t size, size_t alignment,
                             enum chunk_pick pick, unsigned *index) {
    size_t value;
    if (pick == PICK_RESIDENT) return resident_best(c, size, index, &value) ? SIZE_MAX - value : 0;
    if (pick == PICK_UNOWNED && c->home_of != NULL) return 0;
    return run_best(c, size, alignment, index, &value) ? value : 0;
}

/* Under the huge lock: the chunk, locked, that serves the request best, and
 * the run in *index; NULL if none (or the best one changed before it could
 * be taken: the caller goes on to its next choice).
 *
 * PICK_RESIDENT is for a block the mmap threshold would map on its own,
 * from memory the arena holds resident: mapping such a block while that
 * much freed memory idles here faults in new pages for nothing: `large`,
 * whose biggest blocks keep passing a threshold that only their own frees
 * raise, mapped and unmapped a dozen 8 MB blocks, half its page faults. A
 * block that would be more than an eighth fresh pages still gets a mapping
 * of its own, which its free unmaps at once (with half, `large` faulted 16%
 * less again, but held 3% more at its peak: the fresh pages stay with the
 * arena after the free). */
WARM static struct arena_chunk *chunk_best(size_t size, size_t alignment, enum chunk_pick pick,
                                           unsigned *index) {
    struct arena_chunk *best = NULL;
    size_t best_fit = 0;
    for (unsigned slot = 0, used = slots_used(); slot < used; slot++) {
        struct arena_chunk *c = &g_arena_chunks[slot];
        if (chunk_base(c) == 0) continue;
        spin_lock(&c->lock);
        size_t fit = chunk_fit(c, size, alignment, pick, index);
        if (fit && (best == NULL || fit < best_fit)) {
            best = c;
            best_fit = fit;
        }
        spin_unlock(&c->lock);
    }
    if (best == NULL) return NULL;
    spin_lock(&best->lock);
    if (chunk_fit(best, size, alignment, pick, index) == 0) {
        spin_unlock(&best->lock);
        return NULL;
    }
    return best;
}

/* arena_alloc past the home chunk: chunks that are no thread's home, then a
 * new chunk, then any (huge lock held). */
static uintptr_t alloc_elsewhere(size_t size, size_t alignment, bool retain, uintptr_t *dirty_end,
                                 struct heap *heap, bool can_own) {
    unsigned index;
    struct arena_chunk *c = chunk_best(size, alignment, PICK_UNOWNED, &index);
    if (c && can_own && heap->arena_home == 0) chunk_make_home(c, heap);
    if (c == NULL) {
        /* a new chunk's first extent is only page aligned */
        c = chunk_add(size + alignment - OS_PAGE_SIZE);
        size_t bytes;
        if (c && can_own) chunk_make_home(c, heap);
        if (c && !run_best(c, size, alignment, &index, &bytes)) {
            spin_unlock(&c->lock);
            c = NULL;
        }
    }
    if (c == NULL) c = chunk_best(size, alignment, PICK_ANY, &index);
    if (c == NULL) return 0;
    uintptr_t block = run_take(c, index, size, alignment, retain, dirty_end);
    spin_unlock(&c->lock);
    return block;
}

/* Each thread carves its own chunk first (its "home"), then chunks that are
 * no thread's home, then a new chunk, then any: a block freed by the thread
 * that allocates next is in its cache still, where another thread's is not
 * (ebizzy, 2 threads of 192 KiB-1 MiB buffers: 101k records/s with one
 * shared pool against 127-131k with homes or per-thread segments). */
WARM void *arena_alloc(size_t size, size_t alignment, bool resident_only, bool retain,
                       uintptr_t *dirty_end, struct heap *heap) {
    bool can_own = heap != &g_empty_heap; /* not a thread past its exit */
    uintptr_t block = 0;
    if (!resident_only && can_own && heap->arena_home) {
        struct arena_chunk *c = &g_arena_chunks[heap->arena_home - 1];
        unsigned index;
        size_t bytes;
        spin_lock(&c->lock);
        bool home = c->home_of == heap; /* else the chunk went, or is another's */
        if (home && run_best(c, size, alignment, &index, &bytes))
            block = run_take(c, index, size, alignment, retain, dirty_end);
        spin_unlock(&c->lock);
        if (!home) heap->arena_home = 0;
        if (block) return (void *)block;
    }
    spin_lock(&g_huge_lock);
    if (resident_only) {
        unsigned index;
        struct arena_chunk *c = chunk_best(size, OS_PAGE_SIZE, PICK_RESIDENT, &index);
        if (c) {
            block = run_take(c, index, size, OS_PAGE_SIZE, false, dirty_end);
            spin_unlock(&c->lock);
        }
    } else {
        block = alloc_elsewhere(size, alignment, retain, dirty_end, heap, can_own);
    }
    spin_unlock(&g_huge_lock);
    return (void *)block;
}

/* ---- blocks ---- */

/* A range of chunk c (locked) that no block holds any longer back on its
 * list; in aggressive mode released first, as a mapping of its own would
 * be, off the list meanwhile, so that no block is carved from it and the
 * chunk stays. Unlocks c. */
WARM static void range_give(struct arena_chunk *c, uintptr_t start, size_t size, uint32_t now) {
    bool dirty = true;
    if (OPTION(aggressive_madvise)) {
        spin_unlock(&c->lock);
        dirty = !os_release((void *)start, size);
        spin_lock(&c->lock);
    }
    range_return(c, start, size, dirty, now);
    spin_unlock(&c->lock);
}

WARM int arena_free(void *p, size_t *size, bool *retain) {
    struct arena_chunk *c = chunk_lock_holding((uintptr_t)p);
    if (c == NULL) return ARENA_NONE;
    struct arena_block *found = block_find(c, (uintptr_t)p);
    if (found == NULL) {
        spin_unlock(&c->lock);
        return ARENA_NO;
    }
    struct arena_block block = *found;
    block_forget(c, found);
    c->header->freed_recent[c->freed_recent_next++ % FREED_RECENT] = block.start;
    used_bytes_add(block.size, false);
    *size = block.size;
    *retain = block.retain;
    range_give(c, block.start, block.size, clock_ms());
    return ARENA_DONE;
}

WARM int arena_usable_size(const void *p, size_t *usable, uintptr_t *clean_from) {
    struct arena_chunk *c = chunk_lock_holding((uintptr_t)p);
    if (c == NULL) return ARENA_NONE;
    struct arena_block *found = block_find(c, (uintptr_t)p);
    if (found) {
        *usable = found->size;
        if (clean_from) *clean_from = found->start + (uintptr_t)found->dirty_pages * OS_PAGE_SIZE;
    }
    spin_unlock(&c->lock);
    return found ? ARENA_DONE : ARENA_NO;
}

RARE bool arena_recently_freed(const void *p) {
    struct arena_chunk *c = chunk_lock_holding((uintptr_t)p);
    bool found = false;
    if (c == NULL) return false;
    for (unsigned i = 0; i < FREED_RECENT; i++)
        found |= c->header->freed_recent[i] == (uintptr_t)p;
    spin_unlock(&c->lock);
    return found;
}

/* Grows the block at `start` of chunk c (locked) into the free extents
 * right after it, if they are long enough. */
static bool block_grow(struct arena_chunk *c, uintptr_t start, size_t old_size, size_t new_size) {
    unsigned i = extent_index_from(c, start + old_size);
    if (i == c->extent_count || c->header->extents[i].start != start + old_size) return false;
    unsigned after;
    if (run_bytes(c, i, &after) < new_size - old_size) return false;
    uintptr_t dirty_end;
    run_carve(c, i, new_size - old_size, &dirty_end);
    used_bytes_add(new_size - old_size, true);
    return true;
}

WARM int arena_resize(void *p, size_t size) {
    struct arena_chunk *c = chunk_lock_holding((uintptr_t)p);
    if (c == NULL) return ARENA_NONE;
    struct arena_block *found = block_find(c, (uintptr_t)p);
    /* small enough for a segment's slices: the caller copies */
    if (found == NULL || size <= LARGE_MAX) {
        spin_unlock(&c->lock);
        return ARENA_NO;
    }
    size_t old_size = found->size;
    if (size > old_size && !block_grow(c, found->start, old_size, size)) {
        spin_unlock(&c->lock);
        return ARENA_NO;
    }
    found->size = size;
    if (size < old_size) {
        used_bytes_add(old_size - size, false);
        range_give(c, (uintptr_t)p + size, old_size - size, clock_ms());
    } else {
        spin_unlock(&c->lock);
    }
    return ARENA_DONE;
}

void arena_disown(struct heap *heap, bool lock) {
    if (heap->arena_home) {
        struct arena_chunk *c = &g_arena_chunks[heap->arena_home - 1];
        if (lock) spin_lock(&c->lock);
        if (c->home_of == heap) c->home_of = NULL;
        if (lock) spin_unlock(&c->lock);
    }
    heap->arena_home = 0;
}

/* ---- address space lent to segments ---- */

/* Takes `size` bytes at the first or the last `alignment`-aligned address of
 * the run at extent i (run_best found it long enough), whichever leaves the
 * longer free piece; the first when the list has no slot for a split. */
RARE static uintptr_t run_carve_aligned_edge(struct arena_chunk *c, unsigned i, size_t size,
                                             size_t alignment, uintptr_t *dirty_end) {
    struct arena_extent *extents = c->header->extents;
    unsigned last = i; /* not run_bytes: a call from here made it a function of its own */
    while (extent_joins_next(c, last))
        last++;
    uintptr_t start = extents[i].start, end = extents[last].start + extents[last].size;
    uintptr_t place = (end - size) & ~(alignment - 1);
    if (end - (align_up(start, alignment) + size) >= place - start ||
        c->extent_count == CHUNK_EXTENTS_MAX)
        return run_carve_aligned(c, i, size, alignment, dirty_end);
    while (extents[i].start + extents[i].size <= place)
        i++;
    if (extents[i].start < place) {
        /* split at place; once carved, the two parts no longer touch */
        extent_slot_open(c, i + 1);
        extents[i + 1] = extents[i];
        extents[i + 1].start = place;
        extents[i + 1].size = extents[i].start + extents[i].size - place;
        extents[i].size = place - extents[i].start;
        i++;
    }
    run_carve(c, i, size, dirty_end);
    return place;
}

/* Address space is short and a segment cannot be mapped: the chunks' free
 * address space holds it instead, taken from any chunk, its pages released
 * so that it reads as zero as a fresh mapping does. Not counted as the
 * arena's: the segment counts itself. At its run's first aligned place, a
 * 15 MiB run kept 8 MiB in one piece where its other edge keeps 11 (oom lent). */
RARE void *arena_lend(size_t size, size_t alignment) {
    uintptr_t lent = 0, dirty_end;
    unsigned index;
    spin_lock(&g_huge_lock);
    struct arena_chunk *c = chunk_best(size, alignment, PICK_ANY, &index);
    if (c) {
        lent = run_carve_aligned_edge(c, index, size, alignment, &dirty_end);
        spin_unlock(&c->lock);
    }
    spin_unlock(&g_huge_lock);
    if (lent && !os_release((void *)lent, size)) {
        arena_lent_back(lent, size);
        lent = 0;
    }
    return (void *)lent;
}

RARE void arena_lent_back(uintptr_t start, size_t size) {
    struct arena_chunk *c = chunk_lock_holding(start);
    if (c == NULL) fatal_error("free(): arena block outside the arena");
    range_return(c, start, size, true, clock_ms());
    spin_unlock(&c->lock);
}

/* Every purge pass comes here: a process that never made a chunk (no block
 * over 256 KiB under the mmap threshold) returns at once, without mapping
 * the warm code (tests/test_rare_code_apart.c). Here, beside slots_used:
 * gcc then knows which registers that call leaves alone (20 bytes less). */
bool arena_release(bool everything, uint32_t now) {
    if (slots_used() == 0) return false;
    return arena_release_chunks(everything, now);
}
