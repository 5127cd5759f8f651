/* class_young's table (src/size_class.c) against the computation it replaced,
 * compiled from the allocator's own source: a young heap serves each class up
 * to 1 KiB from the power-of-two class at or above it, and every other class
 * (0, and those over 1 KiB) from itself. The behaviour (the block sizes a
 * young heap hands out) is in test_young_heaps. */
#include "../src/internal.h"
#include "../src/size_class.c"
#include "common.h"

/* class_young as it was computed before the table */
static unsigned young_computed(unsigned cls) {
    if (cls == 0 || g_class_size[cls] > 1024) return cls;
    uint32_t size = g_class_size[cls];
    return size_class_of(size <= 16 ? 16 : (size_t)1 << (32 - __builtin_clz(size - 1)));
}

int main(void) {
    CHECK(g_class_size[YOUNG_CLASS_LAST] == 1024);
    CHECK(g_class_size[YOUNG_CLASS_LAST + 1] > 1024);
    unsigned powers = 0;
    for (unsigned cls = 0; cls < SMALL_CLASS_COUNT; cls++) {
        unsigned young = class_young(cls);
        CHECKF(young == young_computed(cls), "class_young(%u) = %u, not %u", cls, young,
               young_computed(cls));
        CHECKF(g_class_size[young] >= g_class_size[cls], "class_young(%u) serves fewer bytes", cls);
        powers += cls > 0 && young == cls && cls <= YOUNG_CLASS_LAST;
    }
    CHECKF(powers == 7, "%u classes up to 1 KiB serve themselves when young, not 7 (16..1024)",
           powers);
    printf("class_young: %u classes checked\n", SMALL_CLASS_COUNT);
    return 0;
}
