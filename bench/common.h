/* Helpers shared by the tidemalloc benchmarks: a seeded PRNG, checked
 * allocation, and a monotonic clock. Header-only, C11. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* splitmix64 seeding + xorshift64*: fast, deterministic, good enough. */
typedef struct {
    uint64_t s;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    r->s = (z ^ (z >> 31)) | 1;
}

static inline uint64_t rng_next(rng_t *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(rng_t *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "malloc(%zu) failed\n", n);
        abort();
    }
    return p;
}

static inline void *xrealloc(void *q, size_t n) {
    void *p = realloc(q, n);
    if (!p) {
        fprintf(stderr, "realloc(%zu) failed\n", n);
        abort();
    }
    return p;
}

/* Writes one byte per 4 KiB page, as a program that uses its memory would. */
static inline void touch_pages(void *p, size_t n, unsigned char v) {
    unsigned char *c = p;
    for (size_t i = 0; i < n; i += 4096)
        c[i] = v;
    if (n) c[n - 1] = v;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Integer argument argv[i] or a default. */
static inline long arg_long(int argc, char **argv, int i, long def) {
    return argc > i ? strtol(argv[i], NULL, 0) : def;
}

#endif
