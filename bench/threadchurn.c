/* Thread churn: threads are created, allocate, and exit. The main thread
 * runs WAVES waves of NT threads; each thread allocates OBJS small objects,
 * frees most of them, and leaves a few in a shared hand-off array for a
 * thread of the next wave to free (a cross-thread free after the
 * allocating thread has exited).
 *
 * usage: threadchurn [threads-per-wave] [waves] */
#include "common.h"
#include <pthread.h>

#define OBJS 3000
#define HAND 64

static unsigned char *handoff[64][HAND];
static long wave;

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    rng_t r;
    rng_seed(&r, (uint64_t)wave * 64 + (uint64_t)id);
    unsigned char **mine = xmalloc(OBJS * sizeof *mine);
    for (int i = 0; i < OBJS; i++) {
        size_t n = 16 + rng_below(&r, 400);
        mine[i] = xmalloc(n);
        mine[i][0] = (unsigned char)n;
    }
    /* free what the previous wave left us, then leave our own */
    for (int i = 0; i < HAND; i++) {
        free(handoff[id][i]);
        handoff[id][i] = mine[i];
    }
    for (int i = HAND; i < OBJS; i++)
        free(mine[i]);
    free(mine);
    return NULL;
}

int main(int argc, char **argv) {
    int nt = (int)arg_long(argc, argv, 1, 2);
    long waves = arg_long(argc, argv, 2, 2500);
    if (nt < 1 || nt > 64) return 2;
    pthread_t th[64];
    for (wave = 0; wave < waves; wave++) {
        for (int t = 0; t < nt; t++)
            if (pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t)) return 1;
        for (int t = 0; t < nt; t++)
            pthread_join(th[t], NULL);
    }
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < HAND; i++)
            free(handoff[t][i]);
    printf("threadchurn threads=%d waves=%ld\n", nt, waves);
    return 0;
}
