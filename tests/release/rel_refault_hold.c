/* The refault hold (src/purge.c), on a garbage collector's bulk frees. Two
 * worker threads allocate and fill blocks of 1-200,000 bytes; whenever those
 * not yet freed pass LIMIT_MIB, the workers wait while a collector thread
 * frees them all (`build/bench/patterns collector`, smaller). COLLECTIONS
 * collections; the faults of each cycle are the process's (getrusage).
 *
 *   rel_refault_hold hold     by default (mallopt(M_REFAULT_PERCENT) takes
 *                             0-100 only; 12 is the default): the bound gives the first
 *                             collections' memory back and the workers fault
 *                             it in again, until the faults our releases
 *                             explain pass refault_percent of the CPU time;
 *                             then the memory stays. The last LATE cycles
 *                             fault under a twentieth of the first one's
 *                             pages each (30-200 here; the first about 49k).
 *   rel_refault_hold control  run with TIDEMALLOC_REFAULT_PERCENT=0: no
 *                             hold, so the last cycles still fault over a
 *                             fifth of the first one's pages each (19-27k
 *                             here). Below about 128 MiB the segment cache
 *                             and the bound's floor keep most of it anyway.
 *
 * A cycle that took over 400 ms skips the test (a stalled host: 75-100 ms
 * here). */
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>

#include "release.h"

#define WORKERS     2
#define LIMIT_MIB   192
#define MAX_BYTES   200000
#define COLLECTIONS 12
#define LATE        4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wanted = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
/* under lock: the blocks made since the last collection, their bytes */
static unsigned char **made;
static size_t made_count, made_capacity, made_bytes;
static int collections;
static bool stop;

static void *worker(void *arg) {
    uint64_t seed = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1); /* xorshift: not 0 */
    pthread_mutex_lock(&lock);
    while (!stop) {
        size_t size = 1 + (size_t)(rel_rand(&seed) >> 33) % MAX_BYTES;
        while (!stop && made_bytes + size > (size_t)LIMIT_MIB << 20) {
            int seen = collections;
            pthread_cond_signal(&wanted);
            while (!stop && seen == collections)
                pthread_cond_wait(&finished, &lock);
        }
        if (stop) break;
        made_bytes += size;
        pthread_mutex_unlock(&lock);
        unsigned char *p = malloc(size);
        REL_CHECK(p != NULL, "malloc(%zu) failed", size);
        memset(p, (int)(size & 127) + 1, size); /* a runtime clears its buffers */
        pthread_mutex_lock(&lock);
        if (made_count == made_capacity) {
            made_capacity = made_capacity ? 2 * made_capacity : 1024;
            made = realloc(made, made_capacity * sizeof *made);
            REL_CHECK(made != NULL, "realloc of the block list failed");
        }
        made[made_count++] = p;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    bool control = argc == 2 && strcmp(argv[1], "control") == 0;
    if (argc != 2 || (!control && strcmp(argv[1], "hold") != 0)) {
        fprintf(stderr, "usage: rel_refault_hold hold|control\n");
        return 2;
    }
    (void)rel_stats(); /* skips under another allocator */
    if (!control) {
        REL_CHECK(mallopt(M_REFAULT_PERCENT, 101) == 0 && mallopt(M_REFAULT_PERCENT, -1) == 0,
                  "mallopt(M_REFAULT_PERCENT) took a value outside 0-100");
        REL_CHECK(mallopt(M_REFAULT_PERCENT, 12) == 1, "mallopt(M_REFAULT_PERCENT, 12) refused");
    }
    pthread_t threads[WORKERS];
    for (size_t w = 0; w < WORKERS; w++)
        REL_CHECK(pthread_create(&threads[w], NULL, worker, (void *)(uintptr_t)w) == 0,
                  "pthread_create failed");
    /* this thread is the collector */
    long faults[COLLECTIONS], faults_mark = rel_minor_faults();
    double slowest = 0, mark = rel_now_s();
    pthread_mutex_lock(&lock);
    while (collections < COLLECTIONS) {
        if (made_bytes + MAX_BYTES <= (size_t)LIMIT_MIB << 20) {
            pthread_cond_wait(&wanted, &lock);
            continue;
        }
        unsigned char **blocks = made;
        size_t count = made_count;
        made = NULL;
        made_count = made_capacity = 0;
        pthread_mutex_unlock(&lock);
        for (size_t i = 0; i < count; i++) {
            unsigned char *p = blocks[i];
            REL_CHECK(p[0] >= 1 && p[0] <= 128, "a block lost its contents");
            free(p);
        }
        free(blocks);
        long faults_now = rel_minor_faults();
        double now = rel_now_s();
        pthread_mutex_lock(&lock);
        faults[collections] = faults_now - faults_mark;
        if (now - mark > slowest) slowest = now - mark;
        faults_mark = faults_now;
        mark = now;
        made_bytes = 0;
        collections++;
        pthread_cond_broadcast(&finished);
    }
    stop = true;
    pthread_cond_broadcast(&finished);
    pthread_mutex_unlock(&lock);
    for (size_t w = 0; w < WORKERS; w++)
        pthread_join(threads[w], NULL);
    for (size_t i = 0; i < made_count; i++)
        free(made[i]);
    free(made);
    long late = 0;
    for (int c = COLLECTIONS - LATE; c < COLLECTIONS; c++)
        late += faults[c];
    late /= LATE;
    REL_FIGURES("mode=%s first_cycle_faults=%ld second_cycle_faults=%ld late_cycle_faults=%ld "
                "slowest_cycle_ms=%.1f",
                argv[1], faults[0], faults[1], late, slowest * 1000);
    if (slowest > 0.4) REL_SKIPF("a cycle took %.0f ms: the host is too slow", slowest * 1000);
    REL_CHECK(faults[0] > ((long)LIMIT_MIB << 20) / 4096 / 2,
              "the first cycle took only %ld faults", faults[0]);
    if (control)
        REL_CHECK(late > faults[0] / 5,
                  "control: %ld faults a cycle in the last %d, %ld in the first: no refaults", late,
                  LATE, faults[0]);
    else
        REL_CHECK(late < faults[0] / 20, "%ld faults a cycle in the last %d, %ld in the first",
                  late, LATE, faults[0]);
    return 0;
}
