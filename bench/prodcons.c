/* Producer/consumer: one thread allocates, another frees (xmalloc-test
 * shape). The producer fills batches of BATCH pointers to fresh objects
 * of random small sizes and passes each batch (itself malloc'ed) through
 * a bounded single-producer/single-consumer ring; the consumer reads a
 * byte of each object and frees it, then frees the batch.
 *
 * usage: prodcons [million-objects] */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define BATCH 256
#define RING  64

static void *ring[RING];
static atomic_size_t head, tail; /* head: next to read, tail: next to write */
static long nbatches;
static uint64_t consumed_sum;

static void *consumer(void *arg) {
    (void)arg;
    uint64_t sum = 0;
    for (long b = 0; b < nbatches; b++) {
        size_t h = atomic_load_explicit(&head, memory_order_relaxed);
        while (atomic_load_explicit(&tail, memory_order_acquire) == h)
            sched_yield();
        unsigned char **batch = ring[h % RING];
        atomic_store_explicit(&head, h + 1, memory_order_release);
        for (int i = 0; i < BATCH; i++) {
            sum += batch[i][0];
            free(batch[i]);
        }
        free(batch);
    }
    consumed_sum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    long objs = arg_long(argc, argv, 1, 8) * 1000000L;
    nbatches = objs / BATCH;
    pthread_t t;
    if (pthread_create(&t, NULL, consumer, NULL)) return 1;
    rng_t r;
    rng_seed(&r, 7);
    for (long b = 0; b < nbatches; b++) {
        unsigned char **batch = xmalloc(BATCH * sizeof *batch);
        for (int i = 0; i < BATCH; i++) {
            size_t n = 16 + rng_below(&r, 240);
            batch[i] = xmalloc(n);
            batch[i][0] = (unsigned char)n;
        }
        size_t tl = atomic_load_explicit(&tail, memory_order_relaxed);
        while (tl - atomic_load_explicit(&head, memory_order_acquire) >= RING)
            sched_yield();
        ring[tl % RING] = batch;
        atomic_store_explicit(&tail, tl + 1, memory_order_release);
    }
    pthread_join(t, NULL);
    printf("prodcons objects=%ld sum=%llu\n", nbatches * BATCH, (unsigned long long)consumed_sum);
    return 0;
}
