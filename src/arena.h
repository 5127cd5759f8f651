/* The arena's own types and the helpers its two files share: arena.c carves
 * and frees blocks and lends address space; arena_release.c gives the free
 * extents back to the kernel, unmaps empty chunks and locks every chunk for
 * fork. Included by those two files only. */
#ifndef TIDEMALLOC_ARENA_H
#define TIDEMALLOC_ARENA_H

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

/* A block handed out. Invariant: a chunk's blocks are sorted by start and
 * overlap neither one another nor a free extent. */
struct arena_block {
    uintptr_t start;      /* the address handed out, page aligned */
    size_t size;          /* bytes, a page multiple */
    bool retain;          /* taken under the mmap threshold: its free moves no threshold */
    uint32_t dirty_pages; /* when handed out, the pages from start up to the last one
                             that may have been resident; those after read as zero
                             (realloc's copy populates them: arena_usable_size) */
};

#define CHUNK_EXTENTS_MAX 1024
#define CHUNK_BLOCKS_MAX  1024
#define FREED_RECENT      64

/* A chunk's first pages: its lists. Their pages are touched only as the
 * lists grow: one for the ring and the first 149 extents, one for the first
 * 170 blocks. */
struct chunk_header {
    /* the last blocks freed: a second free is a double free, not an invalid pointer */
    uintptr_t freed_recent[FREED_RECENT];
    struct arena_extent extents[CHUNK_EXTENTS_MAX]; /* free, sorted by start */
    struct arena_block blocks[CHUNK_BLOCKS_MAX];    /* handed out, sorted by start */
};
#define CHUNK_HEADER_SIZE                                                                          \
    ((sizeof(struct chunk_header) + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1))

/* Where a chunk lies: read without a lock by every free of a big block, so
 * apart from the chunks' state, which their owners write all the time. */
struct chunk_range {
    _Atomic uintptr_t base; /* 0: empty slot; stored last (release) */
    _Atomic size_t size;    /* bytes mapped, the header's included */
};

/* A chunk's state, under its lock, one per cache line. */
struct arena_chunk {
    struct spin_lock lock;
    struct heap *home_of;        /* the thread heap that carves here first, or NULL; the
                                    heap's arena_home may still name this slot after the
                                    chunk went: its owner checks home_of under the lock */
    struct chunk_header *header; /* the chunk's base while it is mapped: a plain copy of
                                    g_arena_ranges[].base for code under the lock (read through
                                    the atomic, every list access grew the code by 290
                                    bytes, a twelfth page) */
    unsigned extent_count;       /* extents in use */
    unsigned block_count;        /* blocks in use */
    unsigned freed_recent_next;  /* next slot of header->freed_recent */
} __attribute__((aligned(64)));

#define ARENA_CHUNKS_MAX 256

/* written under the huge lock */
extern struct chunk_range g_arena_ranges[ARENA_CHUNKS_MAX] INTERNAL;
extern struct arena_chunk g_arena_chunks[ARENA_CHUNKS_MAX] INTERNAL;

void counter_add(_Atomic uint64_t *counter, size_t bytes, bool add) INTERNAL;
#define used_bytes_add(bytes, add)  counter_add(&g_arena_used_bytes, bytes, add)
#define dirty_bytes_add(bytes, add) counter_add(&g_arena_dirty_bytes, bytes, add)
unsigned slots_used(void) INTERNAL;                         /* chunk slots that may be in use */
uintptr_t chunk_base(const struct arena_chunk *c) INTERNAL; /* 0: the slot is empty */
static inline size_t chunk_size(const struct arena_chunk *c) {
    /* relaxed: written before the base, which the caller read (acquire) */
    return atomic_load_explicit(&g_arena_ranges[c - g_arena_chunks].size, memory_order_relaxed);
}
/* a chunk's free extents, its lock held */
void extent_remove(struct arena_chunk *c, unsigned i) INTERNAL;
void range_return(struct arena_chunk *c, uintptr_t start, size_t size, bool dirty,
                  uint32_t now) INTERNAL;
/* arena_release's work once a chunk exists (arena_release.c) */
bool arena_release_chunks(bool everything, uint32_t now) INTERNAL;

#endif
