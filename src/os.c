/* Every memory syscall the allocator makes goes through here and is counted,
 * so tests and benchmarks can assert the release behaviour (lesson 1).
 * Syscalls are made directly, without libc's wrappers: errno is never touched
 * (free must preserve it) and no thread-local state is used, so the purger
 * thread (purge.c), which has no TLS of its own, can call them too. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>

#include "internal.h"

struct os_counters g_os;

/* relaxed: counters are statistics; readers want a recent value, not an order. */
#define COUNT(field, n) atomic_fetch_add_explicit(&g_os.field, (n), memory_order_relaxed)

long raw_syscall6(long number, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return result; /* -errno on failure */
}

void os_yield(void) {
    raw_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
}

/* Our own memory (segments, metadata) is mapped MAP_NORESERVE: a segment is
 * charged to the commit only for what it uses (vm.overcommit_memory=2 ignores
 * the flag and charges it whole). */
static void *raw_mmap(void *address, size_t size, int flags) {
    long r = raw_syscall6(SYS_mmap, (long)address, (long)size, PROT_READ | PROT_WRITE,
                          flags | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return r < 0 && r > -4096 ? MAP_FAILED : (void *)r;
}

static void raw_munmap(void *address, size_t size) {
    raw_syscall6(SYS_munmap, (long)address, (long)size, 0, 0, 0, 0);
}

static void *map_anywhere(size_t size, int flags) {
    COUNT(mmap_calls, 1);
    void *p = raw_mmap(NULL, size, flags);
    if (p == MAP_FAILED) return NULL;
    COUNT(bytes_mapped, size);
    return p;
}

void *os_map(size_t size) {
    return map_anywhere(size, MAP_NORESERVE);
}

/* A block mapped on its own is charged whole, as glibc's mapped chunks are:
 * the kernel's overcommit policy then judges it as it would glibc's, so that
 * malloc(64 TiB) fails with ENOMEM under the default heuristic instead of
 * returning memory that cannot be had. */
WARM void *os_map_block(size_t size) {
    return map_anywhere(size, 0);
}

void os_unmap(void *address, size_t size) {
    COUNT(munmap_calls, 1);
    raw_munmap(address, size);
    atomic_fetch_sub_explicit(&g_os.bytes_mapped, size, memory_order_relaxed);
}

void *os_cut_aligned(void *mapping, size_t span, size_t size, size_t alignment) {
    uintptr_t raw = (uintptr_t)mapping,
              aligned = (raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
    size_t head = aligned - raw, tail = span - head - size;
    if (head) os_unmap(mapping, head);
    if (tail) os_unmap((void *)(aligned + size), tail);
    return (void *)aligned;
}

/* A mapping that starts on a segment boundary: over-map by a segment and cut
 * the unaligned ends off. */
static void *map_aligned(size_t size, int flags) {
    char *raw = map_anywhere(size + SEGMENT_SIZE, flags);
    return raw ? os_cut_aligned(raw, size + SEGMENT_SIZE, size, SEGMENT_SIZE) : NULL;
}

static _Atomic uint32_t unmapping_trims;      /* trims running */
static _Atomic uint64_t unmapping_generation; /* trims ended */

void os_unmapping_begin(void) {
    /* relaxed, all four: a hint to try a mapping once more, which the kernel
     * then answers; nothing is published through them */
    atomic_fetch_add_explicit(&unmapping_trims, 1, memory_order_relaxed);
}

void os_unmapping_end(void) {
    atomic_fetch_add_explicit(&unmapping_generation, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&unmapping_trims, 1, memory_order_relaxed);
}

uint64_t os_unmapping_generation(void) {
    return atomic_load_explicit(&unmapping_generation, memory_order_relaxed);
}

RARE bool os_unmapping_wait(uint64_t generation_before) {
    /* a time bound, not a count: on a loaded machine a thousand yields
     * passed before a trim's munmaps of 100 MiB were done (and a fork child
     * whose parent forked mid-trim sees a count that never drops) */
    uint32_t start = clock_ms();
    while (atomic_load_explicit(&unmapping_trims, memory_order_relaxed) &&
           (uint32_t)(clock_ms() - start) < 200)
        os_yield();
    return os_unmapping_generation() != generation_before;
}

RARE void *os_map_after_trims(void *(*map)(size_t size), size_t size, uint64_t generation_before) {
    void *p = NULL;
    for (int retry = 0; p == NULL && retry < 8 && os_unmapping_wait(generation_before); retry++) {
        generation_before = os_unmapping_generation();
        p = map(size);
    }
    return p;
}

/* A release the kernel refused (a sandbox's seccomp filter, EINVAL on
 * locked memory) is not tried again for RELEASE_REFUSED_MS: every pass tried
 * every range again, 2,800 refused calls a second (rel_release_refused,
 * seventy-third session). The memory stays retained and is reused. */
#define RELEASE_REFUSED_MS 1000
static _Atomic uint32_t release_refused_ms; /* when one was last refused; 0: never */

/* Out of the code every program maps: only a refusal runs them. */
RARE static NOINLINE bool release_refused_lately(uint32_t refused) {
    return (uint32_t)(clock_ms() - refused) < RELEASE_REFUSED_MS;
}
RARE static NOINLINE void release_refused_note(void) {
    /* relaxed: a rate limit; a stale value costs one refused call more */
    atomic_store_explicit(&release_refused_ms, clock_ms() | 1, memory_order_relaxed);
}

bool os_release(void *address, size_t size) {
    /* relaxed: as in release_refused_note */
    uint32_t refused = atomic_load_explicit(&release_refused_ms, memory_order_relaxed);
    if (unlikely(refused != 0) && release_refused_lately(refused)) return false;
    COUNT(madvise_calls, 1);
    bool ok = raw_syscall6(SYS_madvise, (long)address, (long)size, MADV_DONTNEED, 0, 0, 0) == 0;
    if (ok)
        COUNT(bytes_released, size);
    else
        release_refused_note();
    return ok;
}

/* process_madvise(2) on the process itself (the PIDFD_SELF sentinel, in
 * recent kernels) releases many ranges in one system call, with one TLB flush
 * for all of them where the kernel batches them (Linux 6.18 here): a flush
 * interrupts every CPU that runs one of the process's threads. The first
 * failure (an older kernel, valgrind, a seccomp filter that refuses it) sets
 * M_BATCHED_RELEASE to 0: plain madvise from then on, as a user sets it for a
 * seccomp filter that kills the process instead of refusing. */
#define PIDFD_SELF_THREAD (-10000) /* the calling thread: its memory is the process's */

uint64_t os_release_ranges(const struct iovec *ranges, unsigned count) {
    uint64_t done = 0;
    unsigned next = 0;
    /* relaxed (OPTION): a switch; a stale 1 only costs one more failed call */
    if (count > 1 && OPTION(batched_release)) {
        COUNT(madvise_calls, 1);
        long r = raw_syscall6(SYS_process_madvise, PIDFD_SELF_THREAD, (long)ranges, (long)count,
                              MADV_DONTNEED, 0, 0);
        if (r < 0) OPTION_SET(batched_release, false);
        /* the ranges are done in order: those the byte count covers went back */
        for (size_t left = r < 0 ? 0 : (size_t)r; next < count && ranges[next].iov_len <= left;
             next++) {
            left -= ranges[next].iov_len;
            done |= (uint64_t)1 << next;
            COUNT(bytes_released, ranges[next].iov_len);
        }
    }
    for (; next < count; next++)
        if (os_release(ranges[next].iov_base, ranges[next].iov_len)) done |= (uint64_t)1 << next;
    return done;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* A copy is about to write every page of [address, address + size), pages
 * that are not resident: one system call makes them present, where the
 * copy would fault on each. A fault costs an exception on top of the
 * kernel's work, and on a guest with shadow page tables that is much of it:
 * here on 2026-12-05 a fault took 10 µs a page, populating 0.6, and the
 * first write to a present page 4.7 either way (the hypervisor's share): a
 * 4 MiB copy into a fresh mapping took 10.8 ms, 5.9 populated. A kernel
 * or a seccomp filter that refuses the advice (EINVAL before 5.14, ENOSYS,
 * EPERM) sets M_POPULATE to 0: the copy faults as before, as when a user
 * sets it for a filter that kills the process instead. It counts with the
 * advice calls: it releases nothing. */
WARM void os_populate(void *address, size_t size) {
    /* relaxed (OPTION): a switch; a stale 1 costs one more refused call */
    if (!OPTION(populate)) return;
    COUNT(advice_calls, 1);
    long r = raw_syscall6(SYS_madvise, (long)address, (long)size, MADV_POPULATE_WRITE, 0, 0, 0);
    if (r == -EINVAL || r == -ENOSYS || r == -EPERM) OPTION_SET(populate, false);
}

WARM void *os_remap(void *address, size_t old_size, size_t new_size) {
    COUNT(mremap_calls, 1);
    long r = raw_syscall6(SYS_mremap, (long)address, (long)old_size, (long)new_size, MREMAP_MAYMOVE,
                          0, 0);
    if (r < 0 && r > -4096) return NULL;
    if (new_size > old_size)
        COUNT(bytes_mapped, new_size - old_size);
    else
        atomic_fetch_sub_explicit(&g_os.bytes_mapped, old_size - new_size, memory_order_relaxed);
    return (void *)r;
}

/* The smaller soft limit of the two that count a private writable mapping
 * (RLIMIT_DATA does since Linux 4.7, mapped or touched alike). */
WARM uint64_t os_mapping_limit(void) {
    uint64_t smallest = UINT64_MAX;
    static const int resources[] = {RLIMIT_AS, RLIMIT_DATA};
    for (unsigned i = 0; i < sizeof resources / sizeof resources[0]; i++) {
        struct {
            uint64_t soft, hard;
        } limit;
        /* prlimit64 on the process itself: getrlimit's answer, without libc */
        if (raw_syscall6(SYS_prlimit64, 0, resources[i], 0, (long)&limit, 0, 0) == 0 &&
            limit.soft < smallest)
            smallest = limit.soft;
    }
    return smallest;
}

RARE bool os_protect_none(void *address, size_t size) {
    return raw_syscall6(SYS_mprotect, (long)address, (long)size, PROT_NONE, 0, 0, 0) == 0;
}

/* Where the next segment probably fits aligned: the kernel hands out
 * addresses top-down, so asking just below the last segment usually gets an
 * aligned one in a single mmap. relaxed: only a hint, any value is safe. */
static _Atomic uintptr_t next_segment_hint;

void *os_map_segment(void) {
    uintptr_t hint = atomic_load_explicit(&next_segment_hint, memory_order_relaxed);
    /* First segment: a slot well below this library, which the kernel's
     * top-down placement leaves free, saves the over-map and its two munmaps. */
    if (hint == 0)
        hint = ((uintptr_t)&next_segment_hint & ~(uintptr_t)SEGMENT_MASK) - 64 * SEGMENT_SIZE;
    /* MAP_FIXED_NOREPLACE fails instead of moving, so a taken hint costs one
     * failed mmap and no munmap; a few slots further down are tried. */
    for (int attempt = 0; attempt < 4; attempt++, hint -= SEGMENT_SIZE) {
        COUNT(mmap_calls, 1);
        void *p = raw_mmap((void *)hint, SEGMENT_SIZE, MAP_FIXED_NOREPLACE | MAP_NORESERVE);
        if (p == (void *)hint) {
            atomic_store_explicit(&next_segment_hint, hint - SEGMENT_SIZE, memory_order_relaxed);
            COUNT(bytes_mapped, SEGMENT_SIZE);
            os_advise_segment(p);
            return p;
        }
        if (p != MAP_FAILED) { /* an old kernel ignored the flag */
            COUNT(munmap_calls, 1);
            raw_munmap(p, SEGMENT_SIZE);
            break;
        }
    }
    char *aligned = map_aligned(SEGMENT_SIZE, MAP_NORESERVE);
    if (aligned == NULL) return NULL;
    atomic_store_explicit(&next_segment_hint, (uintptr_t)aligned - SEGMENT_SIZE,
                          memory_order_relaxed);
    os_advise_segment(aligned);
    return aligned;
}

/* The start of a small file, NUL-terminated; false if it cannot be read.
 * Raw system calls: free() must not change errno or reach a cancellation
 * point, and nothing here may allocate. */
static bool read_small_file(const char *path, char *text, size_t size) {
    long fd = raw_syscall6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0) return false;
    long got = raw_syscall6(SYS_read, fd, (long)text, (long)size - 1, 0, 0, 0);
    raw_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
    if (got <= 0) return false;
    text[got] = 0;
    return true;
}

static uint64_t parse_decimal(const char *c) {
    uint64_t value = 0;
    while (*c >= '0' && *c <= '9')
        value = value * 10 + (uint64_t)(*c++ - '0');
    return value;
}

/* The first decimal number after `key` in a small file (/proc, /sys), 0 if
 * there is none: "Hugepagesize:" in /proc/meminfo, "VmHWM:" in
 * /proc/self/status ("" for a file that holds only the number). */
RARE uint64_t os_read_number_after(const char *path, const char *key) {
    char text[4096];
    if (!read_small_file(path, text, sizeof text)) return 0;
    const char *at = text_find(text, key);
    if (at == NULL) return 0;
    at += text_length(key);
    while (*at == ' ' || *at == '\t')
        at++;
    return parse_decimal(at);
}

/* Nanoseconds the calling thread has spent runnable but waiting for a CPU
 * (the second field of /proc/thread-self/schedstat), 0 if it cannot be read. */
uint64_t os_thread_run_wait_ns(void) {
    char text[96];
    if (!read_small_file("/proc/thread-self/schedstat", text, sizeof text)) return 0;
    const char *c = text;
    while (*c >= '0' && *c <= '9')
        c++; /* the thread's CPU time */
    while (*c == ' ')
        c++;
    return parse_decimal(c);
}

/* glibc.malloc.hugetlb, with glibc's meaning, set once at start-up:
 * 1 asks for transparent huge pages (madvise MADV_HUGEPAGE) on mappings of at
 * least the THP size, only where the kernel's THP mode is "madvise" (in
 * "always" they come anyway, in "never" not at all); 2 maps blocks of at
 * least the default huge page size on explicit huge pages (MAP_HUGETLB), and
 * a larger value names the huge page size to use, if the kernel has it. */
static size_t thp_size;       /* 0: no MADV_HUGEPAGE */
static size_t huge_page_size; /* 0: no MAP_HUGETLB */
static int huge_page_flags;   /* MAP_HUGETLB and the page size's log2 */
static bool thp_wanted;       /* hugetlb 1: segments keep the kernel's huge pages */

/* Whether the kernel's THP mode is `mode` ("[always]", "[madvise]"). */
static bool thp_mode_is(const char *mode) {
    char text[256];
    return read_small_file("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text) &&
           text_find(text, mode) != NULL;
}

RARE void os_huge_pages_configure(uint64_t hugetlb) {
    char text[256];
    thp_wanted = hugetlb == 1;
    if (hugetlb == 1) {
        if (thp_mode_is("[madvise]"))
            thp_size = (size_t)os_read_number_after(
                "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "");
        return;
    }
    if (hugetlb < 2) return;
    uint64_t size = 0;
    if (hugetlb == 2) {
        size = os_read_number_after("/proc/meminfo", "Hugepagesize:") << 10;
    } else {
        /* a size the kernel offers has its directory of counters */
        if ((hugetlb & 1023) != 0) return;
        char path[96] = "/sys/kernel/mm/hugepages/hugepages-";
        char digits[24];
        size_t n = 0, length = text_length(path);
        for (uint64_t kib = hugetlb >> 10; kib; kib /= 10)
            digits[n++] = (char)('0' + kib % 10);
        while (n)
            path[length++] = digits[--n];
        __builtin_memcpy(path + length, "kB/nr_hugepages", sizeof "kB/nr_hugepages");
        if (!read_small_file(path, text, sizeof text)) return;
        size = hugetlb;
    }
    if (size < OS_PAGE_SIZE || (size & (size - 1)) != 0) return;
    huge_page_size = (size_t)size;
    huge_page_flags = MAP_HUGETLB | (__builtin_ctzll(size) << MAP_HUGE_SHIFT);
}

/* hugetlb 1: a fresh mapping of at least the THP size asks for huge pages. */
void os_advise_huge_pages(void *address, size_t size) {
    if (thp_size == 0 || size < thp_size) return;
    COUNT(advice_calls, 1);
    raw_syscall6(SYS_madvise, (long)address, (long)size, MADV_HUGEPAGE, 0, 0, 0);
}

/* Where the kernel's THP mode is "always", a segment's first touch in each
 * aligned 2 MiB took a whole huge page: an empty program peaked at 4.6 MiB
 * instead of 1.2, cache-scratch at 9.8 instead of 1.6, mstress at 36 instead
 * of 16 (glibc 1.0, 1.5 and 12.7: its heaps fill their 2 MiB ranges before
 * the kernel can back them with one page), and releasing a 64 KiB slice split
 * the page. Segments opt out there, one madvise each, unless
 * glibc.malloc.hugetlb=1 asked for huge pages. (The segment map is
 * read-only but for the pages that hold set bytes: it holds none.) Blocks
 * mapped on their own are left to the kernel, as glibc leaves its mapped
 * chunks. */
static bool segments_refuse_thp;

static void advise_pages(void *address, size_t size, int advice) {
    uintptr_t from = ((uintptr_t)address + OS_PAGE_SIZE - 1) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    uintptr_t to = ((uintptr_t)address + size) & ~(uintptr_t)(OS_PAGE_SIZE - 1);
    if (to <= from) return;
    COUNT(advice_calls, 1);
    raw_syscall6(SYS_madvise, (long)from, (long)(to - from), advice, 0, 0, 0);
}

/* The segment map (segment.c) is 32 MiB of address space, mapped read-only
 * at start-up: it reads as zero and a read-only private mapping is not charged
 * to the commit (as writable .bss it was: Committed_AS grew by 33 MiB a
 * process, against glibc's 0.4, and under vm.overcommit_memory=2 the charge
 * is enforced). The page of a byte about to be set is made writable first
 * (one page covers 16 GiB of address space). A read-only range of 4 KiB
 * pages can hold no huge page either: after the mprotect of one page the
 * kernel splits a huge zero page that reads faulted in. It is not .bss: Linux
 * places a file mapping of 2 MiB or more at a 2 MiB boundary, so a library
 * that large loses 9 bits of address randomization, and every library mapped
 * below it keeps a fixed offset to it (libc's address was fixed modulo 2 MiB
 * in every process that loaded us). */
/* 1 + the map page made writable last, or 0. A page missed here is made
 * writable again (mprotect of a writable page changes nothing), which is one
 * system call per new segment at worst: the segments of a process lie close
 * together, and one map page covers 16 GiB of them. (A flag per map page,
 * 8 KiB of .bss, put the small variables on a page of their own.) */
static _Atomic uintptr_t map_page_writable_last;

bool os_segment_map_writable(uintptr_t index) {
    /* written before any segment is made (allocator_init) */
    if (index >= g_segment_map.entries) return false; /* no map: no segment either */
    uintptr_t page = index / OS_PAGE_SIZE;
    /* acquire: pairs with the release below, so that mprotect is complete */
    if (atomic_load_explicit(&map_page_writable_last, memory_order_acquire) == page + 1)
        return true;
    long r = raw_syscall6(SYS_mprotect, (long)(g_segment_map.bytes + page * OS_PAGE_SIZE),
                          OS_PAGE_SIZE, PROT_READ | PROT_WRITE, 0, 0, 0);
    if (r != 0) return false; /* the commit limit, or the mapping count: no segment */
    atomic_store_explicit(&map_page_writable_last, page + 1, memory_order_release);
    return true;
}

void os_segments_init(void) {
    COUNT(mmap_calls, 1);
    long r = raw_syscall6(SYS_mmap, 0, (long)SEGMENT_MAP_ENTRIES, PROT_READ,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    /* without the map no segment is made: small blocks fail with ENOMEM,
     * blocks mapped on their own still work */
    if (r < 0 && r > -4096) return;
    /* the pointer first: a bound seen is then a mapping there (x86-64 keeps
     * stores in order; the fence keeps the compiler from swapping them) */
    __atomic_store_n(&g_segment_map.bytes, (_Atomic uint8_t *)r, __ATOMIC_RELAXED);
    atomic_signal_fence(memory_order_release);
    __atomic_store_n(&g_segment_map.entries, SEGMENT_MAP_ENTRIES, __ATOMIC_RELAXED);
    if (!thp_wanted && thp_mode_is("[always]")) segments_refuse_thp = true;
}

void os_advise_segment(void *segment) {
    os_advise_arena_chunk(segment, SEGMENT_SIZE);
}

/* An arena chunk is carved as a segment is: a huge page would charge a
 * block of 300 KiB for 2 MiB, so the kernel's "always" is refused too. */
void os_advise_arena_chunk(void *chunk, size_t size) {
    os_advise_huge_pages(chunk, size);
    if (segments_refuse_thp) advise_pages(chunk, size, MADV_NOHUGEPAGE);
}

/* A new arena chunk: advised as above, and the segment map's pages for its
 * range made writable now, while the limit has room. A segment lent from
 * it when address space runs short (arena_lend) needs its byte there, and
 * under RLIMIT_DATA making a map page writable charges 4 KiB: at the limit
 * the mprotect failed, and the lent segment with it, wherever the chunk lay
 * in a 16 GiB range no segment had used (`oom lent data`, a run in 20-40).
 * Best effort: a failure here leaves what was (the mprotect at lending). */
void os_arena_chunk_mapped(void *chunk, size_t size) {
    os_advise_arena_chunk(chunk, size);
    uintptr_t index = (uintptr_t)chunk >> SEGMENT_SHIFT;
    uintptr_t last = ((uintptr_t)chunk + size - 1) >> SEGMENT_SHIFT;
    for (; index < last; index += OS_PAGE_SIZE) /* one map page a step */
        os_segment_map_writable(index);
    os_segment_map_writable(last);
}

/* hugetlb 2 or more: `size` rounded up to whole huge pages, mapped on them if
 * it is at least one huge page and the kernel has them free; NULL otherwise
 * (the caller maps normal pages instead). */
WARM void *os_map_huge_pages(size_t size, size_t *mapped) {
    if (huge_page_size == 0 || size < huge_page_size) return NULL;
    size_t rounded = (size + huge_page_size - 1) & ~(huge_page_size - 1);
    if (rounded < size) return NULL;
    COUNT(mmap_calls, 1);
    long r = raw_syscall6(SYS_mmap, 0, (long)rounded, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | huge_page_flags, -1, 0);
    if (r < 0 && r > -4096) return NULL;
    COUNT(bytes_mapped, rounded);
    *mapped = rounded;
    return (void *)r;
}

/* The kernel's own clock_gettime in the vDSO, found once at start-up. libc's
 * wrapper would cost a small program the pages of libc around it, which the
 * kernel maps 64 KiB at a time (cache-scratch: 1696 -> 1568 KiB of peak RSS),
 * and a system call takes ten times as long (threadchurn reads the clock
 * 118,000 times). It touches no TLS and leaves errno alone, so the purger
 * and free may call it. NULL (no vDSO, under valgrind): the system call. */
typedef int (*vdso_clock_gettime_fn)(clockid_t clock, struct timespec *t);
static vdso_clock_gettime_fn vdso_clock_gettime;

/* A function of the vDSO by name: its symbol table through DT_HASH, which
 * x86-64 kernels provide (the kernel's own tools/testing/.../parse_vdso.c
 * reads it the same way). */
static void *vdso_function(const char *name) {
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0) return NULL;
    const Elf64_Ehdr *header = (const Elf64_Ehdr *)base;
    if (!text_same((const char *)header->e_ident, ELFMAG, SELFMAG) ||
        header->e_ident[EI_CLASS] != ELFCLASS64)
        return NULL;
    const Elf64_Phdr *segments = (const Elf64_Phdr *)(base + header->e_phoff);
    uintptr_t bias = 0;
    const Elf64_Dyn *dynamic = NULL;
    bool loaded = false;
    for (unsigned i = 0; i < header->e_phnum; i++) {
        if (segments[i].p_type == PT_LOAD && !loaded) {
            bias = base + segments[i].p_offset - segments[i].p_vaddr;
            loaded = true;
        } else if (segments[i].p_type == PT_DYNAMIC) {
            dynamic = (const Elf64_Dyn *)(base + segments[i].p_offset);
        }
    }
    if (!loaded || dynamic == NULL) return NULL;
    const Elf64_Sym *symbols = NULL;
    const char *names = NULL;
    const Elf32_Word *hash = NULL;
    for (; dynamic->d_tag != DT_NULL; dynamic++) {
        if (dynamic->d_tag == DT_SYMTAB) symbols = (const Elf64_Sym *)(bias + dynamic->d_un.d_ptr);
        if (dynamic->d_tag == DT_STRTAB) names = (const char *)(bias + dynamic->d_un.d_ptr);
        if (dynamic->d_tag == DT_HASH) hash = (const Elf32_Word *)(bias + dynamic->d_un.d_ptr);
    }
    if (symbols == NULL || names == NULL || hash == NULL) return NULL;
    for (Elf32_Word i = 0; i < hash[1]; i++) /* hash[1]: the number of symbols */
        if (ELF64_ST_TYPE(symbols[i].st_info) == STT_FUNC && symbols[i].st_shndx != SHN_UNDEF &&
            text_equal(names + symbols[i].st_name, name))
            return (void *)(bias + symbols[i].st_value);
    return NULL;
}

void os_clock_init(void) {
    void *f = vdso_function("__vdso_clock_gettime");
    __builtin_memcpy(&vdso_clock_gettime, &f, sizeof f); /* object -> function pointer */
}

static bool os_clock_gettime(clockid_t clock, struct timespec *t) {
    if (vdso_clock_gettime) return vdso_clock_gettime(clock, t) == 0;
    return raw_syscall6(SYS_clock_gettime, clock, (long)t, 0, 0, 0, 0) == 0;
}

uint32_t clock_ms(void) {
    struct timespec now;
    if (!os_clock_gettime(CLOCK_MONOTONIC_COARSE, &now)) return 0;
    return (uint32_t)((uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
}

/* CPU time of the whole process and the monotonic clock, in microseconds
 * (0 if unreadable). */
static uint64_t clock_us(clockid_t clock) {
    struct timespec t;
    if (!os_clock_gettime(clock, &t)) return 0;
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}
uint64_t os_process_cpu_us(void) {
    return clock_us(CLOCK_PROCESS_CPUTIME_ID);
}
uint64_t os_monotonic_us(void) {
    return clock_us(CLOCK_MONOTONIC);
}
