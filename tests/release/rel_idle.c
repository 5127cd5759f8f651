/* Issue 3 must-deliver 5: an idle process gets its memory back. Allocate
 * about 64 MiB in small (16 B..1 KiB) and medium (1 KiB..96 KiB) blocks, touch
 * them, free them all, then only sleep: no allocator call at all (RSS is read
 * with open/read, the poll uses nanosleep). RSS is polled every 100 ms for up
 * to 5 s.
 *   rel_idle release  RSS must fall to within 5 MiB of the start within 5 s
 *                     (what stays: one empty page per size class that the
 *                     heap keeps, not counted as retained)
 *                     (the default purge delay is 1 s; we report when it fell)
 *   rel_idle retain   run with TIDEMALLOC_BACKGROUND_PURGE=0 (and the retain
 *                     bound off, TIDEMALLOC_RETAIN_PERCENT=0, which could
 *                     release part of it during the frees): RSS must still
 *                     hold most of the freed memory after 3 s, which shows
 *                     the switch works (and that "release" is the helper's). */
#include <time.h>

#include "release.h"

#define TARGET     ((size_t)64 << 20)
#define MAX_BLOCKS (1 << 17)
#define SLACK      ((size_t)5 << 20)

static void *blocks[MAX_BLOCKS];

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "release") != 0 && strcmp(argv[1], "retain") != 0)) {
        fprintf(stderr, "usage: rel_idle release|retain\n");
        return 2;
    }
    int expect_release = strcmp(argv[1], "release") == 0;
    memset(blocks, 0, sizeof blocks);
    size_t rss0 = rel_rss();
    struct tidemalloc_stats s0 = rel_stats();
    uint64_t seed = 42;
    size_t total = 0, n = 0;
    while (total < TARGET && n < MAX_BLOCKS) {
        uint64_t r = rel_rand(&seed);
        size_t size =
            (r & 1) ? 16 + (size_t)(r >> 8) % 1009 : 1024 + (size_t)(r >> 8) % (95 * 1024);
        void *p = malloc(size);
        REL_CHECK(p != NULL, "malloc(%zu) failed", size);
        memset(p, 0x77, size);
        blocks[n++] = p;
        total += size;
    }
    size_t rss_peak = rel_rss();
    /* Free in a scattered order, as a real program would. */
    for (size_t i = 0; i < n; i += 2)
        free(blocks[i]);
    for (size_t i = 1; i < n; i += 2)
        free(blocks[i]);
    size_t rss_freed = rel_rss();
    struct tidemalloc_stats s1 = rel_stats();
    /* Idle from here on: no malloc, no free, no stdio until the end. */
    size_t rss = rss_freed;
    int ms = 0, fell_at = -1, first_drop = -1;
    int limit_ms = expect_release ? 5000 : 3000;
    while (ms < limit_ms) {
        nap_ms(100);
        ms += 100;
        rss = rel_rss();
        if (first_drop < 0 && rss + (size_t)32 * 1024 * 1024 <= rss_freed) first_drop = ms;
        if (fell_at < 0 && rss <= rss0 + SLACK) {
            fell_at = ms;
            if (expect_release) break;
        }
    }
    struct tidemalloc_stats s2 = rel_stats();
    REL_FIGURES("mode=%s blocks=%zu bytes=%.2fMiB rss_start=%.2fMiB peak=+%.2fMiB "
                "after_free=%+.2fMiB after_idle=%+.2fMiB halved_at_ms=%d fell_within_5MiB_at_ms=%d "
                "idle_ms=%d "
                "idle_munmap=%llu idle_madvise=%llu retained_after_free=%.2fMiB "
                "retained_after_idle=%.2fMiB purge_runs=%llu",
                argv[1], n, rel_mib(total), rel_mib(rss0), rel_dmib(rss_peak, rss0),
                rel_dmib(rss_freed, rss0), rel_dmib(rss, rss0), first_drop, fell_at, ms,
                (unsigned long long)(s2.munmap_calls - s1.munmap_calls),
                (unsigned long long)(s2.madvise_calls - s1.madvise_calls),
                rel_mib(s1.bytes_retained), rel_mib(s2.bytes_retained),
                (unsigned long long)(s2.purge_runs - s0.purge_runs));
    REL_CHECK(rss_peak >= rss0 + (size_t)60 * 1024 * 1024, "the workload did not become resident");
    if (expect_release) {
        REL_CHECK(fell_at > 0, "RSS still %+.2f MiB from the start after %d ms idle (limit +5 MiB)",
                  rel_dmib(rss, rss0), ms);
    } else {
        REL_CHECK(rss_freed >= rss0 + (size_t)32 * 1024 * 1024,
                  "freeing already released the memory (+%.2f MiB): the check proves nothing",
                  rel_dmib(rss_freed, rss0));
        REL_CHECK(rss >= rss0 + (size_t)32 * 1024 * 1024,
                  "TIDEMALLOC_BACKGROUND_PURGE=0, yet RSS fell to %+.2f MiB while idle",
                  rel_dmib(rss, rss0));
    }
    return 0;
}
