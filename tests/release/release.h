/* Helpers for the release-policy tests (issue 3 checks), tests/release/rel_*.c.
 *
 * Each test runs with the library under test in LD_PRELOAD and finds the
 * counters with dlsym, so the same binary also runs (and skips what needs the
 * counters) under glibc. Exit 0: pass, 1: fail (reason on stderr), 77: skip
 * (reason on stdout after "SKIP "). Figures go to stdout as "key=value" words
 * on one line starting with "FIGURES", which suite-release.sh appends to the
 * PASS/FAIL line. */
#ifndef TIDEMALLOC_RELEASE_TESTS_H
#define TIDEMALLOC_RELEASE_TESTS_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tidemalloc.h"

#define REL_SKIP 77

#define REL_FAIL(...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        fflush(stdout);                                                                            \
        fflush(stderr);                                                                            \
        _exit(1);                                                                                  \
    } while (0)

#define REL_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) REL_FAIL(__VA_ARGS__);                                                        \
    } while (0)

#define REL_SKIPF(...)                                                                             \
    do {                                                                                           \
        printf("SKIP ");                                                                           \
        printf(__VA_ARGS__);                                                                       \
        putchar('\n');                                                                             \
        fflush(stdout);                                                                            \
        _exit(REL_SKIP);                                                                           \
    } while (0)

/* Installs a seccomp filter of `length` instructions on this process (and
 * the threads and children it makes next); skips the test where the kernel
 * or a container refuses it. */
static inline void rel_seccomp_install(struct sock_filter *filter, unsigned short length) {
    struct sock_fprog program = {length, filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
        REL_SKIPF("cannot install a seccomp filter: %s", strerror(errno));
}

typedef void (*rel_stats_fn)(struct tidemalloc_stats *);

/* tidemalloc_stats of the preloaded library; skips the test when absent. */
static inline rel_stats_fn rel_stats_fn_get(void) {
    rel_stats_fn f;
    void *sym = dlsym(RTLD_DEFAULT, "tidemalloc_stats");
    if (sym == NULL) REL_SKIPF("tidemalloc_stats not found (not tidemalloc)");
    memcpy(&f, &sym, sizeof f); /* object -> function pointer, POSIX-style */
    return f;
}

static inline struct tidemalloc_stats rel_stats(void) {
    static rel_stats_fn f;
    if (f == NULL) f = rel_stats_fn_get();
    struct tidemalloc_stats s;
    memset(&s, 0, sizeof s);
    f(&s);
    return s;
}

static inline uint64_t rel_release_calls(const struct tidemalloc_stats *s) {
    return s->munmap_calls + s->madvise_calls;
}

/* Resident set size in bytes, read from /proc/self/statm with a plain
 * read(2), so that measuring allocates nothing. */
static inline size_t rel_rss(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) REL_FAIL("cannot open /proc/self/statm");
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) REL_FAIL("cannot read /proc/self/statm");
    buf[n] = '\0';
    const char *p = buf;
    while (*p && *p != ' ')
        p++; /* skip size */
    unsigned long res = strtoul(p, NULL, 10);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* SIGSYS goes to `handler` (with SA_SIGINFO): a filter's SECCOMP_RET_TRAP
 * calls it instead of the system call, whose result it sets in the
 * context's RAX. */
static inline void rel_on_sigsys(void (*handler)(int, siginfo_t *, void *)) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO;
    if (sigaction(SIGSYS, &action, NULL) != 0) REL_FAIL("sigaction failed");
}

/* Writes one byte in every page of [p, p + n). */
static inline void rel_touch(void *p, size_t n) {
    volatile unsigned char *c = p;
    for (size_t i = 0; i < n; i += 4096)
        c[i] = (unsigned char)(i >> 12 | 1);
    if (n) c[n - 1] = 1;
}

/* `count` blocks of `size` bytes taken, every page written, and all freed:
 * that much memory free at once. */
static inline void rel_burst(void **blocks, int count, size_t size) {
    for (int i = 0; i < count; i++) {
        blocks[i] = malloc(size);
        REL_CHECK(blocks[i] != NULL, "malloc(%zu) failed", size);
        rel_touch(blocks[i], size);
    }
    for (int i = 0; i < count; i++)
        free(blocks[i]);
}

static inline double rel_now_s(void);

/* A block of `size` bytes taken and freed again and again for `seconds`;
 * a block with a page of its own (64 KiB and more) empties that page at
 * each free, which then runs a free's release passes. Returns how many. */
static inline long rel_block_in_and_out(size_t size, double seconds) {
    double end = rel_now_s() + seconds;
    long count = 0;
    while (rel_now_s() < end) {
        void *p = malloc(size);
        REL_CHECK(p != NULL, "malloc(%zu) failed", size);
        free(p);
        count++;
    }
    return count;
}

static inline double rel_mib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

/* Signed difference in MiB, for messages. */
static inline double rel_dmib(size_t a, size_t b) {
    return a >= b ? rel_mib(a - b) : -rel_mib(b - a);
}

/* The process's minor page faults so far (all threads'). */
static inline long rel_minor_faults(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

/* The monotonic clock in seconds. */
static inline double rel_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* xorshift64*, deterministic. */
static inline uint64_t rel_rand(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

#define REL_FIGURES(...)                                                                           \
    do {                                                                                           \
        printf("FIGURES ");                                                                        \
        printf(__VA_ARGS__);                                                                       \
        putchar('\n');                                                                             \
        fflush(stdout);                                                                            \
    } while (0)

/* The allocator's syscalls while `fn` ran in a thread of its own (seed 000's
 * storm happened in a created thread, not the main one). */
struct rel_syscalls {
    uint64_t mmap, munmap, madvise, purge_runs;
};
static inline struct rel_syscalls rel_syscalls_in_thread(void *(*fn)(void *)) {
    struct tidemalloc_stats before = rel_stats();
    pthread_t t;
    REL_CHECK(pthread_create(&t, NULL, fn, NULL) == 0, "pthread_create failed");
    REL_CHECK(pthread_join(t, NULL) == 0, "pthread_join failed");
    struct tidemalloc_stats after = rel_stats();
    return (struct rel_syscalls){
        after.mmap_calls - before.mmap_calls, after.munmap_calls - before.munmap_calls,
        after.madvise_calls - before.madvise_calls, after.purge_runs - before.purge_runs};
}

#endif
