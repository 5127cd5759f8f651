/* From a pointer to its segment, its slice's descriptor and its page: the
 * segment map every free tests first, the lookups, where a page's memory and
 * its blocks begin, and the block test that says whether a pointer starts a
 * block. The fast paths' inline helpers; included by internal.h (which
 * defines what they use: the types, INTERNAL, unlikely). */
#ifndef TIDEMALLOC_PAGE_LOOKUP_H
#define TIDEMALLOC_PAGE_LOOKUP_H

/* One byte per possible segment of the 47-bit user address space, in a
 * mapping of its own (os_segments_init, which says why not .bss). Until that
 * exists `entries` is 1 and `bytes` a static zero byte: free(NULL) reads it,
 * any other pointer is past the bound. Both are written once, `bytes` first. */
#define SEGMENT_MAP_ENTRIES ((size_t)1 << (47 - SEGMENT_SHIFT))
struct segment_map {
    _Atomic uint8_t *bytes; /* 1: a segment of ours starts at index << SEGMENT_SHIFT */
    uintptr_t entries;      /* bytes readable at `bytes`: 1, then SEGMENT_MAP_ENTRIES */
};
extern struct segment_map g_segment_map INTERNAL;
/* NULL is never in a segment (byte 0 stays clear). */
static inline bool segment_map_contains_index(uintptr_t index) {
    /* The bound and then the map's address, in one asm so that the compiler
     * keeps them in that order (x86-64 keeps loads in order, and the map's
     * address is stored before the bound): a bound that covers the index
     * comes with the mapping it bounds, also in a free racing the first
     * malloc. Two instructions, as with a constant bound and a static map. */
    bool outside;
    _Atomic uint8_t *bytes;
    __asm__(
        "cmp %[entries], %[index]\n\t"
        "mov %[map], %[bytes]"
        : "=@ccae"(outside), [bytes] "=r"(bytes)
        : [index] "r"(index), [entries] "m"(g_segment_map.entries), [map] "m"(g_segment_map.bytes));
    if (unlikely(outside)) return false;
    /* A plain load, as a relaxed one is: a pointer we returned was
     * registered before it was handed out, and the hand-out itself orders
     * the caller after the registration. In asm so that the byte is tested
     * where it lies: gcc loads an atomic into a register and tests that
     * (two instructions for one, in every free). Sanitizers do not see this
     * read; the map's bytes are written by segment registration only. */
    bool absent;
    __asm__("cmpb $0, %[entry]" : "=@ccz"(absent) : [entry] "m"(bytes[index]));
    return !absent;
}
static inline bool segment_map_contains(uintptr_t address) {
    return segment_map_contains_index(address >> SEGMENT_SHIFT);
}
/* The segment of the map's index: free shifts the index it tested back
 * instead of masking a second copy of the pointer (the empty asm keeps gcc
 * from folding the two shifts into that mask). */
static inline struct segment *segment_at_index(uintptr_t index) {
    __asm__("" : "+r"(index));
    return (struct segment *)(index << SEGMENT_SHIFT);
}
static inline struct segment *segment_of(const void *p) {
    return (struct segment *)((uintptr_t)p & ~(uintptr_t)SEGMENT_MASK);
}
static inline struct page *page_of(struct segment *segment, const void *p) {
    return segment->pages[((uintptr_t)p >> SLICE_SHIFT) & (SLICES_PER_SEGMENT - 1)].first;
}
/* The descriptor of the slice that p lies in (its page's first slice, or a
 * later one holding copies of the block test's fields) */
static inline const struct page *block_slice_in(struct segment *segment, const void *p) {
    return &segment->pages[((uintptr_t)p >> SLICE_SHIFT) & (SLICES_PER_SEGMENT - 1)];
}
/* Address of a page's first slice (its memory starts there). */
static inline uintptr_t page_slices_begin(const struct page *page) {
    const struct segment *segment = segment_of(page);
    return (uintptr_t)segment + ((uintptr_t)(page - segment->pages) << SLICE_SHIFT);
}
/* Block 0 of a page: after the slack that keeps the last block flush with
 * the page's end (see block_offset_inverse). */
static inline uintptr_t page_start(const struct page *page) {
    return page->start;
}
/* Pages whose first slice keeps touched_end: one-slice class pages. */
static inline bool page_tracks_touched(const struct page *page) {
    return page->slice_count == 1 && page->class_index != LARGE_CLASS;
}
/* Where the OS page after the first `blocks` blocks of a page begins,
 * counted from its first slice's start. */
static inline uint32_t page_carved_end(const struct page *page, uint32_t blocks) {
    uintptr_t end = page_start(page) + (uintptr_t)blocks * page->block_size;
    return (uint32_t)(((end - page_slices_begin(page)) + OS_PAGE_SIZE - 1) &
                      ~(uintptr_t)(OS_PAGE_SIZE - 1));
}

/* The block test of free and malloc_usable_size: p - page_start(page) is a
 * block's offset iff offset * inverse < inverse, with, for a class page,
 * inverse = (floor(2^40 / size) + 1) << 24. Then size * r = 2^40 + e with
 * 0 < e <= size (r = inverse >> 24), the product is (offset * r mod 2^40) << 24,
 * and for offset = k * size + j it is k * e + j * r: below r iff j == 0, while
 * (k + 1) * e < r, true for every offset of a class page. A pointer in the
 * slack before block 0 gives offset -d (0 < d <= size - 16) and a product of
 * 2^40 - d * r >= 16 * r - e, above r: rejected too. As the last block ends
 * at the page's end, nothing else in the page needs a range check (two loads
 * and a branch less per free); tests/test_block_test.c checks every byte
 * offset of every class. A large page (one block at offset 0) has inverse 1,
 * which accepts only 0; a descriptor not in use has 0, which accepts nothing. */
static inline uint64_t block_offset_inverse(size_t block_size) {
    return ((((uint64_t)1 << 40) / block_size) + 1) << 24;
}
static inline bool block_offset_valid(uintptr_t offset, uint64_t inverse) {
    return (uint64_t)offset * inverse < inverse;
}
/* The same test for p on the descriptor of the slice it falls in (a copy of
 * its page's start and inverse): true if p is no block start. In asm so that
 * both fields are memory operands of the subtract, multiply and compare: five
 * instructions in free where gcc made seven of the C form (two register
 * copies of the slice's address and the inverse); `churn 1`: 234.7 M ->
 * 230.7 M instructions. tests/test_block_test.c checks it against the C form
 * and the truth. Sanitizers do not see the two reads (the C form read the
 * same fields plainly; a purger closes the test only under the protocol of
 * segment_reclaim_pages). */
static inline bool block_start_invalid(const void *p, const struct page *slice) {
    uintptr_t product = (uintptr_t)p;
    bool invalid;
    __asm__("sub %[start], %[product]\n\t"
            "imul %[inverse], %[product]\n\t"
            "cmp %[inverse], %[product]"
            : [product] "+r"(product), "=@ccae"(invalid)
            : [start] "m"(slice->start), [inverse] "m"(slice->block_size_inverse));
    return invalid;
}

#endif
