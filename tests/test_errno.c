/* Failure returns NULL with errno ENOMEM (or EINVAL where glibc 2.36 says
 * so); posix_memalign reports through its return value without touching
 * errno; free never changes errno, also for huge (mmapped) blocks. */
#include <errno.h>
#include <malloc.h>
#include <stdalign.h>

#include "common.h"

#define EXPECT_NULL_ERRNO(expr, want)                                                              \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *r_ = (expr);                                                                         \
        int e_ = errno;                                                                            \
        CHECKF(r_ == NULL, "%s returned %p, expected NULL", #expr, r_);                            \
        CHECKF(e_ == (want), "%s: errno %d (%s), expected %d", #expr, e_, strerror(e_), want);     \
    } while (0)

/* Hides a size from the compiler so that it does not warn about it. */
static size_t launder(size_t s) {
    volatile size_t v = s;
    return v;
}

int main(void) {
    const size_t big = launder(SIZE_MAX);
    const size_t half = launder(SIZE_MAX / 2 + 1);

    EXPECT_NULL_ERRNO(malloc(big), ENOMEM);
    EXPECT_NULL_ERRNO(malloc(big - 4096), ENOMEM);
    EXPECT_NULL_ERRNO(malloc(launder((size_t)PTRDIFF_MAX + 1)), ENOMEM);

    EXPECT_NULL_ERRNO(calloc(half, 2), ENOMEM);
    EXPECT_NULL_ERRNO(calloc(2, half), ENOMEM);
    EXPECT_NULL_ERRNO(calloc(big, big), ENOMEM);
    EXPECT_NULL_ERRNO(calloc(launder((size_t)1 << 33), launder((size_t)1 << 33)), ENOMEM);
    EXPECT_NULL_ERRNO(calloc(1, big), ENOMEM);

    EXPECT_NULL_ERRNO(reallocarray(NULL, half, 2), ENOMEM);
    EXPECT_NULL_ERRNO(reallocarray(NULL, big, big), ENOMEM);

    /* Failed reallocs leave the old block alone. */
    char *p = malloc(100);
    CHECK(p != NULL);
    memset(p, 0x77, 100);
    EXPECT_NULL_ERRNO(realloc(p, big), ENOMEM);
    EXPECT_NULL_ERRNO(realloc(p, big - 100000), ENOMEM);
    EXPECT_NULL_ERRNO(reallocarray(p, half, 4), ENOMEM);
    for (int i = 0; i < 100; i++)
        CHECKF(p[i] == 0x77, "failed realloc changed byte %d", i);
    char *p2 = reallocarray(p, 10, 20);
    CHECK(p2 != NULL && p2[0] == 0x77 && p2[99] == 0x77);
    free(p2);

    EXPECT_NULL_ERRNO(pvalloc(big), ENOMEM);
    EXPECT_NULL_ERRNO(pvalloc(big - 4096 * 4), ENOMEM);
    EXPECT_NULL_ERRNO(valloc(big), ENOMEM);
    EXPECT_NULL_ERRNO(memalign(64, big), ENOMEM);
    EXPECT_NULL_ERRNO(memalign(64, big - 200), ENOMEM);
    EXPECT_NULL_ERRNO(memalign(4096, launder((size_t)PTRDIFF_MAX)), ENOMEM);
    EXPECT_NULL_ERRNO(aligned_alloc(64, big), ENOMEM);
    EXPECT_NULL_ERRNO(aligned_alloc(4096, big - 8192), ENOMEM);
    /* glibc 2.36: an alignment above SIZE_MAX/2+1 is EINVAL. */
    EXPECT_NULL_ERRNO(memalign(launder(SIZE_MAX / 2 + 2), 16), EINVAL);

    /* posix_memalign: bad alignments give EINVAL, errno untouched. */
    static const size_t bad_align[] = {0, 1, 2, 4, 3, 12, 24, 48, 100, 4097};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        void *m = (void *)0x1234;
        errno = 4242;
        int rc = posix_memalign(&m, launder(bad_align[i]), 16);
        CHECKF(rc == EINVAL, "posix_memalign(align %zu) = %d, expected EINVAL", bad_align[i], rc);
        CHECKF(errno == 4242, "posix_memalign(align %zu) changed errno to %d", bad_align[i], errno);
    }
    {
        void *m = NULL;
        errno = 4242;
        int rc = posix_memalign(&m, 64, big);
        CHECKF(rc == ENOMEM, "posix_memalign(64, SIZE_MAX) = %d, expected ENOMEM", rc);
        errno = 4242; /* (glibc sets errno on that failure; that is allowed) */
        rc = posix_memalign(&m, 64, 64);
        CHECK(rc == 0 && m != NULL && ((uintptr_t)m & 63) == 0);
        CHECKF(errno == 4242, "successful posix_memalign changed errno to %d", errno);
        free(m);
    }

    /* Success never needs errno; free preserves it, for every kind of block. */
    static const size_t sizes[] = {
        0, 1, 24, 1000, 70000, 300000, (size_t)5 << 20, (size_t)64 << 20};
    static const int errs[] = {ENOMEM, EINVAL, ENOENT, 0, 12345};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t e = 0; e < sizeof errs / sizeof errs[0]; e++) {
            void *m = malloc(sizes[i]);
            CHECK(m != NULL);
            memset(m, 1, sizes[i]);
            errno = errs[e];
            free(m);
            CHECKF(errno == errs[e], "free of a %zu-byte block changed errno %d -> %d", sizes[i],
                   errs[e], errno);
            void *a = memalign(4096, sizes[i]);
            CHECK(a != NULL);
            errno = errs[e];
            free(a);
            CHECKF(errno == errs[e], "free of a memalign'ed %zu-byte block changed errno",
                   sizes[i]);
        }
    }
    errno = EBADF;
    free(NULL);
    CHECKF(errno == EBADF, "free(NULL) changed errno");

    /* After all these failures the allocator still works. */
    for (int i = 0; i < 1000; i++) {
        void *m = malloc((size_t)i * 13);
        CHECK(m != NULL);
        free(m);
    }
    return 0;
}
