/* Thread waves: WAVES waves of NT threads that are all alive at once. Each
 * thread allocates BLOCKS blocks of sizes spread over the small classes
 * (16 B - 3 KiB), touches them, waits at a barrier for its whole wave, frees
 * them and exits; the main thread joins the wave and starts the next. A
 * thread pool that is torn down and rebuilt, or a server that starts a
 * thread per burst of requests, has this shape; threadchurn's waves are of
 * 2 threads, which never more than a few segments serve.
 *
 * usage: threadwave [threads-per-wave] [waves] */
#include "common.h"
#include <pthread.h>

#define BLOCKS 64
#define MAXNT  4096

static pthread_barrier_t barrier;
static long wave;

static void *worker(void *arg) {
    rng_t r;
    rng_seed(&r, (uint64_t)wave * MAXNT + (uint64_t)(uintptr_t)arg);
    unsigned char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        size_t n = 16 + rng_below(&r, 3000);
        blocks[i] = xmalloc(n);
        memset(blocks[i], (int)i, n);
    }
    pthread_barrier_wait(&barrier);
    uint64_t sum = 0;
    for (int i = 0; i < BLOCKS; i++) {
        sum += blocks[i][0];
        free(blocks[i]);
    }
    return (void *)(uintptr_t)(sum + 1);
}

int main(int argc, char **argv) {
    long nt = arg_long(argc, argv, 1, 200);
    long waves = arg_long(argc, argv, 2, 20);
    if (nt < 1 || nt > MAXNT) return 2;
    static pthread_t th[MAXNT];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_barrier_init(&barrier, NULL, (unsigned)nt)) return 1;
    uint64_t sum = 0;
    for (wave = 0; wave < waves; wave++) {
        for (long t = 0; t < nt; t++)
            if (pthread_create(&th[t], &attr, worker, (void *)(uintptr_t)t)) return 1;
        for (long t = 0; t < nt; t++) {
            void *res;
            pthread_join(th[t], &res);
            sum += (uintptr_t)res;
        }
    }
    printf("threadwave threads=%ld waves=%ld sum=%llu\n", nt, waves, (unsigned long long)sum);
    return 0;
}
