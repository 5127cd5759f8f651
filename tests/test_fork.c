/* fork from a multithreaded process: three threads hammer malloc/free (and
 * realloc, and cross-thread frees through shared slots) while the main thread
 * forks 200 times. Each child allocates at once (sometimes from a new
 * thread), frees a block inherited from the parent and _exits 0. A child
 * that does not finish within 20 s counts as deadlocked. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"

#define HAMMERS 3
#define FORKS   200
#define SLOTS   256

static atomic_int stop;
static _Atomic(void *) slots[SLOTS];

static void *hammer(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *mine[64] = {0};
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8;
        size_t n = r % 16 == 0 ? 100000 + r % 400000 : 1 + r % 2000;
        int i = (int)(r % 64);
        free(mine[i]);
        mine[i] = malloc(n);
        if (mine[i]) memset(mine[i], (int)r, n < 64 ? n : 64);
        if (r % 7 == 0) {
            void *q = realloc(mine[i], n / 2 + 1);
            if (q) mine[i] = q;
        }
        if (r % 5 == 0) { /* trade a block with another thread */
            void *b = malloc(48 + r % 300);
            void *old = atomic_exchange(&slots[r % SLOTS], b);
            free(old);
        }
    }
    for (int i = 0; i < 64; i++)
        free(mine[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        void *p = malloc((size_t)i * 37 + 1);
        if (!p) return NULL;
        free(p);
    }
    return malloc(1);
}

static void child(int k, void *inherited) {
    void *p[50];
    for (int i = 0; i < 50; i++) {
        p[i] = malloc((size_t)(i * 101 % 3000) + 1);
        if (!p[i]) _exit(2);
        memset(p[i], i, 1);
    }
    void *big = malloc(500000);
    if (!big) _exit(3);
    memset(big, 1, 500000);
    free(big);
    for (int i = 0; i < 50; i++)
        free(p[i]);
    free(inherited);
    /* a block another thread of the parent was using */
    free(atomic_exchange(&slots[k % SLOTS], NULL));
    if (k % 4 == 0) {
        pthread_t t;
        void *res = NULL;
        if (pthread_create(&t, NULL, child_thread, NULL) != 0) _exit(4);
        pthread_join(t, &res);
        if (!res) _exit(5);
        free(res);
    }
    _exit(0);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void) {
    pthread_t t[HAMMERS];
    for (int i = 0; i < HAMMERS; i++)
        CHECK(pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)(i + 1)) == 0);
    for (int k = 0; k < FORKS; k++) {
        void *inherited = malloc((size_t)k * 13 + 1);
        CHECK(inherited != NULL);
        pid_t pid = fork();
        CHECKF(pid >= 0, "fork failed");
        if (pid == 0) child(k, inherited);
        free(inherited);
        int status = 0;
        double t0 = now();
        for (;;) { /* deadlock detection: a generous limit, not a timing test */
            pid_t w = waitpid(pid, &status, WNOHANG);
            CHECK(w >= 0);
            if (w == pid) break;
            if (now() - t0 > 20.0) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                FAILF("child %d (fork %d) deadlocked: still running after 20 s", (int)pid, k);
            }
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child of fork %d: %s %d", k,
               WIFEXITED(status) ? "exit" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < HAMMERS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    for (int i = 0; i < SLOTS; i++)
        free(atomic_exchange(&slots[i], NULL));
    return 0;
}
