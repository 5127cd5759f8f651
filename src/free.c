/* Public release entry points. free's fast path: find the page with a mask
 * and a load, check the pointer is a block start we handed out, then push it
 * on the page's local list (owner) or its thread_free list (anyone else). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <string.h>

#include "internal.h"

const char g_free_invalid_pointer[] = "free(): invalid pointer";
const char g_free_heap_overflow[] = "free(): heap overflow detected";

/* Whether p starts a block that was freed: a large block's page starts a
 * slice, which is free in its segment once the block is, and whose
 * descriptor still names the large class (a slice no page has used reads
 * zero there), or a huge block freed lately. */
static bool freed_block_at(const void *p) {
    if (!segment_map_contains((uintptr_t)p)) return huge_recently_freed(p);
    unsigned slice = (unsigned)((uintptr_t)p >> SLICE_SHIFT) & (SLICES_PER_SEGMENT - 1);
    if (((uintptr_t)p & (SLICE_SIZE - 1)) != 0 || slice == 0) return false;
    struct segment *segment = segment_of(p);
    spin_lock(&segment->lock);
    bool free_slice = segment->free_slices >> slice & 1;
    spin_unlock(&segment->lock);
    /* relaxed: the owner may set the slice up anew meanwhile; this only
     * chooses between two messages of an abort */
    return free_slice &&
           __atomic_load_n(&segment->pages[slice].class_index, __ATOMIC_RELAXED) == LARGE_CLASS;
}

RARE COLD void report_invalid_pointer(const void *p, const char *message) {
    if (message == g_free_invalid_pointer && freed_block_at(p))
        fatal_error("free(): double free detected");
    fatal_error(message);
}

/* b onto its page's list, as the page's owner (or the shared heap's lock
 * holder): true if the page is empty now and should leave its class. */
static inline __attribute__((always_inline)) bool page_list_free(struct page *page,
                                                                 struct block *b) {
    block_link_set(b, page->free);
    block_free_mark(b, page);
    page->free = b;
    /* Without the checks, a block with user data is on the list now (with
     * them, its mark tells calloc: class_pop_inline). Relaxed: as calloc
     * reads it. */
    if (!CHECKS_ON) __atomic_store_n(&page->is_zero, 0, __ATOMIC_RELAXED);
    return unlikely(--page->used == 0) && page_leaves_when_empty(page);
}

/* The segment's heap pointer is read only when a page empties: the common
 * free never loads it. */
static inline void free_local(struct segment *segment, struct page *page, struct block *b) {
    if (page_list_free(page, b)) heap_page_empty(segment->heap, page);
}

bool free_shared_locked(struct segment *segment, struct page *page, struct block *b) {
    return page_list_free(page, b) && heap_page_empty_quiet(segment->heap, page);
}

/* A remote free made the page's list hold every block: the page is free now,
 * and its owner may not come back for it. Count it with the retained memory
 * (purge.c), and date it for a purger. Stamping a descriptor that its owner
 * has set up anew meanwhile only dates a list that is not there. Out of line,
 * so that the remote free saves no registers. */
static NOINLINE void remote_page_filled(struct page *page, uintptr_t word, uint64_t page_bytes) {
    __atomic_store_n(&page->reclaim_seen, word, __ATOMIC_RELAXED);
    __atomic_store_n(&page->reclaim_seen_ms, clock_ms(), __ATOMIC_RELAXED);
    /* A list of one block is a large page's (class pages hold several): its
     * owner takes the slices back at its next large malloc
     * (heap_malloc_large). The page's fields are not read: its owner may
     * have collected it and set it up anew. Relaxed: a segment changing
     * hands meanwhile only sends one flag astray, to a heap that then walks
     * its large pages for nothing. */
    if (thread_free_count(word) == 1) {
        struct heap *owner = __atomic_load_n(&segment_of(page)->heap, __ATOMIC_RELAXED);
        /* release: the owner's acquire exchange sees our push with the flag */
        if (owner != NULL)
            atomic_store_explicit(&owner->large_freed_remotely, 1, memory_order_release);
    }
    remote_freed_page_note(page_bytes, true);
    purge_after_free();
}

/* Pushes the list first..last of `count` blocks, their keys set, on their
 * page's thread_free list. */
static inline __attribute__((always_inline)) void
thread_free_push_list(struct page *page, struct block *first, struct block *last, uint32_t count) {
    /* Read before the push: once the blocks are on the list, the owner may
     * collect them, retire the page and set it up anew. */
    uint64_t full = page->thread_free_full;
    uint64_t page_bytes = (uint64_t)page->slice_count << SLICE_SHIFT;
    /* relaxed load: the CAS below re-reads and validates it. (Guessing an
     * empty list instead, to take the line exclusive in one transfer, cost
     * larson a failed CAS per free where lists are long, and measured even.) */
    uintptr_t old = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    uintptr_t word;
    do {
        /* a reclaimed page's blocks were all free already */
        if (unlikely(old == THREAD_FREE_RECLAIMED)) fatal_error("free(): double free detected");
        word = thread_free_push_word(old, first, last, count);
        /* release: the owner's acquire exchange must see the links and keys
         * we wrote. */
    } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &old, word,
                                                    memory_order_release, memory_order_relaxed));
    if (unlikely(word >= full)) remote_page_filled(page, word, page_bytes);
}

WARM void thread_free_push_blocks(struct page *page, struct block *first, struct block *last,
                                  uint32_t count) {
    thread_free_push_list(page, first, last, count);
}

/* Pushes b on its page's thread_free list. */
static inline __attribute__((always_inline)) void thread_free_push(struct page *page,
                                                                   struct block *b) {
    block_free_mark(b, page);
    thread_free_push_list(page, b, b, 1);
}

/* ---- remote frees in batches ----
 * The CAS that puts a block on another thread's page is a full barrier: one
 * per remote free made each wait for the cache misses before it (larson, 2
 * threads: 93% of the remote free's time, 20% of the run). A small block
 * freed by a thread with a heap joins instead that heap's batch for its
 * page (in a slot the page chooses: remote_batch_index), and a batch goes in
 * one CAS when it holds REMOTE_BATCH_MAX blocks, when another page takes its
 * slot, and from remote_batches_flush: before this thread takes a segment,
 * on its purge checks (purge_after_free: a page it emptied, a list it
 * filled; once a clock tick), in the slow path's periodic collect, in
 * malloc_trim and at thread exit.
 * Batched blocks are not yet their owner's to reuse: per thread at most
 * REMOTE_BATCH_SLOTS batches of REMOTE_BATCH_MAX - 1 blocks of at most
 * REMOTE_BATCH_BLOCK_MAX bytes, held until its next flush. A batch keeps its
 * page from filling, and so resident, while its thread sleeps; a page of
 * several slices (a frees-others thread's, g_class_slices) spans up to 512
 * KiB, so at most REMOTE_BATCH_WIDE_MAX such batches are open at once
 * (rel_remote_reclaim worker-exited: 11.9 MiB stayed with no bound, 3.7
 * with none of them batched, 3.6-4.3 now; larson's CASes 1.56 M a run with
 * none batched, 0.25 M with all, 0.87 M now: a median 0.987 of the time,
 * where batching all read 0.940). A batched block
 * carries its page's free key, so a second free of it by any thread but
 * its owner aborts at once; the owner, which finds it on none of its
 * page's lists, looks for an open batch of the page
 * (remote_batch_open_for). */

/* A page's slot: its descriptor's index in its segment plus 37 times the
 * segment's number. By the index alone the pages at one slice of every
 * segment shared a slot, and each thread's pages start at slice 1: in
 * mstress, 110-157k of 740-830k batched frees pushed another page's batch
 * out of their slot (3.6-4.1 blocks a push); now 34-80k (4.7-5.8). */
static inline unsigned remote_batch_index(const struct page *page) {
    uintptr_t descriptor = (uintptr_t)page / sizeof(struct page);
    return (unsigned)((descriptor + ((uintptr_t)page >> SEGMENT_SHIFT) * 37) % REMOTE_BATCH_SLOTS);
}
static inline struct remote_batch *remote_batch_slot(struct heap *heap, const struct page *page) {
    return &heap->remote_batches[remote_batch_index(page)];
}

static NOINLINE void remote_batch_push(struct heap *heap, struct remote_batch *batch) {
    heap->remote_batches_open &= ~((uint64_t)1 << (batch - heap->remote_batches));
    /* relaxed: this thread's own word; other threads only peek at it */
    uintptr_t word = atomic_load_explicit(&batch->page_and_count, memory_order_relaxed);
    atomic_store_explicit(&batch->page_and_count, 0, memory_order_relaxed);
    struct page *page = (struct page *)(word & ~(uintptr_t)63);
    /* the batch's blocks keep the page in use: its line 0 holds still */
    heap->remote_batches_wide -= page->slice_count > 1;
    thread_free_push_list(page, batch->first, batch->last, (uint32_t)(word & 63));
}

/* A batch of b's page in the slot, after pushing the batch of another page
 * that held it (word: the slot's page_and_count); b (marked) is pushed alone
 * instead if its page spans several slices and REMOTE_BATCH_WIDE_MAX such
 * batches are open. Out of line, so that adding to an open batch, the
 * common case, needs no stack frame. */
static NOINLINE void remote_batch_start(struct heap *heap, struct page *page, struct block *b,
                                        uintptr_t word) {
    unsigned index = remote_batch_index(page);
    struct remote_batch *batch = &heap->remote_batches[index];
    if (word != 0) remote_batch_push(heap, batch);
    if (page->slice_count > 1) {
        if (heap->remote_batches_wide >= REMOTE_BATCH_WIDE_MAX) {
            thread_free_push_blocks(page, b, b, 1); /* out of line: main code's room */
            return;
        }
        heap->remote_batches_wide++;
    }
    heap->frees_others = 1; /* its pages of 320 B-1 KiB spread (g_class_slices) */
    heap->remote_batches_open |= (uint64_t)1 << index;
    batch->first = batch->last = b;
    /* relaxed: as in remote_batch_push */
    atomic_store_explicit(&batch->page_and_count, (uintptr_t)page | 1, memory_order_relaxed);
}

/* Out of line: the unbatched push keeps a frame-less free_remote (prodcons,
 * whose consumer never allocates and so has no heap, ran 25% slower with
 * this inlined there). */
static NOINLINE void remote_batch_add(struct heap *heap, struct page *page, struct block *b) {
    struct remote_batch *batch = remote_batch_slot(heap, page);
    block_free_mark(b, page);
    /* relaxed: as in remote_batch_push */
    uintptr_t word = atomic_load_explicit(&batch->page_and_count, memory_order_relaxed);
    if ((word & ~(uintptr_t)63) != (uintptr_t)page) {
        remote_batch_start(heap, page, b, word);
        return;
    }
    block_link_set(b, batch->first);
    batch->first = b;
    atomic_store_explicit(&batch->page_and_count, word + 1, memory_order_relaxed);
    if ((word & 63) + 1 == REMOTE_BATCH_MAX) remote_batch_push(heap, batch);
}

void remote_batches_flush(struct heap *heap) {
    while (heap->remote_batches_open)
        remote_batch_push(heap, &heap->remote_batches[__builtin_ctzll(heap->remote_batches_open)]);
}

/* Some live heap has an open batch of the page's blocks. A double free by
 * the owner of a block that another thread freed finds it there (the caller
 * walks the page's lists after this, so a batch pushed meanwhile is on
 * them). A live block holding a copy of a freed block's words (read after
 * free) while another thread batches blocks of its page aborts too. */
RARE bool remote_batch_open_for(const struct page *page) {
    bool open = false;
    spin_lock(&g_heaps_lock);
    for (struct heap *heap = g_heaps; heap && !open; heap = heap->next_heap) {
        /* relaxed: a hint; the owner's word alone tells which page it holds */
        uintptr_t word = atomic_load_explicit(&remote_batch_slot(heap, page)->page_and_count,
                                              memory_order_relaxed);
        open = (word & ~(uintptr_t)63) == (uintptr_t)page;
    }
    spin_unlock(&g_heaps_lock);
    return open;
}

/* Checked or aggressive mode: every free that is not the owner's plain one
 * comes here (the owner's too, since the owner id carries OWNER_CHECKED_BIT).
 * The owner verifies a key match as free_inline does: a live block holding a
 * copy of a freed one's words is no double free (glibc's tst-tcfree3, which
 * aborted in aggressive mode). */
RARE static NOINLINE void free_remote_with_options(struct page *page, struct block *b) {
    struct segment *segment = segment_of(b);
    /* relaxed: as in free_inline */
    bool owner = atomic_load_explicit(&segment->owner_id, memory_order_relaxed) ==
                 (current_thread_id() | OWNER_CHECKED_BIT);
    if (CHECKS_ON && unlikely(b->free_key == free_key_of(page))) {
        if (!owner) fatal_error("free(): double free detected");
        heap_freed_block_check(page, b, "free(): double free detected");
    }
    if (OPTION(checked)) checked_before_free(page, b);
    /* secure mode checks the free fill on reuse: released pages read zero */
    if (OPTION(aggressive_madvise) && !g_options.secure) aggressive_release_block(page, b);
    if (owner)
        free_local(segment, page, b);
    else
        thread_free_push(page, b);
}

/* Another thread's block (an owner walks its own lists on a key match; this
 * thread cannot walk another's). */
static NOINLINE void free_remote(struct page *page, struct block *b) {
    if (unlikely(OPTION(free_slow))) {
        free_remote_with_options(page, b);
        return;
    }
    if (CHECKS_ON && unlikely(b->free_key == free_key_of(page)))
        fatal_error("free(): double free detected");
    struct heap *heap = t_heap;
    if (heap != &g_empty_heap) {
        if (page->block_size <= REMOTE_BATCH_BLOCK_MAX) {
            remote_batch_add(heap, page, b);
            return;
        } else if (page->class_index != LARGE_CLASS) {
            /* a class block over REMOTE_BATCH_BLOCK_MAX is a shared
             * class's (1-32 KiB): it joins this thread's cache */
            shared_class_push(heap, page, b);
            return;
        }
    }
    thread_free_push(page, b);
}

/* The block already carries the free key: verify before freeing it. A
 * separate function keeps the fast path free of register saves. */
RARE static NOINLINE void free_local_checked(struct segment *segment, struct page *page,
                                             struct block *b) {
    heap_freed_block_check(page, b, "free(): double free detected");
    free_local(segment, page, b);
}

static NOINLINE void free_outside_segments(void *p) {
    if (p == NULL) return;
    int saved = errno;
    if (!huge_free(p)) report_invalid_pointer(p, g_free_invalid_pointer);
    errno = saved;
}

/* free's report of a pointer that is not a block's start. gcc sends a call
 * it knows does not return to free.cold, whose start free's alignment
 * (LINE_ALIGNED) put on 64 bytes too: 49 bytes of padding in the code every
 * program maps. noipa keeps gcc from finding out, so free jumps here (clang,
 * which builds the fuzzer, has no such attribute). */
#if __has_attribute(noipa)
#define NOT_KNOWN_NORETURN __attribute__((noipa))
#else
#define NOT_KNOWN_NORETURN NOINLINE
#endif
RARE static NOT_KNOWN_NORETURN void free_invalid_pointer(const void *p) {
    report_invalid_pointer(p, g_free_invalid_pointer);
}

static inline __attribute__((always_inline)) void free_inline(void *p) {
    /* NULL takes this branch too: one test fewer for every other pointer */
    uintptr_t index = (uintptr_t)p >> SEGMENT_SHIFT;
    if (unlikely(!segment_map_contains_index(index))) {
        free_outside_segments(p);
        return;
    }
    struct segment *segment = segment_at_index(index);
    /* page_of_block_in, but the report is a jump from here (free_invalid_pointer) */
    const struct page *slice = block_slice_in(segment, p);
    if (CHECKS_ON && unlikely(block_start_invalid(p, slice))) {
        free_invalid_pointer(p);
        return;
    }
    struct page *page = slice->first;
    struct block *b = p;
    /* relaxed: equal only if this thread owns the segment, and then this
     * thread wrote the value itself; any other value takes the remote path.
     * The owner may then read the segment's heap pointer. */
    if (likely(
            is_current_thread_id(atomic_load_explicit(&segment->owner_id, memory_order_relaxed)))) {
        if (CHECKS_ON && unlikely(b->free_key == free_key_of(page)))
            free_local_checked(segment, page, b);
        else
            free_local(segment, page, b);
        return;
    }
    free_remote(page, b);
}

/* realloc keeps a block in place whose free key is set: a block freed
 * already, which would then be handed out twice, or a live one holding a copy
 * of a freed one's words. The owner walks the page's lists to tell; another
 * thread cannot, and takes the key for proof, as free_remote does. */
RARE COLD void realloc_freed_check(void *p) {
    struct segment *segment = segment_of(p);
    if (segment_owner_thread(segment) != current_thread_id())
        fatal_error("realloc(): invalid pointer");
    heap_freed_block_check(page_of(segment, p), p, "realloc(): invalid pointer");
}

API LINE_ALIGNED void TM_NAME(free)(void *p) {
    free_inline(p);
}
/* The library's own frees (realloc) and the rarely used entry points: free
 * itself, called directly (a hidden name, not through the PLT, so a program
 * that interposes free never sees them). A copy of the fast path of their
 * own was 208 bytes of the code every program maps whole. */
#ifdef TIDEMALLOC_PREFIX
void free_internal(void *p) __attribute__((alias("tm_free")));
#else
void free_internal(void *p) __attribute__((alias("free"), copy(free))); /* free's nothrow, leaf */
#endif
RARE API void TM_NAME(cfree)(void *p) {
    free_internal(p);
}
RARE API void TM_NAME(free_sized)(void *p, size_t size) {
    (void)size;
    free_internal(p);
}
RARE API void TM_NAME(free_aligned_sized)(void *p, size_t alignment, size_t size) {
    (void)alignment;
    (void)size;
    free_internal(p);
}
#ifndef TIDEMALLOC_PREFIX
API void __libc_free(void *p) __attribute__((alias("free"), copy(free)));
#endif

size_t block_usable_size(const void *p, const char *message) {
    if (!segment_map_contains((uintptr_t)p)) {
        size_t usable;
        if (!huge_usable_size(p, &usable, NULL)) report_invalid_pointer(p, message);
        return usable;
    }
    struct page *page = page_of_block((void *)p, message);
    if (unlikely(g_options.secure)) return checked_usable_size(page, p);
    return page->block_size;
}

RARE API size_t TM_NAME(malloc_usable_size)(void *p) {
    if (p == NULL) return 0;
    return block_usable_size(p, "malloc_usable_size(): invalid pointer");
}
