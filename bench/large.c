/* Large blocks of 64 KiB - 8 MiB with realloc growth (malloc-large shape).
 * A set of SLOTS slots; each step picks a slot: an empty slot gets a new
 * block (log-uniform size), a full one is grown with realloc by 25-100%
 * (freed instead once it would pass 8 MiB) or freed. Every page of new or
 * grown memory is touched, as a program filling its buffers would.
 *
 * usage: large [thousand-steps] */
#include "common.h"

#define SLOTS 24
#define MINSZ (64u * 1024)
#define MAXSZ (8u * 1024 * 1024)

static size_t large_size(rng_t *r) {
    /* log-uniform in [64 KiB, 8 MiB): 7 doublings */
    unsigned e = (unsigned)rng_below(r, 7);
    size_t base = (size_t)MINSZ << e;
    return base + rng_below(r, base);
}

int main(int argc, char **argv) {
    long steps = arg_long(argc, argv, 1, 40) * 1000L;
    rng_t r;
    rng_seed(&r, 31337);
    unsigned char *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    uint64_t sum = 0;
    for (long s = 0; s < steps; s++) {
        size_t i = rng_below(&r, SLOTS);
        if (!p[i]) {
            sz[i] = large_size(&r);
            p[i] = xmalloc(sz[i]);
            touch_pages(p[i], sz[i], (unsigned char)s);
        } else if (rng_next(&r) & 1) {
            size_t n = sz[i] + sz[i] / 4 + rng_below(&r, sz[i] * 3 / 4);
            if (n > MAXSZ) {
                sum += p[i][0];
                free(p[i]);
                p[i] = NULL;
                continue;
            }
            p[i] = xrealloc(p[i], n);
            touch_pages(p[i] + sz[i], n - sz[i], (unsigned char)s);
            sz[i] = n;
        } else {
            sum += p[i][0] + p[i][sz[i] - 1];
            free(p[i]);
            p[i] = NULL;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(p[i]);
    printf("large steps=%ld sum=%llu\n", steps, (unsigned long long)sum);
    return 0;
}
