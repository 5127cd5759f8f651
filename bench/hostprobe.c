/* A quick reading of the host, for the header of a benchmark run: what a
 * first-touch page fault costs (and how much of it a page populated ahead
 * still costs at its first write), what a cache line's round trip between two
 * threads costs, and how fast one core runs a fixed loop. On a shared
 * virtual machine these move with the host (a fault cost 12 µs on one and
 * 2 µs on the next; for hours some multithreaded benchmarks took twice as
 * long in every allocator), and the ratios of a run are read against
 * them. The harness runs it with no allocator preloaded, and it measures
 * no allocation: the fault loop maps its own memory. Prints one line.
 *
 * usage: hostprobe */
#include "common.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define FAULT_BYTES ((size_t)16 << 20)
#define ROUND_TRIPS 20000 /* a trial */
#define TRIALS      7
#define LOOP_ITERS  20000000L

static _Atomic long ball __attribute__((aligned(64)));

/* Answers every odd value with the next even one: a warm-up and TRIALS
 * timed trials of ROUND_TRIPS each. */
static void *bouncer(void *arg) {
    (void)arg;
    for (long i = 0; i < (long)(TRIALS + 1) * ROUND_TRIPS; i++) {
        long want = 2 * i + 1;
        while (atomic_load_explicit(&ball, memory_order_acquire) != want)
            ;
        atomic_store_explicit(&ball, want + 1, memory_order_release);
    }
    return NULL;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* With `populated`, the pages are populated (MADV_POPULATE_WRITE) before
 * the timed writes: what is left is what the first write to a present page
 * costs. On a guest whose hypervisor keeps shadow page tables that is most
 * of a fault's price (4.7 of 10 µs here on 2026-12-05), on bare metal
 * nearly nothing. -1 if the kernel does not populate. */
static double fault_ns_per_page(bool populated) {
    unsigned char *p =
        mmap(NULL, FAULT_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    if (populated && madvise(p, FAULT_BYTES, MADV_POPULATE_WRITE) != 0) {
        munmap(p, FAULT_BYTES);
        return -1;
    }
    double t = now_s();
    for (size_t i = 0; i < FAULT_BYTES; i += 4096)
        p[i] = 1;
    t = now_s() - t;
    munmap(p, FAULT_BYTES);
    return t * 1e9 / (double)(FAULT_BYTES / 4096);
}

/* Rounds first..first+ROUND_TRIPS-1: ns per round trip. */
static double round_trips(long first) {
    double start = now_s();
    for (long i = first; i < first + ROUND_TRIPS; i++) {
        atomic_store_explicit(&ball, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 2)
            ;
    }
    return (now_s() - start) * 1e9 / ROUND_TRIPS;
}

/* The median of the timed trials, after a warm-up: the first trips after
 * the thread starts are slow (it may start on this CPU, or its vCPU may have
 * to wake up), and without the warm-up one run of 100,000 trips read from
 * 100 to 650 ns on a host where the warmed-up median reads 100. */
static double median_round_trip_ns(void) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, bouncer, NULL)) return -1;
    double t[TRIALS];
    round_trips(0);
    for (int i = 0; i < TRIALS; i++)
        t[i] = round_trips((long)(i + 1) * ROUND_TRIPS);
    pthread_join(thread, NULL);
    for (int i = 1; i < TRIALS; i++) /* insertion sort: a few values */
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[TRIALS / 2];
}

static double loop_ns_per_iter(void) {
    volatile uint64_t sink;
    uint64_t x = 1;
    double t = now_s();
    for (long i = 0; i < LOOP_ITERS; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = now_s() - t;
    sink = x;
    (void)sink;
    return t * 1e9 / LOOP_ITERS;
}

int main(void) {
    double fault = fault_ns_per_page(false);
    double populated = fault_ns_per_page(true);
    double trip = median_round_trip_ns();
    double loop = loop_ns_per_iter();
    printf("first-touch fault %.0f ns a page (a populated page's first write %.0f), "
           "thread-to-thread round trip %.0f ns (median of %d), serial loop %.2f ns an iteration\n",
           fault, populated, trip, TRIALS, loop);
    return 0;
}
