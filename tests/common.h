/* Tiny helpers shared by tidemalloc's behaviour tests (tests/test_*.c).
 *
 * A test exits 0 on success. On failure it prints "file:line: why" on stderr
 * and exits 1. A test that cannot run in this environment (e.g. the
 * tidemalloc_stats counters are absent because another allocator is
 * preloaded) prints "SKIP why" on stdout and exits 77; suite-unit.sh turns
 * these into PASS/FAIL/SKIP lines. */
#ifndef TIDEMALLOC_TESTS_COMMON_H
#define TIDEMALLOC_TESTS_COMMON_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tidemalloc.h"

#define TEST_SKIP_CODE 77

#define FAILF(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        fflush(stderr);                                                                            \
        _exit(1);                                                                                  \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) FAILF("check failed: %s", #cond);                                             \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) FAILF(__VA_ARGS__);                                                           \
    } while (0)

/* xorshift64: a test's fixed-seed random numbers (the state is never 0). */
static inline uint64_t test_rng_next(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* fn(arg) in a thread of its own, waited for. */
static inline void run_in_thread(void *(*fn)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0) FAILF("pthread_create failed");
    if (pthread_join(t, NULL) != 0) FAILF("pthread_join failed");
}

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        printf("SKIP ");                                                                           \
        printf(__VA_ARGS__);                                                                       \
        putchar('\n');                                                                             \
        fflush(stdout);                                                                            \
        _exit(TEST_SKIP_CODE);                                                                     \
    } while (0)

typedef void (*tm_stats_fn)(struct tidemalloc_stats *);

/* tidemalloc_stats if the preloaded allocator provides it, else NULL. */
static inline tm_stats_fn tm_stats_lookup(void) {
    tm_stats_fn f;
    void *sym = dlsym(RTLD_DEFAULT, "tidemalloc_stats");
    memcpy(&f, &sym, sizeof f); /* object -> function pointer, POSIX-style */
    return f;
}

/* True when the environment says the library under test is tidemalloc
 * (suite-unit.sh sets TEST_EXPECT_TIDEMALLOC=1): then stats must exist. */
static inline int tm_expected(void) {
    const char *e = getenv("TEST_EXPECT_TIDEMALLOC");
    return e && e[0] == '1';
}

/* Looks up tidemalloc_stats; fails if it is expected but absent. */
static inline tm_stats_fn tm_stats_required_if_expected(void) {
    tm_stats_fn f = tm_stats_lookup();
    if (!f && tm_expected()) FAILF("tidemalloc_stats not found although tidemalloc is preloaded");
    return f;
}

/* Resident set size in bytes, from /proc/self/statm. */
static inline size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f) FAILF("cannot open /proc/self/statm");
    if (fscanf(f, "%lu %lu", &size, &res) != 2) FAILF("cannot parse /proc/self/statm");
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* Pattern: word w of a buffer filled under key k. */
static inline uint64_t pat_word(uint64_t k, size_t w) {
    uint64_t x = k ^ ((uint64_t)w + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

/* Key derived from an address and a size. */
static inline uint64_t pat_key(const void *p, size_t n) {
    return (uint64_t)(uintptr_t)p * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)n * 0x165667B19E3779F9ull;
}

/* Fills n bytes at p with the pattern of key k. */
static inline void pat_fill_k(void *p, size_t n, uint64_t k) {
    unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = pat_word(k, i >> 3);
        __builtin_memcpy(c + i, &x, 8); /* inlined even under -fno-builtin */
    }
    if (i < n) {
        uint64_t x = pat_word(k, i >> 3);
        for (size_t j = 0; i + j < n; j++)
            c[i + j] = (unsigned char)(x >> (8 * j));
    }
}

/* Offset of the first of n bytes at p that differs from the pattern of key k,
 * or (size_t)-1 when all match. */
static inline size_t pat_check_k(const void *p, size_t n, uint64_t k) {
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = pat_word(k, i >> 3), y;
        __builtin_memcpy(&y, c + i, 8);
        if (x != y) break;
    }
    for (; i < n; i++)
        if (c[i] != (unsigned char)(pat_word(k, i >> 3) >> (8 * (i & 7)))) return i;
    return (size_t)-1;
}

/* The same with the key derived from the block's address and size. */
static inline void pat_fill(void *p, size_t n) {
    pat_fill_k(p, n, pat_key(p, n));
}
static inline size_t pat_check(const void *p, size_t n) {
    return pat_check_k(p, n, pat_key(p, n));
}

#endif
