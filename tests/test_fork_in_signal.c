/* fork() from a signal handler that interrupts a fork (glibc's
 * tst-mallocfork, in a loop): a child signals its parent as soon as it
 * runs, which often lands while the parent is still in the atfork
 * handlers, and the parent's handler forks again. Such a nested fork must
 * see the locks the interrupted handler holds (a lock released a moment
 * before its count went down made it spin on that lock for good: 10 hangs
 * in 600 runs of tst-mallocfork beside a second loop), and its end must
 * not make the outer fork forget what it took. Two worker processes run
 * the loop side by side (alone, one caught the old race in 1 run of 3; two
 * caught it in 6 of 6); a hang fails the test after a deadline instead of
 * stalling the suite. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"

#define ROUNDS      1500
#define DEADLINE_MS 30000
#define WORKERS     2

static void handler(int sig) {
    (void)sig;
    int saved = errno;
    pid_t child = fork();
    if (child == 0) _exit(0);
    if (child > 0)
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
    errno = saved;
}

static int worker(void) {
    struct sigaction action = {.sa_handler = handler};
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGALRM, &action, NULL) != 0) return 2;
    pid_t parent = getpid();
    for (int i = 0; i < ROUNDS; i++) {
        void *p = malloc(64 + (size_t)i % 512);
        if (p == NULL) return 3;
        free(p);
        pid_t child = fork();
        if (child < 0) return 4;
        if (child == 0) {
            kill(parent, SIGALRM);
            _exit(0);
        }
        while (waitpid(child, NULL, 0) < 0)
            if (errno != EINTR) return 5;
    }
    /* the locks must all be free again: a trim takes the purge lock */
    malloc_trim(0);
    return 0;
}

int main(void) {
    pid_t pids[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        pids[w] = fork();
        CHECKF(pids[w] >= 0, "fork failed");
        if (pids[w] == 0) _exit(worker());
    }
    for (int w = 0, waited = 0; w < WORKERS;) {
        int status = 0;
        pid_t r = waitpid(pids[w], &status, WNOHANG);
        CHECK(r >= 0);
        if (r == pids[w]) {
            CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d: status %d", w,
                   status);
            w++;
            continue;
        }
        if (waited >= DEADLINE_MS) {
            for (int k = w; k < WORKERS; k++) {
                kill(pids[k], SIGKILL);
                waitpid(pids[k], NULL, 0);
            }
            FAILF("%d forks from a signal handler beside forks: hung (no end after %d s)", ROUNDS,
                  DEADLINE_MS / 1000);
        }
        struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
        waited += 10;
    }
    printf("%d workers x %d forks from a signal handler that interrupted a fork: no hang\n",
           WORKERS, ROUNDS);
    return 0;
}
