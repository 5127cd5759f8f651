/* fork while other threads hold emptied pages in their page caches: the
 * child has none of those threads, so nothing there reuses the pages, and
 * malloc_trim(0) in the child must still give their memory back (it is free
 * memory of the process: glibc's malloc_trim releases every arena's free
 * chunks, whichever thread used them). A child that then starts threads of
 * its own must not lose them either: a new thread's heap reuses a dead
 * one's structure. */
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "common.h"

#define THREADS 4
#define CLASSES 6
#define BLOCKS  2048 /* of each size: several pages of each class */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready, done;

/* Fills pages of a few classes and frees them all: those that empty go to
 * the thread's page cache (all but the one page each class keeps). */
static void *holder(void *arg) {
    (void)arg;
    static const size_t sizes[CLASSES] = {48, 160, 512, 1024, 3072, 8192};
    void **blocks = malloc(BLOCKS * sizeof *blocks);
    if (blocks == NULL) return (void *)1;
    for (int c = 0; c < CLASSES; c++) {
        for (int i = 0; i < BLOCKS; i++) {
            blocks[i] = malloc(sizes[c]);
            if (blocks[i] == NULL) return (void *)1;
            memset(blocks[i], 0x5a, sizes[c]);
        }
        for (int i = 0; i < BLOCKS; i++)
            free(blocks[i]);
    }
    free(blocks);
    pthread_mutex_lock(&lock);
    ready++;
    pthread_cond_broadcast(&cond);
    while (!done)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    void *p = malloc(100);
    free(p);
    return NULL;
}

/* The child: trims, then checks that nothing is retained; with `threads`,
 * starts and joins threads first (their heaps reuse the dead ones'). */
static int child(tm_stats_fn stats, int threads) {
    for (int t = 0; t < threads; t++) {
        pthread_t th;
        if (pthread_create(&th, NULL, child_thread, NULL) != 0) return 2;
        pthread_join(th, NULL);
    }
    malloc_trim(0);
    struct tidemalloc_stats s;
    stats(&s);
    if (s.bytes_retained != 0) {
        fprintf(stderr, "child (%d threads): %llu bytes retained after malloc_trim(0)\n", threads,
                (unsigned long long)s.bytes_retained);
        return 3;
    }
    return 0;
}

int main(void) {
    tm_stats_fn stats = tm_stats_required_if_expected();
    if (stats == NULL) SKIP("needs tidemalloc_stats");
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, holder, NULL) == 0);
    pthread_mutex_lock(&lock);
    while (ready < THREADS)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    struct tidemalloc_stats before;
    stats(&before);
    CHECKF(before.bytes_retained > 0, "the threads' emptied pages were not retained: nothing to "
                                      "test");
    for (int threads_in_child = 0; threads_in_child <= 8; threads_in_child += 8) {
        pid_t pid = fork();
        CHECKF(pid >= 0, "fork failed");
        if (pid == 0) _exit(child(stats, threads_in_child));
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "child with %d threads of its own: status %d (retained before the fork: %llu bytes)",
               threads_in_child, status, (unsigned long long)before.bytes_retained);
    }
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int t = 0; t < THREADS; t++) {
        void *r;
        pthread_join(threads[t], &r);
        CHECK(r == NULL);
    }
    printf("fork beside %d threads with cached pages (%llu bytes retained): every child's trim "
           "left nothing retained\n",
           THREADS, (unsigned long long)before.bytes_retained);
    return 0;
}
