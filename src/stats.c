/* Statistics: our counters, and glibc's mallinfo/mallinfo2, malloc_stats and
 * malloc_info mapped onto this design (docs/tuning.md says how). Figures of
 * other threads' pages are read without stopping them: they are a snapshot. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../include/tidemalloc.h"
#include "internal.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed) /* statistics only */

RARE API void tidemalloc_stats(struct tidemalloc_stats *out) {
    memset(out, 0, sizeof *out);
    out->mmap_calls = LOAD(g_os.mmap_calls);
    out->munmap_calls = LOAD(g_os.munmap_calls);
    out->madvise_calls = LOAD(g_os.madvise_calls);
    out->mremap_calls = LOAD(g_os.mremap_calls);
    out->bytes_mapped = LOAD(g_os.bytes_mapped);
    out->bytes_retained =
        LOAD(g_retained_bytes) + LOAD(g_arena_dirty_bytes) + remote_freed_page_bytes();
    out->bytes_released = LOAD(g_os.bytes_released);
    out->purge_runs = LOAD(g_os.purge_runs);
    out->huge_blocks = LOAD(g_huge_count);
    out->huge_bytes = LOAD(g_huge_bytes);
    out->segments = LOAD(g_segment_count);
    out->heaps = LOAD(g_heap_count);
}

RARE API uint64_t tidemalloc_release_syscalls(void) {
    return LOAD(g_os.munmap_calls) + LOAD(g_os.madvise_calls);
}

/* Per-owner sums over the segment registry (owner 0: abandoned or cached). */
struct usage {
    uint64_t system;      /* bytes of segments */
    uint64_t in_use;      /* bytes in blocks handed out */
    uint64_t free;        /* free bytes kept: free blocks and free slices */
    uint64_t releasable;  /* free resident slices */
    uint64_t blocks_free; /* free block count inside pages */
};

/* A snapshot of pages other threads are changing: those reads are
 * deliberately racy (the owners' fast paths must not pay for statistics),
 * each field is read once through a volatile access and the sums are clamped;
 * ThreadSanitizer is told so. The slice bitmaps are read under their lock. */
static uint64_t usage_releasable_slices(struct segment *s) {
    spin_lock(&s->lock);
    uint64_t slices = s->free_slices & s->dirty_slices & ~(uint64_t)1;
    spin_unlock(&s->lock);
    return slices;
}

#define SNAPSHOT(field) (*(volatile __typeof__(field) *)&(field))

/* Blocks handed out and not freed. Those other threads freed wait on
 * thread_free until the owner collects them (a full page's until its list is
 * rescued): free, not in use. A reclaimed page is all free. */
RARE __attribute__((no_sanitize("thread"))) static uint64_t page_blocks_in_use(struct page *p) {
    uint64_t used = SNAPSHOT(p->used);
    /* relaxed: a statistics snapshot, like the fields beside it */
    uintptr_t remote = atomic_load_explicit(&p->thread_free, memory_order_relaxed);
    uint64_t waiting = remote == THREAD_FREE_RECLAIMED ? used : thread_free_count(remote);
    return used > waiting ? used - waiting : 0;
}
__attribute__((no_sanitize("thread"))) static void usage_of_segment(struct segment *s,
                                                                    struct usage *u) {
    u->system += SEGMENT_SIZE;
    for (unsigned i = 1; i < SLICES_PER_SEGMENT;) {
        struct page *p = &s->pages[i];
        uint32_t area = SNAPSHOT(p->area_size);
        uint32_t count = SNAPSHOT(p->slice_count);
        if (area == 0 || count == 0) {
            u->free += SLICE_SIZE;
            i++;
            continue;
        }
        uint64_t used = page_blocks_in_use(p);
        uint64_t size = SNAPSHOT(p->block_size);
        uint64_t reserved = SNAPSHOT(p->reserved);
        if (used > reserved) used = reserved;
        u->in_use += used * size;
        u->free += (uint64_t)count * SLICE_SIZE - used * size;
        u->blocks_free += reserved - used;
        i += count;
    }
    uint64_t releasable = usage_releasable_slices(s);
    u->releasable += (uint64_t)bit_count(releasable) * SLICE_SIZE;
}

RARE static void usage_total(struct usage *u, uint64_t owner, bool all) {
    memset(u, 0, sizeof *u);
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next)
        if (all || segment_owner_thread(s) == owner) usage_of_segment(s, u);
    spin_unlock(&g_registry_lock);
}

RARE API struct mallinfo2 TM_NAME(mallinfo2)(void) {
    struct mallinfo2 m;
    memset(&m, 0, sizeof m);
    struct usage u;
    usage_total(&u, 0, true);
    uint64_t arena_used = LOAD(g_arena_used_bytes), arena_dirty = LOAD(g_arena_dirty_bytes);
    /* the arena's resident part: its blocks and its free memory not released */
    m.arena = u.system + arena_used + arena_dirty;
    m.ordblks = u.blocks_free;
    m.hblks = LOAD(g_huge_count);
    m.hblkhd = LOAD(g_huge_bytes);
    m.usmblks = 0;
    m.uordblks = u.in_use + arena_used;
    m.fordblks = u.free + arena_dirty;
    m.keepcost = u.releasable + arena_dirty;
    return m;
}

RARE API struct mallinfo TM_NAME(mallinfo)(void) {
    struct mallinfo2 m2 = TM_NAME(mallinfo2)();
    struct mallinfo m;
    m.arena = (int)m2.arena;
    m.ordblks = (int)m2.ordblks;
    m.smblks = (int)m2.smblks;
    m.hblks = (int)m2.hblks;
    m.hblkhd = (int)m2.hblkhd;
    m.usmblks = (int)m2.usmblks;
    m.fsmblks = (int)m2.fsmblks;
    m.uordblks = (int)m2.uordblks;
    m.fordblks = (int)m2.fordblks;
    m.keepcost = (int)m2.keepcost;
    return m;
}
/* glibc exports it too, for programs that call it directly (naming
 * mallinfo here is no use of it, whatever glibc's deprecation says). */
#ifndef TIDEMALLOC_PREFIX
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
API struct mallinfo __libc_mallinfo(void) __attribute__((alias("mallinfo")));
#pragma GCC diagnostic pop
#endif

RARE static void out_padded(struct out_buffer *out, const char *label, uint64_t value) {
    out_string(out, label);
    out_unsigned_padded(out, value, 10);
    out_string(out, "\n");
}

/* Heap ids in a stack array, so the heaps lock is not held while summing. */
RARE static unsigned heap_ids(uint64_t *ids, unsigned max) {
    unsigned n = 0;
    spin_lock(&g_heaps_lock);
    for (struct heap *h = g_heaps; h && n < max; h = h->next_heap)
        ids[n++] = h->id;
    spin_unlock(&g_heaps_lock);
    return n;
}

RARE API void TM_NAME(malloc_stats)(void) {
    int old_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
    int saved = errno;
    fflush(stderr);
    struct out_buffer out = {.fd = 2, .length = 0};
    uint64_t ids[64];
    unsigned n = heap_ids(ids, 64);
    uint64_t system = 0, in_use = 0;
    for (unsigned i = 0; i <= n; i++) {
        struct usage u;
        usage_total(&u, i < n ? ids[i] : 0, false); /* the last: abandoned and cached */
        out_string(&out, "Arena ");
        out_unsigned(&out, i);
        out_string(&out, ":\n");
        out_padded(&out, "system bytes     = ", u.system);
        out_padded(&out, "in use bytes     = ", u.in_use);
        system += u.system;
        in_use += u.in_use;
    }
    /* the arena (blocks over 256 KiB) counts as a heap's, as glibc's main arena */
    system += LOAD(g_arena_used_bytes) + LOAD(g_arena_dirty_bytes);
    in_use += LOAD(g_arena_used_bytes);
    out_string(&out, "Total (incl. mmap):\n");
    out_padded(&out, "system bytes     = ", system + LOAD(g_huge_bytes));
    out_padded(&out, "in use bytes     = ", in_use + LOAD(g_huge_bytes));
    out_padded(&out, "max mmap regions = ", LOAD(g_huge_max_count));
    out_padded(&out, "max mmap bytes   = ", LOAD(g_huge_max_bytes));
    out_flush(&out);
    errno = saved;
    pthread_setcancelstate(old_state, NULL);
}

/* `format` with its "%llu"s replaced by a, then b (our own formatting: one
 * libc import fewer than snprintf, and it cannot allocate). */
RARE static void xml_line(FILE *fp, const char *format, uint64_t a, uint64_t b) {
    char line[256];
    size_t n = 0;
    uint64_t values[2] = {a, b};
    unsigned used = 0;
    for (const char *f = format; *f && n < sizeof line - 24; f++) {
        if (f[0] == '%' && f[1] == 'l' && f[2] == 'l' && f[3] == 'u' && used < 2) {
            n += format_unsigned(line + n, values[used++]);
            f += 3;
        } else {
            line[n++] = *f;
        }
    }
    fwrite(line, 1, n, fp);
}

RARE API int TM_NAME(malloc_info)(int options, FILE *fp) {
    if (options != 0) return EINVAL;
    uint64_t ids[256];
    unsigned n = heap_ids(ids, 256);
    xml_line(fp, "<malloc version=\"1\">\n", 0, 0);
    uint64_t total_system = 0, total_free = 0, total_free_count = 0;
    for (unsigned i = 0; i <= n; i++) {
        struct usage u;
        usage_total(&u, i < n ? ids[i] : 0, false);
        xml_line(fp, "<heap nr=\"%llu\">\n<sizes>\n</sizes>\n", i, 0);
        xml_line(fp, "<total type=\"fast\" count=\"%llu\" size=\"%llu\"/>\n", 0, 0);
        xml_line(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n", u.blocks_free,
                 u.free);
        xml_line(fp, "<system type=\"current\" size=\"%llu\"/>\n", u.system, 0);
        xml_line(fp, "<system type=\"max\" size=\"%llu\"/>\n", u.system, 0);
        xml_line(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", u.system, 0);
        xml_line(fp, "<aspace type=\"mprotect\" size=\"%llu\"/>\n", u.system, 0);
        xml_line(fp, "</heap>\n", 0, 0);
        total_system += u.system;
        total_free += u.free;
        total_free_count += u.blocks_free;
    }
    /* the arena's free memory kept, and its part of the system's */
    total_free += LOAD(g_arena_dirty_bytes);
    total_system += LOAD(g_arena_used_bytes) + LOAD(g_arena_dirty_bytes);
    xml_line(fp, "<total type=\"fast\" count=\"%llu\" size=\"%llu\"/>\n", 0, 0);
    xml_line(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n", total_free_count,
             total_free);
    xml_line(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", LOAD(g_huge_count),
             LOAD(g_huge_bytes));
    xml_line(fp, "<system type=\"current\" size=\"%llu\"/>\n", total_system, 0);
    xml_line(fp, "<system type=\"max\" size=\"%llu\"/>\n", total_system, 0);
    xml_line(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", total_system, 0);
    xml_line(fp, "<aspace type=\"mprotect\" size=\"%llu\"/>\n", total_system, 0);
    xml_line(fp, "<syscalls mmap=\"%llu\" munmap=\"%llu\"", LOAD(g_os.mmap_calls),
             LOAD(g_os.munmap_calls));
    xml_line(fp, " madvise=\"%llu\" mremap=\"%llu\"/>\n", LOAD(g_os.madvise_calls),
             LOAD(g_os.mremap_calls));
    xml_line(fp, "</malloc>\n", 0, 0);
    return 0;
}

/* Blocks in use per class in one segment (a snapshot, as usage_of_segment). */
__attribute__((no_sanitize("thread"))) static void live_blocks_by_class(struct segment *s,
                                                                        uint64_t *live) {
    for (unsigned i = 1; i < SLICES_PER_SEGMENT;) {
        struct page *p = &s->pages[i];
        uint32_t count = SNAPSHOT(p->slice_count);
        if (SNAPSHOT(p->area_size) == 0 || count == 0) {
            i++;
            continue;
        }
        unsigned cls = SNAPSHOT(p->class_index);
        if (cls <= LARGE_CLASS) live[cls] += page_blocks_in_use(p);
        i += count;
    }
}

/* TIDEMALLOC_STATS=1: a summary on stderr at exit, written without malloc. */
RARE void stats_print_at_exit(void) {
    extern int g_stats_fd INTERNAL;
    struct out_buffer out = {.fd = g_stats_fd, .length = 0};
    struct tidemalloc_stats s;
    tidemalloc_stats(&s);
    uint64_t peak_kib = os_read_number_after("/proc/self/status", "VmHWM:");
    struct usage u;
    usage_total(&u, 0, true);
    out_string(&out, "tidemalloc: peak RSS ");
    out_unsigned(&out, peak_kib);
    out_string(&out, " KiB, in use ");
    out_unsigned(&out, u.in_use + s.huge_bytes + LOAD(g_arena_used_bytes));
    out_string(&out, " bytes, segments ");
    out_unsigned(&out, s.segments);
    out_string(&out, ", huge blocks ");
    out_unsigned(&out, s.huge_blocks);
    out_string(&out, "\ntidemalloc: syscalls mmap ");
    out_unsigned(&out, s.mmap_calls);
    out_string(&out, " munmap ");
    out_unsigned(&out, s.munmap_calls);
    out_string(&out, " madvise ");
    out_unsigned(&out, s.madvise_calls);
    out_string(&out, " (+");
    out_unsigned(&out, LOAD(g_os.advice_calls));
    out_string(&out, " advice) mremap ");
    out_unsigned(&out, s.mremap_calls);
    out_string(&out, ", released ");
    out_unsigned(&out, s.bytes_released);
    out_string(&out, " bytes in ");
    out_unsigned(&out, s.purge_runs);
    out_string(&out, " purge passes\n");
    /* per class: pages set up over the heaps' lives (live heaps only) and
     * blocks in use now (a snapshot of every segment) */
    uint64_t pages[LARGE_CLASS + 1] = {0}, live[LARGE_CLASS + 1] = {0};
    spin_lock(&g_heaps_lock);
    for (struct heap *h = g_heaps; h; h = h->next_heap)
        for (unsigned c = 0; c < CLASS_COUNT; c++)
            pages[c] += h->pages_allocated[c];
    spin_unlock(&g_heaps_lock);
    spin_lock(&g_registry_lock);
    for (struct segment *seg = g_registry; seg; seg = seg->all_next)
        live_blocks_by_class(seg, live);
    spin_unlock(&g_registry_lock);
    out_string(&out, "tidemalloc: per class (size:pages set up/blocks in use)");
    for (unsigned c = 1; c <= LARGE_CLASS; c++) {
        if (pages[c] == 0 && live[c] == 0) continue;
        out_string(&out, " ");
        if (c == LARGE_CLASS)
            out_string(&out, "large");
        else
            out_unsigned(&out, class_block_size(c));
        if (c >= FITTED_CLASS_FIRST && c < LARGE_CLASS) out_string(&out, "(fitted)");
        out_string(&out, ":");
        out_unsigned(&out, pages[c]);
        out_string(&out, "/");
        out_unsigned(&out, live[c]);
    }
    out_string(&out, "\n");
    out_flush(&out);
}
