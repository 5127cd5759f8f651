/* Multithreaded stress with content integrity. Four threads share 4096 slots.
 * Each step allocates a block (sizes across all classes, some large), fills it
 * with a pattern derived from its address and size, and swaps it into a random
 * slot; the block that comes out -- usually allocated by another thread -- has
 * its pattern checked and is freed (sometimes after a realloc). Each thread
 * also keeps blocks of its own. Bounded: a fixed number of steps, cut short
 * after 8 s so that the test stays short on a slow machine. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "common.h"

#define THREADS 4
#define SLOTS   4096
#define STEPS   300000
#define LOCAL   256

/* A slot holds (pointer >> 4) in its low 43 bits and the size above. The
 * pattern's key mixes in the allocating thread, so that the checker can tell
 * who allocated the block and count the frees done by another thread. */
static _Atomic uint64_t slots[SLOTS];
static atomic_ullong cross_frees, slot_frees;
static _Thread_local unsigned tid;

#define PTR_BITS 43
static uint64_t pack(void *p, size_t n) {
    return ((uint64_t)(uintptr_t)p >> 4) | ((uint64_t)n << PTR_BITS);
}
static void *unpack_ptr(uint64_t v) {
    return (void *)(uintptr_t)((v & ((1ull << PTR_BITS) - 1)) << 4);
}
static size_t unpack_size(uint64_t v) {
    return (size_t)(v >> PTR_BITS);
}

static size_t pick_size(uint64_t r) {
    switch (r % 16) {
    case 0:
        return 1 + (r >> 8) % 16;
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
        return 1 + (r >> 8) % 256;
    case 6:
    case 7:
    case 8:
        return 1 + (r >> 8) % 2048;
    case 9:
    case 10:
        return 2048 + (r >> 8) % 30000;
    case 11:
        return 32768 + (r >> 8) % 100000;
    case 12:
        return (r >> 20) % 64 == 0 ? 200000 + (r >> 8) % 1800000 : 1 + (r >> 8) % 600;
    default:
        return 1 + (r >> 8) % 120;
    }
}

static uint64_t key_of(void *p, size_t n, unsigned owner) {
    return pat_key(p, n) ^ ((uint64_t)(owner + 1) * 0xD6E8FEB86659FD93ull);
}

static void fill(void *p, size_t n) {
    pat_fill_k(p, n, key_of(p, n, tid));
}

static void verify_and_free(uint64_t v, uint64_t r) {
    void *p = unpack_ptr(v);
    size_t n = unpack_size(v);
    if (!p) return;
    unsigned owner = THREADS;
    size_t bad = (size_t)-1;
    for (unsigned o = 0; o < THREADS; o++) {
        bad = pat_check_k(p, n, key_of(p, n, o));
        if (bad == (size_t)-1) {
            owner = o;
            break;
        }
    }
    CHECKF(owner < THREADS, "block %p size %zu: corrupted (byte %zu differs for the last owner)", p,
           n, bad);
    CHECKF(malloc_usable_size(p) >= n, "usable size of %p shrank below %zu", p, n);
    atomic_fetch_add_explicit(&slot_frees, 1, memory_order_relaxed);
    if (owner != tid) atomic_fetch_add_explicit(&cross_frees, 1, memory_order_relaxed);
    if (r % 8 == 0) { /* realloc, often by a foreign thread, then check the prefix */
        uint64_t key = key_of(p, n, owner);
        size_t m = r % 16 == 0 ? n / 2 + 1 : n * 2 + 16;
        void *q = realloc(p, m);
        CHECK(q != NULL);
        bad = pat_check_k(q, m < n ? m : n, key);
        CHECKF(bad == (size_t)-1, "realloc %zu -> %zu lost byte %zu", n, m, bad);
        p = q;
    }
    free(p);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double deadline;

static void *worker(void *arg) {
    tid = (unsigned)(uintptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ull * (tid + 1);
    void *mine[LOCAL] = {0};
    size_t mine_n[LOCAL] = {0};
    for (long step = 0; step < STEPS; step++) {
        if ((step & 1023) == 0 && now() > deadline) break;
        uint64_t r = test_rng_next(&s);
        if (r % 4 == 0) { /* a block of our own */
            int i = (int)((r >> 40) % LOCAL);
            if (mine[i]) {
                size_t bad = pat_check_k(mine[i], mine_n[i], key_of(mine[i], mine_n[i], tid));
                CHECKF(bad == (size_t)-1, "own block size %zu: byte %zu corrupted", mine_n[i], bad);
                free(mine[i]);
            }
            mine_n[i] = pick_size(test_rng_next(&s));
            mine[i] = malloc(mine_n[i]);
            CHECK(mine[i] != NULL);
            fill(mine[i], mine_n[i]);
            continue;
        }
        size_t n = pick_size(test_rng_next(&s));
        void *p = (r >> 20) % 32 == 0 ? calloc(1, n) : malloc(n);
        CHECKF(p != NULL, "malloc(%zu) failed", n);
        CHECKF(((uintptr_t)p & 15) == 0, "%p misaligned", p);
        fill(p, n);
        uint64_t old =
            atomic_exchange_explicit(&slots[(r >> 32) % SLOTS], pack(p, n), memory_order_acq_rel);
        verify_and_free(old, r >> 3);
    }
    for (int i = 0; i < LOCAL; i++) {
        if (mine[i]) {
            CHECK(pat_check_k(mine[i], mine_n[i], key_of(mine[i], mine_n[i], tid)) == (size_t)-1);
            free(mine[i]);
        }
    }
    return NULL;
}

int main(void) {
    deadline = now() + 8.0;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    tid = THREADS; /* the main thread frees what is left: all foreign */
    for (int i = 0; i < SLOTS; i++)
        verify_and_free(atomic_exchange(&slots[i], 0), 1);
    unsigned long long total = atomic_load(&slot_frees), cross = atomic_load(&cross_frees);
    CHECKF(total >= 20000 && cross * 5 >= total,
           "too few cross-thread frees to mean anything: %llu of %llu", cross, total);
    if (getenv("TEST_VERBOSE")) printf("%llu slot frees, %llu by another thread\n", total, cross);
    return 0;
}
