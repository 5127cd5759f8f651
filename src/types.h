/* Internal types of tidemalloc. Every field says what it holds and who may
 * touch it; invariants are stated next to the structure they constrain.
 *
 * Address space is carved into segments: SEGMENT_SIZE-aligned regions, so a
 * pointer finds its segment with one mask. A segment is SLICES_PER_SEGMENT
 * slices; slice 0 holds the segment header (this metadata), the others hold
 * pages. A page is a run of slices serving one size class (many blocks) or one
 * large block. Blocks larger than LARGE_MAX, or at/above the mmap threshold,
 * are "huge": mapped on their own and tracked in huge.c's table. */
#ifndef TIDEMALLOC_TYPES_H
#define TIDEMALLOC_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define SEGMENT_SHIFT      22 /* 4 MiB segments */
#define SEGMENT_SIZE       ((size_t)1 << SEGMENT_SHIFT)
#define SEGMENT_MASK       (SEGMENT_SIZE - 1)
#define SLICE_SHIFT        16 /* 64 KiB slices: release granularity and page unit */
#define SLICE_SIZE         ((size_t)1 << SLICE_SHIFT)
#define SLICES_PER_SEGMENT (SEGMENT_SIZE / SLICE_SIZE) /* 64: one uint64_t bitmap */
#define OS_PAGE_SIZE       4096

#define SMALL_CLASS_COUNT 46                 /* classes 0..45, 16 B .. 32 KiB */
#define SMALL_MAX         ((size_t)32 << 10) /* largest size served from a class */
#define CLASS_TABLE_SIZE  65                 /* size -> class tables: 0 .. (1024 + 15) >> 4 */
#define YOUNG_CLASS_LAST  20                 /* the 1 KiB class: the last a young heap maps */
/* Classes fitted to the program's own sizes (fitted_class.c): indices
 * SMALL_CLASS_COUNT on, each set once, at the size that most mallocs of a
 * class over 1 KiB ask at most, where that is well below its block size. */
#define FITTED_CLASS_COUNT 4
#define CLASS_COUNT        (SMALL_CLASS_COUNT + FITTED_CLASS_COUNT) /* every class index */
#define LARGE_CLASS        CLASS_COUNT /* class_index of a one-block page */
/* Largest block served from a segment's slices; bigger ones below the mmap
 * threshold come from the arena (arena.c), one pool where freed blocks of
 * every size serve each other. Not higher: blocks of 0.25-4 MiB in slices
 * and bigger ones beside them made two pools, each keeping its own free
 * memory (`large`, peak RSS: 104.4 MiB with 4032 KiB here, 96.7 with 1 MiB,
 * 89.7 with 256 KiB); not lower: a segment serves a thread with no lock. */
#define LARGE_MAX       ((size_t)256 << 10)
#define PAGE_MAX_SLICES 8 /* a class page spans at most 512 KiB */

/* Remote frees in batches (free.c): slots per heap, blocks per batch, and
 * the largest block size batched (larger blocks would hold more memory back
 * from their owner than the saved atomic is worth: mstress's peak RSS), and
 * how many open batches may hold a page of several slices (remote_batch_start:
 * a batch keeps its page resident while its thread sleeps). */
#define REMOTE_BATCH_SLOTS     64
#define REMOTE_BATCH_MAX       16
#define REMOTE_BATCH_BLOCK_MAX 1024
#define REMOTE_BATCH_WIDE_MAX  4

/* Classes of blocks over 1 KiB come from one heap all threads share, through
 * a small cache per thread (shared_class.c): classes SHARED_CLASS_FIRST on. */
#define SHARED_CLASS_FIRST 21
/* the fitted classes are shared classes too (their sizes are over 1 KiB) */
#define SHARED_CLASS_COUNT (CLASS_COUNT - SHARED_CLASS_FIRST)

#define ALIGNMENT 16 /* every block is at least 16-byte aligned, like glibc */

/* A free block. Links are encoded with the slot's address (glibc's
 * safe-linking), and checked when used, so a stray write is caught. */
struct block {
    uintptr_t next_encoded; /* encoded pointer to the next free block */
    uintptr_t free_key;     /* free_key_of(page) while free: cheap double-free test */
};

/* A page: one run of slices. Descriptors live in the segment header, one per
 * slice; only the first slice's descriptor of a page is "the page", and
 * every slice's `first` points to it (a free slice's to itself, or NULL while
 * the slice has never been part of a page: a fresh segment's descriptors are
 * left unwritten, so they cost no memory until used).
 * Invariants: used <= capacity <= reserved; blocks [0, capacity) were carved;
 * each carved block is exactly one of: handed out, on `free`, on
 * `thread_free`. area_size == 0 iff the descriptor is not an in-use page.
 * An in-use class page of a live heap is on exactly one of: its class
 * queue, its class's full list (flags & PAGE_IN_FULL), the heap's page cache
 * (empty); a page of an abandoned or orphaned segment is on none.
 * `capacity` is written under the segment lock (a purger reads it there to
 * reclaim a page whose every block waits on `thread_free`); a reclaimed page
 * has thread_free == THREAD_FREE_RECLAIMED and block_size_inverse == 0 until
 * its owner resets it (page_collect_remote). */
/* struct page's flags */
#define PAGE_IN_FULL 1
#define PAGE_LENT    2

struct page {
    /* Line 0: constant while the page is in use. Every free reads it, the
     * remote ones included, so nothing written per block may live here. */
    struct page *first; /* every slice: its page's descriptor (free: itself; never used: NULL) */
    /* The block test's two fields are copied into every slice's descriptor
     * of the page (page_block_test_set), so free reads them from the slice
     * its pointer falls in: no NULL test for a never-used slice (all zero,
     * which accepts nothing) and no load that waits for `first`. */
    uintptr_t start;             /* block 0: first slice + slack, last block ends the page */
    uint64_t block_size_inverse; /* block test (block_offset_valid): 1 large, 0 not in use */
    uint32_t block_size;         /* bytes per block */
    uint32_t area_size;          /* reserved * block_size; 0 when not in use */
    uint16_t reserved;           /* blocks that fit in the page */
    uint8_t class_index;         /* size class, or LARGE_CLASS */
    uint8_t slice_count;         /* slices in this page (first slice only) */
    uint64_t thread_free_full;   /* reserved << THREAD_FREE_COUNT_SHIFT: a list of every block */
    /* A one-slice class page's first slice, and a free slice: bytes from the
     * slice's start that may be resident (SLICE_SIZE: unknown), so that a
     * thread's exit gives back what earlier pages on the slice touched past
     * its own (heap_exit_trim). Written by the owner when the page is set up
     * on a clean slice (0), trimmed or freed; read for no other page. */
    uint32_t touched_end;
    /* Set in every descriptor of a segment the arena lent, when it is made.
     * Invariant: in_lent_segment == !!(flags & PAGE_LENT) == segment->lent,
     * each copy for its readers: this one for other threads' frees (flags
     * is the owner's, which it rewrites; the segment's header is a second
     * load and 64 bytes more main code), PAGE_LENT for free's empty-page
     * test (one compare with PAGE_IN_FULL), the segment's for its release. */
    uint8_t in_lent_segment;
    char constant_padding[11];
    /* Line 1: the owner's, written by its every malloc and free. Remote
     * frees never touch it (with it on line 0, larson and mstress paid a
     * cache-line transfer per remote free and per owner write after it). */
    /* owner only: local free list, ending in list_end_of(page) (NULL without the checks) */
    struct block *free __attribute__((aligned(64)));
    struct page *next;     /* owner only: circular class queue */
    struct page *prev;     /* owner only: circular class queue */
    uint64_t clean_slices; /* owner only: slices of the run (bit i: its slice i) that read as
                              zero when it was taken; calloc of a large block clears the rest */
    uint16_t used;         /* owner only: blocks out, minus those collected */
    uint16_t capacity;     /* owner only: blocks carved into lists so far */
    /* owner only: PAGE_IN_FULL: on its class's full list (heap.c), not in
     * the queue; PAGE_LENT: in a segment the arena lent (set in every
     * descriptor when the segment is made, kept), where a page goes back
     * once empty, as its class's only one-slice page too. One byte, so that
     * free tests both at once. */
    uint8_t flags;
    uint8_t is_zero; /* small pages: fresh from the kernel, so a block never freed
                        since reads as zero but for its link and mark words (calloc
                        skips the memset; large pages use clean_slices). With the
                        checks a freed block carries its double-free mark until it
                        is handed out again, which calloc tests; without them free
                        clears this. Relaxed atomic accesses: exiting threads share
                        the exit heap's pages. */
    char owner_padding[26];
    /* Line 2: other threads push here. A list head in the low 48 bits and the
     * list's length in the top 16 (THREAD_FREE_COUNT_SHIFT), so the owner
     * learns the count from its one exchange instead of walking blocks that
     * other cores wrote (larson: the walk was 19% of the profile). */
    _Atomic uintptr_t thread_free __attribute__((aligned(64)));
    /* The thread_free word last seen holding every carved block, and since
     * when (relaxed atomics): set by the pusher that filled the list, or by a
     * purge pass that found it so; a page still so min_age_ms on is
     * reclaimed (segment_reclaim_pages). */
    uintptr_t reclaim_seen;
    uint32_t reclaim_seen_ms;
    char remote_padding[108]; /* the descriptor is 256 bytes: indexing is a shift */
};

/* The header of a segment, at its start. Protected as stated per field.
 * Invariants: bit 0 of free_slices is never set (the header slice);
 * free_slices & ~dirty_slices are slices known to read as zero; a set bit in
 * free_slices means pages[i].area_size == 0 and pages[i].first is &pages[i] or
 * NULL (never used); the header slice's descriptor keeps first == NULL. */
struct segment {
    /* Line 0, read by every free: written only when ownership changes. */
    _Atomic uint64_t owner_id; /* heap id of the owner; 0 when abandoned */
    struct heap *heap;         /* owning heap; meaningful to the owner only */
    /* The end of every free list of the segment's pages in checked builds
     * (list_end_of): never written, so its link word stays zero. */
    struct block list_end;
    struct segment *next
        __attribute__((aligned(64))); /* owner's avail/full list, or abandoned/cache list */
    struct segment *prev;             /* ditto (doubly linked for O(1) unlink) */
    struct segment *all_next;         /* registry of all segments (registry lock) */
    struct segment *all_prev;         /* registry of all segments (registry lock) */
    struct spin_lock lock;            /* guards the slice bitmaps and freed_at stamps */
    uint32_t used_pages;              /* owner only: pages in use */
    uint64_t free_slices;             /* lock: bit i = slice i belongs to no page */
    uint64_t dirty_slices;            /* lock: bit i = slice i may hold non-zero, resident data */
    uint64_t purging_slices;          /* lock: slices a purger took out to release */
    uint8_t in_full_list;             /* owner only: on heap's full list (no free slice) */
    uint8_t abandoned;                /* abandoned list lock: on the abandoned list */
    uint8_t lent;                     /* set once: carved from an arena chunk (arena_lend),
                                         destroyed back into it instead of unmapped */
    uint32_t cached_ms;               /* cache lock: when it last entered the segment cache */
    uint32_t slice_freed_ms[SLICES_PER_SEGMENT]; /* lock: when each free slice was freed */
    struct page pages[SLICES_PER_SEGMENT];       /* one descriptor per slice */
};

/* A thread's heap. Only its thread touches it, except `next_heap` (heaps
 * lock) and the batches' page_and_count words, which double-free checks
 * read (relaxed). Threads that never allocate use g_empty_heap, whose page
 * pointers all lead to an always-empty page, so the fast path needs no init
 * test, and which never batches a free. Invariants: bit i of
 * remote_batches_open is set iff remote_batches[i].page_and_count != 0;
 * remote_batches_wide counts the open batches whose page spans several
 * slices. */
struct heap {
    struct page *pages_direct[CLASS_COUNT]; /* head of each class queue, or &g_empty_page */
    /* malloc's fast path: the class of a size up to 1 KiB, by (size + 15) >> 4.
     * Invariant, whenever the heaps lock is free: g_class_of_small's entry,
     * or while `young` the power-of-two class at or above it
     * (heap_class_table_fill); 0 (the empty class) routes to the slow path.
     * Written under the heaps lock (mallopt rewrites every heap's), read by
     * the owner with relaxed loads. */
    _Atomic uint8_t class_of_small[CLASS_TABLE_SIZE];
    /* Pages the queue search met with no free block and nothing left to
     * carve, out of the queue so that the search finds free blocks past
     * them; NULL if none. A page goes back when blocks come back to it. */
    struct page *pages_full[CLASS_COUNT];
    uint64_t id;                           /* unique, never reused; UINT64_MAX for g_empty_heap */
    struct segment *segments_avail;        /* owned segments with at least one free slice */
    uint32_t segments_avail_count;         /* segments on segments_avail */
    struct segment *segments_full;         /* owned segments without a free slice */
    struct page *large_pages;              /* circular list of one-block pages, or NULL */
    struct heap *next_heap;                /* global list of live heaps (heaps lock) */
    struct heap *prev_heap;                /* ditto */
    uint64_t large_allocs;                 /* statistics: large pages handed out */
    uint32_t pages_allocated[CLASS_COUNT]; /* statistics: class pages set up */
    uint32_t collect_countdown;            /* slow-path calls until the next full collect */
    uint32_t slow_paths;      /* owner (relaxed stores): malloc slow paths taken, read by purgers */
    uint32_t slow_paths_seen; /* purge lock: slow_paths at the previous idle-owner pass */
    uint32_t slow_paths_window;  /* heaps lock: slow_paths when the retain bound's window began */
    struct spin_lock cache_lock; /* guards the page cache (owner, purgers) */
    uint32_t page_cache_count;   /* cache lock: entries in page_cache */
    struct cached_page {
        struct page *page; /* an empty page, still owned by this heap */
        uint32_t freed_ms; /* when it became empty (purge delay) */
        uint8_t clean;     /* a purger released its memory: reads as zero */
    } page_cache[8];       /* cache lock: recently emptied pages, oldest first */
    /* Sizes up to 1 KiB go to power-of-two classes (heap.c, "young heaps"):
     * set at creation, cleared for good by the owner under the heaps lock */
    uint8_t young;
    uint8_t young_carves; /* owner: OS pages of blocks up to 1 KiB carved while young */
    /* owner only: 1 once this thread has batched a free of another
     * thread's block (free.c, remote_batch_start), 0 before; picks the row
     * of g_class_slices (size_class.c) for the pages it sets up */
    uint8_t frees_others;
    /* owner only: how many of remote_batches hold blocks of a page of
     * several slices (at most REMOTE_BATCH_WIDE_MAX) */
    uint8_t remote_batches_wide;
    uint16_t arena_home; /* huge lock: 1 + the arena chunk this thread carves first, 0: none */
    /* owner (the exit heap: its lock): per class, how many more carves of
     * the queue's head may skip heap_find_page's search; set only for the
     * classes over 1 KiB, after a search that found no free block */
    uint8_t search_skips[CLASS_COUNT];
    /* Blocks of other threads' pages that this thread freed and has not yet
     * pushed on their page's thread_free list (free.c, "remote frees in
     * batches"): a slot the page chooses (remote_batch_index); a slot holds
     * one page's blocks. Owner only but for page_and_count; empty after
     * remote_batches_flush. */
    uint64_t remote_batches_open; /* owner only: bit i set iff remote_batches[i] is not empty */
    /* owner only: clock_ms() of purge_after_free's last flush */
    uint32_t remote_batches_flushed_ms;
    struct remote_batch {
        /* the page's descriptor | its blocks here (1..REMOTE_BATCH_MAX), 0:
           empty (descriptors are 64-byte aligned); relaxed atomic accesses,
           as double-free checks of other threads peek at it */
        _Atomic uintptr_t page_and_count;
        struct block *first; /* the newest block; links lead to `last` */
        struct block *last;  /* the oldest block; linked when the batch is pushed */
    } remote_batches[REMOTE_BATCH_SLOTS];
    /* Set (release store) by a thread whose free filled the list of one of
     * this heap's large pages, cleared by the owner (acquire exchange), which
     * then collects its large pages at its next large malloc: a line of its
     * own, since other threads write it. A heap recycled meanwhile at worst
     * walks its list once for nothing (heap structures are never unmapped);
     * heap_struct_alloc clears it atomically, and stops its memset before it. */
    _Atomic uint8_t large_freed_remotely __attribute__((aligned(64)));
};

/* A thread's cache of blocks of the shared classes (shared_class.c): blocks
 * it freed and may hand out again, a list per class, each block carrying its
 * page's free key. Owner only. Invariant: bytes is the sum of the cached
 * blocks' sizes. */
struct shared_caches {
    struct shared_cache {
        struct block *head; /* newest block; links encoded by shared_cache_link_set */
        uint16_t count;     /* blocks on the list */
        uint16_t limit;     /* most blocks kept: grows with each refill (0: never used) */
    } classes[SHARED_CLASS_COUNT];
    uint32_t bytes; /* of every cached block */
    /* bytes past which every class gives back half (the thread's share of
     * what all threads may cache; 0 until first computed) */
    uint32_t bound;
};

/* The shared heap's depot (shared_class.c): lists of blocks of the shared
 * classes that threads gave back past their caches' limits, kept whole for
 * the next thread whose cache of the class runs empty. A lock per class, so
 * that threads trading blocks of different classes do not meet, and neither
 * walks the lists under it. Invariants, under the lock: the first `used`
 * slots hold lists, each of counts[i] blocks (1 to 255) linked as a
 * cache's, and blocks is the sum of those counts. */
#define SHARED_DEPOT_SLOTS 6
struct shared_depot_class {
    struct spin_lock lock;
    uint16_t blocks;                         /* on every list */
    uint8_t used;                            /* slots holding a list, from the first */
    uint8_t counts[SHARED_DEPOT_SLOTS];      /* blocks on each list */
    struct block *lists[SHARED_DEPOT_SLOTS]; /* each a cache's list, whole */
} __attribute__((aligned(64)));              /* a line each: no false sharing */
struct shared_depot {
    struct shared_depot_class classes[SHARED_CLASS_COUNT];
    /* bytes on every list, for the bound on all classes (changed under
     * each class's lock, by threads holding different ones) */
    _Atomic uint64_t bytes __attribute__((aligned(64)));
};

/* What heap_struct_alloc carves: a heap and its caches, which are apart
 * from struct heap so that g_empty_heap, which never caches, stays as
 * small as it was (it lies in .data, on the page of the small variables). */
struct thread_heap {
    struct heap heap; /* first: a heap's caches are found with a cast */
    struct shared_caches caches;
};

_Static_assert(sizeof(struct page) == 256, "page descriptors index with a shift");
_Static_assert(_Alignof(struct page) >= 64 && REMOTE_BATCH_MAX < 64,
               "a batch's count shares a word with its page's descriptor address");
#endif
