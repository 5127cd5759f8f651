/* Many threads with bursts of allocation and cross-thread frees (mstress /
 * rptest shape). Each thread repeatedly allocates a burst of objects of
 * mixed sizes (mostly small, some medium, rarely up to 256 KiB); then it
 * frees each object of the burst in one of three ways: locally, by keeping
 * it in a per-thread long-lived set (freeing the object it evicts), or by
 * exchanging it into a global transfer array, freeing whatever pointer
 * another thread left there.
 *
 * usage: mstress [threads] [rounds-per-thread] */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

#define XFER     4096
#define KEEP     1024
#define MAXBURST 2000

static _Atomic(unsigned char *) xfer[XFER];
static long rounds;
static uint64_t sums[64];

static size_t mixed_size(rng_t *r) {
    uint64_t x = rng_next(r);
    if ((x & 1023) == 0) return 16384 + (x >> 16) % (240 * 1024);
    if ((x & 63) == 0) return 1024 + (x >> 16) % (15 * 1024);
    return 16 + (x >> 16) % 496;
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    rng_t r;
    rng_seed(&r, 500 + (uint64_t)id);
    unsigned char **burst = xmalloc(MAXBURST * sizeof *burst);
    unsigned char **keep = calloc(KEEP, sizeof *keep);
    uint64_t sum = 0;
    for (long k = 0; k < rounds; k++) {
        int n = 100 + (int)rng_below(&r, MAXBURST - 100);
        for (int i = 0; i < n; i++) {
            size_t sz = mixed_size(&r);
            burst[i] = xmalloc(sz);
            burst[i][0] = (unsigned char)sz;
            burst[i][sz - 1] = (unsigned char)i;
        }
        for (int i = n - 1; i >= 0; i--) {
            unsigned char *p = burst[i], *old;
            switch (rng_next(&r) & 3) {
            case 0:
                old = atomic_exchange_explicit(&xfer[rng_below(&r, XFER)], p, memory_order_acq_rel);
                break;
            case 1: {
                size_t j = rng_below(&r, KEEP);
                old = keep[j];
                keep[j] = p;
                break;
            }
            default:
                old = p;
            }
            if (old) {
                sum += old[0];
                free(old);
            }
        }
    }
    for (int j = 0; j < KEEP; j++)
        free(keep[j]);
    free(keep);
    free(burst);
    sums[id] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    int nt = (int)arg_long(argc, argv, 1, 4);
    rounds = arg_long(argc, argv, 2, 1500);
    if (nt < 1 || nt > 64) return 2;
    pthread_t th[64];
    for (int t = 0; t < nt; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    uint64_t sum = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        sum += sums[t];
    }
    for (int i = 0; i < XFER; i++)
        free(atomic_load_explicit(&xfer[i], memory_order_relaxed));
    printf("mstress threads=%d rounds=%ld sum=%llu\n", nt, rounds, (unsigned long long)sum);
    return 0;
}
