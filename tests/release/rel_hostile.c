/* Lesson 1, "bounded whatever the program does": a created thread alternates
 * malloc/free of random sizes 64 KiB..2 MiB for 200,000 iterations. The suite
 * runs it with MALLOC_TRIM_THRESHOLD_=0 and TIDEMALLOC_PURGE_DELAY_MS=0 (the
 * most eager release policy a user can ask for), and again with
 * MALLOC_MMAP_THRESHOLD_=33554432 added so that every block lives in segment
 * slices. The release syscalls that the policy makes must stay far below the
 * number of frees: < iterations / 20.
 *
 * Setting MALLOC_TRIM_THRESHOLD_ freezes glibc's dynamic mmap threshold at
 * 128 KiB, so most blocks are then direct mappings, and glibc's semantics
 * (which we keep) are one munmap per free of such a block: not the release
 * policy's doing. The test counts those frees (huge_blocks rises on their
 * malloc) and asserts on the release syscalls beyond them; it reports both.
 *   rel_hostile [iterations]   (default 200000) */

#include "release.h"

#define MIN_SIZE ((size_t)64 << 10)
#define MAX_SIZE ((size_t)2 << 20)

static long iterations = 200000;
static uint64_t direct_frees;

static void *worker(void *arg) {
    (void)arg;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    for (long i = 0; i < iterations; i++) {
        size_t size = MIN_SIZE + (size_t)(rel_rand(&seed) % (MAX_SIZE - MIN_SIZE + 1));
        uint64_t before = rel_stats().huge_blocks;
        unsigned char *p = malloc(size);
        if (p == NULL) REL_FAIL("malloc(%zu) failed at iteration %ld", size, i);
        if (rel_stats().huge_blocks > before) direct_frees++;
        p[0] = 1;
        p[size - 1] = 2;
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) iterations = strtol(argv[1], NULL, 10);
    REL_CHECK(iterations > 0, "bad iteration count");
    struct rel_syscalls d = rel_syscalls_in_thread(worker);
    uint64_t munmaps = d.munmap, madvises = d.madvise;
    uint64_t release = munmaps + madvises;
    uint64_t policy = release > direct_frees ? release - direct_frees : 0;
    uint64_t limit = (uint64_t)iterations / 20;
    REL_FIGURES(
        "iterations=%ld frees=%ld direct_mapped_frees=%llu mmap=%llu munmap=%llu "
        "madvise=%llu release=%llu policy_release=%llu purge_runs=%llu limit=%llu",
        iterations, iterations, (unsigned long long)direct_frees, (unsigned long long)d.mmap,
        (unsigned long long)munmaps, (unsigned long long)madvises, (unsigned long long)release,
        (unsigned long long)policy, (unsigned long long)d.purge_runs, (unsigned long long)limit);
    REL_CHECK(policy < limit,
              "%llu release syscalls by the release policy (munmap %llu + madvise %llu - %llu "
              "direct-mapping frees) for %ld frees; limit %llu",
              (unsigned long long)policy, (unsigned long long)munmaps, (unsigned long long)madvises,
              (unsigned long long)direct_frees, iterations, (unsigned long long)limit);
    return 0;
}
