/* malloc_usable_size(p) is at least the request, all of it may be written
 * and the usable bytes of distinct live blocks never overlap; it is 0 for
 * NULL, and realloc to the usable size keeps the block in place. */
#include <malloc.h>

#include "common.h"

#define N 4000

struct blk {
    unsigned char *p;
    size_t u;
};

static int cmp_blk(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const struct blk *)a)->p, y = (uintptr_t)((const struct blk *)b)->p;
    return x < y ? -1 : x > y;
}

int main(void) {
    CHECK(malloc_usable_size(NULL) == 0);
    static struct blk b[N];
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)(i * 37 % 5000);
        if (i % 100 == 7) n = 100000 + (size_t)i * 1000;
        b[i].p = malloc(n);
        CHECK(b[i].p != NULL);
        b[i].u = malloc_usable_size(b[i].p);
        CHECKF(b[i].u >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, b[i].u);
        memset(b[i].p, (unsigned char)i, b[i].u);
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < b[i].u; k++)
            CHECKF(b[i].p[k] == (unsigned char)i, "block %d byte %zu overwritten", i, k);
    qsort(b, N, sizeof b[0], cmp_blk);
    for (int i = 1; i < N; i++)
        CHECKF(b[i - 1].p + b[i - 1].u <= b[i].p, "usable ranges overlap: %p+%zu and %p",
               (void *)b[i - 1].p, b[i - 1].u, (void *)b[i].p);
    /* realloc to the usable size keeps the block where it is. glibc's
     * mmapped blocks may move (their usable size ends 8 bytes short of what a
     * realloc to it needs), so for other allocators only blocks below 64 KiB
     * are checked; tidemalloc must keep every block in place. */
    const int all = tm_expected();
    for (int i = 0; i < N; i++) {
        void *q = realloc(b[i].p, b[i].u);
        CHECK(q != NULL);
        if (all || b[i].u < 65536)
            CHECKF(q == b[i].p, "realloc(p, malloc_usable_size(p) = %zu) moved the block", b[i].u);
        free(q);
    }
    return 0;
}
