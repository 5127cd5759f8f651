/* Sizes at and around every size-class boundary: malloc_usable_size(p) is at
 * least the request, all of it can be written, and writing it disturbs no
 * other live block. Sizes: every byte 1..2048, then 2^k and 1.125, 1.25, 1.5,
 * 1.75 times 2^k (and their neighbours) up to 64 MiB. */
#include <malloc.h>

#include "common.h"

#define MAXN 12

static void one_size(size_t s, int n) {
    void *p[MAXN];
    size_t u[MAXN];
    for (int i = 0; i < n; i++) {
        p[i] = malloc(s);
        CHECKF(p[i] != NULL, "malloc(%zu) failed", s);
        u[i] = malloc_usable_size(p[i]);
        CHECKF(u[i] >= s, "malloc_usable_size(malloc(%zu)) = %zu", s, u[i]);
        pat_fill(p[i], u[i]);
    }
    for (int i = 0; i < n; i++) {
        size_t bad = pat_check(p[i], u[i]);
        CHECKF(bad == (size_t)-1, "size %zu block %d (%p, usable %zu): byte %zu overwritten", s, i,
               p[i], u[i], bad);
        CHECKF(malloc_usable_size(p[i]) == u[i], "usable size of %p changed", p[i]);
    }
    /* Free every other block, refill the rest after new allocations. */
    for (int i = 0; i < n; i += 2)
        free(p[i]);
    for (int i = 0; i < n; i += 2) {
        p[i] = malloc(s);
        CHECKF(p[i] != NULL, "malloc(%zu) failed", s);
        u[i] = malloc_usable_size(p[i]);
        CHECKF(u[i] >= s, "malloc_usable_size(malloc(%zu)) = %zu", s, u[i]);
        pat_fill(p[i], u[i]);
    }
    for (int i = 0; i < n; i++) {
        size_t bad = pat_check(p[i], u[i]);
        CHECKF(bad == (size_t)-1, "size %zu block %d (%p): byte %zu overwritten after reuse", s, i,
               p[i], bad);
        free(p[i]);
    }
}

int main(void) {
    for (size_t s = 1; s <= 2048; s++)
        one_size(s, MAXN);

    for (size_t base = 2048; base <= ((size_t)64 << 20); base <<= 1) {
        size_t mult[5] = {base, base + base / 8, base + base / 4, base + base / 2,
                          base + 3 * base / 4};
        int n = base >= ((size_t)8 << 20) ? 2 : base >= ((size_t)512 << 10) ? 4 : MAXN;
        for (int m = 0; m < 5; m++) {
            if (mult[m] > ((size_t)64 << 20)) break;
            static const long d[] = {-1, 0, 1, -17, -16, -15, 15, 16, 17};
            /* Big blocks: fewer neighbours, to keep the run short. */
            size_t nd = base >= ((size_t)8 << 20)   ? 2
                        : base >= ((size_t)1 << 20) ? 3
                                                    : sizeof d / sizeof d[0];
            for (size_t k = 0; k < nd; k++)
                one_size((size_t)((long)mult[m] + d[k]), n);
        }
    }
    return 0;
}
