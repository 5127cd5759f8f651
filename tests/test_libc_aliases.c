/* glibc's __libc_* entry points reach the allocator that serves malloc.
 * glibc exports them beside the standard names, and a program or library
 * that calls one directly (__libc_mallopt to tune, __libc_malloc from an
 * interposer) binds to whichever library defines it first: one we do not
 * define goes to glibc's own malloc, which then tunes or counts nothing
 * that this process uses, or hands out a block that our free rejects. */
#include <malloc.h>

#include "common.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);
extern int __libc_mallopt(int param, int value);
extern struct mallinfo __libc_mallinfo(void);

#define BIG ((size_t)10 << 20)

/* Bytes in use as malloc's own allocator counts them. */
static size_t in_use(void) {
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* p, just returned by an alias for BIG bytes, is the allocator's: its
 * count grew by BIG, and free gives it back. */
static void check_big_block(void *p, const char *name, size_t before) {
    CHECKF(p != NULL, "%s(%zu) failed", name, BIG);
    memset(p, 1, BIG);
    CHECKF(in_use() >= before + BIG, "%s: block not counted by mallinfo2 (%zu -> %zu)", name,
           before, in_use());
    CHECKF(malloc_usable_size(p) >= BIG, "%s: malloc_usable_size %zu", name, malloc_usable_size(p));
    free(p);
    CHECKF(in_use() < before + BIG, "%s: free did not give the block back", name);
}

int main(void) {
    const char *lib = getenv("TEST_PRELOAD_LIB");
    if (!tm_expected() && lib != NULL && lib[0] != '\0')
        SKIP("%s: another allocator's own statistics and tunables", lib);

    /* allocation: big blocks counted by malloc's mallinfo2, small ones
     * accepted by its free */
    size_t before = in_use();
    check_big_block(__libc_malloc(BIG), "__libc_malloc", before);
    check_big_block(__libc_calloc(1, BIG), "__libc_calloc", before);
    check_big_block(__libc_realloc(NULL, BIG), "__libc_realloc", before);
    check_big_block(__libc_memalign(4096, BIG), "__libc_memalign", before);
    check_big_block(__libc_valloc(BIG), "__libc_valloc", before);
    check_big_block(__libc_pvalloc(BIG), "__libc_pvalloc", before);
    void *small[5] = {__libc_malloc(40), __libc_calloc(3, 16), __libc_realloc(NULL, 100),
                      __libc_memalign(64, 200), __libc_valloc(300)};
    for (int i = 0; i < 5; i++) {
        CHECK(small[i] != NULL);
        memset(small[i], 2, 40);
        free(small[i]);
    }
    void *p = malloc(50);
    CHECK(p != NULL);
    p = __libc_realloc(p, 5000); /* malloc's block, grown by the alias */
    CHECK(p != NULL);
    __libc_free(p);

    /* __libc_mallinfo counts malloc's blocks */
    void *volatile big = malloc(BIG);
    CHECK(big != NULL);
    struct mallinfo m = __libc_mallinfo();
    CHECKF((size_t)(unsigned)m.uordblks + (size_t)(unsigned)m.hblkhd >= BIG,
           "__libc_mallinfo does not count a %zu-byte block: uordblks %d hblkhd %d", BIG,
           m.uordblks, m.hblkhd);
    free(big);

    /* __libc_mallopt tunes malloc: M_PERTURB fills new blocks with the
     * complement of its byte, as glibc's does */
    CHECK(__libc_mallopt(M_PERTURB, 0xa5) == 1);
    unsigned char *volatile q = malloc(64);
    CHECK(q != NULL);
    for (int i = 0; i < 64; i++)
        CHECKF(q[i] == 0x5a, "__libc_mallopt(M_PERTURB) not applied: byte %d is %#x", i, q[i]);
    free(q);
    CHECK(__libc_mallopt(M_PERTURB, 0) == 1);
    return 0;
}
