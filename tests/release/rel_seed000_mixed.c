/* Issue 3 check b: seed 000's mixed case. malloc((i % 58) * 4096), every
 * other block kept and all kept blocks freed at the end: at most 100 release
 * syscalls (munmap + madvise, our counters) with the default settings. The
 * seed counted 13,438 for patched glibc. Runs in a created thread, like the
 * seed's ebizzy, and counts from before the thread starts to after the join.
 * ROUNDS x NUM iterations in all. */

#include "release.h"

#define NUM         1024 /* the seed's num */
#define ROUNDS      8    /* the seed's worker, run 8 times in the thread (ebizzy-like) */
#define ITERATIONS  (NUM * ROUNDS)
#define MAX_RELEASE 100

static void *kept[NUM / 2 + 1];

/* The seed's worker, with a dostuff that touches the first and last byte.
 * Blocks of 57 pages (odd i) are always kept, so they stay above any dynamic
 * mmap threshold raised in the first round only until they are freed at the
 * end of it: a correct dynamic threshold maps them in round 1 only. */
static void worker_round(void) {
    int j = 0;
    for (int i = NUM; i--;) {
        size_t size = (size_t)(i % 58) * 4096;
        unsigned char *m = malloc(size);
        if (m == NULL && size != 0) REL_FAIL("malloc(%zu) failed at i=%d", size, i);
        if (m && size) m[0] = m[size - 1] = 1;
        if (i % 2 == 0)
            free(m);
        else
            kept[j++] = m;
    }
    for (; j > 0; j--)
        free(kept[j - 1]);
}

static void *worker(void *arg) {
    (void)arg;
    for (int r = 0; r < ROUNDS; r++)
        worker_round();
    return NULL;
}

int main(void) {
    struct rel_syscalls d = rel_syscalls_in_thread(worker);
    struct tidemalloc_stats after = rel_stats();
    uint64_t munmaps = d.munmap, madvises = d.madvise, mmaps = d.mmap;
    REL_FIGURES("iterations=%d delta_mmap=%llu delta_munmap=%llu delta_madvise=%llu "
                "total_release=%llu",
                ITERATIONS, (unsigned long long)mmaps, (unsigned long long)munmaps,
                (unsigned long long)madvises, (unsigned long long)rel_release_calls(&after));
    REL_CHECK(munmaps + madvises <= MAX_RELEASE,
              "%llu release syscalls (munmap %llu + madvise %llu) in %d iterations, limit %d",
              (unsigned long long)(munmaps + madvises), (unsigned long long)munmaps,
              (unsigned long long)madvises, ITERATIONS, MAX_RELEASE);
    return 0;
}
