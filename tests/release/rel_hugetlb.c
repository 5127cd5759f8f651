/* glibc.malloc.hugetlb, with glibc 2.36's meaning (issue 3 must-deliver 2:
 * "the rest of glibc.malloc.*"). What the kernel did is read from the
 * VmFlags of the mapping that holds a block in /proc/self/smaps: "hg" is
 * madvise(MADV_HUGEPAGE), "ht" a mapping on explicit huge pages.
 *   rel_hugetlb off        (no tunable) neither flag on a small block's
 *                          segment nor on an 8 MiB block; where the THP
 *                          mode is "always", the segment carries "nh"
 *                          (MADV_NOHUGEPAGE: a huge page per 2 MiB of
 *                          segment multiplied small programs' RSS) and
 *                          holds no huge page, and the 8 MiB block's
 *                          mapping does not (left to the kernel, as glibc
 *                          leaves its mapped chunks); elsewhere no "nh"
 *   rel_hugetlb thp        (hugetlb=1) where the kernel's THP mode is
 *                          "madvise", both carry "hg"; in the other modes
 *                          glibc gives no advice, and neither do we (nor
 *                          "nh": huge pages were asked for). The advice
 *                          releases nothing: it is not a madvise release
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

/* The text after `key` on that line of p's mapping in /proc/self/smaps
 * ("VmFlags:", "AnonHugePages:"), or "" if none. */
static const char *smaps_field_of(const void *p, const char *key) {
    static char field[256];
    FILE *f = fopen("/proc/self/smaps", "r");
    REL_CHECK(f != NULL, "cannot open /proc/self/smaps");
    char line[512];
    int inside = 0;
    size_t key_length = strlen(key);
    field[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-') {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && strncmp(line, key, key_length) == 0) {
            snprintf(field, sizeof field, "%s", line + key_length);
            break;
        }
    }
    fclose(f);
    return field;
}

/* The VmFlags of the mapping holding p. */
static const char *vm_flags_of(const void *p) {
    return smaps_field_of(p, "VmFlags:");
}

static int has_flag(const char *flags, const char *flag) {
    size_t n = strlen(flag);
    for (const char *c = flags; (c = strstr(c, flag)) != NULL; c += n)
        if ((c == flags || c[-1] == ' ') && (c[n] == ' ' || c[n] == '\n' || c[n] == '\0')) return 1;
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

/* The kernel's THP mode: "always", "madvise", "never", or "" if unknown. */
static const char *thp_mode(void) {
    static char text[256];
    if (!read_text("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text)) return "";
    if (strstr(text, "[always]")) return "always";
    if (strstr(text, "[madvise]")) return "madvise";
    return strstr(text, "[never]") ? "never" : "";
}

/* KiB of huge pages in the mapping holding p (its AnonHugePages line). */
static unsigned long huge_kib_of(const void *p) {
    return strtoul(smaps_field_of(p, "AnonHugePages:"), NULL, 10);
}

/* A block in a thread's own, new segment: the main thread's first segment
 * may predate what is being checked. */
static void *small_in_thread(void *unused) {
    (void)unused;
    char *p = malloc(32);
    REL_CHECK(p != NULL, "malloc failed");
    p[0] = 1;
    return p;
}

static void expect_plain(const char *what, int huge_pages_asked) {
    int always = strcmp(thp_mode(), "always") == 0;
    struct tidemalloc_stats before = rel_stats();
    pthread_t thread;
    void *small = NULL;
    REL_CHECK(pthread_create(&thread, NULL, small_in_thread, NULL) == 0, "pthread_create failed");
    REL_CHECK(pthread_join(thread, &small) == 0, "pthread_join failed");
    unsigned char *big = malloc(BIG);
    REL_CHECK(small && big, "malloc failed");
    fill(big, BIG, 7);
    struct tidemalloc_stats after = rel_stats();
    const char *f = vm_flags_of(small);
    REL_CHECK(!has_flag(f, "hg") && !has_flag(f, "ht"), "%s: small block's mapping has %s", what,
              f);
    if (always && !huge_pages_asked) {
        REL_CHECK(has_flag(f, "nh"), "%s, THP always: the segment does not refuse huge pages: %s",
                  what, f);
        REL_CHECK(huge_kib_of(small) == 0, "%s, THP always: %lu KiB of huge pages in a segment",
                  what, huge_kib_of(small));
    } else {
        REL_CHECK(!has_flag(f, "nh"), "%s: THP %s, yet the segment refuses huge pages: %s", what,
                  thp_mode(), f);
    }
    REL_CHECK(after.madvise_calls == before.madvise_calls,
              "%s: %llu madvise releases counted while only allocating", what,
              (unsigned long long)(after.madvise_calls - before.madvise_calls));
    f = vm_flags_of(big);
    REL_CHECK(!has_flag(f, "hg") && !has_flag(f, "ht") && !has_flag(f, "nh"),
              "%s: 8 MiB block's mapping has %s", what, f);
    check_fill(big, BIG, 7, "in place");
    free(big);
    free(small);
    REL_FIGURES("huge_pages=none thp_mode=%s segment_refuses=%d", thp_mode(),
                always && !huge_pages_asked);
}

static void run_thp(void) {
    if (strcmp(thp_mode(), "madvise") != 0) {
        expect_plain("THP mode is not madvise", 1);
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
    REL_CHECK(after.madvise_calls == before.madvise_calls,
              "the advice was counted as a madvise release");
    check_fill(big, BIG, 3, "in place");
    free(big);
    free(small);
    REL_FIGURES("huge_pages=thp anon_huge_kib=%lu",
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
        expect_plain(mode, 0);
    else if (strcmp(mode, "thp") == 0)
        run_thp();
    else if (strcmp(mode, "explicit") == 0)
        run_explicit();
    else
        REL_FAIL("usage: rel_hugetlb off|thp|explicit|ignored");
    return 0;
}
