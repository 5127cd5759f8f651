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
 * Why it traces the command: since Linux 6.2 a process's RSS counters are
 * per-CPU counters folded into the total every 32 pages, and ru_maxrss is
 * computed from the folded total, so it reads up to 31 pages per CPU and per
 * counter (file, anonymous) low: on 2 CPUs up to 0.5 MiB, a sixth of a
 * 1.5 MiB program's figure, by an amount that depends on how the program's
 * faults fell on the CPUs. /proc/PID/status sums the counters exactly. So the
 * command runs under ptrace with only PTRACE_O_TRACEEXIT (plus exec events, so
 * that a SIGTRAP of its own is told apart): it stops once, as its main thread
 * exits with its memory still mapped, and VmHWM is read then. No system call
 * of the command stops; a signal sent to its main thread stops it briefly and
 * is passed on. Where ptrace is refused, the command runs untraced and only
 * ru_maxrss is reported. (A command that must trace its own threads, such as
 * one built with LeakSanitizer, fails its leak check under a tracer: none of
 * the benchmarks is.)
 *
 * The report file gets "pid N" as soon as the command started, then
 * "traced 1" (0: ptrace refused), "hwm KiB" (VmHWM at the main thread's exit,
 * 0 if it could not be read),
 * "wall S", "user S", "sys S", "maxrss KiB" (ru_maxrss, which also covers
 * the children the command waited for), "minflt N" (page faults that
 * needed no I/O: on a virtual machine each costs microseconds) and
 * "status RAW-WAIT-STATUS". */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double tv(struct timeval t) {
    return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

/* VmHWM of a process, in KiB; 0 if it cannot be read. */
static long peak_rss_kib(pid_t pid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strstr(buf, "\nVmHWM:");
    return p ? strtol(p + 7, NULL, 10) : 0;
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
        /* Refused (a seccomp policy, another tracer): run untraced. */
        (void)ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    fprintf(rep, "pid %d\n", (int)pid);
    fflush(rep);
    int st;
    struct rusage ru;
    long hwm = 0;
    int options_set = 0;
    for (;;) {
        if (wait4(pid, &st, 0, &ru) < 0) {
            if (errno == EINTR) continue;
            perror("wait4");
            return 2;
        }
        if (!WIFSTOPPED(st)) break;
        int sig = WSTOPSIG(st), event = st >> 16;
        if (sig == SIGTRAP && event == PTRACE_EVENT_EXIT) {
            hwm = peak_rss_kib(pid);
            sig = 0;
        } else if (sig == SIGTRAP && (event == PTRACE_EVENT_EXEC || !options_set)) {
            /* The first stop is the exec of the command, before the options. */
            if (!options_set)
                ptrace(PTRACE_SETOPTIONS, pid, NULL,
                       (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL));
            options_set = 1;
            sig = 0;
        } else {
            /* A group-stop has no signal to pass on (GETSIGINFO fails). */
            siginfo_t si;
            if (ptrace(PTRACE_GETSIGINFO, pid, NULL, &si) < 0) sig = 0;
        }
        ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(
        rep,
        "traced %d\nhwm %ld\nwall %.6f\nuser %.6f\nsys %.6f\nmaxrss %ld\nminflt %ld\nstatus %d\n",
        options_set, hwm, wall, tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, st);
    fclose(rep);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
