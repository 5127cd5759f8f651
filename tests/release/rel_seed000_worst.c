/* Issue 3 check a: seed 000's worst case. In a created thread (not the main
 * one), 1024 iterations of p = malloc(48 * 4096); touch every page; free(p)
 * must cost at most 2 release syscalls (munmap + madvise, our counters, delta
 * from before pthread_create to after pthread_join). suite-release.sh runs it
 * with the defaults, with MALLOC_MMAP_THRESHOLD_=262144 (glibc 2.36: 200,001
 * madvise calls in 200,000 iterations) and with the trim threshold at or above
 * the block size, and confirms the totals with strace -f -c. */

#include "release.h"

#define ITERATIONS  1024
#define BLOCK       (48 * 4096)
#define MAX_RELEASE 2

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        unsigned char *p = malloc(BLOCK);
        if (p == NULL) REL_FAIL("malloc(%d) failed at iteration %d", BLOCK, i);
        rel_touch(p, BLOCK);
        free(p);
    }
    return NULL;
}

int main(void) {
    struct rel_syscalls d = rel_syscalls_in_thread(worker);
    struct tidemalloc_stats after = rel_stats();
    uint64_t munmaps = d.munmap, madvises = d.madvise, mmaps = d.mmap;
    REL_FIGURES("iterations=%d block=%d delta_mmap=%llu delta_munmap=%llu delta_madvise=%llu "
                "total_release=%llu",
                ITERATIONS, BLOCK, (unsigned long long)mmaps, (unsigned long long)munmaps,
                (unsigned long long)madvises, (unsigned long long)rel_release_calls(&after));
    REL_CHECK(munmaps + madvises <= MAX_RELEASE,
              "%llu release syscalls (munmap %llu + madvise %llu) in %d iterations, limit %d",
              (unsigned long long)(munmaps + madvises), (unsigned long long)munmaps,
              (unsigned long long)madvises, ITERATIONS, MAX_RELEASE);
    return 0;
}
