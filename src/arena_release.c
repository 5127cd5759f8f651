/* The arena's side of the release policy: dirty extents idle for the purge
 * delay go back to the kernel in batches of ranges, chunks that are one clean
 * extent end to end are unmapped; and fork's locking of every chunk. What is
 * released when is purge.c's. */
#define _GNU_SOURCE
#include "arena.h"

#define RELEASE_BATCH 32 /* extents released per round of system calls */

/* Unmaps the chunks that are one clean extent from end to end (huge lock
 * held; dropped around each munmap). */
static void chunks_unmap_free(void) {
    for (unsigned slot = 0; slot < slots_used(); slot++) {
        struct arena_chunk *c = &g_arena_chunks[slot];
        uintptr_t base = chunk_base(c);
        size_t size = chunk_size(c);
        if (base == 0) continue;
        spin_lock(&c->lock);
        bool unmap = c->block_count == 0 && c->extent_count == 1 && !c->header->extents[0].dirty &&
                     c->header->extents[0].size == size - CHUNK_HEADER_SIZE;
        if (unmap) {
            /* relaxed: the locks order it for the chunk's users; a lookup
             * that read the old base checks it again under the lock */
            atomic_store_explicit(&g_arena_ranges[slot].base, 0, memory_order_relaxed);
            c->home_of = NULL;
            c->extent_count = 0;
        }
        spin_unlock(&c->lock);
        if (!unmap) continue;
        spin_unlock(&g_huge_lock);
        os_unmap((void *)base, size);
        spin_lock(&g_huge_lock);
    }
}

/* Takes up to RELEASE_BATCH dirty extents idle for the purge delay (all
 * dirty ones: everything) off the lists, into ranges[] and their chunks into
 * owner[]; returns how many (huge lock held). */
static unsigned release_batch_take(bool everything, uint32_t now, struct iovec *ranges,
                                   struct arena_chunk **owner) {
    unsigned count = 0;
    for (unsigned slot = 0, used = slots_used(); slot < used && count < RELEASE_BATCH; slot++) {
        struct arena_chunk *c = &g_arena_chunks[slot];
        if (chunk_base(c) == 0) continue;
        spin_lock(&c->lock);
        for (unsigned i = 0; i < c->extent_count && count < RELEASE_BATCH;) {
            struct arena_extent *e = &c->header->extents[i];
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
        spin_unlock(&c->lock);
    }
    return count;
}

WARM NOINLINE bool arena_release_chunks(bool everything, uint32_t now) {
    bool released = false;
    os_unmapping_begin();
    spin_lock(&g_huge_lock);
    for (;;) {
        /* Off the lists while the kernel releases them, so no block is
         * carved from a range being zeroed, and their chunks stay mapped. */
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
            spin_lock(&owner[k]->lock);
            range_return(owner[k], (uintptr_t)ranges[k].iov_base, ranges[k].iov_len, !clean, now);
            spin_unlock(&owner[k]->lock);
        }
        if (count < RELEASE_BATCH || went == 0) break;
    }
    chunks_unmap_free();
    spin_unlock(&g_huge_lock);
    os_unmapping_end();
    return released;
}

/* ---- fork: after the huge lock, every chunk's, in slot order ---- */

void arena_fork_lock(void) {
    for (unsigned slot = 0, used = slots_used(); slot < used; slot++)
        spin_lock(&g_arena_chunks[slot].lock);
}

void arena_fork_unlock(void) {
    for (unsigned slot = slots_used(); slot-- > 0;)
        spin_unlock(&g_arena_chunks[slot].lock);
}
