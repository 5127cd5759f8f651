/* fork while another thread gives memory back: in aggressive mode each free
 * of a large block releases its slices at once, on the freeing thread, with
 * no lock held during the madvise. A fork then copies a segment whose slices
 * are out of the free set for the release, and the child has no thread to
 * put them back. Each child trims and must then hold no retained memory:
 * slices kept out for good stay counted as retained (heap_atfork_child
 * returns them; without that, about one child in three failed). */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "common.h"

#define FORKS 100
#define BLOCK ((size_t)2 << 20)

static atomic_int stop;

static void *release_loop(void *arg) {
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        char *p = malloc(BLOCK);
        if (p == NULL) continue;
        /* One page touched: the release is the larger part of the loop (with
         * the whole block written, the page faults were, and a fork landed
         * in a release 30 times less often). */
        ((volatile char *)p)[0] = 1;
        free(p);
    }
    return NULL;
}

int main(void) {
    tm_stats_fn stats = tm_stats_required_if_expected();
    if (stats == NULL) SKIP("needs tidemalloc_stats");
    CHECKF(mallopt(M_AGGRESSIVE_MADVISE, 1) == 1, "mallopt(M_AGGRESSIVE_MADVISE) refused");
    /* blocks from segments, not mappings of their own */
    CHECKF(mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1, "mallopt(M_MMAP_THRESHOLD) refused");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, release_loop, NULL) == 0);
    int failed = 0;
    for (int k = 0; k < FORKS; k++) {
        usleep(500 + (unsigned)k * 37 % 1000); /* land at different points of a release */
        pid_t pid = fork();
        CHECKF(pid >= 0, "fork failed");
        if (pid == 0) {
            void *p = malloc(3 * BLOCK / 2); /* the child allocates large blocks too */
            if (p == NULL) _exit(2);
            memset(p, 2, 64);
            free(p);
            malloc_trim(0);
            struct tidemalloc_stats s;
            stats(&s);
            _exit(s.bytes_retained == 0 ? 0 : 3);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) != 2, "child of fork %d: status %d", k,
               status);
        if (WEXITSTATUS(status) == 3) failed++;
    }
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
    pthread_join(thread, NULL);
    CHECKF(failed == 0, "%d children of %d kept retained memory after malloc_trim", failed, FORKS);
    printf("%d forks beside releases: every child's trim left nothing retained\n", FORKS);
    return 0;
}
