/* Server simulation (larson shape). NT threads work on NT shared arrays of
 * SLOTS objects. In each round a thread takes a different array than in the
 * previous round, so it frees objects that another thread allocated; in a
 * round it replaces random slots with new objects of random sizes 16..1000.
 *
 * usage: larson [threads] [million-steps-total] */
#include "common.h"
#include <pthread.h>

#define SLOTS 4000
#define ROUND 40000

static int nt;
static long rounds;
static unsigned char **arrays[64];
static pthread_barrier_t bar;
static uint64_t sums[64];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    rng_t r;
    rng_seed(&r, 1000 + (uint64_t)id);
    uint64_t sum = 0;
    for (long k = 0; k < rounds; k++) {
        unsigned char **a = arrays[(id + k) % nt];
        for (int s = 0; s < ROUND; s++) {
            size_t i = rng_below(&r, SLOTS);
            sum += a[i][0];
            free(a[i]);
            size_t n = 16 + rng_below(&r, 985);
            a[i] = xmalloc(n);
            a[i][0] = (unsigned char)n;
            a[i][n - 1] = 1;
        }
        pthread_barrier_wait(&bar);
    }
    sums[id] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    nt = (int)arg_long(argc, argv, 1, 2);
    long steps = arg_long(argc, argv, 2, 16) * 1000000L;
    if (nt < 1 || nt > 64) return 2;
    rounds = steps / ((long)ROUND * nt);
    rng_t r;
    rng_seed(&r, 99);
    for (int t = 0; t < nt; t++) {
        arrays[t] = xmalloc(SLOTS * sizeof(unsigned char *));
        for (int i = 0; i < SLOTS; i++) {
            size_t n = 16 + rng_below(&r, 985);
            arrays[t][i] = xmalloc(n);
            arrays[t][i][0] = (unsigned char)n;
        }
    }
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    pthread_t th[64];
    for (int t = 0; t < nt; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    uint64_t sum = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        sum += sums[t];
    }
    for (int t = 0; t < nt; t++) {
        for (int i = 0; i < SLOTS; i++)
            free(arrays[t][i]);
        free(arrays[t]);
    }
    printf("larson threads=%d steps=%ld sum=%llu\n", nt, rounds * ROUND * nt,
           (unsigned long long)sum);
    return 0;
}
