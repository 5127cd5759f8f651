/* The library's code is in three load segments: what every program runs,
 * the WARM code (src/warm.ld: the arena, huge blocks, a large block's
 * growth in place) and the RARE code (src/rare.ld: the aligned and the
 * rarer entry points, statistics, mallopt, secure mode, error reports). The
 * kernel maps a file's pages up to 64 KiB around each fault, clipped to the
 * mapping, so a program maps a segment only when it runs code there (11 code
 * pages in every program before the forty-fourth session, 9 before the
 * forty-sixth, 7 now in the common ones). This test mallocs, callocs,
 * reallocs and frees small and large blocks, in threads and across a fork,
 * and checks that neither the warm nor the rare mapping has a page
 * resident; then it grows a block to 4 MiB (the warm code: both mappings
 * read where a call lands), and then calls a rare entry point. */
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

/* Small and large blocks (under the mmap threshold, 128 KiB by default),
 * realloc from one to the other: the code every program runs. */
static void work(void) {
    void *small[200];
    for (int i = 0; i < 200; i++) {
        small[i] = i % 3 ? malloc((size_t)(16 + i * 40)) : calloc(1, (size_t)(8 + i * 8));
        CHECK(small[i] != NULL);
    }
    void *large = malloc((size_t)100 << 10);
    CHECK(large != NULL);
    memset(large, 1, (size_t)100 << 10);
    free(large);
    char *grow = NULL;
    for (size_t size = 100; size <= ((size_t)100 << 10); size *= 3) {
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
    CHECKF(count == 3,
           "%d executable mappings of the library, expected the code's, the warm and the rare",
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
        _exit(count == 3 && rss[1] == 0 && rss[2] == 0 ? 0 : 3);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the fork child mapped the warm or the rare code (status %d)", status);
    free(handed);

    count = code_mappings_rss(rss, 4);
    CHECK(count == 3);
    CHECKF(rss[1] == 0 && rss[2] == 0,
           "the warm code's mapping has %lu KiB resident, the rare's %lu (the code's %lu)", rss[1],
           rss[2], rss[0]);

    /* a block past the large pages: the warm code runs, the rare does not */
    char *huge = malloc((size_t)1 << 20);
    CHECK(huge != NULL);
    huge = realloc(huge, (size_t)4 << 20);
    CHECK(huge != NULL);
    huge[((size_t)4 << 20) - 1] = 1;
    free(huge);
    count = code_mappings_rss(rss, 4);
    CHECK(count == 3);
    CHECKF(rss[1] > 0, "a 4 MiB block came and went, yet the warm code's mapping reads 0 KiB");
    CHECKF(rss[2] == 0, "a 4 MiB block mapped the rare code (%lu KiB)", rss[2]);

    /* a rare entry point: its page (and its neighbours) get mapped */
    void *p = malloc(100);
    CHECK(p != NULL);
    CHECK(malloc_usable_size(p) >= 100);
    free(p);
    count = code_mappings_rss(rss, 4);
    CHECK(count == 3);
    CHECKF(rss[2] > 0, "malloc_usable_size ran, yet the rare code's mapping reads 0 KiB");
    return 0;
}
