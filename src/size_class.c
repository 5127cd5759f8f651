/* Size classes: 16-byte steps to 128 B, 4 classes per doubling to 1 KiB,
 * then 5 per doubling up to 32 KiB: 9/8, 5/4, 3/2, 7/4 and 2 times each
 * power of two (at most 25% and on average about 12% internal waste). The
 * class at 9/8 serves a power of two and a header, which programs ask for
 * often: sqlite3's page cache asks for 4368 and 1032 bytes, served from 5120
 * and 1280 before (17% and 24% waste; its peak RSS 176.7 -> 161.3 MiB with
 * the class, glibc's 147.1). A class costs a partly used page per heap where
 * sizes spread thin (mstress's 1-16 KiB blocks: peak RSS +2-5%), so the
 * steps stay coarse elsewhere. Bigger blocks are large pages (runs of
 * slices): a freed one goes back to its segment, where a block of any size
 * can reuse its resident memory, whereas a class page of 4-8 such blocks
 * stayed resident with one live block (mstress: peak RSS 32 -> 26 MiB; with
 * the limit at 16 KiB ghostscript's RSS rose 6%).
 * A class that a program asks mostly for one size well below its block
 * size gets a class fitted to it as the program runs (fitted_class.c).
 * g_class_size was generated once from the rule in size_class_of();
 * test_size_classes checks that every size gets a block at least that large
 * and that all of it is usable. */
#include "internal.h"

/* class of a size up to 1 KiB, indexed by (size + 15) >> 4: what each
 * heap's table (malloc's fast path) is copied from. Derived from
 * size_class_of() by size_class_table_limit, which initialisation and every
 * change of the mmap threshold call; until then every entry is 0, the class
 * that stays empty, so malloc takes the slow path (which initialises). An
 * entry stays 0 where its sizes must not come from a class: above a lowered
 * mmap threshold, or all in checked mode. */
_Atomic uint8_t g_class_of_small[CLASS_TABLE_SIZE];

/* The block sizes of the classes over 1 KiB (SHARED_CLASS_FIRST on): written
 * once, for both tables below. */
#define SHARED_FIXED_SIZES                                                                         \
    1152, 1280, 1536, 1792, 2048, 2304, 2560, 3072, 3584, 4096, 4608, 5120, 6144, 7168, 8192,      \
        9216, 10240, 12288, 14336, 16384, 18432, 20480, 24576, 28672, 32768

/* block size of each class */
const uint32_t g_class_size[SMALL_CLASS_COUNT] = {
    16,  16,  32,  48,  64,  80,  96,  112, 128, 160,  192,
    224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, SHARED_FIXED_SIZES,
};

/* Slices (64 KiB) per page of each class, by heap->frees_others. Row 0: the
 * fewest that hold 8 blocks. Row 1, a thread that frees other threads'
 * blocks (a server's worker): the thread-local classes whose slice holds
 * fewer than 256 blocks (320 B to 1 KiB) take the fewest slices, a power of
 * two, that hold 512: 4 up to 512 B, 8 from 640 B. A free goes to its
 * block's own page and malloc takes the blocks of the class's current page,
 * so a class spread over many small pages hands out blocks freed long
 * before, cold in the cache (larson: its workers' live blocks of a class of
 * 640 B-1 KiB filled 5-7 one-slice pages; with 8 slices it runs in
 * 0.87-0.94 of the time, and with 4 for 320-512 B too, 0.96-0.98 of that;
 * mstress 0.95-0.96). Not for every thread: a thread that sleeps while
 * others free what it allocated keeps its current page of each class
 * resident as far as it was carved, since its own list holds blocks carved
 * and never handed out, and that reached 1.1-1.6 MiB with 8 slices where
 * rel_remote_reclaim prompt allows 1 (0.7-0.9 with one); a thread that only
 * allocates for others (that test's owner) keeps row 0. Smaller classes and
 * 8 slices from 320 B cost mstress or threadchurn peak RSS
 * (docs/benchmark-history.md, fifty-seventh and fifty-eighth sessions). */
const uint8_t g_class_slices[2][SMALL_CLASS_COUNT] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 8, 8, 8, 8, 1, 1,
     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4},
};

/* The power-of-two class at or above cls, for the classes of at most 1 KiB
 * (a young heap's); 0 and larger classes stay. A table: computed from the
 * block size it took 107 bytes of the code every program maps, 19 now
 * (tests/test_young_class_table.c checks it against that computation). */
static const uint8_t young_class[YOUNG_CLASS_LAST + 1] = {
    0, 1, 2, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 16, 16, 16, 16, 20, 20, 20, 20,
};
unsigned class_young(unsigned cls) {
    return cls <= YOUNG_CLASS_LAST ? young_class[cls] : cls;
}

/* Routes sizes above `limit` (at most 1 KiB matters) to the slow path.
 * True if an entry changed: the heaps' tables are then out of date
 * (heap_class_tables_refresh). */
bool size_class_table_limit(size_t limit) {
    bool changed = false;
    for (size_t i = 1; i < CLASS_TABLE_SIZE; i++) {
        size_t largest = i << 4; /* the largest size of entry i */
        uint8_t cls = largest <= limit ? (uint8_t)size_class_of(largest) : 0;
        /* relaxed: a malloc racing with mallopt may use either entry */
        changed |= atomic_exchange_explicit(&g_class_of_small[i], cls, memory_order_relaxed) != cls;
    }
    return changed;
}

/* The block sizes of the shared classes by cls - SHARED_CLASS_FIRST: the
 * fixed ones, as in g_class_size, then the fitted classes' (fitted_class.c),
 * 0 until each is set, once. */
uint16_t g_shared_class_size[SHARED_CLASS_COUNT] = {SHARED_FIXED_SIZES};
