/* launch: runs a command and reports its resource use, for bench/run.py.
 *
 *   launch REPORT-FILE command [args...]
 *
 * Why: ru_maxrss counts the resident set a process had before exec, so a
 * command forked straight from the Python runner would inherit the runner's
 * RSS as its "peak". This launcher is small, so the command's peak RSS is its
 * own. The environment variable BENCH_LD_PRELOAD becomes LD_PRELOAD in the
 * command only, so the launcher itself never runs on the allocator under test.
 *
 * The report file gets "pid N" as soon as the command started, then
 * "wall S", "user S", "sys S", "maxrss KiB", "minflt N" (page faults that
 * needed no I/O: on a virtual machine each costs microseconds) and
 * "status RAW-WAIT-STATUS". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double tv(struct timeval t) {
    return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: launch REPORT-FILE command [args...]\n");
        return 2;
    }
    FILE *rep = fopen(argv[1], "w");
    if (!rep) {
        perror(argv[1]);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        const char *pre = getenv("BENCH_LD_PRELOAD");
        if (pre && *pre) setenv("LD_PRELOAD", pre, 1);
        unsetenv("BENCH_LD_PRELOAD");
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    fprintf(rep, "pid %d\n", (int)pid);
    fflush(rep);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("wait4");
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(rep, "wall %.6f\nuser %.6f\nsys %.6f\nmaxrss %ld\nminflt %ld\nstatus %d\n", wall,
            tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, st);
    fclose(rep);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
