/* Arena lock pressure: each of T threads mallocs a block of SIZE KiB plus
 * 0-12 KiB (over 256 KiB: the arena's, under the mmap threshold), writes a
 * byte into it and frees it, N times. Nothing else is done, so the time is
 * the allocator's shared state: per thread, a flat time as threads are added
 * means the big-block path does not serialise them. Prints ns a pair.
 *
 * usage: arena_pairs [threads] [size-KiB] [pairs-per-thread] */
#include "common.h"
#include <pthread.h>

static size_t block_size;
static long pairs;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        volatile unsigned char *p = xmalloc(block_size + (size_t)(i & 3) * 4096);
        p[0] = (unsigned char)i;
        free((void *)p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int nt = (int)arg_long(argc, argv, 1, 1);
    block_size = (size_t)arg_long(argc, argv, 2, 512) * 1024;
    pairs = arg_long(argc, argv, 3, 1000000);
    if (nt < 1 || nt > 64 || pairs < 1) return 2;
    pthread_t th[64];
    double t0 = now_s();
    for (int t = 0; t < nt; t++)
        pthread_create(&th[t], NULL, worker, NULL);
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    double el = now_s() - t0;
    printf("arena_pairs threads=%d size=%zu pairs=%ld ns_per_pair=%.1f\n", nt, block_size, pairs,
           el * 1e9 / (double)pairs);
    return 0;
}
