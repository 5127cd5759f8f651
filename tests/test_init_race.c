/* Initialisation race: in a fresh process, 8 threads released together by a
 * barrier make the program's first allocations (the main thread allocates
 * nothing before). Each thread checks its blocks' contents; blocks of
 * different threads never coincide. The experiment runs in 30 fresh
 * processes (this program re-executes itself with the argument "child"). */
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "common.h"

#define T 8
#define K 200

static pthread_barrier_t bar;
static void *got[T][K];

static void *racer(void *arg) {
    int id = (int)(uintptr_t)arg;
    pthread_barrier_wait(&bar);
    for (int i = 0; i < K; i++) {
        size_t n = (size_t)((i * 131 + id * 17) % 1500) + 1;
        if (i % 50 == 49) n = 300000;
        got[id][i] = malloc(n);
        if (!got[id][i]) return (void *)1;
        pat_fill(got[id][i], n);
        if (malloc_usable_size(got[id][i]) < n) return (void *)2;
    }
    for (int i = 0; i < K; i++) {
        size_t n = (size_t)((i * 131 + id * 17) % 1500) + 1;
        if (i % 50 == 49) n = 300000;
        if (pat_check(got[id][i], n) != (size_t)-1) return (void *)3;
    }
    return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static int child_main(void) {
    pthread_t t[T];
    pthread_barrier_init(&bar, NULL, T);
    for (int i = 0; i < T; i++)
        if (pthread_create(&t[i], NULL, racer, (void *)(uintptr_t)i) != 0) return 10;
    for (int i = 0; i < T; i++) {
        void *res = NULL;
        pthread_join(t[i], &res);
        if (res != NULL) return 20 + (int)(uintptr_t)res;
    }
    static void *all[T * K];
    memcpy(all, got, sizeof all);
    qsort(all, T * K, sizeof all[0], cmp_ptr);
    for (int i = 1; i < T * K; i++)
        if (all[i] == all[i - 1]) return 30;
    for (int i = 0; i < T * K; i++)
        free(all[i]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) return child_main();
    for (int r = 0; r < 30; r++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            char *args[] = {(char *)"/proc/self/exe", (char *)"child", NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "run %d: child %s %d", r,
               WIFEXITED(status) ? "exited with" : "killed by signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    return 0;
}
