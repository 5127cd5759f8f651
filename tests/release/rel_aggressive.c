/* Issue 3 check d: aggressive mode (seed 001). Allocate a 64 MiB working set
 * of 256 KiB blocks, touch every page, free them all: RSS must be back within
 * 1 MiB of the start without any call to malloc_trim.
 *   rel_aggressive env      expects MALLOC_AGGRESSIVE_MADVISE_=1 in the environment
 *   rel_aggressive mallopt  calls mallopt(M_AGGRESSIVE_MADVISE, 1) first
 *   rel_aggressive off      neither: the control, expects RSS to stay up
 * A second argument "segments" first sets mallopt(M_MMAP_THRESHOLD, 1 MiB),
 * so that the 256 KiB blocks are certainly served from segment slices (with
 * the default, dynamic threshold they may be direct mappings, which every
 * mode unmaps on free, so that run alone proves little about aggressive mode).
 * The suite runs all with TIDEMALLOC_BACKGROUND_PURGE=0, so that the release
 * is aggressive mode's and not the idle purger's. */
#include <malloc.h>

#include "release.h"

#define BLOCK   ((size_t)256 << 10)
#define WORKING ((size_t)64 << 20)
#define NBLOCKS (WORKING / BLOCK)
#define SLACK   ((size_t)1 << 20)

static void *blocks[NBLOCKS];

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 ||
        (strcmp(argv[1], "env") != 0 && strcmp(argv[1], "mallopt") != 0 &&
         strcmp(argv[1], "off") != 0) ||
        (argc == 3 && strcmp(argv[2], "segments") != 0)) {
        fprintf(stderr, "usage: rel_aggressive env|mallopt|off [segments]\n");
        return 2;
    }
    int control = strcmp(argv[1], "off") == 0;
    int segments = argc == 3;
    if (segments)
        REL_CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1, "mallopt(M_MMAP_THRESHOLD, 1 MiB) != 1");
    if (strcmp(argv[1], "mallopt") == 0)
        REL_CHECK(mallopt(M_AGGRESSIVE_MADVISE, 1) == 1, "mallopt(M_AGGRESSIVE_MADVISE, 1) != 1");
    memset(blocks, 0, sizeof blocks);
    /* Warm up: a first round lets the dynamic mmap threshold settle, so that
     * the measured round exercises blocks inside segments. */
    void *warm = malloc(BLOCK);
    REL_CHECK(warm != NULL, "malloc failed");
    free(warm);
    struct tidemalloc_stats s0 = rel_stats();
    size_t rss0 = rel_rss();
    for (size_t i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        REL_CHECK(blocks[i] != NULL, "malloc(%zu) failed", BLOCK);
        memset(blocks[i], 0x33, BLOCK);
    }
    size_t rss_peak = rel_rss();
    struct tidemalloc_stats s1 = rel_stats();
    for (size_t i = 0; i < NBLOCKS; i++)
        free(blocks[i]);
    size_t rss_end = rel_rss();
    struct tidemalloc_stats s2 = rel_stats();
    REL_FIGURES("mode=%s%s rss_start=%.2fMiB peak=+%.2fMiB after_free=%+.2fMiB mmap=%llu "
                "free_munmap=%llu free_madvise=%llu retained_after=%.2fMiB huge_blocks_peak=%llu",
                argv[1], segments ? "+segments" : "", rel_mib(rss0), rel_dmib(rss_peak, rss0),
                rel_dmib(rss_end, rss0), (unsigned long long)(s2.mmap_calls - s0.mmap_calls),
                (unsigned long long)(s2.munmap_calls - s1.munmap_calls),
                (unsigned long long)(s2.madvise_calls - s1.madvise_calls),
                rel_mib(s2.bytes_retained), (unsigned long long)s1.huge_blocks);
    REL_CHECK(rss_peak >= rss0 + (size_t)60 * 1024 * 1024,
              "the working set did not become resident");
    if (control) {
        /* Without aggressive mode and without the idle purger, the retained
         * memory stays until the purge delay passes and another free comes. */
        REL_CHECK(!segments || rss_end > rss0 + (size_t)32 * 1024 * 1024,
                  "control: RSS fell to %+.2f MiB without aggressive mode; the test cannot "
                  "tell the modes apart",
                  rel_dmib(rss_end, rss0));
        return 0;
    }
    REL_CHECK(rss_end <= rss0 + SLACK,
              "RSS after freeing is %+.2f MiB from the start (limit +1 MiB)",
              rel_dmib(rss_end, rss0));
    return 0;
}
