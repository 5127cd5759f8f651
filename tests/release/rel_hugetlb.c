/* glibc.malloc.hugetlb, with glibc 2.36's meaning (issue 3 must-deliver 2:
 * "the rest of glibc.malloc.*"). What the kernel did is read from the
 * VmFlags of the mapping that holds a block in /proc/self/smaps: "hg" is
 * madvise(MADV_HUGEPAGE), "ht" a mapping on explicit huge pages.
 *   rel_hugetlb off        (no tunable) neither flag on a small block's
 *                          segment nor on an 8 MiB block
 *   rel_hugetlb thp        (hugetlb=1) where the kernel's THP mode is
 *                          "madvise", both carry "hg" and the advice is
 *                          counted as madvise calls; in the other modes
 *                          glibc gives no advice, and neither do we
 *   rel_hugetlb explicit   (hugetlb=2 or a page size the kernel has) an
 *                          8 MiB block is on huge pages when enough of them
 *                          are free (HugePages_Free), and works on normal
 *                          pages when not; either way realloc keeps its
 *                          contents (growing copies it, shrinking keeps it in
 *                          place, as glibc does once mremap fails) and free
 *                          unmaps it
 *   rel_hugetlb ignored    (a value naming no huge page size the kernel has)
 *                          as off */
#include "release.h"

/* The VmFlags line of the mapping holding p, or "" if none. */
static const char *vm_flags_of(const void *p) {
    static char flags[256];
    FILE *f = fopen("/proc/self/smaps", "r");
    REL_CHECK(f != NULL, "cannot open /proc/self/smaps");
    char line[512];
    int inside = 0;
    flags[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-') {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(flags, sizeof flags, "%s", line + 8);
            break;
        }
    }
    fclose(f);
    return flags;
}

static int has_flag(const char *flags, const char *flag) {
    size_t n = strlen(flag);
    for (const char *c = flags; (c = strstr(c, flag)) != NULL; c += n)
        if ((c == flags || c[-1] == ' ') && (c[n] == ' ' || c[n] == '\n' || c[n] == '\0'))
            return 1;
    return 0;
}

static int read_text(const char *path, char *text, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, size - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    return 1;
}

/* A number after `key` in /proc/meminfo or another such file, 0 if absent. */
static unsigned long number_in(const char *path, const char *key) {
    static char text[8192];
    if (!read_text(path, text, sizeof text)) return 0;
    const char *at = strstr(text, key);
    return at ? strtoul(at + strlen(key), NULL, 10) : 0;
}

#define BIG ((size_t)8 << 20)

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (unsigned char)(seed + i / 4096);
}

static void check_fill(const unsigned char *p, size_t n, unsigned seed, const char *when) {
    for (size_t i = 0; i < n; i += 4096)
        REL_CHECK(p[i] == (unsigned char)(seed + i / 4096), "contents lost %s at offset %zu", when,
                  i);
}

static void expect_plain(const char *what) {
    char *small = malloc(32);
    unsigned char *big = malloc(BIG);
    REL_CHECK(small && big, "malloc failed");
    fill(big, BIG, 7);
    const char *f = vm_flags_of(small);
    REL_CHECK(!has_flag(f, "hg") && !has_flag(f, "ht"), "%s: small block's mapping has %s", what,
              f);
    f = vm_flags_of(big);
    REL_CHECK(!has_flag(f, "hg") && !has_flag(f, "ht"), "%s: 8 MiB block's mapping has %s", what,
              f);
    check_fill(big, BIG, 7, "in place");
    free(big);
    free(small);
    REL_FIGURES("huge_pages=none");
}

static void run_thp(void) {
    char mode[256];
    int advise = read_text("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof mode) &&
                 strstr(mode, "[madvise]") != NULL;
    if (!advise) {
        expect_plain("THP mode is not madvise");
        return;
    }
    struct tidemalloc_stats before = rel_stats();
    char *small = malloc(32);
    unsigned char *big = malloc(BIG);
    REL_CHECK(small && big, "malloc failed");
    fill(big, BIG, 3);
    struct tidemalloc_stats after = rel_stats();
    const char *f = vm_flags_of(small);
    REL_CHECK(has_flag(f, "hg"), "hugetlb=1: the small block's segment has no hg flag: %s", f);
    f = vm_flags_of(big);
    REL_CHECK(has_flag(f, "hg"), "hugetlb=1: the 8 MiB block's mapping has no hg flag: %s", f);
    uint64_t advice = after.madvise_calls - before.madvise_calls;
    REL_CHECK(advice >= 1, "the advice was not counted as a madvise call");
    check_fill(big, BIG, 3, "in place");
    free(big);
    free(small);
    REL_FIGURES("huge_pages=thp madvise_calls=%llu anon_huge_kib=%lu", (unsigned long long)advice,
                number_in("/proc/self/smaps_rollup", "AnonHugePages:"));
}

static void run_explicit(void) {
    unsigned long page_kib = number_in("/proc/meminfo", "Hugepagesize:");
    unsigned long free_pages = number_in("/proc/meminfo", "HugePages_Free:");
    int available = page_kib > 0 && free_pages * page_kib * 1024 >= BIG * 3;
    unsigned char *big = malloc(BIG);
    REL_CHECK(big != NULL, "malloc failed");
    fill(big, BIG, 5);
    const char *f = vm_flags_of(big);
    if (available)
        REL_CHECK(has_flag(f, "ht"), "hugetlb=2 with %lu free huge pages: no ht flag: %s",
                  free_pages, f);
    else
        REL_CHECK(!has_flag(f, "ht"), "no free huge pages, yet an ht flag: %s", f);
    unsigned char *grown = realloc(big, BIG + BIG / 2);
    REL_CHECK(grown != NULL, "realloc (grow) failed");
    check_fill(grown, BIG, 5, "after growing");
    fill(grown, BIG + BIG / 2, 9);
    unsigned char *shrunk = realloc(grown, BIG / 2);
    REL_CHECK(shrunk != NULL, "realloc (shrink) failed");
    check_fill(shrunk, BIG / 2, 9, "after shrinking");
    if (available) REL_CHECK(shrunk == grown, "a block on huge pages moved when shrinking");
    struct tidemalloc_stats before = rel_stats();
    free(shrunk);
    struct tidemalloc_stats after = rel_stats();
    REL_CHECK(after.munmap_calls > before.munmap_calls || !available,
              "free of a block on huge pages unmapped nothing");
    REL_FIGURES("huge_pages=%s free_huge_pages=%lu page_kib=%lu",
                available ? "explicit" : "unavailable", free_pages, page_kib);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    rel_stats(); /* skips under other allocators */
    if (strcmp(mode, "off") == 0 || strcmp(mode, "ignored") == 0)
        expect_plain(mode);
    else if (strcmp(mode, "thp") == 0)
        run_thp();
    else if (strcmp(mode, "explicit") == 0)
        run_explicit();
    else
        REL_FAIL("usage: rel_hugetlb off|thp|explicit|ignored");
    return 0;
}
