/* The size-class rule (size_class_of in src/internal.h) against the tables
 * it was generated into (src/size_class.c): every size up to SMALL_MAX gets
 * the smallest class that holds it, no class wastes a quarter of a request
 * or more, each class page holds at least 8 blocks in as few slices as can
 * (a thread that frees other threads' blocks: 512 blocks from 320 B to 1 KiB),
 * and malloc's table for sizes up to 1 KiB agrees with the rule. A power of
 * two plus a header (sqlite3's 4368 and 1032 bytes) gets the class at 9/8 of
 * that power. The shared classes' table of sizes (g_shared_class_size)
 * agrees with the fixed ones'. This is the arithmetic itself, compiled from the allocator's
 * own header; test_size_classes checks the blocks malloc hands out. */
#include "../src/internal.h"
#include "../src/size_class.c"
#include "common.h"

int main(void) {
    CHECK(g_class_size[0] == 16 && g_class_size[1] == 16);
    for (unsigned cls = 2; cls < SMALL_CLASS_COUNT; cls++)
        CHECKF(g_class_size[cls] > g_class_size[cls - 1] && g_class_size[cls] % ALIGNMENT == 0,
               "class %u: %u after %u", cls, g_class_size[cls], g_class_size[cls - 1]);
    CHECK(g_class_size[SMALL_CLASS_COUNT - 1] == SMALL_MAX);
    /* the shared classes' one table: the fixed ones' sizes, the fitted ones
     * unset (src/fitted_class.c sets each once) */
    for (unsigned cls = SHARED_CLASS_FIRST; cls < CLASS_COUNT; cls++)
        CHECKF(g_shared_class_size[cls - SHARED_CLASS_FIRST] ==
                   (cls < SMALL_CLASS_COUNT ? g_class_size[cls] : 0),
               "class %u: %u in the shared classes' table", cls,
               g_shared_class_size[cls - SHARED_CLASS_FIRST]);

    CHECK(size_class_of(0) == 0);
    for (size_t size = 1; size <= SMALL_MAX; size++) {
        unsigned cls = size_class_of(size);
        CHECKF(cls >= 1 && cls < SMALL_CLASS_COUNT, "size %zu: class %u", size, cls);
        CHECKF(g_class_size[cls] >= size, "size %zu: class %u holds %u", size, cls,
               g_class_size[cls]);
        CHECKF(cls == 1 || g_class_size[cls - 1] < size,
               "size %zu: class %u (%u) where %u holds it", size, cls, g_class_size[cls],
               g_class_size[cls - 1]);
        if (size <= 128)
            CHECKF(g_class_size[cls] - size < 16, "size %zu: class %u (%u)", size, cls,
                   g_class_size[cls]);
        else
            CHECKF((g_class_size[cls] - size) * 4 < size,
                   "size %zu: class %u (%u) wastes a quarter or more", size, cls,
                   g_class_size[cls]);
    }
    CHECK(g_class_size[size_class_of(4368)] == 4608);
    CHECK(g_class_size[size_class_of(1032)] == 1152);
    CHECK(g_class_size[size_class_of(2056)] == 2304);
    CHECK(g_class_size[size_class_of(8200)] == 9216);

    for (unsigned cls = 1; cls < SMALL_CLASS_COUNT; cls++) {
        size_t slices = g_class_slices[0][cls], size = g_class_size[cls];
        CHECKF(slices >= 1 && slices <= PAGE_MAX_SLICES, "class %u: %zu slices", cls, slices);
        CHECKF((slices << SLICE_SHIFT) / size >= 8, "class %u (%zu B): %zu blocks a page", cls,
               size, (slices << SLICE_SHIFT) / size);
        CHECKF(slices == 1 || ((slices / 2) << SLICE_SHIFT) / size < 8,
               "class %u (%zu B): %zu slices where %zu hold 8 blocks", cls, size, slices,
               slices / 2);
        /* row 1, a thread that frees other threads' blocks: the fewest
         * slices, a power of two, that hold 512 blocks for its classes (not
         * the shared ones, over 1 KiB) whose slice holds fewer than 256,
         * the same as row 0 for the others */
        size_t wide = slices;
        if (cls < SHARED_CLASS_FIRST && SLICE_SIZE / size < 256)
            for (wide = 1; (wide << SLICE_SHIFT) / size < 512;)
                wide *= 2;
        CHECKF(g_class_slices[1][cls] == wide,
               "class %u (%zu B): %u slices for a thread that frees others' blocks, not %zu", cls,
               size, (unsigned)g_class_slices[1][cls], wide);
    }
    CHECK(g_class_slices[1][size_class_of(320)] == 4 && g_class_slices[1][size_class_of(512)] == 4);
    CHECK(g_class_slices[1][size_class_of(640)] == 8 &&
          g_class_slices[1][size_class_of(1024)] == 8);
    CHECK(g_class_slices[1][size_class_of(256)] == 1 &&
          g_class_slices[1][size_class_of(1152)] == 1);

    size_class_table_limit(SMALL_MAX);
    for (size_t i = 1; i < 65; i++)
        CHECKF(atomic_load(&g_class_of_small[i]) == size_class_of(i << 4),
               "fast-path entry %zu: class %u, the rule says %u", i,
               (unsigned)atomic_load(&g_class_of_small[i]), size_class_of(i << 4));
    return 0;
}
