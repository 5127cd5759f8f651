/* Single-thread small-object churn.
 *
 * Phase 1: a working set of SLOTS live objects; each step frees a random
 * slot and refills it with a new object of a random small size (mostly
 * 16-128 B, sometimes up to 1 KiB), writing its first bytes.
 * Phase 2: batches in the style of a micro-benchmark: allocate BATCH
 * objects of one size, then free them in allocation order.
 *
 * usage: churn [million-steps]   (fixed work, fixed seed) */
#include "common.h"

#define SLOTS 8192
#define BATCH 100

static size_t small_size(rng_t *r) {
    uint64_t x = rng_next(r);
    if ((x & 15) == 0) return 129 + (x >> 8) % 896; /* 1 in 16: 129..1024 B */
    return 16 + ((x >> 8) % 8) * 16 - ((x >> 20) & 7);
}

int main(int argc, char **argv) {
    long steps = arg_long(argc, argv, 1, 12) * 1000000L;
    rng_t r;
    rng_seed(&r, 42);
    static unsigned char *slot[SLOTS];
    uint64_t sum = 0;

    for (int i = 0; i < SLOTS; i++) {
        size_t n = small_size(&r);
        slot[i] = xmalloc(n);
        slot[i][0] = (unsigned char)n;
    }
    for (long s = 0; s < steps; s++) {
        size_t i = rng_below(&r, SLOTS);
        sum += slot[i][0];
        free(slot[i]);
        size_t n = small_size(&r);
        slot[i] = xmalloc(n);
        memset(slot[i], (int)s, n < 32 ? n : 32);
    }
    for (int i = 0; i < SLOTS; i++)
        free(slot[i]);

    static const size_t sizes[] = {16, 24, 32, 48, 64, 96, 128, 256};
    unsigned char *batch[BATCH];
    long rounds = steps / BATCH;
    for (long k = 0; k < rounds; k++) {
        size_t n = sizes[k % 8];
        for (int i = 0; i < BATCH; i++) {
            batch[i] = xmalloc(n);
            batch[i][0] = (unsigned char)i;
        }
        for (int i = 0; i < BATCH; i++) {
            sum += batch[i][0];
            free(batch[i]);
        }
    }
    printf("churn steps=%ld sum=%llu\n", steps, (unsigned long long)sum);
    return 0;
}
