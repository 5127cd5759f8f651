/* False sharing, in two styles.
 *
 * thrash (active): each thread repeatedly allocates a small object, writes
 * it many times and frees it. An allocator that hands neighbouring objects
 * to different threads makes the cache line bounce.
 *
 * scratch (passive): the main thread allocates one small object per thread
 * back to back and gives one to each thread, which frees it and then runs
 * the thrash loop. An allocator that reuses the freed object in the freeing
 * thread puts two threads on one cache line.
 *
 * usage: falseshare thrash|scratch [threads] [thousand-iterations] [writes] */
#include "common.h"
#include <pthread.h>

#define OBJ 8

static long iters, writes;
static int scratch;
static void *given[64];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    if (scratch) free(given[id]);
    for (long i = 0; i < iters; i++) {
        volatile unsigned char *p = xmalloc(OBJ);
        for (long w = 0; w < writes; w++)
            for (int j = 0; j < OBJ; j++)
                p[j] = (unsigned char)(p[j] + 1);
        free((void *)p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    scratch = strcmp(argv[1], "scratch") == 0;
    int nt = (int)arg_long(argc, argv, 2, 2);
    iters = arg_long(argc, argv, 3, 200) * 1000L;
    writes = arg_long(argc, argv, 4, 100);
    if (nt < 1 || nt > 64) return 2;
    for (int t = 0; t < nt; t++)
        given[t] = xmalloc(OBJ);
    pthread_t th[64];
    for (int t = 0; t < nt; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    if (!scratch)
        for (int t = 0; t < nt; t++)
            free(given[t]);
    printf("%s threads=%d iters=%ld writes=%ld\n", argv[1], nt, iters, writes);
    return 0;
}
