/* malloc(0) returns a unique pointer that can be freed (glibc semantics);
 * so do realloc(NULL, 0), memalign(a, 0) and aligned_alloc(a, 0). */
#include <malloc.h>

#include "common.h"

#define N 10000

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    static void *p[N];
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0:
            p[i] = malloc(0);
            break;
        case 1:
            p[i] = realloc(NULL, 0);
            break;
        case 2:
            p[i] = memalign(64, 0);
            break;
        default:
            p[i] = aligned_alloc(32, 0);
            break;
        }
        CHECKF(p[i] != NULL, "zero-size allocation %d returned NULL", i);
        CHECKF(((uintptr_t)p[i] & 15) == 0, "zero-size allocation %p misaligned", p[i]);
    }
    void *sorted[N];
    memcpy(sorted, p, sizeof sorted);
    qsort(sorted, N, sizeof sorted[0], cmp_ptr);
    for (int i = 1; i < N; i++)
        CHECKF(sorted[i] != sorted[i - 1], "malloc(0) returned %p twice", sorted[i]);
    /* The blocks do not overlap ordinary blocks either. */
    void *q = malloc(16);
    CHECK(q != NULL);
    for (int i = 0; i < N; i++)
        CHECK(p[i] != q);
    free(q);
    for (int i = 0; i < N; i++)
        free(p[i]);
    /* And once more, after freeing: still fine. */
    for (int i = 0; i < N; i++) {
        p[i] = malloc(0);
        CHECK(p[i] != NULL);
    }
    for (int i = N - 1; i >= 0; i--)
        free(p[i]);
    return 0;
}
