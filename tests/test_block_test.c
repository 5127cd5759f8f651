/* free()'s block test (block_offset_valid in src/page_lookup.h, and
 * block_start_invalid, the asm form free runs) against the truth, at every
 * byte of every page geometry a size class can have (and a sample of the
 * sizes a fitted class can have): for each class and each
 * page length of 1 to PAGE_MAX_SLICES slices, laid out as page_init does
 * (slack first, last block flush with the page's end), the test must accept
 * exactly the block starts. It also checks that the slack keeps every
 * power-of-two alignment that divides the block size (memalign serves such
 * alignments from class pages). A large page's inverse 1 and a free
 * descriptor's 0 are checked at the offsets that matter, in both forms. This
 * is the arithmetic itself, compiled from the allocator's own header; the
 * behaviour (an abort on a pointer into the slack) is in test_invalid_free. */
#include "../src/internal.h"
#include "../src/size_class.c"
#include "common.h"

/* Fitted classes (src/fitted_class.c) take any multiple of 16 between two
 * classes over 1 KiB: a sample of them, the sizes programs ask among them
 * (sqlite3's 1040, 4112 and 4368), and the largest below 32 KiB. */
static const size_t fitted_sizes[] = {1040, 1104, 2064,  4112,  4368, 5504,
                                      7792, 8304, 11744, 17824, 32752};
#define FITTED_SIZES (sizeof fitted_sizes / sizeof fitted_sizes[0])

int main(void) {
    unsigned long checked = 0;
    for (unsigned k = 0; k < SMALL_CLASS_COUNT + FITTED_SIZES; k++) {
        size_t size = k < SMALL_CLASS_COUNT ? g_class_size[k] : fitted_sizes[k - SMALL_CLASS_COUNT];
        uint64_t inverse = block_offset_inverse(size);
        for (unsigned slices = 1; slices <= PAGE_MAX_SLICES; slices++) {
            /* a descriptor as page_block_test_set writes it; only its two
             * fields are read, and the addresses are never dereferenced */
            struct page slice = {0};
            size_t area = (size_t)slices << SLICE_SHIFT;
            size_t blocks_bytes = area / size * size;
            size_t slack = area - blocks_bytes;
            uintptr_t page_begin = (uintptr_t)1 << 46;
            slice.start = page_begin + slack;
            slice.block_size_inverse = inverse;
            for (size_t align = 16; align <= size && size % align == 0; align *= 2)
                CHECKF(slack % align == 0, "size %zu, %u slices: slack %zu breaks %zu alignment",
                       size, slices, slack, align);
            for (size_t at = 0; at < area; at++) {
                uintptr_t offset = (uintptr_t)at - slack; /* wraps before block 0 */
                bool is_block =
                    at >= slack && at - slack < blocks_bytes && (at - slack) % size == 0;
                CHECKF(block_offset_valid(offset, inverse) == is_block,
                       "size %zu, %u slices, byte %zu of the page (slack %zu): %s", size, slices,
                       at, slack, is_block ? "block start rejected" : "accepted");
                CHECKF(block_start_invalid((const void *)(page_begin + at), &slice) == !is_block,
                       "asm form: size %zu, %u slices, byte %zu of the page: %s", size, slices, at,
                       is_block ? "block start rejected" : "accepted");
            }
            checked += area;
        }
    }
    struct page large = {.start = (uintptr_t)1 << 46, .block_size_inverse = 1};
    for (uintptr_t offset = 1; offset < LARGE_MAX; offset++) {
        CHECKF(!block_offset_valid(offset, 1), "large page: offset %zu accepted", (size_t)offset);
        CHECKF(block_start_invalid((const void *)(large.start + offset), &large),
               "large page, asm form: offset %zu accepted", (size_t)offset);
    }
    CHECK(block_offset_valid(0, 1));
    CHECK(!block_start_invalid((const void *)large.start, &large));
    struct page unused = {0}; /* a descriptor never written: start 0 too */
    uintptr_t probes[] = {0, 1, 16, SLICE_SIZE, (uintptr_t)-16};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        CHECKF(!block_offset_valid(probes[i], 0), "free descriptor: offset %zu accepted",
               (size_t)probes[i]);
        CHECKF(block_start_invalid((const void *)(large.start + probes[i]), &unused),
               "free descriptor, asm form: address %zu accepted", (size_t)probes[i]);
    }
    printf("block test: %lu offsets checked\n", checked);
    return 0;
}
