/* tidemalloc public extensions. The standard allocation API is declared by
 * <stdlib.h> and <malloc.h>; this header adds what is ours. */
#ifndef TIDEMALLOC_H
#define TIDEMALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIDEMALLOC_VERSION "0.1.0"

/* mallopt() parameters of our own. glibc 2.36 uses -1..-8 and 1..4. */
#define M_AGGRESSIVE_MADVISE (-9)   /* 1: give whole free pages back at once (seed 001) */
#define M_PURGE_DELAY_MS     (-100) /* ms a free range must stay unused before release */
#define M_BACKGROUND_PURGE                                                                         \
    (-101)                       /* 1 (default): an idle process still gets memory back;           \
                                    2: the helper makes every release */
#define M_RETAIN_PERCENT  (-102) /* free memory kept, as % of memory in use (0: no bound) */
#define M_BATCHED_RELEASE (-103) /* 1 (default): release ranges with one process_madvise */
#define M_POPULATE        (-104) /* 1 (default): realloc populates the pages its copy writes */
#define M_REFAULT_PERCENT (-105) /* % of CPU time refaults may take before the bound pauses */
#define M_FITTED_CLASSES                                                                           \
    (-106) /* 1 (default): a class over 1 KiB may get one fitted to its sizes */

/* Counters kept since the process started. Syscall counts are those the
 * allocator itself made. */
struct tidemalloc_stats {
    uint64_t mmap_calls;     /* mmap, including failed attempts */
    uint64_t munmap_calls;   /* munmap */
    uint64_t madvise_calls;  /* madvise and process_madvise releases (MADV_DONTNEED); the
                                advice on huge pages, at most one call per new mapping,
                                gives nothing back and is not counted */
    uint64_t mremap_calls;   /* mremap (huge realloc) */
    uint64_t bytes_mapped;   /* address space currently mapped for blocks */
    uint64_t bytes_retained; /* free memory kept resident (candidates for release) */
    uint64_t bytes_released; /* total bytes given back with madvise or munmap */
    uint64_t purge_runs;     /* release passes that gave something back */
    uint64_t huge_blocks;    /* live direct-mapped blocks */
    uint64_t huge_bytes;     /* bytes in live direct-mapped blocks */
    uint64_t segments;       /* live segments */
    uint64_t heaps;          /* thread heaps currently alive */
};

/* Fills *out. Safe to call from any thread at any time; it never allocates. */
void tidemalloc_stats(struct tidemalloc_stats *out);

/* Number of release syscalls (munmap + madvise + process_madvise) made so far. */
uint64_t tidemalloc_release_syscalls(void);

#ifdef __cplusplus
}
#endif
#endif
