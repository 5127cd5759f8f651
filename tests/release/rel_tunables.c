/* Issue 3 must-deliver 2: glibc's tunables with glibc's semantics.
 *   rel_tunables range        glibc 2.36's mallopt: M_MMAP_THRESHOLD takes any
 *                             value (32 MiB + 1: a 200 KiB block is not mapped;
 *                             -1: a 40 MiB block is kept when freed), M_ARENA_MAX
 *                             and M_ARENA_TEST return 1 for 0 and -1, and
 *                             M_MMAP_MAX -1 maps nothing on its own (older
 *                             glibc refused thresholds over 32 MiB; 2.36 does not)
 *   rel_tunables unmapped     run with a threshold over 32 MiB from the
 *                             environment: neither a 200 KiB nor a 1 MiB block
 *                             is a direct mapping
 *   rel_tunables perturb XX   a freed block filled with 0x11 and taken again
 *                             reads XX (hex) at byte 50: 11 when MALLOC_PERTURB_
 *                             is out of glibc's range (0-255) and ignored, fe
 *                             for MALLOC_PERTURB_=1; with a third argument N,
 *                             mallopt(M_PERTURB, N) first (256: ff, as glibc,
 *                             whose perturb byte is the whole int)
 *   rel_tunables defaults     the default thresholds hold: a 200 KiB block is
 *                             a direct mapping (mmap on malloc, munmap on free).
 *                             The suite runs it under bad values
 *                             (MALLOC_TRIM_THRESHOLD_=abc, ...) to show they
 *                             are ignored without crashing.
 *   rel_tunables small64k     run with mmap_threshold=65536 (GLIBC_TUNABLES or
 *                             MALLOC_MMAP_THRESHOLD_): a 100 KiB malloc is a
 *                             direct mapping, 1 mmap, and its free 1 munmap
 *   rel_tunables tiny         mallopt(M_MMAP_THRESHOLD, 512): 600 B is a direct
 *                             mapping, 400 B is not; back at 128 KiB, 600 B is
 *                             not mapped either
 *   rel_tunables dynamic      glibc's dynamic threshold: after freeing a 1 MiB
 *                             mapped block, the next 1 MiB malloc is not mapped
 *   rel_tunables fixed        after mallopt(M_MMAP_THRESHOLD, 128 KiB) the
 *                             threshold no longer moves: the same sequence maps
 *                             both 1 MiB blocks */
#include <malloc.h>

#include "release.h"

struct delta {
    uint64_t mmap, munmap, huge;
};

static struct tidemalloc_stats snap;
static void mark(void) {
    snap = rel_stats();
}
static struct delta since(void) {
    struct tidemalloc_stats now = rel_stats();
    struct delta d = {now.mmap_calls - snap.mmap_calls, now.munmap_calls - snap.munmap_calls,
                      now.huge_blocks - snap.huge_blocks};
    return d;
}

/* malloc(size) then free: returns the counter deltas of each half. */
static void map_cycle(size_t size, struct delta *on_malloc, struct delta *on_free, int keep,
                      void **kept) {
    mark();
    unsigned char *p = malloc(size);
    REL_CHECK(p != NULL, "malloc(%zu) failed", size);
    *on_malloc = since();
    rel_touch(p, size);
    mark();
    if (keep) {
        *kept = p;
        memset(on_free, 0, sizeof *on_free);
        return;
    }
    free(p);
    *on_free = since();
}

static void warm_up(void) {
    /* The first segment and the heap come into being here, not in a measure. */
    void *p = malloc(64);
    REL_CHECK(p != NULL, "malloc(64) failed");
    free(p);
    /* The first direct mapping also maps the table of direct mappings (one
     * more mmap, once). A 40 MiB block is above the 32 MiB cap of the dynamic
     * threshold, so freeing it moves no threshold. */
    p = malloc((size_t)40 << 20);
    REL_CHECK(p != NULL, "malloc(40 MiB) failed");
    free(p);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(
            stderr,
            "usage: rel_tunables range|defaults|unmapped|perturb XX|small64k|tiny|dynamic|fixed\n");
        return 2;
    }
    const char *mode = argv[1];
    warm_up();
    struct delta m, f;
    if (strcmp(mode, "range") == 0) {
        int over_32mib = mallopt(M_MMAP_THRESHOLD, 33554433);
        map_cycle(200 * 1024, &m, &f, 0, NULL);
        int negative = mallopt(M_MMAP_THRESHOLD, -1);
        struct delta m2, f2, m3, f3, m4, f4;
        map_cycle((size_t)40 << 20, &m2, &f2, 0, NULL);
        int arenas = mallopt(M_ARENA_MAX, 0) + mallopt(M_ARENA_MAX, -1) + mallopt(M_ARENA_TEST, 0) +
                     mallopt(M_ARENA_TEST, -1);
        REL_CHECK(mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1, "mallopt(M_MMAP_THRESHOLD) failed");
        int no_mmaps = mallopt(M_MMAP_MAX, -1);
        map_cycle(200 * 1024, &m3, &f3, 0, NULL);
        REL_CHECK(mallopt(M_MMAP_MAX, 65536) == 1, "mallopt(M_MMAP_MAX, 65536) failed");
        map_cycle(200 * 1024, &m4, &f4, 0, NULL);
        REL_FIGURES("mallopt_32MiB_plus_1=%d 200KiB_direct=%llu mallopt_minus_1=%d "
                    "40MiB_munmap_on_free=%llu arena_calls_ok=%d mmap_max_minus_1=%d "
                    "200KiB_direct_no_mmaps=%llu 200KiB_direct_after=%llu",
                    over_32mib, (unsigned long long)m.huge, negative, (unsigned long long)f2.munmap,
                    arenas, no_mmaps, (unsigned long long)m3.huge, (unsigned long long)m4.huge);
        REL_CHECK(over_32mib == 1, "mallopt(M_MMAP_THRESHOLD, 33554433) returned %d, expected 1",
                  over_32mib);
        REL_CHECK(m.huge == 0 && f.munmap == 0,
                  "a 200 KiB block below a 32 MiB + 1 threshold was mapped (direct %llu, munmap "
                  "%llu)",
                  (unsigned long long)m.huge, (unsigned long long)f.munmap);
        REL_CHECK(negative == 1, "mallopt(M_MMAP_THRESHOLD, -1) returned %d, expected 1", negative);
        REL_CHECK(f2.munmap == 0, "with the threshold at -1 a 40 MiB block was unmapped on free");
        REL_CHECK(arenas == 4, "M_ARENA_MAX/M_ARENA_TEST with 0 and -1: %d of 4 returned 1",
                  arenas);
        REL_CHECK(no_mmaps == 1, "mallopt(M_MMAP_MAX, -1) returned %d, expected 1", no_mmaps);
        REL_CHECK(m3.huge == 0 && f3.munmap == 0,
                  "M_MMAP_MAX -1: a 200 KiB block was mapped on its own (direct %llu)",
                  (unsigned long long)m3.huge);
        REL_CHECK(m4.huge == 1 && f4.munmap == 1,
                  "M_MMAP_MAX back at 65536: the 200 KiB block was not mapped (direct %llu)",
                  (unsigned long long)m4.huge);
    } else if (strcmp(mode, "unmapped") == 0) {
        struct delta m2, f2;
        map_cycle(200 * 1024, &m, &f, 0, NULL);
        map_cycle((size_t)1 << 20, &m2, &f2, 0, NULL);
        REL_FIGURES("200KiB_direct=%llu 1MiB_direct=%llu", (unsigned long long)m.huge,
                    (unsigned long long)m2.huge);
        REL_CHECK(m.huge == 0 && m2.huge == 0 && f.munmap == 0 && f2.munmap == 0,
                  "threshold over 32 MiB from the environment not in force: 200 KiB direct %llu, "
                  "1 MiB direct %llu",
                  (unsigned long long)m.huge, (unsigned long long)m2.huge);
    } else if (strcmp(mode, "perturb") == 0) {
        unsigned expected = argc >= 3 ? (unsigned)strtoul(argv[2], NULL, 16) : 0x11;
        if (argc == 4)
            REL_CHECK(mallopt(M_PERTURB, atoi(argv[3])) == 1, "mallopt(M_PERTURB, %s) failed",
                      argv[3]);
        unsigned char *p = malloc(100);
        REL_CHECK(p != NULL, "malloc(100) failed");
        memset(p, 0x11, 100);
        free(p);
        unsigned char *q = malloc(100);
        REL_CHECK(q == p, "malloc(100) did not take the block just freed");
        REL_FIGURES("byte50=%02x expected=%02x", q[50], expected);
        REL_CHECK(q[50] == expected, "byte 50 of the block taken again reads %02x, expected %02x",
                  q[50], expected);
        free(q);
    } else if (strcmp(mode, "defaults") == 0) {
        map_cycle(200 * 1024, &m, &f, 0, NULL);
        void *q = calloc(1000, 100);
        REL_CHECK(q != NULL, "calloc failed");
        q = realloc(q, 300000);
        REL_CHECK(q != NULL, "realloc failed");
        free(q);
        REL_FIGURES("200KiB_mmap=%llu 200KiB_huge=%llu 200KiB_munmap=%llu",
                    (unsigned long long)m.mmap, (unsigned long long)m.huge,
                    (unsigned long long)f.munmap);
        REL_CHECK(m.mmap == 1 && m.huge == 1 && f.munmap == 1,
                  "default threshold not in force: 200 KiB block mmap %llu (direct %llu), "
                  "munmap on free %llu",
                  (unsigned long long)m.mmap, (unsigned long long)m.huge,
                  (unsigned long long)f.munmap);
    } else if (strcmp(mode, "small64k") == 0) {
        map_cycle(100 * 1024, &m, &f, 0, NULL);
        struct delta m2, f2;
        map_cycle(60 * 1024, &m2, &f2, 0, NULL);
        REL_FIGURES("100KiB_mmap=%llu 100KiB_huge=%llu 100KiB_munmap=%llu 60KiB_huge=%llu",
                    (unsigned long long)m.mmap, (unsigned long long)m.huge,
                    (unsigned long long)f.munmap, (unsigned long long)m2.huge);
        REL_CHECK(m.mmap == 1 && m.huge == 1,
                  "100 KiB malloc with mmap_threshold=65536: mmap %llu, direct %llu (want 1, 1)",
                  (unsigned long long)m.mmap, (unsigned long long)m.huge);
        REL_CHECK(f.munmap == 1, "free of the 100 KiB mapping made %llu munmap calls (want 1)",
                  (unsigned long long)f.munmap);
        REL_CHECK(m2.huge == 0, "a 60 KiB block below the 64 KiB threshold was mapped");
    } else if (strcmp(mode, "tiny") == 0) {
        /* malloc's fast path keeps this limit in its class table up to 1 KiB:
         * a page of 600 B blocks with free blocks on it must not serve one */
        free(malloc(600));
        REL_CHECK(mallopt(M_MMAP_THRESHOLD, 512) == 1, "mallopt(M_MMAP_THRESHOLD, 512) failed");
        struct delta m2, f2, m3, f3;
        map_cycle(600, &m, &f, 0, NULL);
        map_cycle(400, &m2, &f2, 0, NULL);
        REL_CHECK(mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1, "mallopt(M_MMAP_THRESHOLD) failed");
        map_cycle(600, &m3, &f3, 0, NULL);
        REL_FIGURES("600B_direct=%llu 400B_direct=%llu 600B_direct_after_128KiB=%llu",
                    (unsigned long long)m.huge, (unsigned long long)m2.huge,
                    (unsigned long long)m3.huge);
        REL_CHECK(m.huge == 1 && f.munmap == 1,
                  "600 B with mmap_threshold=512: direct %llu, munmap on free %llu (want 1, 1)",
                  (unsigned long long)m.huge, (unsigned long long)f.munmap);
        REL_CHECK(m2.huge == 0, "400 B below a 512 B threshold was mapped");
        REL_CHECK(m3.huge == 0, "600 B was still mapped after the threshold went back to 128 KiB");
    } else if (strcmp(mode, "dynamic") == 0 || strcmp(mode, "fixed") == 0) {
        int fixed = strcmp(mode, "fixed") == 0;
        if (fixed)
            REL_CHECK(mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1,
                      "mallopt(M_MMAP_THRESHOLD) failed");
        map_cycle((size_t)1 << 20, &m, &f, 0, NULL);
        struct delta m2, f2;
        void *kept = NULL;
        map_cycle((size_t)1 << 20, &m2, &f2, 1, &kept);
        mark();
        free(kept);
        f2 = since();
        REL_FIGURES("first_1MiB_mmap=%llu first_direct=%llu first_free_munmap=%llu "
                    "second_1MiB_mmap=%llu second_direct=%llu second_free_munmap=%llu",
                    (unsigned long long)m.mmap, (unsigned long long)m.huge,
                    (unsigned long long)f.munmap, (unsigned long long)m2.mmap,
                    (unsigned long long)m2.huge, (unsigned long long)f2.munmap);
        REL_CHECK(m.huge == 1 && m.mmap == 1 && f.munmap == 1,
                  "the first 1 MiB block was not a direct mapping (mmap %llu munmap %llu)",
                  (unsigned long long)m.mmap, (unsigned long long)f.munmap);
        if (fixed) {
            REL_CHECK(m2.huge == 1 && m2.mmap == 1 && f2.munmap == 1,
                      "threshold set by mallopt moved: second 1 MiB block mmap %llu munmap %llu",
                      (unsigned long long)m2.mmap, (unsigned long long)f2.munmap);
        } else {
            /* (one mmap at most: the arena's first chunk, not the block's own) */
            REL_CHECK(m2.huge == 0 && m2.mmap <= 1,
                      "dynamic threshold: after freeing a 1 MiB mapping the next 1 MiB malloc "
                      "is still a direct mapping (mmap %llu, direct %llu)",
                      (unsigned long long)m2.mmap, (unsigned long long)m2.huge);
            REL_CHECK(f2.munmap == 0, "its free made %llu munmap calls",
                      (unsigned long long)f2.munmap);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
