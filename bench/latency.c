/* Latency of single malloc and free calls: their distribution and their
 * tail, where a call that gives memory back to the kernel, takes a lock or
 * maps a segment shows. Each thread keeps a working set that swings between
 * a high and a low mark (so that memory is freed in bulk, given back and
 * taken again), of mixed sizes (mostly small, some to 64 KiB, rarely to 1
 * MiB), and hands a quarter of the blocks it frees to the other threads
 * through a shared array (so that frees of other threads' blocks are timed
 * too). Every malloc and free is timed with the time-stamp counter; so is
 * an empty region between the two reads, at the same rate, as a control:
 * its tail is the host's own (interrupts, preemption), which no allocator
 * can do better than.
 *
 * usage: latency [threads] [ops-per-thread] [high-MiB]
 * prints, for malloc, free and the control: calls, then percentiles 50,
 * 90, 99, 99.9 and 99.99, the maximum, in ns, and the calls over 10 us,
 * 100 us and 1 ms. */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>
#include <x86intrin.h>

#define SLOTS     65536
#define XFER      1024
#define SUB_BITS  3 /* 8 buckets a power of two: 12% wide at most */
#define BUCKETS   (64 << SUB_BITS)
#define SWING_OPS 200000 /* ops from the high mark to the low one and back */

enum { KIND_MALLOC, KIND_FREE, KIND_EMPTY, KINDS };
static const char *kind_names[KINDS] = {"malloc", "free", "empty"};

struct histogram {
    uint64_t count[BUCKETS];
    uint64_t over[3]; /* calls over 10 us, 100 us and 1 ms */
    uint64_t max;
};

static struct histogram totals[KINDS];
static pthread_mutex_t totals_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(unsigned char *) xfer[XFER];
static long ops_per_thread;
static size_t high_bytes;
static uint64_t over_ticks[3]; /* 10 us, 100 us and 1 ms in ticks */

static unsigned bucket_of(uint64_t ticks) {
    if (ticks < (1u << SUB_BITS)) return (unsigned)ticks;
    unsigned top = 63 - (unsigned)__builtin_clzll(ticks);
    unsigned sub = (unsigned)(ticks >> (top - SUB_BITS)) & ((1u << SUB_BITS) - 1);
    return ((top - SUB_BITS + 1) << SUB_BITS) + sub;
}

/* The upper edge of a bucket, in ticks (a percentile is read as it). */
static uint64_t bucket_top(unsigned b) {
    if (b < (1u << SUB_BITS)) return b;
    unsigned top = (b >> SUB_BITS) + SUB_BITS - 1;
    uint64_t sub = b & ((1u << SUB_BITS) - 1);
    return ((((uint64_t)1 << SUB_BITS) + sub + 1) << (top - SUB_BITS)) - 1;
}

static inline void record(struct histogram *h, uint64_t ticks) {
    h->count[bucket_of(ticks)]++;
    if (ticks > h->max) h->max = ticks;
    for (int i = 0; i < 3 && ticks > over_ticks[i]; i++)
        h->over[i]++;
}

static inline uint64_t ticks_start(void) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

static inline uint64_t ticks_end(void) {
    unsigned aux;
    uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
}

static size_t mixed_size(rng_t *r) {
    uint64_t x = rng_next(r);
    if ((x & 255) == 0) return 65536 + (x >> 16) % (960 * 1024);
    if ((x & 15) == 0) return 4096 + (x >> 16) % (60 * 1024);
    if ((x & 3) == 0) return 257 + (x >> 16) % 3840;
    return 16 + (x >> 16) % 241;
}

static void *worker(void *arg) {
    rng_t r;
    rng_seed(&r, 900 + (uint64_t)(intptr_t)arg);
    struct histogram *h = calloc(KINDS, sizeof *h);
    unsigned char **slot = calloc(SLOTS, sizeof *slot);
    size_t *slot_size = calloc(SLOTS, sizeof *slot_size);
    if (!h || !slot || !slot_size) abort();
    size_t live = 0, low_bytes = high_bytes / 8;
    for (long op = 0; op < ops_per_thread; op++) {
        /* the target falls from the high mark to the low one, then rises */
        long phase = op % SWING_OPS;
        size_t target = phase < SWING_OPS / 2 ? high_bytes : low_bytes;
        size_t i = rng_below(&r, SLOTS);
        uint64_t t0, t1;
        t0 = ticks_start();
        t1 = ticks_end();
        record(&h[KIND_EMPTY], t1 - t0);
        if (slot[i] == NULL && live < target) {
            size_t size = mixed_size(&r);
            t0 = ticks_start();
            unsigned char *p = malloc(size);
            t1 = ticks_end();
            if (!p) abort();
            record(&h[KIND_MALLOC], t1 - t0);
            p[0] = (unsigned char)size;
            p[size - 1] = (unsigned char)op;
            slot[i] = p;
            slot_size[i] = size;
            live += size;
        } else if (slot[i] != NULL && (live > target || (op & 1))) {
            unsigned char *p = slot[i];
            live -= slot_size[i];
            slot[i] = NULL;
            if (p[0] != (unsigned char)slot_size[i]) abort();
            if ((rng_next(&r) & 3) == 0) /* another thread's block in its place */
                p = atomic_exchange_explicit(&xfer[rng_below(&r, XFER)], p, memory_order_acq_rel);
            if (p) {
                t0 = ticks_start();
                free(p);
                t1 = ticks_end();
                record(&h[KIND_FREE], t1 - t0);
            }
        }
    }
    for (size_t i = 0; i < SLOTS; i++)
        free(slot[i]);
    pthread_mutex_lock(&totals_lock);
    for (int k = 0; k < KINDS; k++) {
        for (unsigned b = 0; b < BUCKETS; b++)
            totals[k].count[b] += h[k].count[b];
        for (int i = 0; i < 3; i++)
            totals[k].over[i] += h[k].over[i];
        if (h[k].max > totals[k].max) totals[k].max = h[k].max;
    }
    pthread_mutex_unlock(&totals_lock);
    free(slot_size);
    free(slot);
    free(h);
    return NULL;
}

static double percentile_ns(const struct histogram *h, uint64_t total, double q,
                            double ns_per_tick) {
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    for (unsigned b = 0; b < BUCKETS; b++) {
        seen += h->count[b];
        if (seen > want) {
            uint64_t top = bucket_top(b);
            return (double)(top < h->max ? top : h->max) * ns_per_tick;
        }
    }
    return (double)h->max * ns_per_tick;
}

/* Nanoseconds a tick, over a 50 ms sleep. */
static double tick_ns(void) {
    double s0 = now_s();
    uint64_t c0 = __rdtsc();
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    return (now_s() - s0) * 1e9 / (double)(__rdtsc() - c0);
}

int main(int argc, char **argv) {
    int threads = (int)arg_long(argc, argv, 1, 2);
    ops_per_thread = arg_long(argc, argv, 2, 2000000);
    high_bytes = (size_t)arg_long(argc, argv, 3, 64) << 20;
    if (threads < 1 || threads > 64 || ops_per_thread < 1) return 2;
    double ns_per_tick = tick_ns();
    for (int i = 0; i < 3; i++)
        over_ticks[i] = (uint64_t)((i == 0 ? 1e4 : i == 1 ? 1e5 : 1e6) / ns_per_tick);
    pthread_t th[64];
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < XFER; i++)
        free(xfer[i]);
    printf("latency threads=%d ops=%ld high=%zu MiB ns_per_tick=%.4f\n", threads, ops_per_thread,
           high_bytes >> 20, ns_per_tick);
    printf("%-7s %10s %8s %8s %8s %8s %8s %9s %7s %7s %7s\n", "call", "count", "p50", "p90", "p99",
           "p99.9", "p99.99", "max", ">10us", ">100us", ">1ms");
    for (int k = 0; k < KINDS; k++) {
        const struct histogram *h = &totals[k];
        uint64_t total = 0;
        for (unsigned b = 0; b < BUCKETS; b++)
            total += h->count[b];
        printf("%-7s %10llu %8.0f %8.0f %8.0f %8.0f %8.0f %9.0f %7llu %7llu %7llu\n", kind_names[k],
               (unsigned long long)total, percentile_ns(h, total, 0.50, ns_per_tick),
               percentile_ns(h, total, 0.90, ns_per_tick),
               percentile_ns(h, total, 0.99, ns_per_tick),
               percentile_ns(h, total, 0.999, ns_per_tick),
               percentile_ns(h, total, 0.9999, ns_per_tick), (double)h->max * ns_per_tick,
               (unsigned long long)h->over[0], (unsigned long long)h->over[1],
               (unsigned long long)h->over[2]);
    }
    return 0;
}
