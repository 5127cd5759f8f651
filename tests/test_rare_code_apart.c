/* The library's rarely run code (RARE in src/internal.h: the aligned and
 * the rarer entry points, statistics, mallopt, secure mode, error reports)
 * has a load segment of its own (src/rare.ld), so that a program which only
 * mallocs, callocs, reallocs and frees, in threads and across a fork, never
 * maps its pages: the kernel maps a file's pages up to 64 KiB around each
 * fault, clipped to the mapping, so inside the code's mapping they were
 * resident in every program (11 code pages before, 9 now). This test does
 * that work, checks that the second executable mapping of the library has
 * no page resident, then calls a rare entry point and checks that the
 * mapping is read where a call lands (so that the test sees the pages). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "common.h"

static char smaps[1 << 20];

/* Rss in KiB of the library's executable mappings, in address order;
 * returns how many there are (at most `max`). Reads with read(2): stdio
 * would allocate, and this runs between the checks. */
static int code_mappings_rss(unsigned long *rss_kib, int max) {
    int fd = open("/proc/self/smaps", O_RDONLY);
    CHECKF(fd >= 0, "open /proc/self/smaps: %s", strerror(errno));
    size_t n = 0;
    ssize_t r;
    while (n < sizeof smaps - 1 && (r = read(fd, smaps + n, sizeof smaps - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    CHECK(n < sizeof smaps - 1);
    smaps[n] = 0;
    int count = 0, inside = 0;
    for (char *line = smaps; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        /* a mapping's first line: "start-end perms offset dev inode path" */
        char perms[8];
        if (sscanf(line, "%*x-%*x %7s", perms) == 1)
            inside = strcmp(perms, "r-xp") == 0 && strstr(line, "libtidemalloc") != NULL;
        unsigned long kib;
        if (inside && sscanf(line, "Rss: %lu kB", &kib) == 1) {
            if (count < max) rss_kib[count] = kib;
            count++;
            inside = 0;
        }
        line = end ? end + 1 : NULL;
    }
    return count;
}

static void work(void) {
    void *small[200];
    for (int i = 0; i < 200; i++) {
        small[i] = i % 3 ? malloc((size_t)(16 + i * 40)) : calloc(1, (size_t)(8 + i * 8));
        CHECK(small[i] != NULL);
    }
    char *grow = NULL;
    for (size_t size = 100; size <= ((size_t)4 << 20); size *= 3) {
        grow = realloc(grow, size);
        CHECK(grow != NULL);
        grow[size - 1] = 1;
    }
    grow = realloc(grow, 1000);
    CHECK(grow != NULL);
    free(grow);
    for (int i = 0; i < 200; i += 2)
        free(small[i]);
    for (int i = 1; i < 200; i += 2)
        free(small[i]);
}

static void *thread_work(void *arg) {
    work();
    return arg;
}

int main(int argc, char **argv) {
    (void)argc;
    /* Options from the environment are parsed by rare code: run again with
     * only the preload and the harness's expectation. */
    if (getenv("RARE_CODE_TEST_CLEAN") == NULL) {
        static char preload[4096], expect[64];
        const char *p = getenv("LD_PRELOAD"), *e = getenv("TEST_EXPECT_TIDEMALLOC");
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", p ? p : "");
        snprintf(expect, sizeof expect, "TEST_EXPECT_TIDEMALLOC=%s", e ? e : "0");
        char *env[] = {preload, expect, "RARE_CODE_TEST_CLEAN=1", NULL};
        execve("/proc/self/exe", argv, env);
        FAILF("execve: %s", strerror(errno));
    }

    unsigned long rss[4];
    int count = code_mappings_rss(rss, 4);
    if (count == 0) {
        if (tm_expected()) FAILF("no executable mapping of libtidemalloc found");
        SKIP("libtidemalloc is not loaded");
    }
    CHECKF(count == 2, "%d executable mappings of the library, expected the code's and the rare",
           count);

    work();
    pthread_t threads[3];
    for (int t = 0; t < 3; t++)
        CHECK(pthread_create(&threads[t], NULL, thread_work, NULL) == 0);
    /* blocks freed by another thread than their owner's */
    void *handed = malloc(64);
    CHECK(handed != NULL);
    for (int t = 0; t < 3; t++)
        CHECK(pthread_join(threads[t], NULL) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        work();
        count = code_mappings_rss(rss, 4);
        _exit(count == 2 && rss[1] == 0 ? 0 : 3);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the fork child mapped the rare code (status %d)", status);
    free(handed);

    count = code_mappings_rss(rss, 4);
    CHECK(count == 2);
    CHECKF(rss[1] == 0, "the rare code's mapping has %lu KiB resident (the code's %lu)", rss[1],
           rss[0]);

    /* a rare entry point: its page (and its neighbours) get mapped */
    void *p = malloc(100);
    CHECK(p != NULL);
    CHECK(malloc_usable_size(p) >= 100);
    free(p);
    count = code_mappings_rss(rss, 4);
    CHECK(count == 2);
    CHECKF(rss[1] > 0, "malloc_usable_size ran, yet the rare code's mapping reads 0 KiB");
    return 0;
}
