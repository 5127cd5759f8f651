/* Fitted classes: a class over 1 KiB whose mallocs mostly ask well below
 * its block size gets a class of its own at that size: sqlite3's page
 * cache asks for 1032 and 4368 bytes, which the 9/8 classes serve at 1152
 * and 4608 (glibc at 1040 and 4384). How, in steps:
 * - Every FITTED_START refills of the shared classes from the shared heap's
 *   pages (shared_class_refill counts them), the fixed classes over 1 KiB
 *   with no fitted class are marked FITTED_SAMPLING (fitted_class_sampling).
 * - heap_malloc_shared sends a malloc of a marked class here
 *   (fitted_class_malloc), which records its size, FITTED_SAMPLES to a
 *   window, and pops the class's cache as before.
 * - At a window's end the class gets one of FITTED_CLASS_COUNT slots if the
 *   shared heap has set up FITTED_MIN_PAGES pages of it or more (a class
 *   with few blocks would hold a slot, and a partly used page, for little),
 *   and the size that 7 in 8 of its mallocs asked at most (not the largest:
 *   sqlite3's 1 KiB pages come with a few larger blocks, which keep the
 *   fixed class) leaves a 20th of its block size or more unused (a 32nd
 *   fitted the 4096-byte class of test_thread_waves, whose sizes stop at
 *   4000, at 3968, for 3%: not worth a slot and a class). Otherwise
 *   its sampling stops until the next FITTED_START refills.
 * - A slot is class FITTED_CLASS_FIRST + slot, of that size rounded to
 *   ALIGNMENT, set once. From then on fitted_class_malloc routes the class's
 *   mallocs up to that size there; larger ones keep the fixed class.
 * A block's class never changes its size, so a thread that read the routing
 * stale (the fixed class) gets a block that fits too. Sizes spread over a
 * class (mstress: uniform 1-16 KiB) put the 7/8 point near the block size,
 * and no class is fitted. Aligned allocations keep to the fixed classes
 * (class_aligned_from), whose block sizes set the alignment. All of it is
 * rare code: a program that never refills these classes often never maps it
 * (tests/test_rare_code_apart.c). TIDEMALLOC_FITTED_CLASSES=0 stops it. */
#include "internal.h"

#define FITTED_SAMPLES   128
#define FITTED_MIN_PAGES 16

_Atomic uint8_t g_fitted_slot_of[SMALL_CLASS_COUNT - SHARED_CLASS_FIRST];
uint32_t g_fitted_refills;

/* Under fitted_lock (taken with a try: a malloc that finds it busy is not
 * sampled, and a fork child that inherits it held samples no more): each
 * sampled class's window. Only the sampler reads them: out of the page of
 * .data and .bss that every process touches. */
struct fitted_window {
    uint32_t samples;               /* mallocs sampled in the window */
    uint16_t sizes[FITTED_SAMPLES]; /* their sizes */
};
LARGE_BSS static struct spin_lock fitted_lock;
LARGE_BSS static struct fitted_window fitted_windows[SMALL_CLASS_COUNT - SHARED_CLASS_FIRST];

/* A fitted class's page: its fixed class's slices (the one whose slot it
 * is; a thread that sets up its page routed a malloc there, with acquire). */
RARE unsigned fitted_class_slices(unsigned cls) {
    unsigned fixed = SHARED_CLASS_FIRST;
    /* relaxed: see above */
    while (atomic_load_explicit(&g_fitted_slot_of[fixed - SHARED_CLASS_FIRST],
                                memory_order_relaxed) != cls - FITTED_CLASS_FIRST + 1)
        fixed++;
    return g_class_slices[0][fixed];
}

/* The slots taken: the routes published (slots are taken in order, under
 * fitted_lock). Relaxed: a count read stale by the sampling's start marks
 * the classes once more or once less; the window's end reads it under the
 * lock, which alone publishes. */
static RARE unsigned fitted_slots_taken(void) {
    unsigned taken = 0;
    for (unsigned i = 0; i < SMALL_CLASS_COUNT - SHARED_CLASS_FIRST; i++) {
        unsigned slot = atomic_load_explicit(&g_fitted_slot_of[i], memory_order_relaxed);
        taken += slot != 0 && slot != FITTED_SAMPLING;
    }
    return taken;
}

/* Exit heap lock held: FITTED_START more refills. A fixed class with no
 * fitted class and no sampling is sampled again, while slots are left. */
RARE void fitted_class_sampling(void) {
    g_fitted_refills = 0;
    /* relaxed: a tunable; a stale value marks the classes once more or less */
    if (!OPTION(fitted_classes) || fitted_slots_taken() == FITTED_CLASS_COUNT) return;
    for (unsigned i = 0; i < SMALL_CLASS_COUNT - SHARED_CLASS_FIRST; i++) {
        uint8_t none = 0;
        /* relaxed: a mark the sampler tests again under its lock; from 0
         * only, so that a slot a window's end published stays */
        atomic_compare_exchange_strong_explicit(&g_fitted_slot_of[i], &none, FITTED_SAMPLING,
                                                memory_order_relaxed, memory_order_relaxed);
    }
}

/* The shared heap's pages of class cls set up so far (its lock: taken
 * inside fitted_lock, never the other way round). */
static RARE uint32_t fitted_class_pages(unsigned cls) {
    spin_lock(&g_exit_heap_lock);
    struct heap *shared = exit_heap_locked(false);
    uint32_t pages = shared != NULL ? shared->pages_allocated[cls] : 0;
    spin_unlock(&g_exit_heap_lock);
    return pages;
}

/* The end of a window of fixed class cls (fitted_lock held): a slot, or
 * the end of its sampling. */
static RARE void fitted_class_window_end(unsigned cls, struct fitted_window *window) {
    uint16_t *sizes = window->sizes;
    window->samples = 0;
    for (unsigned i = 1; i < FITTED_SAMPLES; i++) /* insertion sort: 128 sizes */
        for (unsigned j = i; j > 0 && sizes[j - 1] > sizes[j]; j--) {
            uint16_t t = sizes[j];
            sizes[j] = sizes[j - 1];
            sizes[j - 1] = t;
        }
    uint32_t fitted =
        ((uint32_t)sizes[FITTED_SAMPLES * 7 / 8 - 1] + ALIGNMENT - 1) & ~(uint32_t)(ALIGNMENT - 1);
    uint32_t block = g_class_size[cls];
    unsigned slot = fitted_slots_taken();
    unsigned shared = cls - SHARED_CLASS_FIRST;
    if (fitted > block - block / 20 || fitted <= g_class_size[cls - 1] ||
        slot == FITTED_CLASS_COUNT || fitted_class_pages(cls) < FITTED_MIN_PAGES) {
        /* relaxed: a thread that reads it stale samples once more */
        atomic_store_explicit(&g_fitted_slot_of[shared], 0, memory_order_relaxed);
        return;
    }
    /* the slot's release store publishes it */
    g_shared_class_size[FITTED_CLASS_FIRST + slot - SHARED_CLASS_FIRST] = (uint16_t)fitted;
    atomic_store_explicit(&g_fitted_slot_of[shared], (uint8_t)(slot + 1), memory_order_release);
}

/* A malloc of `size` for fixed shared class cls, whose slot is not 0. */
RARE void *fitted_class_malloc(size_t size, struct heap *heap, size_t cls) {
    unsigned shared = (unsigned)cls - SHARED_CLASS_FIRST;
    /* acquire: the fitted class's size, stored before the slot */
    unsigned slot = atomic_load_explicit(&g_fitted_slot_of[shared], memory_order_acquire);
    if (slot == FITTED_SAMPLING) {
        if (spin_try_lock(&fitted_lock)) {
            /* relaxed: the lock orders it with the window's end */
            if (atomic_load_explicit(&g_fitted_slot_of[shared], memory_order_relaxed) ==
                FITTED_SAMPLING) {
                struct fitted_window *window = &fitted_windows[shared];
                window->sizes[window->samples++] = (uint16_t)size;
                if (window->samples == FITTED_SAMPLES)
                    fitted_class_window_end((unsigned)cls, window);
            }
            spin_unlock(&fitted_lock);
        }
    } else if (size <= shared_class_size(FITTED_CLASS_FIRST + slot - 1)) {
        cls = FITTED_CLASS_FIRST + slot - 1;
    }
    return shared_class_pop(heap, (unsigned)cls);
}
