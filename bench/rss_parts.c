/* rss_parts.so: where a program's resident memory sits under tidemalloc.
 *
 *   RSS_PARTS=1 LD_PRELOAD="build/bench/rss_parts.so build/libtidemalloc.so" PROGRAM...
 *
 * (this library first: it forwards the allocation calls to the next one;
 * RSS_PARTS=MS samples every MS milliseconds instead of 20.)
 * Every 20 ms a thread reads /proc/self/status and tidemalloc's segments,
 * found in /proc/self/maps and recognised by their headers, and sorts each
 * resident OS page (mincore, less the pages that map the kernel's zero page,
 * which the RSS does not count: /proc/self/pagemap, when the process may read
 * frame numbers) by what holds it: a segment header, a class
 * page, a large page or a free slice. It also sums the resident pages of the
 * live blocks of 64 KiB or more outside segments (direct-mapped blocks,
 * tracked through the calls it forwards). At exit it prints on stderr the
 * averages and the sample with the highest RssAnon, with the bytes of the
 * blocks in class and large pages (a class page counts blocks other threads
 * freed that its owner has not collected yet as in use), and the class pages
 * of that sample by size class: resident, in blocks, and how much of that
 * other threads freed and the owner has not collected, then its segments one
 * by one: who owns each (a live heap, abandoned, or none: cached or frozen),
 * and what is resident in its free slices and class pages against the blocks
 * they hold. Beside RssFile it prints the library's own file pages that the
 * process maps at exit (pagemap's present bit), mapping by mapping.
 * "Program's own" is anonymous memory that is none of these
 * (stacks, static data, the program's own mappings, cached huge mappings). Headers are
 * read with pread on /proc/self/mem, so a segment unmapped meanwhile reads as
 * an error instead of a crash. A diagnostic, not a benchmark: the sampling
 * thread and its locks slow the program down. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/types.h"
#include "next_alloc.h"

#define TRACK_MIN    ((size_t)64 << 10) /* blocks tracked: may be direct-mapped */
#define TRACK_SLOTS  4096               /* open addressing, power of two */
#define MAX_SEGMENTS 1024

static void *tracked[TRACK_SLOTS];
static pthread_mutex_t track_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *p) {
    return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 52) & (TRACK_SLOTS - 1);
}

static void track(void *p) {
    if (p == NULL || next_usable_size(p) < TRACK_MIN) return;
    pthread_mutex_lock(&track_lock);
    size_t i = slot_of(p);
    for (size_t n = 0; n < TRACK_SLOTS && tracked[i]; n++)
        i = (i + 1) & (TRACK_SLOTS - 1);
    if (tracked[i] == NULL) tracked[i] = p; /* a full table drops the block */
    pthread_mutex_unlock(&track_lock);
}

static void untrack(void *p) {
    if (p == NULL || next_usable_size(p) < TRACK_MIN) return;
    pthread_mutex_lock(&track_lock);
    size_t i = slot_of(p);
    for (size_t n = 0; n < TRACK_SLOTS && tracked[i] != p; n++)
        i = (i + 1) & (TRACK_SLOTS - 1);
    if (tracked[i] == p) {
        /* backward-shift deletion keeps every probe chain whole */
        size_t hole = i, j = i;
        for (;;) {
            j = (j + 1) & (TRACK_SLOTS - 1);
            if (tracked[j] == NULL) break;
            size_t home = slot_of(tracked[j]);
            if ((j > hole && (home <= hole || home > j)) ||
                (j < hole && home <= hole && home > j)) {
                tracked[hole] = tracked[j];
                hole = j;
            }
        }
        tracked[hole] = NULL;
    }
    pthread_mutex_unlock(&track_lock);
}

void *malloc(size_t size) {
    next_resolve();
    void *p = next_malloc(size);
    track(p);
    return p;
}
void *calloc(size_t count, size_t size) {
    if (next_calloc == NULL) {
        void *early = early_calloc(count * size);
        if (early != NULL) return early;
        next_resolve();
    }
    void *p = next_calloc(count, size);
    track(p);
    return p;
}
void *realloc(void *p, size_t size) {
    next_resolve();
    untrack(p);
    void *q = next_realloc(p, size);
    track(q != NULL ? q : size != 0 ? p : NULL);
    return q;
}
void free(void *p) {
    if (early_owns(p)) return;
    next_resolve();
    untrack(p);
    next_free(p);
}
void *memalign(size_t alignment, size_t size) {
    next_resolve();
    void *p = next_memalign(alignment, size);
    track(p);
    return p;
}
void *aligned_alloc(size_t alignment, size_t size) {
    next_resolve();
    void *p = next_aligned_alloc(alignment, size);
    track(p);
    return p;
}
int posix_memalign(void **out, size_t alignment, size_t size) {
    next_resolve();
    int err = next_posix_memalign(out, alignment, size);
    if (err == 0) track(*out);
    return err;
}

enum part { HEADER, CLASS_PAGES, LARGE_PAGES, FREE_SLICES, PART_COUNT };
static const char *const part_names[PART_COUNT] = {"segment headers", "class pages", "large pages",
                                                   "free slices"};
/* One sample's figures, in bytes; also their sum over the run, and the
 * sample with the highest RssAnon. */
struct parts {
    double resident[PART_COUNT], in_use[PART_COUNT], direct, anon, file;
    double class_resident[LARGE_CLASS], class_in_use[LARGE_CLASS]; /* class pages by class */
    double class_pending[LARGE_CLASS]; /* of class_in_use: freed by other threads, not collected */
    unsigned class_pages[LARGE_CLASS]; /* pages in use by class */
    /* per segment, in the order found: the header fields and the sums */
    struct segment_parts {
        uintptr_t base, owner_id;
        uint8_t abandoned;
        uint8_t free_slices, dirty_free_slices; /* counts */
        double free_resident, class_resident, class_in_use;
    } segment[MAX_SEGMENTS];
    int segment_count;
};
static struct parts sum, at_peak, now; /* now: too big for the sampler's stack */
static double samples;
static unsigned interval_ms = 20;
static uintptr_t segments[MAX_SEGMENTS];
static int segment_count;
static int mem_fd = -1;
static char maps[1 << 18];
static struct segment header; /* a copy of the segment being read */
static unsigned char residency[SEGMENT_SIZE / OS_PAGE_SIZE];
static uint64_t pagemap_entries[SEGMENT_SIZE / OS_PAGE_SIZE];
static int pagemap_fd = -1;
static uint64_t zero_pfn; /* the kernel's shared zero page; 0: unknown (no CAP_SYS_ADMIN) */

#define PAGEMAP_PRESENT  ((uint64_t)1 << 63)
#define PAGEMAP_PFN_MASK (((uint64_t)1 << 55) - 1)

/* A page only read since it was mapped (a descriptor a scan looked at, a
 * block calloc left alone) maps the kernel's zero page: mincore calls it
 * resident, the RSS does not count it. Found through /proc/self/pagemap,
 * whose frame numbers only a privileged process sees. */
static void zero_pfn_find(void) {
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY);
    if (pagemap_fd < 0) return;
    volatile char *probe = mmap(NULL, OS_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) return;
    (void)probe[0];
    uint64_t entry = 0;
    if (pread(pagemap_fd, &entry, sizeof entry, (off_t)((uintptr_t)probe / OS_PAGE_SIZE * 8)) ==
            (ssize_t)sizeof entry &&
        (entry & PAGEMAP_PRESENT))
        zero_pfn = entry & PAGEMAP_PFN_MASK;
    munmap((void *)probe, OS_PAGE_SIZE);
}

/* Fills residency[0, pages) for the pages from start (bit 0: counted in the
 * RSS): mincore, less the pages that map the zero page. False if mincore
 * failed (the range is not mapped). */
static bool residency_read(uintptr_t start, size_t pages) {
    if (mincore((void *)start, pages * OS_PAGE_SIZE, residency)) return false;
    size_t length = pages * sizeof pagemap_entries[0];
    if (zero_pfn == 0 || pread(pagemap_fd, pagemap_entries, length,
                               (off_t)(start / OS_PAGE_SIZE * 8)) != (ssize_t)length)
        return true;
    for (size_t i = 0; i < pages; i++)
        if ((pagemap_entries[i] & PAGEMAP_PRESENT) &&
            (pagemap_entries[i] & PAGEMAP_PFN_MASK) == zero_pfn)
            residency[i] = 0;
    return true;
}

static long status_kib(const char *buffer, const char *key) {
    const char *at = strstr(buffer, key);
    return at ? strtol(at + strlen(key), NULL, 10) : 0;
}

/* A 4 MiB-aligned anonymous region is a segment if every slice's `first`
 * points into the header's own descriptor array or is NULL (a slice never
 * used), as types.h requires, and some slice is in a page. */
static bool read_segment(uintptr_t base) {
    if (pread(mem_fd, &header, sizeof header, (off_t)base) != (ssize_t)sizeof header) return false;
    bool any = false;
    for (unsigned i = 0; i < SLICES_PER_SEGMENT; i++) {
        uintptr_t first = (uintptr_t)header.pages[i].first;
        uintptr_t lo = base + offsetof(struct segment, pages);
        if (first == 0) continue;
        if (first < lo || first >= lo + sizeof header.pages) return false;
        any = true;
    }
    return any;
}

/* /proc/self/maps into buffer, NUL-terminated (empty if unreadable). */
static void maps_read(char *buffer, size_t size) {
    int fd = open("/proc/self/maps", O_RDONLY);
    size_t used = 0;
    ssize_t got;
    while (fd >= 0 && (got = read(fd, buffer + used, size - 1 - used)) > 0)
        used += (size_t)got;
    if (fd >= 0) close(fd);
    buffer[used] = 0;
}

static void find_segments(void) {
    maps_read(maps, sizeof maps);
    segment_count = 0;
    for (char *line = maps; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        unsigned long lo, hi;
        char perms[8];
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s%n", &lo, &hi, perms, &name_at) >= 3 &&
            perms[0] == 'r' && perms[1] == 'w' && strpbrk(line + name_at, "/[") == NULL) {
            for (uintptr_t s = (lo + SEGMENT_MASK) & ~(uintptr_t)SEGMENT_MASK;
                 s + SEGMENT_SIZE <= hi && segment_count < MAX_SEGMENTS; s += SEGMENT_SIZE)
                segments[segment_count++] = s;
        }
        line = end ? end + 1 : NULL;
    }
}

static double resident_bytes(uintptr_t from, size_t length) {
    uintptr_t start = from & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    size_t pages = (from + length - start + OS_PAGE_SIZE - 1) / OS_PAGE_SIZE;
    double bytes = 0;
    while (pages > 0) { /* a block may be larger than the residency buffer */
        size_t chunk = pages < sizeof residency ? pages : sizeof residency;
        if (!residency_read(start, chunk)) return bytes;
        for (size_t i = 0; i < chunk; i++)
            bytes += (residency[i] & 1) * (double)OS_PAGE_SIZE;
        start += chunk * OS_PAGE_SIZE;
        pages -= chunk;
    }
    return bytes;
}

static void sample(void) {
    memset(&now, 0, sizeof now);
    find_segments();
    for (int k = 0; k < segment_count; k++) {
        uintptr_t base = segments[k];
        if (!read_segment(base)) {
            segments[k] = 0; /* a big block's mapping, not a segment */
            continue;
        }
        if (!residency_read(base, SEGMENT_SIZE / OS_PAGE_SIZE)) continue;
        struct segment_parts *mine = &now.segment[now.segment_count++];
        mine->base = base;
        mine->owner_id = header.owner_id;
        mine->abandoned = header.abandoned;
        mine->free_slices = (uint8_t)__builtin_popcountll(header.free_slices);
        mine->dirty_free_slices =
            (uint8_t)__builtin_popcountll(header.free_slices & header.dirty_slices);
        for (unsigned i = 0; i < SLICES_PER_SEGMENT; i++) {
            double bytes = 0;
            for (size_t q = 0; q < SLICE_SIZE / OS_PAGE_SIZE; q++)
                bytes +=
                    (residency[i * (SLICE_SIZE / OS_PAGE_SIZE) + q] & 1) * (double)OS_PAGE_SIZE;
            const struct page *page = &header.pages[i];
            uintptr_t descriptors = base + offsetof(struct segment, pages);
            size_t first = page->first ? ((uintptr_t)page->first - descriptors) / sizeof *page : i;
            enum part part = i == 0                                           ? HEADER
                             : (header.free_slices >> i) & 1                  ? FREE_SLICES
                             : header.pages[first].class_index == LARGE_CLASS ? LARGE_PAGES
                                                                              : CLASS_PAGES;
            now.resident[part] += bytes;
            if (part == FREE_SLICES) mine->free_resident += bytes;
            if (part == CLASS_PAGES) mine->class_resident += bytes;
            unsigned class_index = header.pages[first].class_index;
            if (part == CLASS_PAGES && class_index < LARGE_CLASS)
                now.class_resident[class_index] += bytes;
            if (first == i && page->area_size != 0 && part != FREE_SLICES) {
                now.in_use[part] +=
                    part == LARGE_PAGES ? page->block_size : (double)page->used * page->block_size;
                if (part == CLASS_PAGES && class_index < LARGE_CLASS) {
                    now.class_in_use[class_index] += (double)page->used * page->block_size;
                    mine->class_in_use += (double)page->used * page->block_size;
                    uintptr_t word = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
                    if (word != 1) /* 1: THREAD_FREE_RECLAIMED */
                        now.class_pending[class_index] += (double)(word >> 48) * page->block_size;
                    now.class_pages[class_index]++;
                }
            }
        }
    }
    pthread_mutex_lock(&track_lock);
    for (size_t i = 0; i < TRACK_SLOTS; i++) {
        void *p = tracked[i];
        if (p == NULL) continue;
        uintptr_t base = (uintptr_t)p & ~(uintptr_t)SEGMENT_MASK;
        bool in_segment = false;
        for (int k = 0; k < segment_count && !in_segment; k++)
            in_segment = segments[k] == base;
        if (!in_segment) now.direct += resident_bytes((uintptr_t)p, next_usable_size(p));
    }
    pthread_mutex_unlock(&track_lock);
    char status[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t got = fd >= 0 ? read(fd, status, sizeof status - 1) : -1;
    if (fd >= 0) close(fd);
    status[got > 0 ? got : 0] = 0;
    now.anon = status_kib(status, "RssAnon:") * 1024.0;
    now.file = status_kib(status, "RssFile:") * 1024.0;
    for (int p = 0; p < PART_COUNT; p++) {
        sum.resident[p] += now.resident[p];
        sum.in_use[p] += now.in_use[p];
    }
    sum.direct += now.direct;
    sum.anon += now.anon;
    sum.file += now.file;
    if (now.anon > at_peak.anon) at_peak = now;
    samples++;
}

static void *sampler(void *arg) {
    (void)arg;
    for (;;) {
        sample();
        usleep(interval_ms * 1000);
    }
    return NULL;
}

/* The library's own file pages that the process maps, mapping by mapping
 * (pagemap's present bit: mincore would report the page cache instead):
 * what the kernel's fault-around maps of its code and data, part of the
 * fixed cost over glibc's malloc (docs/benchmarks.md). Its own buffers: the
 * sampler may still be running. */
static char library_maps[1 << 18];
static void report_library_pages(void) {
    if (pagemap_fd < 0) return;
    maps_read(library_maps, sizeof library_maps);
    char detail[512];
    int length = 0;
    unsigned total = 0;
    for (char *line = library_maps; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        unsigned long lo, hi;
        char perms[8];
        if (strstr(line, "libtidemalloc") && sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
            unsigned present = 0;
            for (unsigned long page = lo; page < hi; page += OS_PAGE_SIZE) {
                uint64_t entry = 0;
                if (pread(pagemap_fd, &entry, sizeof entry, (off_t)(page / OS_PAGE_SIZE * 8)) ==
                        (ssize_t)sizeof entry &&
                    (entry & PAGEMAP_PRESENT))
                    present++;
            }
            total += present;
            if (length < (int)sizeof detail - 32)
                length += snprintf(detail + length, sizeof detail - (size_t)length, " %s %u/%lu",
                                   perms, present, (hi - lo) / OS_PAGE_SIZE);
        }
        line = end ? end + 1 : NULL;
    }
    if (total)
        fprintf(stderr,
                "  library's file pages mapped at exit: %u (%u KiB); by mapping, present/all:%s\n",
                total, total * OS_PAGE_SIZE / 1024, detail);
}

/* block size of each class: size_class.c is built into this library too */
extern const uint32_t g_class_size[SMALL_CLASS_COUNT];

static void report_line(const char *name, double average, double peak) {
    fprintf(stderr, "  %-22s %9.2f %9.2f\n", name, average / samples / 1048576.0, peak / 1048576.0);
}

__attribute__((destructor)) static void report(void) {
    if (samples == 0) return;
    fprintf(stderr, "rss_parts: %.0f samples %u ms apart, MiB\n", samples, interval_ms);
    fprintf(stderr, "  %-22s %9s %9s\n", "", "average", "at peak");
    double segments_sum = 0, segments_peak = 0;
    char name[64];
    for (int p = 0; p < PART_COUNT; p++) {
        report_line(part_names[p], sum.resident[p], at_peak.resident[p]);
        snprintf(name, sizeof name, "  blocks in %s", part_names[p]);
        if (p == CLASS_PAGES || p == LARGE_PAGES)
            report_line(name, sum.in_use[p], at_peak.in_use[p]);
        segments_sum += sum.resident[p];
        segments_peak += at_peak.resident[p];
    }
    report_line("direct-mapped blocks", sum.direct, at_peak.direct);
    report_line("program's own (rest)", sum.anon - segments_sum - sum.direct,
                at_peak.anon - segments_peak - at_peak.direct);
    report_line("RssAnon", sum.anon, at_peak.anon);
    report_line("RssFile", sum.file, at_peak.file);
    report_library_pages();
    fprintf(stderr, "  class pages at peak, by block size: pages, KiB resident / in blocks"
                    " (of which freed by other threads, not yet collected)\n");
    for (int c = 0; c < LARGE_CLASS; c++)
        if (at_peak.class_pages[c] != 0)
            fprintf(stderr, "    %6u B: %4u pages %8.0f / %8.0f (%.0f)\n", g_class_size[c],
                    at_peak.class_pages[c], at_peak.class_resident[c] / 1024,
                    at_peak.class_in_use[c] / 1024, at_peak.class_pending[c] / 1024);
    fprintf(stderr, "  segments at peak: owner, free slices (dirty ones), KiB resident in free"
                    " slices, in class pages / in their blocks\n");
    for (int k = 0; k < at_peak.segment_count; k++) {
        const struct segment_parts *g = &at_peak.segment[k];
        fprintf(stderr, "    %#14lx %-10s %2u (%2u) %8.0f %8.0f / %8.0f\n", (unsigned long)g->base,
                g->abandoned  ? "abandoned"
                : g->owner_id ? "a heap"
                              : "no owner",
                g->free_slices, g->dirty_free_slices, g->free_resident / 1024,
                g->class_resident / 1024, g->class_in_use / 1024);
    }
}

__attribute__((constructor)) static void start(void) {
    const char *setting = getenv("RSS_PARTS");
    if (setting == NULL) return;
    if (atoi(setting) > 1) interval_ms = (unsigned)atoi(setting); /* RSS_PARTS=MS */
    next_resolve();
    mem_fd = open("/proc/self/mem", O_RDONLY);
    zero_pfn_find();
    pthread_t thread;
    pthread_create(&thread, NULL, sampler, NULL);
}
