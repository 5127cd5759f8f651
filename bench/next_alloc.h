/* The allocation calls of the next library, for the diagnostics preloaded
 * before tidemalloc (rss_parts.so, live_bound.so), which forward to it.
 * next_resolve() looks them up at the first call; dlsym's own calloc,
 * before they are known, is served from a static buffer (early_calloc),
 * whose blocks free ignores (early_owns). */
#ifndef TIDEMALLOC_BENCH_NEXT_ALLOC_H
#define TIDEMALLOC_BENCH_NEXT_ALLOC_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static void *(*next_memalign)(size_t, size_t);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static size_t (*next_usable_size)(void *);

static char early_heap[8192];
static size_t early_used;

static void next_resolve(void) {
    if (next_malloc) return;
    next_calloc = dlsym(RTLD_NEXT, "calloc");
    next_realloc = dlsym(RTLD_NEXT, "realloc");
    next_free = dlsym(RTLD_NEXT, "free");
    next_memalign = dlsym(RTLD_NEXT, "memalign");
    next_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    next_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    next_usable_size = dlsym(RTLD_NEXT, "malloc_usable_size");
    next_malloc = dlsym(RTLD_NEXT, "malloc"); /* last: the test of next_resolve */
}

/* calloc while next_resolve runs (dlsym's own), else NULL: resolve then.
 * `bytes` is the request plus any header of the caller's. */
static void *early_calloc(size_t bytes) {
    if (next_calloc != NULL || next_malloc != NULL || early_used + bytes > sizeof early_heap)
        return NULL;
    void *p = early_heap + early_used; /* static storage reads as zero */
    early_used += (bytes + 15) & ~(size_t)15;
    return p;
}

static bool early_owns(const void *p) {
    return (const char *)p >= early_heap && (const char *)p < early_heap + sizeof early_heap;
}

#endif
