/* A dlopen'ed library allocates (in its constructor, its functions and a
 * thread of its own) and the main program frees, and the other way round;
 * the library is closed and opened again. Uses build/tests/libdlalloc.so. */
#include <limits.h>
#include <malloc.h>

#include "common.h"

typedef void *(*alloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void (*free_fn)(void *);
typedef char *(*strdup_fn)(const char *);
typedef char *(*block_fn)(void);

static void *sym(void *h, const char *name) {
    void *s = dlsym(h, name);
    CHECKF(s != NULL, "dlsym(%s): %s", name, dlerror());
    return s;
}

#define GETFN(type, var, h, name)                                                                  \
    type var;                                                                                      \
    do {                                                                                           \
        void *s_ = sym(h, name);                                                                   \
        memcpy(&var, &s_, sizeof var);                                                             \
    } while (0)

static void check_bytes(const void *p, int v, size_t n, const char *what) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        CHECKF(c[i] == (unsigned char)v, "%s: byte %zu is 0x%02x", what, i, c[i]);
}

int main(void) {
    char path[PATH_MAX];
    const char *dir = getenv("TEST_BUILD_DIR");
    if (dir) {
        snprintf(path, sizeof path, "%s/libdlalloc.so", dir);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
        CHECK(n > 0);
        path[n] = 0;
        char *slash = strrchr(path, '/');
        CHECK(slash != NULL);
        strcpy(slash + 1, "libdlalloc.so");
    }

    void *kept[8] = {0};
    for (int round = 0; round < 20; round++) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        CHECKF(h != NULL, "dlopen(%s): %s", path, dlerror());
        GETFN(alloc_fn, dl_alloc, h, "dl_alloc");
        GETFN(calloc_fn, dl_calloc, h, "dl_calloc");
        GETFN(realloc_fn, dl_realloc, h, "dl_realloc");
        GETFN(free_fn, dl_free, h, "dl_free");
        GETFN(strdup_fn, dl_strdup, h, "dl_strdup");
        GETFN(alloc_fn, dl_alloc_in_thread, h, "dl_alloc_in_thread");
        GETFN(block_fn, dl_ctor_block, h, "dl_ctor_block");

        char *cb = dl_ctor_block();
        CHECKF(cb != NULL, "constructor allocation failed");
        check_bytes(cb, 'c', 777, "constructor block");
        CHECK(malloc_usable_size(cb) >= 777);

        static const size_t sizes[] = {1, 40, 1000, 5000, 70000, 400000, (size_t)6 << 20};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            /* library allocates, main frees */
            void *p = dl_alloc(n);
            CHECK(p != NULL && malloc_usable_size(p) >= n);
            check_bytes(p, 0xD1, n, "dl_alloc");
            p = realloc(p, n * 2 + 1);
            CHECK(p != NULL);
            check_bytes(p, 0xD1, n, "realloc of dl_alloc");
            free(p);
            /* main allocates, library reallocs and frees */
            unsigned char *q = malloc(n);
            CHECK(q != NULL);
            memset(q, 0x42, n);
            q = dl_realloc(q, n + 100);
            CHECK(q != NULL);
            check_bytes(q, 0x42, n, "dl_realloc of malloc");
            dl_free(q);
            /* calloc in the library */
            void *z = dl_calloc(n, 1);
            CHECK(z != NULL);
            check_bytes(z, 0, n, "dl_calloc");
            free(z);
            /* allocated by a thread of the library that has exited */
            void *t = dl_alloc_in_thread(n);
            CHECK(t != NULL);
            check_bytes(t, 0xD2, n, "dl_alloc_in_thread");
            free(t);
        }
        char *s = dl_strdup("hello from the library");
        CHECK(s != NULL && strcmp(s, "hello from the library") == 0);
        free(s);

        /* blocks that outlive the library */
        free(kept[round % 8]);
        kept[round % 8] = dl_alloc(100 + (size_t)round * 1000);
        CHECK(kept[round % 8] != NULL);
        CHECK(dlclose(h) == 0);
    }
    for (int i = 0; i < 8; i++) {
        check_bytes(kept[i], 0xD1, 100, "block kept after dlclose");
        free(kept[i]);
    }
    return 0;
}
