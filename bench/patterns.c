/* Allocation patterns outside the `make bench` suite, each a known weak spot
 * once (docs/benchmark-history.md says what was measured with them):
 *
 *   patterns realloc-grow MIB STEP REPS  grow one buffer STEP bytes at a time
 *                                        to MIB MiB with realloc, REPS times
 *   patterns large-heap LIVE STEPS       LIVE blocks of 100-200 KB, then STEPS
 *                                        random replacements (free one, malloc
 *                                        one of a new size)
 *   patterns threads N OBJS CLASSES      N threads each hold OBJS small blocks
 *                                        over CLASSES size classes; prints the
 *                                        process's RssAnon while all hold them
 *   patterns aligned ALIGN ROUNDS        ROUNDS times, 256 posix_memalign(ALIGN)
 *                                        blocks of 16-515 bytes, then frees
 *   patterns calloc-large MODE STEPS     16 slots; each step frees one and
 *                                        callocs 64 KiB-4 MiB there, then
 *                                        touches one byte of it (MODE sparse)
 *                                        or writes all of it (dense)
 *   patterns handoff KIB ROUNDS          a thread allocates ROUNDS blocks of KIB
 *                                        KiB and fills them; another frees
 *                                        them, through a ring of 8 slots
 *   patterns cycles SIZE COUNT ROUNDS [HELPERS]
 *                                        ROUNDS times, COUNT blocks of SIZE
 *                                        bytes (their first byte written), then
 *                                        every other one freed, then the rest:
 *                                        a program whose use swings from all to
 *                                        nothing and back; HELPERS threads
 *                                        (default 0) each malloc 64 bytes
 *                                        first and wait, as a timer or logger
 *                                        thread would
 *   patterns collector THREADS BLOCKS MIB MAXBYTES
 *                                        THREADS threads each allocate BLOCKS
 *                                        blocks of 1-MAXBYTES bytes and fill
 *                                        them; whenever the blocks not yet
 *                                        freed pass MIB MiB, the threads wait
 *                                        while a collector thread frees them
 *                                        all: a garbage-collected runtime's
 *                                        native buffers (Java's direct
 *                                        buffers, which its reference handler
 *                                        frees after each collection)
 *
 * Fixed work and fixed seeds; the time is the caller's to take (bench/run.py,
 * /usr/bin/time), so the program prints only a checksum (and, for threads,
 * the resident set). */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

static int realloc_grow(long mib, long step, long reps) {
    size_t max = (size_t)mib << 20;
    uint64_t sum = 0;
    for (long r = 0; r < reps; r++) {
        unsigned char *p = NULL;
        for (size_t n = (size_t)step; n <= max; n += (size_t)step) {
            p = xrealloc(p, n);
            p[n - 1] = (unsigned char)n;
        }
        sum += p[max / 2];
        free(p);
    }
    printf("realloc-grow sum=%llu\n", (unsigned long long)sum);
    return 0;
}

static int large_heap(long live, long steps) {
    rng_t r;
    rng_seed(&r, 99);
    unsigned char **slot = xmalloc((size_t)live * sizeof *slot);
    for (long i = 0; i < live; i++) {
        slot[i] = xmalloc(100000);
        slot[i][0] = 1;
    }
    uint64_t sum = 0;
    for (long s = 0; s < steps; s++) {
        size_t k = rng_below(&r, (uint64_t)live);
        sum += slot[k][0];
        free(slot[k]);
        slot[k] = xmalloc(100000 + rng_below(&r, 100000));
        slot[k][0] = (unsigned char)s;
    }
    for (long i = 0; i < live; i++)
        free(slot[i]);
    free(slot);
    printf("large-heap sum=%llu\n", (unsigned long long)sum);
    return 0;
}

static pthread_barrier_t held;
static long thread_objs, thread_classes;

static void *holder(void *arg) {
    (void)arg;
    void **blocks = xmalloc((size_t)thread_objs * sizeof *blocks);
    for (long i = 0; i < thread_objs; i++) {
        blocks[i] = xmalloc(16 + (size_t)(i % thread_classes) * 16);
        memset(blocks[i], 1, 16);
    }
    pthread_barrier_wait(&held); /* all hold their blocks */
    pthread_barrier_wait(&held); /* main has read the resident set */
    for (long i = 0; i < thread_objs; i++)
        free(blocks[i]);
    free(blocks);
    return NULL;
}

static int threads(long n, long objs, long classes) {
    thread_objs = objs;
    thread_classes = classes < 1 ? 1 : classes;
    pthread_t *t = xmalloc((size_t)n * sizeof *t);
    pthread_barrier_init(&held, NULL, (unsigned)n + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], &attr, holder, NULL)) return 1;
    pthread_barrier_wait(&held);
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "RssAnon:", 8) == 0) fputs(line, stdout);
    if (f) fclose(f);
    pthread_barrier_wait(&held);
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    return 0;
}

static int aligned(long alignment, long rounds) {
    void *blocks[256];
    uint64_t sum = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 256; i++) {
            if (posix_memalign(&blocks[i], (size_t)alignment, 16 + (size_t)(i * 13 + r) % 500))
                return 1;
            ((unsigned char *)blocks[i])[0] = (unsigned char)i;
        }
        for (int i = 0; i < 256; i++) {
            sum += ((unsigned char *)blocks[i])[0];
            free(blocks[i]);
        }
    }
    printf("aligned sum=%llu\n", (unsigned long long)sum);
    return 0;
}

static int calloc_large(const char *mode, long steps) {
    bool dense = strcmp(mode, "dense") == 0;
    if (!dense && strcmp(mode, "sparse") != 0) return 2;
    enum { SLOTS = 16 };
    unsigned char *slot[SLOTS] = {0};
    rng_t r;
    rng_seed(&r, 7);
    uint64_t sum = 0;
    for (long s = 0; s < steps; s++) {
        size_t i = rng_below(&r, SLOTS);
        size_t n = ((size_t)64 << 10) + rng_below(&r, ((size_t)4 << 20) - ((size_t)64 << 10));
        free(slot[i]);
        slot[i] = calloc(1, n);
        if (slot[i] == NULL) return 1;
        sum += slot[i][n / 3]; /* reads zero */
        if (dense)
            memset(slot[i], (int)s, n);
        else
            slot[i][n / 2] = 1;
    }
    for (int i = 0; i < SLOTS; i++)
        free(slot[i]);
    printf("calloc-large sum=%llu\n", (unsigned long long)sum);
    return 0;
}

/* Buffers handed from a producer to a consumer that frees them: every free
 * of the producer's blocks is another thread's. */
enum { HANDOFF_RING = 8 };
static _Atomic(unsigned char *) handoff_ring[HANDOFF_RING];
static long handoff_rounds;
static size_t handoff_size;

static void *handoff_consumer(void *arg) {
    uint64_t *sum = arg;
    for (long i = 0; i < handoff_rounds; i++) {
        unsigned char *p;
        while ((p = atomic_exchange_explicit(&handoff_ring[i % HANDOFF_RING], NULL,
                                             memory_order_acquire)) == NULL)
            sched_yield();
        *sum += p[handoff_size - 1];
        free(p);
    }
    return NULL;
}

static int handoff(long kib, long rounds) {
    if (kib < 1 || rounds < 1) return 2;
    handoff_size = (size_t)kib << 10;
    handoff_rounds = rounds;
    uint64_t sum = 0;
    pthread_t consumer;
    if (pthread_create(&consumer, NULL, handoff_consumer, &sum) != 0) return 1;
    for (long i = 0; i < rounds; i++) {
        unsigned char *p = xmalloc(handoff_size);
        memset(p, (int)i, handoff_size);
        _Atomic(unsigned char *) *slot = &handoff_ring[i % HANDOFF_RING];
        while (atomic_load_explicit(slot, memory_order_acquire) != NULL)
            sched_yield();
        atomic_store_explicit(slot, p, memory_order_release);
    }
    pthread_join(consumer, NULL);
    printf("handoff sum=%llu\n", (unsigned long long)sum);
    return 0;
}

static pthread_barrier_t helpers_ready;
static pthread_mutex_t helpers_gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t helpers_done_cond = PTHREAD_COND_INITIALIZER;
static bool helpers_done;

static void *cycles_helper(void *unused) {
    (void)unused;
    void *p = xmalloc(64);
    pthread_barrier_wait(&helpers_ready);
    pthread_mutex_lock(&helpers_gate);
    while (!helpers_done)
        pthread_cond_wait(&helpers_done_cond, &helpers_gate);
    pthread_mutex_unlock(&helpers_gate);
    free(p);
    return NULL;
}

static int cycles(long size, long count, long rounds, long helpers) {
    if (size < 1 || count < 1 || rounds < 1 || helpers < 0 || helpers > 64) return 2;
    pthread_t helper[64];
    pthread_barrier_init(&helpers_ready, NULL, (unsigned)helpers + 1);
    for (long h = 0; h < helpers; h++)
        pthread_create(&helper[h], NULL, cycles_helper, NULL);
    pthread_barrier_wait(&helpers_ready);
    unsigned char **blocks = xmalloc((size_t)count * sizeof *blocks);
    uint64_t sum = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < count; i++) {
            blocks[i] = xmalloc((size_t)size);
            blocks[i][0] = (unsigned char)(i + r);
        }
        for (long i = 0; i < count; i += 2)
            sum += blocks[i][0], free(blocks[i]);
        for (long i = 1; i < count; i += 2)
            sum += blocks[i][0], free(blocks[i]);
    }
    free(blocks);
    pthread_mutex_lock(&helpers_gate);
    helpers_done = true;
    pthread_cond_broadcast(&helpers_done_cond);
    pthread_mutex_unlock(&helpers_gate);
    for (long h = 0; h < helpers; h++)
        pthread_join(helper[h], NULL);
    printf("cycles sum=%llu\n", (unsigned long long)sum);
    return 0;
}

/* collector: the blocks the workers made since the last collection, and
 * their bytes, under collector_lock */
static pthread_mutex_t collector_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t collector_wanted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t collector_finished = PTHREAD_COND_INITIALIZER;
static unsigned char **collector_blocks;
static size_t collector_count, collector_capacity, collector_bytes, collector_limit;
static long collector_per_thread, collector_max, collections;
static bool collector_stop;

static void *collector_worker(void *arg) {
    rng_t r;
    rng_seed(&r, 900 + (uint64_t)(intptr_t)arg);
    for (long i = 0; i < collector_per_thread; i++) {
        size_t size = 1 + (size_t)rng_below(&r, (uint64_t)collector_max);
        pthread_mutex_lock(&collector_lock);
        while (collector_bytes + size > collector_limit) {
            long seen = collections;
            pthread_cond_signal(&collector_wanted);
            while (seen == collections)
                pthread_cond_wait(&collector_finished, &collector_lock);
        }
        collector_bytes += size;
        pthread_mutex_unlock(&collector_lock);
        unsigned char *p = xmalloc(size);
        memset(p, (int)(i & 127) + 1, size); /* a runtime clears its buffers */
        pthread_mutex_lock(&collector_lock);
        if (collector_count == collector_capacity) {
            collector_capacity = collector_capacity ? 2 * collector_capacity : 1024;
            collector_blocks = xrealloc(collector_blocks, collector_capacity * sizeof(void *));
        }
        collector_blocks[collector_count++] = p;
        pthread_mutex_unlock(&collector_lock);
    }
    return NULL;
}

static void *collector_main(void *sum_out) {
    uint64_t sum = 0;
    pthread_mutex_lock(&collector_lock);
    while (!collector_stop) {
        if (collector_bytes + (size_t)collector_max <= collector_limit) {
            pthread_cond_wait(&collector_wanted, &collector_lock);
            continue;
        }
        unsigned char **blocks = collector_blocks;
        size_t count = collector_count;
        collector_blocks = NULL;
        collector_count = collector_capacity = 0;
        pthread_mutex_unlock(&collector_lock);
        for (size_t i = 0; i < count; i++)
            sum += blocks[i][0], free(blocks[i]);
        free(blocks);
        pthread_mutex_lock(&collector_lock);
        collector_bytes = 0;
        collections++;
        pthread_cond_broadcast(&collector_finished);
    }
    pthread_mutex_unlock(&collector_lock);
    *(uint64_t *)sum_out = sum;
    return NULL;
}

static int collector(long threads, long blocks, long mib, long max_bytes) {
    if (threads < 1 || threads > 64 || blocks < 1 || mib < 1 || max_bytes < 1 ||
        (size_t)max_bytes > ((size_t)mib << 20))
        return 2;
    collector_per_thread = blocks;
    collector_limit = (size_t)mib << 20;
    collector_max = max_bytes;
    uint64_t sum = 0;
    pthread_t gc, worker[64];
    pthread_create(&gc, NULL, collector_main, &sum);
    for (long t = 0; t < threads; t++)
        pthread_create(&worker[t], NULL, collector_worker, (void *)(intptr_t)t);
    for (long t = 0; t < threads; t++)
        pthread_join(worker[t], NULL);
    pthread_mutex_lock(&collector_lock);
    collector_stop = true;
    pthread_cond_signal(&collector_wanted);
    pthread_mutex_unlock(&collector_lock);
    pthread_join(gc, NULL);
    for (size_t i = 0; i < collector_count; i++)
        sum += collector_blocks[i][0], free(collector_blocks[i]);
    free(collector_blocks);
    printf("collector collections=%ld sum=%llu\n", collections, (unsigned long long)sum);
    return 0;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "realloc-grow") == 0)
        return realloc_grow(arg_long(argc, argv, 2, 1), arg_long(argc, argv, 3, 1),
                            arg_long(argc, argv, 4, 20));
    if (strcmp(what, "large-heap") == 0)
        return large_heap(arg_long(argc, argv, 2, 2000), arg_long(argc, argv, 3, 300000));
    if (strcmp(what, "threads") == 0)
        return threads(arg_long(argc, argv, 2, 500), arg_long(argc, argv, 3, 100),
                       arg_long(argc, argv, 4, 8));
    if (strcmp(what, "aligned") == 0)
        return aligned(arg_long(argc, argv, 2, 64), arg_long(argc, argv, 3, 40000));
    if (strcmp(what, "calloc-large") == 0)
        return calloc_large(argc > 2 ? argv[2] : "sparse", arg_long(argc, argv, 3, 4000));
    if (strcmp(what, "handoff") == 0)
        return handoff(arg_long(argc, argv, 2, 200), arg_long(argc, argv, 3, 2000));
    if (strcmp(what, "cycles") == 0)
        return cycles(arg_long(argc, argv, 2, 100), arg_long(argc, argv, 3, 800000),
                      arg_long(argc, argv, 4, 20), arg_long(argc, argv, 5, 0));
    if (strcmp(what, "collector") == 0)
        return collector(arg_long(argc, argv, 2, 4), arg_long(argc, argv, 3, 6000),
                         arg_long(argc, argv, 4, 512), arg_long(argc, argv, 5, 200000));
    fprintf(stderr, "usage: patterns realloc-grow MIB STEP REPS | large-heap LIVE STEPS | "
                    "threads N OBJS CLASSES | aligned ALIGN ROUNDS | calloc-large MODE STEPS | "
                    "handoff KIB ROUNDS | cycles SIZE COUNT ROUNDS [HELPERS] | "
                    "collector THREADS BLOCKS MIB MAXBYTES\n");
    return 2;
}
