/* Free lists: how a free block links to the next (encoded and checked when
 * used), how a list ends (a sentinel in the segment's header), the
 * double-free mark, and the word of a page's list of blocks other threads
 * freed. The fast paths' inline helpers; included by internal.h, whose
 * segment_of (page_lookup.h) and report_corrupt_free_list they use. */
#ifndef TIDEMALLOC_FREE_LIST_H
#define TIDEMALLOC_FREE_LIST_H

/* TIDEMALLOC_NO_CHECKS builds the library without the default checks (link
 * encoding, link and pointer validation, the double-free key: its test and
 * its stores): only to measure what they cost (docs/security.md). CHECKS_ON
 * is 0 there, 1 otherwise. */
#ifdef TIDEMALLOC_NO_CHECKS
#define CHECKS_ON 0
#else
#define CHECKS_ON 1
#endif

/* The double-free mark: free_key_of(page) in a free block's second word,
 * cleared when the block is handed out. It is one of the default checks,
 * so a build without them writes none on the fast paths (secure mode sets
 * it on its own path, check.c): what `make bench-checks` measures then
 * includes the mark's two stores, one in free and one in malloc. */
static inline void block_free_mark(struct block *b, const struct page *page) {
    if (CHECKS_ON) b->free_key = free_key_of(page);
}
static inline void block_free_mark_clear(struct block *b) {
    if (CHECKS_ON) b->free_key = 0;
}

/* Free-list links are stored as next ^ b ^ LINK_KEY, b being the block that
 * holds the link (glibc's safe-linking idea: forging a link takes the slot's
 * address). A valid link stays in b's segment, so stored ^ LINK_KEY = next ^
 * b lies below SEGMENT_SIZE: one test of its top bits checks it. The key's
 * top bits make a zeroed link, a small number, -1 or any user pointer
 * written over a link fail the check; it is a sign-extended 32-bit
 * immediate, so applying it takes one xor, no 64-bit constant load. (A link
 * overwritten with exactly LINK_KEY, a block pointing at itself, passes: the
 * test of [1, SEGMENT_SIZE) that caught it cost an instruction a malloc.)
 *
 * Lists end in a sentinel (checked builds): a block-sized word pair in the
 * segment's header (segment->list_end), so the last block's link is a valid
 * link like any other, and page->free holds the sentinel when the list is
 * empty. The sentinel's link word is zero, which fails the check: malloc's
 * fast path needs no empty-list test, the check sends an empty list to the
 * slow path. g_empty_page, in no segment, ends in g_list_end. Without the
 * checks, lists end in NULL and the fast path tests for it. */
#define LINK_KEY 0xffffffffd6a40000ull

extern struct block g_list_end INTERNAL;
/* The end of a list of the pages of p's segment. */
static inline struct block *list_end_of(const void *p) {
    if (!CHECKS_ON) return NULL;
    return &segment_of(p)->list_end;
}
/* The end of a list of a page in a segment: its segment's sentinel (no
 * block lies in a segment's header). */
static inline bool list_is_segment_end(const struct block *b) {
    if (!CHECKS_ON) return b == NULL;
    return ((uintptr_t)b & SEGMENT_MASK) == offsetof(struct segment, list_end);
}
static inline bool list_is_end(const struct block *b) {
    if (!CHECKS_ON) return b == NULL;
    return list_is_segment_end(b) || b == &g_list_end;
}
static inline bool page_list_empty(const struct page *page) {
    return list_is_end(page->free);
}
/* The same for a page in a segment (not g_empty_page): one test. */
static inline bool segment_page_list_empty(const struct page *page) {
    return list_is_segment_end(page->free);
}

static inline struct block *block_link_decode(const struct block *b) { /* unchecked */
    if (!CHECKS_ON) return (struct block *)b->next_encoded;
    return (struct block *)(b->next_encoded ^ LINK_KEY ^ (uintptr_t)b);
}
static inline void block_link_set(struct block *b, struct block *next) {
    if (!CHECKS_ON)
        b->next_encoded = (uintptr_t)next;
    else
        b->next_encoded = (uintptr_t)next ^ LINK_KEY ^ (uintptr_t)b;
}
/* next ^ b of a valid link: both in one segment. */
static inline bool block_link_delta_valid(uintptr_t delta) {
    return (delta & ~(uintptr_t)SEGMENT_MASK) == 0;
}
/* The block after b on a free list (or the list's end) in *next, or false:
 * the list is empty (b is its end: the sentinel, or NULL without the
 * checks) or b's link is corrupt. The test is on the link itself, so that
 * malloc's fast path tests once. With `prefetch`, the next block's line is
 * fetched too: the next malloc of the class reads its link (a block another
 * core freed is a miss); without the checks NULL is never prefetched, since
 * that costs a page walk. */
static inline __attribute__((always_inline)) bool
block_next_get(const struct block *b, struct block **next, bool prefetch) {
    if (!CHECKS_ON) {
        if (b == NULL) return false;
        *next = (struct block *)b->next_encoded;
        if (prefetch) __builtin_prefetch(*next != NULL ? *next : b);
        return true;
    }
    uintptr_t delta = b->next_encoded ^ LINK_KEY; /* next ^ b */
    if (unlikely(!block_link_delta_valid(delta))) return false;
    *next = (struct block *)(delta ^ (uintptr_t)b);
    if (prefetch) __builtin_prefetch(*next); /* in b's segment: mapped */
    return true;
}
/* The block after b, which is on a list and not its end; a corrupt link aborts. */
static inline struct block *block_next_checked(const struct block *b) {
    struct block *next;
    if (unlikely(!block_next_get(b, &next, false))) report_corrupt_free_list();
    return next;
}

/* page->thread_free of a page a purger reclaimed: every carved block had
 * been freed by other threads and left there by its owner, and the page's
 * memory went back to the kernel. No push makes it: a head is a block. */
#define THREAD_FREE_RECLAIMED ((uintptr_t)1)

/* page->thread_free: list head (a user-space pointer: 47 bits) and length. */
#define THREAD_FREE_COUNT_SHIFT 48
#define THREAD_FREE_COUNT_ONE   ((uintptr_t)1 << THREAD_FREE_COUNT_SHIFT)
static inline struct block *thread_free_head(uintptr_t word) {
    return (struct block *)(word & (THREAD_FREE_COUNT_ONE - 1));
}
static inline uint32_t thread_free_count(uintptr_t word) {
    return (uint32_t)(word >> THREAD_FREE_COUNT_SHIFT);
}
/* page->thread_free with no block on it: a count of zero, and the end of a
 * list (the segment's sentinel with the checks, NULL without) in the head's
 * bits, so that a push links its last block to the old head as it is, with no
 * test for an empty list (prodcons' consumer: 4 instructions of the 9 the
 * checks added to its free). A descriptor never set up reads 0, and a
 * reclaimed page THREAD_FREE_RECLAIMED: both count zero too. */
static inline uintptr_t thread_free_empty_word(const struct page *page) {
    return (uintptr_t)list_end_of(page);
}
/* The word after pushing the list `first`..`last` of `count` blocks onto the
 * list in `old`; links `last` to old's head. */
static inline uintptr_t thread_free_push_word(uintptr_t old, struct block *first,
                                              struct block *last, uint32_t count) {
    block_link_set(last, thread_free_head(old)); /* an empty word's head ends a list */
    return ((old & ~(THREAD_FREE_COUNT_ONE - 1)) + count * THREAD_FREE_COUNT_ONE) |
           (uintptr_t)first;
}

#endif
