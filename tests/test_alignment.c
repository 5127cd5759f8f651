/* Every allocation result is suitably aligned and all of its usable size can
 * be written: malloc of every size 0..4096 and each power of two up to 64 MiB
 * (16-byte alignment, as glibc gives on x86-64), and memalign, posix_memalign,
 * aligned_alloc, valloc and pvalloc with alignments 16 B .. 2 MiB. */
#include <errno.h>
#include <malloc.h>

#include "common.h"

static void touch_all(void *p, size_t req) {
    size_t u = malloc_usable_size(p);
    CHECKF(u >= req, "usable size %zu < requested %zu", u, req);
    memset(p, 0x5A, u);
    if (u > 0) {
        volatile unsigned char *c = p;
        CHECK(c[0] == 0x5A && c[u - 1] == 0x5A);
    }
}

static void check_align(void *p, size_t align, const char *what, size_t size) {
    CHECKF(p != NULL, "%s(align %zu, size %zu) returned NULL", what, align, size);
    CHECKF(((uintptr_t)p & (align - 1)) == 0, "%s(align %zu, size %zu) = %p misaligned", what,
           align, size, p);
    touch_all(p, size);
}

int main(void) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *keep[64];

    /* The classic small cases. */
    for (int i = 0; i < 64; i++) {
        keep[i] = malloc(i & 1 ? 1 : 8);
        check_align(keep[i], 16, "malloc", i & 1 ? 1 : 8);
    }
    for (int i = 0; i < 64; i++)
        free(keep[i]);

    /* Every size up to 4096, several blocks live at once. */
    for (size_t s = 0; s <= 4096; s++) {
        void *p[4];
        for (int k = 0; k < 4; k++) {
            p[k] = malloc(s);
            check_align(p[k], 16, "malloc", s);
        }
        for (int k = 0; k < 4; k++)
            free(p[k]);
    }

    /* Powers of two and their neighbours up to 64 MiB. */
    for (size_t s = 1; s <= ((size_t)64 << 20); s <<= 1) {
        size_t sizes[3] = {s - 1, s, s + 1};
        for (int k = 0; k < 3; k++) {
            void *p = malloc(sizes[k]);
            check_align(p, 16, "malloc", sizes[k]);
            free(p);
        }
    }

    /* The aligned allocators, alignments 16 B .. 2 MiB. */
    for (size_t a = 16; a <= ((size_t)2 << 20); a <<= 1) {
        size_t sizes[] = {0, 1, 16, a - 1, a, a + 1, 3 * a + 5, 100000};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t s = sizes[k];
            void *p = memalign(a, s);
            check_align(p, a, "memalign", s);
            void *q = aligned_alloc(a, s);
            check_align(q, a, "aligned_alloc", s);
            void *r = NULL;
            int rc = posix_memalign(&r, a, s);
            CHECKF(rc == 0, "posix_memalign(%zu, %zu) = %d", a, s, rc);
            check_align(r, a, "posix_memalign", s);
            free(p);
            free(q);
            free(r);
        }
        /* Several live at once, so that they cannot all sit at one spot. */
        void *many[16];
        for (int i = 0; i < 16; i++) {
            many[i] = memalign(a, 24);
            check_align(many[i], a, "memalign", 24);
        }
        for (int i = 0; i < 16; i++)
            free(many[i]);
    }

    /* valloc and pvalloc: page alignment; pvalloc rounds the size up to pages. */
    size_t vs[] = {0, 1, 100, page - 1, page, page + 1, 5 * page + 3, (size_t)3 << 20};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        void *p = valloc(vs[k]);
        check_align(p, page, "valloc", vs[k]);
        void *q = pvalloc(vs[k]);
        size_t rounded = (vs[k] + page - 1) / page * page;
        check_align(q, page, "pvalloc", rounded);
        free(p);
        free(q);
    }
    return 0;
}
