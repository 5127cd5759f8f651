/* Blocks over 1 KiB come from one heap that every thread shares, through a
 * small cache per thread (src/shared_class.c):
 * - a block another thread allocated, freed here, is the next one of its
 *   size handed out here (the freeing thread's cache);
 * - blocks one thread freed serve another thread that is still running
 *   (no page of the class per thread);
 * - a thread's cached blocks go back at its exit, and serve the others;
 * - the contents of blocks that move between threads stay intact;
 * - a fork child goes on with the shared heap and the forking thread's
 *   cache while another thread was using them.
 * Not required of other allocators: with them only the contents are
 * checked. */
#include <pthread.h>
#include <semaphore.h>
#include <sys/wait.h>

#include "common.h"

#define SIZE  3000
#define COUNT 32

static int strict;

static void *allocate(void *out) {
    *(void **)out = malloc(SIZE);
    return NULL;
}

/* A block from another thread, freed here, comes back at the next malloc. */
static void reuse_after_remote_free(void) {
    void *warm = malloc(SIZE); /* this thread has used the class */
    CHECK(warm != NULL);
    free(warm);
    void *p = NULL;
    run_in_thread(allocate, &p);
    CHECKF(p != NULL, "malloc(%d) failed in a thread", SIZE);
    free(p);
    void *q = malloc(SIZE);
    CHECK(q != NULL);
    if (strict) CHECKF(q == p, "a block freed here (%p) was not reused: got %p", p, q);
    free(q);
}

/* Thread A allocates and frees COUNT blocks and waits; thread B, running
 * meanwhile, allocates COUNT blocks: most are A's. */
static void *a_blocks[COUNT];
static sem_t a_done, b_done;

static void *thread_a(void *unused) {
    (void)unused;
    for (int i = 0; i < COUNT; i++) {
        a_blocks[i] = malloc(SIZE);
        if (a_blocks[i] == NULL) FAILF("malloc(%d) failed", SIZE);
        pat_fill(a_blocks[i], SIZE);
    }
    for (int i = 0; i < COUNT; i++)
        if (pat_check(a_blocks[i], SIZE) != (size_t)-1) FAILF("block %d changed", i);
    for (int i = 0; i < COUNT; i++)
        free(a_blocks[i]);
    sem_post(&a_done);
    sem_wait(&b_done); /* stays alive: its heap and cache stay */
    return NULL;
}

static void *thread_b(void *count) {
    sem_wait(&a_done);
    void *mine[COUNT];
    int from_a = 0;
    for (int i = 0; i < COUNT; i++) {
        mine[i] = malloc(SIZE);
        if (mine[i] == NULL) FAILF("malloc(%d) failed", SIZE);
        pat_fill(mine[i], SIZE);
        for (int j = 0; j < COUNT; j++)
            from_a += mine[i] == a_blocks[j];
    }
    for (int i = 0; i < COUNT; i++) {
        if (pat_check(mine[i], SIZE) != (size_t)-1) FAILF("block %d changed", i);
        free(mine[i]);
    }
    *(int *)count = from_a;
    sem_post(&b_done);
    return NULL;
}

static void shared_between_live_threads(void) {
    CHECK(sem_init(&a_done, 0, 0) == 0 && sem_init(&b_done, 0, 0) == 0);
    int from_a = 0;
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, thread_a, NULL) == 0);
    CHECK(pthread_create(&b, NULL, thread_b, &from_a) == 0);
    CHECK(pthread_join(b, NULL) == 0 && pthread_join(a, NULL) == 0);
    /* A keeps some in its cache (three quarters of its limit), and B first
     * gets the blocks carved and not yet handed out; with a heap per thread
     * none would be A's */
    if (strict) CHECKF(from_a >= COUNT / 8, "only %d of %d blocks were A's", from_a, COUNT);
}

/* A thread's cache goes back when it exits. */
static void *cache_then_exit(void *block) {
    void *p = malloc(SIZE), *q = malloc(SIZE);
    if (p == NULL || q == NULL) FAILF("malloc(%d) failed", SIZE);
    free(q);
    free(p); /* p, the newest, would be this thread's next block */
    *(void **)block = p;
    return NULL;
}

static void cache_back_at_exit(void) {
    void *p = NULL;
    run_in_thread(cache_then_exit, &p);
    void *got[COUNT];
    int found = 0;
    for (int i = 0; i < COUNT; i++) {
        got[i] = malloc(SIZE);
        CHECK(got[i] != NULL);
        found += got[i] == p;
    }
    for (int i = 0; i < COUNT; i++)
        free(got[i]);
    if (strict) CHECKF(found == 1, "the exited thread's cached block %p was not reused", p);
}

/* A fork while this thread caches blocks and another thread allocates and
 * frees them: the child reuses the shared heap and its cache, and frees
 * what the parent allocated. */
static volatile int churn_stop;
static void *churn(void *unused) {
    (void)unused;
    while (!churn_stop) {
        void *p = malloc(SIZE + 1000);
        if (p == NULL) FAILF("malloc failed");
        pat_fill(p, SIZE + 1000);
        if (pat_check(p, SIZE + 1000) != (size_t)-1) FAILF("a churned block changed");
        free(p);
    }
    return NULL;
}

static void fork_with_caches(void) {
    void *kept[COUNT];
    for (int i = 0; i < COUNT; i++) {
        kept[i] = malloc(SIZE);
        CHECK(kept[i] != NULL);
        pat_fill(kept[i], SIZE);
    }
    for (int i = 0; i < COUNT; i += 2)
        free(kept[i]); /* some cached here */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, churn, NULL) == 0);
    for (int round = 0; round < 20; round++) {
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            for (int i = 1; i < COUNT; i += 2)
                if (pat_check(kept[i], SIZE) != (size_t)-1) _exit(3);
            void *mine[2 * COUNT];
            for (int i = 0; i < 2 * COUNT; i++) {
                mine[i] = malloc(SIZE + (size_t)i * 100);
                if (mine[i] == NULL) _exit(4);
                pat_fill(mine[i], SIZE + (size_t)i * 100);
            }
            for (int i = 0; i < 2 * COUNT; i++)
                if (pat_check(mine[i], SIZE + (size_t)i * 100) != (size_t)-1) _exit(5);
            for (int i = 0; i < 2 * COUNT; i++)
                free(mine[i]);
            for (int i = 1; i < COUNT; i += 2)
                free(kept[i]);
            _exit(0);
        }
        int status;
        CHECK(waitpid(child, &status, 0) == child);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child failed (status %d)",
               status);
    }
    churn_stop = 1;
    CHECK(pthread_join(t, NULL) == 0);
    for (int i = 1; i < COUNT; i += 2)
        free(kept[i]);
}

int main(void) {
    strict = tm_stats_required_if_expected() != NULL;
    reuse_after_remote_free();
    shared_between_live_threads();
    cache_back_at_exit();
    fork_with_caches();
    return 0;
}
