/* The purge helper wakes only when there is work. Run with a long purge
 * delay (TIDEMALLOC_PURGE_DELAY_MS=60000): free 3 MiB of 64 KiB blocks,
 * enough to start the helper (past the trim threshold) but within the retain
 * bound (4 MiB at the least), so that nothing is due before the delay. Then
 * stay idle, with no allocator call, for IDLE_MS and count the helper's
 * context switches (its voluntary_ctxt_switches in /proc/self/task/TID/status,
 * read with raw syscalls into stack buffers: opendir would malloc).
 *   rel_helper_wakeups idle    at most MAX_WAKEUPS switches in IDLE_MS from
 *                              the frees on (its start and its one look);
 *                              until the seventy-first session the helper
 *                              napped every 100 ms for the whole delay (10 a
 *                              second), until the seventy-fourth it looked
 *                              every 100 ms for the 400 ms that a recent
 *                              peak stood above the use (4-5)
 *   rel_helper_wakeups bound   then free 40 MiB more, past the bound, and
 *                              stop: the helper must still hand it back
 *                              within 2 s (the memory was too young for the
 *                              frees' own passes), as `rel_retain_bound
 *                              quiet` checks for the first burst */
#include <dirent.h>
#include <sys/syscall.h>

#include "release.h"

#define BLOCK       ((size_t)64 << 10)
#define FIRST_BYTES ((size_t)3 << 20)
#define MORE_BYTES  ((size_t)40 << 20)
#define IDLE_MS     1500
#define MAX_WAKEUPS 2

static void *blocks[(FIRST_BYTES + MORE_BYTES) / BLOCK];

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The sum of voluntary context switches of every thread but the main one,
 * and how many such threads there are. */
static long helper_switches(int *threads) {
    char buf[4096], status[2048], path[64];
    long sum = 0;
    *threads = 0;
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    REL_CHECK(dir >= 0, "cannot open /proc/self/task");
    for (;;) {
        long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
        REL_CHECK(n >= 0, "getdents64 failed");
        if (n == 0) break;
        for (long at = 0; at < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + at);
            at += e->d_reclen;
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            if (atol(e->d_name) == getpid()) continue;
            snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t len = read(fd, status, sizeof status - 1);
            close(fd);
            if (len <= 0) continue;
            status[len] = '\0';
            const char *field = strstr(status, "voluntary_ctxt_switches:");
            if (field == NULL) continue; /* the first match: nonvoluntary_ comes after */
            sum += atol(field + strlen("voluntary_ctxt_switches:"));
            ++*threads;
        }
    }
    close(dir);
    return sum;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "idle") != 0 && strcmp(argv[1], "bound") != 0)) {
        fprintf(stderr, "usage: rel_helper_wakeups idle|bound\n");
        return 2;
    }
    size_t first = FIRST_BYTES / BLOCK, all = (FIRST_BYTES + MORE_BYTES) / BLOCK;
    for (size_t i = 0; i < all; i++) {
        blocks[i] = malloc(BLOCK);
        REL_CHECK(blocks[i] != NULL, "malloc failed");
        memset(blocks[i], 0x5a, BLOCK);
    }
    /* the first 3 MiB go now; the rest stays live until `bound` frees it */
    for (size_t i = 0; i < first; i++)
        free(blocks[i]);
    struct tidemalloc_stats s0 = rel_stats();
    /* counted from the frees on: the helper starts, looks at the bound once
     * and sleeps out the delay (until the seventy-fourth session it looked
     * every 100 ms while the recent peak's two 100 ms windows passed, about
     * 400 ms, with 3 MiB retained under the 4 MiB floor: 5-6 wakeups) */
    int threads;
    long before = helper_switches(&threads);
    long start = now_ms();
    nap_ms(IDLE_MS);
    long idle_ms = now_ms() - start;
    long wakeups = helper_switches(&threads) - before;
    struct tidemalloc_stats s1 = rel_stats();
    REL_CHECK(threads == 1, "expected the purge helper alone beside the main thread, found %d",
              threads);
    REL_CHECK(s0.bytes_retained >= (size_t)2 << 20,
              "only %zu bytes retained after the frees: the check proves nothing",
              (size_t)s0.bytes_retained);
    REL_CHECK(s1.bytes_retained + BLOCK >= s0.bytes_retained,
              "retained fell from %zu to %zu bytes: released before the delay",
              (size_t)s0.bytes_retained, (size_t)s1.bytes_retained);
    if (strcmp(argv[1], "idle") == 0) {
        REL_FIGURES("idle_ms=%ld helper_wakeups=%ld retained=%.2fMiB", idle_ms, wakeups,
                    rel_mib(s1.bytes_retained));
        REL_CHECK(wakeups <= MAX_WAKEUPS,
                  "the helper woke %ld times in %ld ms with nothing due (limit %d)", wakeups,
                  idle_ms, MAX_WAKEUPS);
        return 0;
    }
    for (size_t i = first; i < all; i++)
        free(blocks[i]);
    struct tidemalloc_stats s2 = rel_stats();
    start = now_ms();
    long back_ms = -1;
    struct tidemalloc_stats s3 = s2;
    while (now_ms() - start < 2000) {
        nap_ms(20);
        s3 = rel_stats();
        if (s3.bytes_retained <= ((size_t)4 << 20) + ((size_t)256 << 10)) {
            back_ms = now_ms() - start;
            break;
        }
    }
    REL_FIGURES("idle_ms=%ld helper_wakeups=%ld retained_after_frees=%.2fMiB back_ms=%ld "
                "retained=%.2fMiB",
                idle_ms, wakeups, rel_mib(s2.bytes_retained), back_ms, rel_mib(s3.bytes_retained));
    REL_CHECK(back_ms >= 0, "still %.2f MiB retained 2 s after the frees stopped",
              rel_mib(s3.bytes_retained));
    return 0;
}
