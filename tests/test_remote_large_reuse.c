/* Large blocks that another thread frees are reused by their owner at its
 * next large malloc. Such a block waits on its page's list until the owner
 * collects: the freeing thread flags the owner's heap, and a heap that needs
 * a segment collects first too. The main thread allocates 200 KB blocks
 * (four slices each) one at a time and hands each to a thread that frees
 * it: the 400 blocks, 25 segments' worth, must take at most a segment more
 * and at most DISTINCT addresses (asserted for tidemalloc only,
 * TEST_EXPECT_TIDEMALLOC=1; glibc's and mimalloc's take one). Before, the
 * freed pages piled up until the periodic collect, each 15 blocks took a
 * segment, and the exit heap, whose every free is remote, took the cached
 * segments of the threads that came after it (test_tsd_exit). Every block
 * keeps its contents until it is freed. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "common.h"

#define ROUNDS   400
#define SIZE     200000
#define DISTINCT 8 /* most addresses the blocks may take, for tidemalloc */

static _Atomic(unsigned char *) handed; /* the block to free, or NULL */
static atomic_int done;

static void *freer(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        unsigned char *p;
        while ((p = atomic_load_explicit(&handed, memory_order_acquire)) == NULL)
            sched_yield();
        CHECKF(p[0] == (unsigned char)i && p[SIZE - 1] == (unsigned char)~i,
               "round %d: the block's contents changed before its free", i);
        free(p);
        atomic_store_explicit(&handed, NULL, memory_order_release);
    }
    atomic_store_explicit(&done, 1, memory_order_release);
    return NULL;
}

static uint64_t segments_now(tm_stats_fn fn) {
    struct tidemalloc_stats s = {0};
    fn(&s);
    return s.segments;
}

int main(void) {
    tm_stats_fn fn = tm_stats_required_if_expected();
    free(malloc(SIZE)); /* this thread's heap and its first segment */
    uint64_t before = fn ? segments_now(fn) : 0, most = before;
    void *seen[DISTINCT + 1];
    int distinct = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, freer, NULL) == 0);
    for (int i = 0; i < ROUNDS; i++) {
        unsigned char *p = malloc(SIZE);
        CHECKF(p != NULL, "round %d: malloc(%d) failed", i, SIZE);
        int k = 0;
        while (k < distinct && seen[k] != p)
            k++;
        if (k == distinct && distinct <= DISTINCT) seen[distinct++] = p;
        p[0] = (unsigned char)i;
        p[SIZE - 1] = (unsigned char)~i;
        atomic_store_explicit(&handed, p, memory_order_release);
        while (atomic_load_explicit(&handed, memory_order_acquire) != NULL)
            sched_yield();
        if (fn) {
            uint64_t n = segments_now(fn);
            if (n > most) most = n;
        }
    }
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(atomic_load_explicit(&done, memory_order_acquire) == 1);
    /* the owner takes the slices back at its next large malloc: the same
     * few addresses over and over */
    if (fn)
        CHECKF(distinct <= DISTINCT,
               "%d blocks freed by another thread took more than %d addresses", ROUNDS, DISTINCT);
    if (fn)
        CHECKF(most <= before + 1, "%d blocks freed by another thread: %llu segments, %llu before",
               ROUNDS, (unsigned long long)most, (unsigned long long)before);
    printf("remote large reuse: ok (segments %llu, at most %llu; %d addresses%s)\n",
           (unsigned long long)before, (unsigned long long)most, distinct,
           distinct > DISTINCT ? " or more" : "");
    return 0;
}
