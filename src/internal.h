/* Declarations shared between tidemalloc's files, and the small inline helpers
 * that the fast paths need. Layering (a file may call those below it):
 *
 *   api: alloc.c free.c (public entry points), stats.c, options.c (mallopt)
 *   heap.c     thread heaps, class queues, slow paths
 *   heap_exit.c  a thread's exit, the exit heap, heaps a fork leaves behind
 *   page.c     carving pages into blocks, collecting remote frees
 *   segment.c  slice bitmaps, where a page's slices go
 *   segment_lifecycle.c  mapping, registry, owners' lists, cache, adoption
 *   segment_release.c  free slices back to the kernel, in batches
 *   huge.c     direct mappings      purge.c  release policy, malloc_trim
 *   os.c       every syscall, counted   format.c  output without malloc
 */
#ifndef TIDEMALLOC_INTERNAL_H
#define TIDEMALLOC_INTERNAL_H

#include <sys/uio.h>

#include "types.h"
#include "lock.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define INTERNAL    __attribute__((visibility("hidden")))
#define NOINLINE    __attribute__((noinline))
#define NORETURN    __attribute__((noreturn))
/* Run once a thread or a segment, or rarer: optimised for size, as the files
 * of the Makefile's COLD_SRCS are (the library's code is resident whole). */
#define COLD __attribute__((cold))
/* Code that a program which only mallocs, callocs, reallocs and frees, in
 * threads and across fork, does not run: the aligned and the rarer entry
 * points, statistics, mallopt and options from the environment, secure mode,
 * malloc_trim, error reports, the fallbacks when address space runs out. It
 * has a load segment of its own (src/rare.ld): the kernel maps a file's pages
 * up to 64 KiB around each fault, clipped to the mapping, so in the code's
 * mapping it was resident in every program; apart, it is mapped where a call
 * lands there. What is marked follows what ran (callgrind over the benchmarks
 * and programs such as ls, sort, tar, bash, python3, perl, gcc, sqlite3;
 * docs/benchmark-history.md, forty-fourth session); tests/test_rare_code_apart.c
 * checks that such a program maps none of it. */
#define RARE __attribute__((section("tm_rare")))
/* Code that common programs do not run (ls, grep, sed, tar, cp, find, bash,
 * awk, gcc's driver and the small benchmarks: small blocks and large ones
 * under the mmap threshold, realloc between them, threads, fork), but
 * programs with bigger blocks do: the arena, huge (direct-mapped) blocks, a
 * large block's growth in place, a realloc copy of 64 KiB or more looking
 * for pages to populate. A load segment of its own (src/warm.ld), 2
 * pages, so that the code's is 7 instead of 9 and the common programs map
 * 8 KiB less; a program that runs both maps 9, as before (forty-sixth
 * session: which programs map which, docs/benchmark-history.md). The retain
 * bound's and the purge's code stays in the code's segment: any program with
 * threads that exit may run it. tests/test_rare_code_apart.c checks that the
 * common work maps none of it. */
#define WARM __attribute__((section("tm_warm")))
/* Zero-initialised arrays that only the arena and huge blocks use: in
 * x86-64's large-data section, which the linker places after .bss, so that
 * the small variables every program writes share the page where .data ends
 * (which the loader's zeroing of .bss's start has written anyway) instead of
 * a page past these arrays. */
#define LARGE_BSS __attribute__((section(".lbss")))
/* malloc and free start a cache line: malloc's fast path is 92 bytes, and
 * where it began 48 bytes into a line it spanned three lines instead of two
 * (churn 1-3% slower, forty-third session); free was aligned by chance. The
 * remote free and the refill, aligned too, measured even: left as laid out. */
#define LINE_ALIGNED __attribute__((aligned(64)))
/* Slow paths in the files built for speed start where the code before them
 * ends, not on 16 bytes (gcc's default there): the padding was 460 bytes of
 * the 7 pages of code that every program maps, which the fitted classes
 * needed (size_class.c; the sixty-ninth session). Files built for size
 * are not padded anyway. */
#define UNPADDED __attribute__((aligned(1)))

/* Public names. A sanitizer test build defines TIDEMALLOC_PREFIX to get
 * tm_malloc, tm_free... that interpose nothing (tests/sanitize/). */
#define API __attribute__((visibility("default")))
#ifdef TIDEMALLOC_PREFIX
#define TM_NAME(name) tm_##name
#else
#define TM_NAME(name) name
#endif

/* Set bits in a word. Without -mpopcnt (not every x86-64 has the
 * instruction) __builtin_popcountll is a call to libgcc's table loop, which
 * took 23% of a loop of 100-200 KB mallocs and frees (find_free_run weighs
 * every candidate run); this is a dozen inline instructions. */
static inline unsigned bit_count(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* ---- options.c: every tunable in one table ---- */
/* The most the dynamic mmap threshold rises to (glibc's on 64-bit): a block
 * over it is always mapped on its own. */
#define DEFAULT_MMAP_THRESHOLD_MAX ((size_t)32 << 20)
struct options {
    size_t trim_threshold;    /* retained free bytes kept before releasing */
    size_t top_pad;           /* extra bytes kept on top of the threshold */
    size_t mmap_threshold;    /* requests at/above this are mapped on their own */
    int mmap_max;             /* most live direct mappings (0 or less: never map directly) */
    bool dynamic_threshold;   /* glibc's adaptive mmap threshold still on */
    bool aggressive_madvise;  /* seed 001: release free pages at once */
    uint8_t background_purge; /* 1: a helper thread releases memory of idle processes;
                                 2: it makes every release (no call waits for one);
                                 0: no helper */
    bool batched_release;     /* a pass's ranges go back in one process_madvise call;
                                 cleared when the kernel refuses one */
    bool populate;            /* realloc's copy populates the untouched pages it will
                                 write (os_populate); cleared when the kernel refuses */
    bool print_stats;         /* TIDEMALLOC_STATS=1: summary at exit */
    bool fitted_classes;      /* classes over 1 KiB may get a class fitted to the
                                 sizes asked of them (fitted_class.c); 0: no more */
    uint32_t purge_delay_ms;  /* how long free memory stays before release */
    uint32_t retain_percent;  /* free slices kept past the threshold: % of in use (0: off) */
    uint32_t refault_percent; /* % of CPU time refaults may take before the retain bound
                                 pauses for a purge delay (0: never; purge.c) */
    int perturb;              /* MALLOC_PERTURB_ value (0: off); its low byte fills */
    int check_action;         /* MALLOC_CHECK_ value; 3 turns on secure mode */
    bool secure;              /* canaries, free fill checked on reuse, guard pages */
    bool checked;             /* secure or perturb: all calls take check.c's paths */
    bool free_slow;           /* checked, or aggressive: every free takes the slow path */
};
extern struct options g_options INTERNAL;
/* Tunables that mallopt and the dynamic threshold change while other threads
 * read them: relaxed atomic accesses (a reader acting on the previous value
 * is as good as one that ran a moment earlier). */
#define OPTION(field)            __atomic_load_n(&g_options.field, __ATOMIC_RELAXED)
#define OPTION_SET(field, value) __atomic_store_n(&g_options.field, (value), __ATOMIC_RELAXED)
void options_init_from_environment(void) INTERNAL;
void options_note_huge_free(size_t size) INTERNAL;

/* ---- init.c ---- */
/* A free block's second word holds its page descriptor's address: a value a
 * program never sees, so finding it in a block being freed means a double
 * free (verified on the owner's path). It needs no global load. */
static inline uintptr_t free_key_of(const struct page *page) {
    return (uintptr_t)page;
}
extern _Atomic int g_initialized INTERNAL;
void allocator_init(void) INTERNAL; /* idempotent, thread-safe */

/* ---- format.c ---- */
/* Strings without libc's: every string function a library imports has its
 * ifunc resolver run at load, and each one called or resolved maps libc text
 * around it (64 KiB of fault-around a touched page): a small program's RSS.
 * These serve start-up (the environment, the vDSO) and error paths only. */
static inline size_t text_length(const char *s) {
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}
/* The first `length` bytes of a and b are equal (neither ends before). */
static inline bool text_same(const char *a, const char *b, size_t length) {
    for (size_t i = 0; i < length; i++)
        if (a[i] != b[i]) return false;
    return true;
}
/* s starts with prefix; reads s no further than a mismatch or its end. */
static inline bool text_starts_with(const char *s, const char *prefix) {
    for (; *prefix; s++, prefix++)
        if (*s != *prefix) return false;
    return true;
}
static inline bool text_equal(const char *a, const char *b) {
    return text_starts_with(a, b) && a[text_length(b)] == '\0';
}
/* The first occurrence of needle in s, or NULL. */
static inline const char *text_find(const char *s, const char *needle) {
    for (; *s; s++)
        if (text_starts_with(s, needle)) return s;
    return *needle ? NULL : s;
}
NORETURN void fatal_error(const char *message) INTERNAL; /* "message" + abort */
void write_string(int fd, const char *s) INTERNAL;
struct out_buffer {
    int fd;
    size_t length;
    char data[512];
};
void out_string(struct out_buffer *out, const char *s) INTERNAL;
void out_unsigned(struct out_buffer *out, uint64_t value) INTERNAL;
/* value in decimal at `text` (room for 20 digits), no terminator; returns its length */
size_t format_unsigned(char *text, uint64_t value) INTERNAL;
void out_unsigned_padded(struct out_buffer *out, uint64_t value, int width) INTERNAL;
void out_flush(struct out_buffer *out) INTERNAL;

/* ---- os.c: the only file making memory syscalls; each one counted ---- */
struct os_counters {
    _Atomic uint64_t mmap_calls, munmap_calls, madvise_calls, mremap_calls;
    _Atomic uint64_t bytes_mapped, bytes_released, purge_runs;
    /* madvise calls that give nothing back (the huge-page advice on a new
     * mapping): not in madvise_calls, which counts releases */
    _Atomic uint64_t advice_calls;
};
extern struct os_counters g_os INTERNAL;
/* The kernel's call without libc's wrapper: no errno, no cancellation point,
 * and one import fewer for the dynamic linker to bind. -errno on failure. */
long raw_syscall6(long number, long a, long b, long c, long d, long e, long f) INTERNAL;
void os_yield(void) INTERNAL;       /* sched_yield(2) */
void *os_map(size_t size) INTERNAL; /* our own memory, MAP_NORESERVE; NULL on failure */
void os_unmap(void *address, size_t size) INTERNAL;
/* Around a trim that takes mappings off a cache and unmaps them: while one
 * runs, the address space it is giving back is on no list and not free yet.
 * A mapping that failed for want of address space (RLIMIT_AS) calls
 * os_unmapping_wait with the generation read before it: true when a trim
 * has ended since, after waiting (a bounded time) for those still running,
 * so that one more try may succeed. */
void os_unmapping_begin(void) INTERNAL;
void os_unmapping_end(void) INTERNAL;
uint64_t os_unmapping_generation(void) INTERNAL;
bool os_unmapping_wait(uint64_t generation_before) INTERNAL;
/* map(size) again while os_unmapping_wait says trims have ended (8 tries at most). */
void *os_map_after_trims(void *(*map)(size_t size), size_t size,
                         uint64_t generation_before) INTERNAL;
bool os_release(void *address, size_t size) INTERNAL; /* MADV_DONTNEED */
/* Releases up to 64 ranges in as few calls as it can; bit i: ranges[i] went back. */
uint64_t os_release_ranges(const struct iovec *ranges, unsigned count) INTERNAL;
void *os_remap(void *address, size_t old_size, size_t new_size) INTERNAL;
/* MADV_POPULATE_WRITE over whole pages a copy is about to write (os.c says when) */
void os_populate(void *address, size_t size) INTERNAL;
/* A block mapped on its own, charged to the commit as glibc's are (the
 * kernel's overcommit policy may refuse it). NULL on failure. */
void *os_map_block(size_t size) INTERNAL;
/* The `size` bytes of a mapping of `span` from its first `alignment`-aligned
 * address (the caller made room for them): the ends are unmapped. */
void *os_cut_aligned(void *mapping, size_t span, size_t size, size_t alignment) INTERNAL;
void *os_map_segment(void) INTERNAL; /* SEGMENT_SIZE-aligned, NULL on failure */
bool os_protect_none(void *address, size_t size) INTERNAL; /* guard pages */
uint64_t os_mapping_limit(void) INTERNAL; /* RLIMIT_AS or _DATA, the smaller; UINT64_MAX: none */
uint64_t os_thread_run_wait_ns(void) INTERNAL; /* runnable, not running: 0 if unknown */
uint64_t os_process_cpu_us(void) INTERNAL;     /* CPU time of all threads */
uint64_t os_monotonic_us(void) INTERNAL;
uint64_t os_read_number_after(const char *path, const char *key) INTERNAL; /* 0: none */
void os_clock_init(void) INTERNAL;                       /* finds the vDSO's clock_gettime */
uint32_t clock_ms(void) INTERNAL;                        /* monotonic milliseconds (coarse clock) */
void os_huge_pages_configure(uint64_t hugetlb) INTERNAL; /* glibc.malloc.hugetlb */
void os_advise_huge_pages(void *address, size_t size) INTERNAL; /* hugetlb 1: MADV_HUGEPAGE */
void os_segments_init(void) INTERNAL; /* maps the segment map; THP "always": none */
bool os_segment_map_writable(uintptr_t index) INTERNAL; /* false: no memory */
void os_advise_segment(void *segment) INTERNAL;         /* a new segment: huge pages or none */
void os_advise_arena_chunk(void *chunk, size_t size) INTERNAL; /* the same for the arena */
void os_arena_chunk_mapped(void *chunk, size_t size) INTERNAL; /* advised, its map pages writable */
void *os_map_huge_pages(size_t size, size_t *mapped) INTERNAL; /* hugetlb 2+: NULL if not */

/* Slices a large block of `size` bytes takes. */
static inline unsigned slices_for_size(size_t size) {
    return (unsigned)((size + SLICE_SIZE - 1) >> SLICE_SHIFT);
}

/* ---- size classes ---- */
/* (size + 15) >> 4 -> class; what a heap's table derives from */
extern _Atomic uint8_t g_class_of_small[CLASS_TABLE_SIZE] INTERNAL;
bool size_class_table_limit(size_t limit) INTERNAL; /* true: the table changed */
unsigned class_young(unsigned cls) INTERNAL;
extern const uint32_t g_class_size[SMALL_CLASS_COUNT] INTERNAL;
/* [heap->frees_others][cls]: slices per page of the class */
extern const uint8_t g_class_slices[2][SMALL_CLASS_COUNT] INTERNAL;
/* The block sizes of the shared classes (SHARED_CLASS_FIRST on), the fitted
 * ones (fitted_class.c) included, by cls - SHARED_CLASS_FIRST: the fixed
 * classes' as in g_class_size, a fitted class's 0 until it is set, once.
 * One table, so that the shared classes' paths read a size with no test of
 * which kind of class it is. */
#define FITTED_CLASS_FIRST SMALL_CLASS_COUNT
extern uint16_t g_shared_class_size[SHARED_CLASS_COUNT] INTERNAL;
static inline uint32_t shared_class_size(unsigned cls) {
    /* Plain reads: a fixed class's entry never changes, and a fitted one is
     * written once, before the release store of its slot, which a thread
     * that uses the class read with acquire (fitted_class_malloc) or got one
     * of its blocks from a thread that did: no reader races the store. */
    return g_shared_class_size[cls - SHARED_CLASS_FIRST];
}
static inline uint32_t class_block_size(unsigned cls) {
    return cls < SHARED_CLASS_FIRST ? g_class_size[cls] : shared_class_size(cls);
}
/* g_fitted_slot_of[cls - SHARED_CLASS_FIRST] for fixed shared class cls (the
 * fast path's size_class_of gives only those): 0,
 * FITTED_SAMPLING while its mallocs are sampled, or 1 + the slot whose
 * fitted class (FITTED_CLASS_FIRST + slot) serves its sizes up to that
 * class's block size (set once, with release, after that size). */
#define FITTED_SAMPLING 0xff
extern _Atomic uint8_t g_fitted_slot_of[SMALL_CLASS_COUNT - SHARED_CLASS_FIRST] INTERNAL;
/* heap_malloc_shared's for a shared class cls whose slot is not 0: the
 * sample, or the fitted class, then the pop (rare code: only programs that
 * refill these classes often run it). */
void *fitted_class_malloc(size_t size, struct heap *heap, size_t cls) INTERNAL;
static inline bool fitted_class_active(size_t cls) {
    /* relaxed: a hint; fitted_class_malloc reads it again with acquire, and
     * a stale 0 routes one malloc to the fixed class, which fits it too */
    return atomic_load_explicit(&g_fitted_slot_of[cls - SHARED_CLASS_FIRST],
                                memory_order_relaxed) != 0;
}
/* Refills of the shared classes from the shared heap's pages (its lock):
 * every FITTED_START of them, the fixed classes with no fitted class have
 * their mallocs sampled again (fitted_class_sampling). */
#define FITTED_START 4096
extern uint32_t g_fitted_refills INTERNAL;
void fitted_class_sampling(void) INTERNAL; /* exit heap lock held */
static inline void fitted_class_note(void) {
    if (unlikely(++g_fitted_refills == FITTED_START)) fitted_class_sampling();
}
unsigned fitted_class_slices(unsigned cls) INTERNAL; /* a fitted class's slices a page */
/* Slices per page of a class: a fitted class's are its fixed class's. */
static inline unsigned class_page_slices(unsigned frees_others, unsigned cls) {
    if (unlikely(cls >= FITTED_CLASS_FIRST)) return fitted_class_slices(cls);
    return g_class_slices[frees_others][cls];
}

/* The first class from cls up whose block size is a multiple of `alignment`
 * (a power of two), SMALL_CLASS_COUNT if none: its blocks are aligned to it,
 * since a class page starts on a slice and its slack before block 0 is a
 * multiple of the block size's powers of two (page_init). */
static inline unsigned class_aligned_from(unsigned cls, size_t alignment) {
    while (cls < SMALL_CLASS_COUNT && (g_class_size[cls] & (alignment - 1)) != 0)
        cls++;
    return cls;
}

/* The class of a size up to SMALL_MAX: 16-byte steps to 128, then 4 classes
 * per doubling to 1 KiB, then 5: the eighth of the doubling that the size
 * reaches into (w's three bits below the top one) picks 9/8, 5/4, 3/2, 3/2,
 * 7/4, 7/4, 2, 2 through the nibbles of one constant. */
static inline unsigned size_class_of(size_t size) {
    if (size <= 128) return (unsigned)((size + 15) >> 4);
    size_t w = size - 1;
    unsigned bit = 63u - (unsigned)__builtin_clzl(w);
    if (size <= 1024) return 9u + (bit - 7u) * 4u + (unsigned)((w >> (bit - 2u)) & 3u);
    unsigned eighth = (unsigned)((w >> (bit - 3u)) & 7u);
    return 21u + (bit - 10u) * 5u + ((0x44332210u >> (eighth * 4u)) & 15u);
}

#include "page_lookup.h" /* the segment map, pointer to page, the block test */

/* ---- segment.c ---- */
/* cls: the size class of the page, or LARGE_CLASS */
struct page *segment_page_alloc(struct heap *heap, unsigned slices, unsigned cls) INTERNAL;
void segment_page_free(struct heap *heap, struct page *page) INTERNAL;
void segment_page_free_frozen(struct page *page, bool clean) INTERNAL; /* fork child */
bool segment_page_grow(struct heap *heap, struct page *page, unsigned slices) INTERNAL;
void segment_page_shrink(struct heap *heap, struct page *page, unsigned slices) INTERNAL;
/* free_slices changes under the segment lock, and only so; the owner also
 * reads it without the lock, as a hint (segment_page_alloc): relaxed stores
 * make that read no data race. */
static inline void free_slices_set(struct segment *segment, uint64_t value) {
    __atomic_store_n(&segment->free_slices, value, __ATOMIC_RELAXED);
}
/* No free slice left (segment lock held). Slices a purger holds come back
 * free, so they do not count as taken. */
static inline bool segment_full_locked(const struct segment *segment) {
    return (segment->free_slices | segment->purging_slices) == 0;
}
/* Slices [first, first + count) as a mask. */
static inline uint64_t run_mask(unsigned first, unsigned count) {
    return (count >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << count) - 1)) << first;
}
/* Free resident slices join (add) or leave the retained memory. */
void retained_slices_note(uint64_t slices_mask, bool add) INTERNAL;
void retained_bytes_note(uint64_t bytes, bool add) INTERNAL; /* cached pages (page_cache.c) */
/* free slices not yet released */
extern _Atomic uint64_t g_retained_bytes INTERNAL;
extern _Atomic uint64_t g_page_slice_bytes INTERNAL; /* slices taken by pages (cached ones too) */
/* Pages whose every block that fits waits on thread_free (count == reserved):
 * free memory their owner has not collected; reclaimable by a purger. */
extern _Atomic uint64_t g_remote_freed_page_bytes INTERNAL;
void remote_freed_page_note(uint64_t page_bytes, bool add) INTERNAL;
static inline uint64_t remote_freed_page_bytes(void) {
    /* relaxed: a trigger and a statistic. Signed: the owner's subtraction
     * may land before the pusher's addition. */
    int64_t bytes = (int64_t)atomic_load_explicit(&g_remote_freed_page_bytes, memory_order_relaxed);
    return bytes > 0 ? (uint64_t)bytes : 0;
}

/* ---- segment_lifecycle.c ---- */
enum segment_source {
    SEGMENT_ANY,           /* an abandoned one (adopted), else a cached one, else a new one */
    SEGMENT_CACHED_OR_NEW, /* a cached one, else a new one */
    SEGMENT_NEW,           /* a new mapping: every slice free, nothing for a purger */
};
struct segment *segment_acquire(struct heap *heap, enum segment_source source) INTERNAL;
/* own_frees: a thread heap's own frees emptied it, the thread living on */
void segment_release_empty(struct heap *heap, struct segment *segment, bool own_frees) INTERNAL;
bool segment_cache_trim(bool everything, uint32_t now) INTERNAL;
void segment_abandon(struct segment *segment) INTERNAL;
void segment_orphan(struct segment *segment) INTERNAL;
struct segment *segment_try_adopt(struct heap *heap) INTERNAL;
void segments_mark_slow_frees(bool slow) INTERNAL; /* sets or clears OWNER_CHECKED_BIT */
/* The owner's lists: a segment goes to the full list when its last free
 * slice is taken, and back when slices return (owner only). */
void segment_move_to_full(struct heap *heap, struct segment *segment) INTERNAL;
void segment_lists_slices_returned(struct heap *heap, struct segment *segment) INTERNAL;
extern struct spin_lock g_registry_lock INTERNAL;
extern struct segment *g_registry INTERNAL;
extern struct spin_lock g_abandoned_lock INTERNAL;
extern struct spin_lock g_segment_cache_lock INTERNAL;
extern _Atomic uint64_t g_segment_count INTERNAL;

/* ---- segment_release.c ---- */
/* Ranges a purge pass releases together (segment_purge gathers them). */
#define PURGE_BATCH_MAX 32 /* 1 KiB of stack: passes also run on free()'s slow path */
struct purge_batch {
    struct iovec ranges[PURGE_BATCH_MAX];      /* what goes back, in address order per segment */
    struct segment *segments[PURGE_BATCH_MAX]; /* the segment of each range */
    uint64_t runs[PURGE_BATCH_MAX];            /* the slices of each range */
    unsigned count;                            /* ranges gathered */
};
size_t segment_purge(struct segment *segment, uint32_t now, uint32_t min_age_ms,
                     struct purge_batch *batch) INTERNAL;
size_t purge_batch_flush(struct purge_batch *batch) INTERNAL;
size_t purge_batch_bytes(const struct purge_batch *batch) INTERNAL; /* still counted as retained */
size_t segment_reclaim_pages(struct segment *segment, uint32_t now, uint32_t min_age_ms) INTERNAL;
void segment_purge_now(struct segment *segment, uint32_t now) INTERNAL;

/* ---- page.c ---- */
void page_init(struct page *page, unsigned class_index, size_t block_size) INTERNAL;
/* Sets the block test's inverse (0 closes it) and start in every slice of the page. */
void page_block_test_set(struct page *page, uint64_t inverse) INTERNAL;
bool page_extend(struct page *page) INTERNAL;             /* carve more blocks; false if full */
uint32_t page_collect_remote(struct page *page) INTERNAL; /* returns blocks collected */
bool page_stale_tail(const struct page *page, struct iovec *range) INTERNAL;
void page_collect_if_empties(struct page *page) INTERNAL;
NORETURN void report_corrupt_free_list(void) INTERNAL;
/* Whether a page that just emptied leaves its class (for the page cache or
 * its segment): all do but a class's only one-slice page, which stays, in
 * aggressive mode too, so that a malloc/free loop does not thrash; in a
 * segment the arena lent (PAGE_LENT) that one leaves too. A page on its
 * class's full list (PAGE_IN_FULL) always leaves. free's test and
 * heap_collect's. */
static inline bool page_leaves_when_empty(const struct page *page) {
    return page->next != page || page->slice_count > 1 || page->flags;
}

#include "free_list.h"

/* The calling thread's identity: its thread pointer (%fs:0 holds the TCB's own
 * address on x86-64), one load without a TLS lookup. A segment's owner_id is
 * its owner's thread pointer; it is reset when the thread exits, so a later
 * thread reusing the address never finds stale ownership. */
static inline uint64_t current_thread_id(void) {
    uint64_t id;
    __asm__("mov %%fs:0, %0" : "=r"(id));
    return id;
}
/* id == current_thread_id(), as one compare against the TLS word (free's
 * owner test: an instruction fewer than loading the id first). */
static inline bool is_current_thread_id(uint64_t id) {
    bool equal;
    __asm__("cmp %%fs:0, %1" : "=@ccz"(equal) : "r"(id));
    return equal;
}

/* The owning thread's id of a segment (0: none), without the mark that sends
 * its owner's frees down the slow path (free_remote_with_options). */
#define OWNER_CHECKED_BIT ((uint64_t)1 << 63) /* owner ids never match: frees go slow */
static inline uint64_t segment_owner_thread(const struct segment *segment) {
    /* relaxed: equal to a thread's id only if that thread stored it itself
     * (ownership changes on the owner's own thread, or to 0) */
    return atomic_load_explicit(&segment->owner_id, memory_order_relaxed) & ~OWNER_CHECKED_BIT;
}

/* ---- heap.c ---- */
extern __thread struct heap *t_heap __attribute__((tls_model("initial-exec"))) INTERNAL;
extern struct heap g_empty_heap INTERNAL;
extern struct page g_empty_page INTERNAL;
extern struct spin_lock g_heaps_lock INTERNAL;
extern struct heap *g_heaps INTERNAL;
extern _Atomic uint64_t g_heap_count INTERNAL;
extern _Atomic uint64_t g_heap_exits INTERNAL; /* threads that exited (with a heap) */
void *heap_malloc_slow(struct heap *heap, size_t size) INTERNAL;
/* malloc's fast path found class cls dry (cls 0: the generic path) */
void *heap_malloc_refill(size_t size, struct heap *heap, size_t cls) INTERNAL;
void *heap_malloc_shared(struct heap *heap, size_t size, size_t cls) INTERNAL; /* cls: shared */
void *heap_malloc_generic(struct heap *heap, size_t size, bool *is_zero) INTERNAL;
uintptr_t large_clean_from(const void *p) INTERNAL; /* realloc's copy: see heap.c */
void heap_atfork_child(bool locked) INTERNAL;       /* locked: the fork took our locks first */

/* ---- page_cache.c: the owner's calls but heap_cache_purge (purger or
 * malloc_trim, heaps lock held: releases the memory of pages cached for
 * min_age_ms, which stay cached, clean) ---- */
void page_cache_push(struct heap *heap, struct page *page) INTERNAL; /* an emptied page */
/* A cached page for class cls (best: same class, free list intact), else one
 * of `slices` slices; NULL if none. *reusable: its free list can stay. */
struct page *page_cache_take(struct heap *heap, unsigned cls, unsigned slices,
                             bool *reusable) INTERNAL;
void page_cache_flush(struct heap *heap, bool everything) INTERNAL; /* or those past the delay */
void page_cache_give_back_frozen(struct heap *heap) INTERNAL;       /* fork child */
void page_cache_each_resident(struct heap *heap, void (*visit)(struct page *page, void *arg),
                              void *arg) INTERNAL; /* cached pages not released */
size_t heap_cache_purge(struct heap *heap, uint32_t now, uint32_t min_age_ms) INTERNAL;
void *heap_malloc_aligned(struct heap *heap, size_t alignment, size_t size) INTERNAL;
void heap_page_empty(struct heap *heap, struct page *page) INTERNAL;
bool heap_page_empty_quiet(struct heap *heap, struct page *page) INTERNAL; /* true: purge due */
bool heap_large_grow(void *p, size_t size) INTERNAL;                       /* false: p untouched */
bool heap_large_shrink(void *p, size_t size) INTERNAL;                     /* false: p untouched */
void heap_adopt_page(struct heap *heap, struct page *page) INTERNAL;
/* large pages that other threads emptied back to their segments: returns how
 * many; adds the pages looked at to *visited (or NULL) */
uint32_t heap_large_pages_collect(struct heap *heap, uint32_t *visited) INTERNAL;
void heap_young_end(struct heap *heap) INTERNAL; /* owner: fine classes from now on */
void heap_class_tables_refresh(void) INTERNAL;   /* after g_class_of_small changed */
struct heap *heap_for_thread(void) INTERNAL;     /* creates this thread's heap if needed */
void heap_freed_block_check(struct page *page, struct block *b, const char *message) INTERNAL;
/* a heap owned by `id` (a thread's: may be young), on the heaps list; NULL
 * when out of memory */
struct heap *heap_create(uint64_t id, bool may_be_young) INTERNAL;
void heap_retire(struct heap *heap) INTERNAL; /* heap_create's undoing (its thread exited) */
/* heaps lock held, the heap already off the live list: onto the recycle list */
void heap_struct_recycle(struct heap *heap) INTERNAL;
/* what other threads freed where that empties a page (every list when
 * exiting), and empty pages given back: returns the pages looked at */
uint32_t heap_collect(struct heap *heap, bool exiting) INTERNAL;

/* ---- class_queue.c: class queues, full lists, the search for a page ----
 * head: &heap->pages_direct[class] (empty: &g_empty_page) or
 * &heap->pages_full[class] (empty: NULL) */
void queue_insert_head(struct page **head, struct page *page) INTERNAL;
void queue_insert_tail(struct page **head, struct page *page) INTERNAL; /* head stays first */
void queue_remove(struct page **head, struct page *page, struct page *empty) INTERNAL;
void full_list_remove(struct heap *heap, struct page *page) INTERNAL; /* clears PAGE_IN_FULL */
bool full_page_refilled(struct page *page) INTERNAL; /* blocks back (collected) or room to carve */
/* a page of class cls with a free block, made the queue's head; NULL: no
 * memory (the owner's, or the exit heap's lock held) */
struct page *heap_find_page(struct heap *heap, unsigned cls) INTERNAL;

/* ---- heap_exit.c ---- */
extern __thread uint8_t t_heap_exited __attribute__((tls_model("initial-exec"))) INTERNAL;
extern struct spin_lock g_exit_heap_lock INTERNAL;
void heap_thread_exit(void *heap) INTERNAL; /* the heap key's destructor */
/* a thread past its heap's exit: malloc (alignment 0) or an aligned block */
void *exit_heap_malloc(size_t alignment, size_t size, bool *is_zero) INTERNAL;
void heap_each_class_page(struct heap *heap, unsigned first,
                          void (*visit)(struct page *page, void *arg), void *arg) INTERNAL;
#define EXIT_HEAP_ID 16                              /* a thread id is its TLS address: never 16 */
struct heap *exit_heap_locked(bool create) INTERNAL; /* exit heap lock held */

/* ---- shared_class.c: the classes over 1 KiB, one heap for all threads.
 * The pop and the push on a thread's cache are inline here, in malloc's and
 * free's files (built for speed), and the rest out of line there: through
 * calls, a 1-8 KiB malloc and free took 170 instructions, twice tcmalloc's. */
void *shared_class_refill(struct heap *heap, unsigned cls) INTERNAL; /* the cache is empty */
/* the cache is past a limit, or the block's page lies in a lent segment */
void shared_class_over(struct heap *heap, const struct page *page) INTERNAL;
void shared_caches_release(struct heap *heap) INTERNAL; /* every cached block back */
void shared_depot_fork_lock(void) INTERNAL;             /* fork: its locks, after the exit heap's */
void shared_depot_fork_unlock(void) INTERNAL;
void shared_depot_forget(void) INTERNAL; /* fork child that took no lock */

/* The caches of a heap from heap_struct_alloc (never g_empty_heap's) */
static inline struct shared_caches *caches_of(struct heap *heap) {
    return &((struct thread_heap *)heap)->caches;
}

/* A cached block's link is encoded with its own address, as free lists'
 * are, but checked against the segment map, since the blocks of one list
 * may lie in different segments. */
static inline void shared_cache_link_set(struct block *b, struct block *next) {
    b->next_encoded = (uintptr_t)next ^ LINK_KEY ^ (uintptr_t)b;
}
static inline struct block *shared_cache_link_get(const struct block *b) {
    struct block *next = (struct block *)(b->next_encoded ^ LINK_KEY ^ (uintptr_t)b);
    if (unlikely(((uintptr_t)next & (ALIGNMENT - 1)) != 0 ||
                 !segment_map_contains((uintptr_t)next)))
        report_corrupt_free_list();
    return next;
}

/* A block of class cls (SHARED_CLASS_FIRST on) for the thread of `heap`
 * (not the shared heap, not g_empty_heap). */
static inline void *shared_class_pop(struct heap *heap, unsigned cls) {
    struct shared_caches *caches = caches_of(heap);
    struct shared_cache *cache = &caches->classes[cls - SHARED_CLASS_FIRST];
    if (unlikely(cache->count == 0)) return shared_class_refill(heap, cls);
    struct block *b = cache->head;
    cache->head = --cache->count > 0 ? shared_cache_link_get(b) : NULL;
    caches->bytes -= shared_class_size(cls);
    block_free_mark_clear(b);
    return b;
}

/* A block of a shared class onto the cache of the thread of `heap`, freed by
 * a thread with a heap; the caller tested its key already. */
static inline void shared_class_push(struct heap *heap, struct page *page, struct block *b) {
    unsigned cls = page->class_index;
    struct shared_caches *caches = caches_of(heap);
    struct shared_cache *cache = &caches->classes[cls - SHARED_CLASS_FIRST];
    block_free_mark(b, page);
    shared_cache_link_set(b, cache->head);
    cache->head = b;
    caches->bytes += page->block_size;
    /* a block of a page in a lent segment leaves at once (shared_class_over) */
    if (unlikely(++cache->count > cache->limit || caches->bytes > caches->bound ||
                 page->in_lent_segment))
        shared_class_over(heap, page);
}
/* malloc_trim: its empty pages back; false: there is no shared heap */
bool shared_heap_collect(void) INTERNAL;
bool shared_heap_give_back(void) INTERNAL;                   /* memory is short: true if it tried */
void heap_shared_slow_path_note(struct heap *heap) INTERNAL; /* exit heap lock held */
/* free.c: b back on its page's list, the exit heap lock held (its pages'
 * owner fields); true if a page emptied (purge_after_free due) */
bool free_shared_locked(struct segment *segment, struct page *page, struct block *b) INTERNAL;
/* free.c: the list first..last of count blocks onto their page's thread_free */
void thread_free_push_blocks(struct page *page, struct block *first, struct block *last,
                             uint32_t count) INTERNAL;

/* ---- huge.c ---- */
void *huge_alloc(size_t size, size_t alignment, bool zero_needed, bool retain_on_free) INTERNAL;
void *huge_alloc_guarded(size_t size, size_t alignment) INTERNAL; /* secure mode */
bool huge_free(void *p) INTERNAL;                                 /* false: not ours */
/* false: not ours; clean_from: see huge.c */
bool huge_usable_size(const void *p, size_t *usable, uintptr_t *clean_from) INTERNAL;
/* among the last 64 huge blocks freed of their kind (arena chunk, own mapping) */
bool huge_recently_freed(const void *p) INTERNAL;
void *huge_realloc(void *p, size_t size) INTERNAL; /* NULL: could not, p untouched */
extern struct spin_lock g_huge_lock INTERNAL;
extern _Atomic uint64_t g_huge_count INTERNAL;
extern _Atomic uint64_t g_huge_bytes INTERNAL;
extern _Atomic uint64_t g_huge_max_bytes INTERNAL;
extern _Atomic uint64_t g_huge_max_count INTERNAL;

/* ---- arena.c, arena_release.c: blocks over ARENA_MIN and under the mmap threshold ---- */
/* Each function takes the locks it needs (a chunk's, and the huge lock
 * before it to add, remove or search several chunks). arena_alloc: `size`
 * bytes (page multiple) aligned to `alignment` (a power of two, at least a
 * page) for the thread of `heap`, recorded as a block of its chunk, or NULL;
 * resident_only: only from freed memory that covers it, at most an eighth of
 * it clean (a block over the mmap threshold); retain: taken under the
 * threshold; *dirty_end: the end of the last part taken that may be
 * resident (at or before the block's start: the block reads as zeros). */
void *arena_alloc(size_t size, size_t alignment, bool resident_only, bool retain,
                  uintptr_t *dirty_end, struct heap *heap) INTERNAL;
/* What the next three say of a pointer: no chunk holds it (ARENA_NONE), a
 * chunk holds it but it is no block there or the call cannot be done
 * (ARENA_NO), or done (ARENA_DONE). arena_free: *size and *retain of the
 * block freed. arena_resize: to `size` bytes
 * (page multiple) in place, growing into free extents or giving the tail
 * back; ARENA_NO: the caller copies. */
enum { ARENA_NONE, ARENA_NO, ARENA_DONE };
int arena_free(void *p, size_t *size, bool *retain) INTERNAL;
/* clean_from (or NULL): where the block, as handed out, starts to read as zeros, not resident */
int arena_usable_size(const void *p, size_t *usable, uintptr_t *clean_from) INTERNAL;
int arena_resize(void *p, size_t size) INTERNAL;
bool arena_recently_freed(const void *p) INTERNAL; /* among its chunk's last 64 freed */
/* its thread exits (lock), or a fork child forgets the threads (no lock) */
void arena_disown(struct heap *heap, bool lock) INTERNAL;
/* Releases free extents idle for the purge delay (all: everything) and
 * unmaps wholly free chunks. True if anything went. */
bool arena_release(bool everything, uint32_t now) INTERNAL;
/* arena_lend: `size` bytes aligned to `alignment` (a power of two) from the
 * chunks' free address space, reading as zero, for a segment that could not
 * be mapped; NULL if no run fits. arena_lent_back: such a range, no longer
 * used. */
void *arena_lend(size_t size, size_t alignment) INTERNAL;
void arena_lent_back(uintptr_t start, size_t size) INTERNAL;
void arena_fork_lock(void) INTERNAL;                  /* every chunk's lock, the huge lock held */
void arena_fork_unlock(void) INTERNAL;                /* and back */
extern _Atomic uint64_t g_arena_dirty_bytes INTERNAL; /* free, maybe resident */
extern _Atomic uint64_t g_arena_used_bytes INTERNAL;  /* in blocks handed out */

/* ---- purge.c ---- */
void purge_after_free(void) INTERNAL; /* called on slow paths that retained memory */
bool purge_everything(size_t pad) INTERNAL;
/* At most one thread heap (the exit heap aside) grew in the retain bound's last
 * window: the bound and the segment cache keep what the recent peak used. */
bool retain_one_growing_heap(void) INTERNAL;
/* The refault hold (purge.c): refaults cost past refault_percent of the CPU
 * time lately. While it lasts the retain bound is off, and the segment cache
 * keeps what a thread's own frees empty. */
extern _Atomic uint32_t g_refault_hold_until_ms INTERNAL; /* 0: none */
static inline bool refault_hold(uint32_t now) {
    /* relaxed: a hint; a stale value moves one decision */
    uint32_t until = atomic_load_explicit(&g_refault_hold_until_ms, memory_order_relaxed);
    return until != 0 && (int32_t)(until - now) > 0;
}
void purge_atfork_child(void) INTERNAL;

/* ---- free.c / alloc.c ---- */
/* p is no live block: aborts with `message`, or, when `message` is
 * g_free_invalid_pointer and p's memory shows a block freed there (a large
 * page's first slice free again in its segment, one of the last huge blocks
 * freed), with free's double-free message. */
NORETURN void report_invalid_pointer(const void *p, const char *message) INTERNAL;
extern const char g_free_invalid_pointer[] INTERNAL; /* "free(): invalid pointer" */
/* "free(): heap overflow detected": secure mode's canaries and size words,
 * and huge blocks' guard bytes (one copy, in the code's segment) */
extern const char g_free_heap_overflow[] INTERNAL;
/* The page of a pointer into our segments, after checking it is the start of
 * a block of an in-use page (block_offset_valid says why one test is enough). */
static inline struct page *page_of_block_in(struct segment *segment, const void *p,
                                            const char *message) {
    const struct page *slice = block_slice_in(segment, p);
    /* the slice's copies of the test (page_block_test_set): a slice never
     * part of a page reads zero there, and zero accepts nothing */
    if (CHECKS_ON && unlikely(block_start_invalid(p, slice))) report_invalid_pointer(p, message);
    return slice->first;
}
static inline struct page *page_of_block(const void *p, const char *message) {
    return page_of_block_in(segment_of(p), p, message);
}
size_t block_usable_size(const void *p, const char *function) INTERNAL;
void free_internal(void *p) INTERNAL;
void realloc_freed_check(void *p) INTERNAL; /* p's free key is set: aborts if p is free */
void remote_batches_flush(struct heap *heap) INTERNAL;        /* pushes every batch of the heap */
bool remote_batch_open_for(const struct page *page) INTERNAL; /* some heap batches its blocks */

/* ---- check.c: secure mode and MALLOC_PERTURB_ ---- */
#define SECURE_TRAILER 5    /* at least one canary byte, then the requested size (4 bytes) */
#define CANARY_BYTE    0xa5 /* secure mode: what fills the bytes past a block's requested size */
void *checked_malloc(struct heap *heap, size_t size, size_t alignment, bool *is_zero) INTERNAL;
void checked_before_free(struct page *page, struct block *b) INTERNAL;
void aggressive_release_block(const struct page *page, struct block *b) INTERNAL;
void checked_before_reuse(struct page *page, struct block *b) INTERNAL;
size_t checked_usable_size(const struct page *page, const void *p) INTERNAL;
void *heap_malloc_class_checked(struct heap *heap, unsigned cls) INTERNAL;
void *heap_malloc_class(struct heap *heap, unsigned cls) INTERNAL; /* NULL: ENOMEM */

/* ---- stats.c ---- */
void stats_print_at_exit(void) INTERNAL;

/* ---- fork.c ---- */
void fork_handlers_install(void) INTERNAL;

#endif
