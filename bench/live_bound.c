/* live_bound.so: how much memory a program keeps live at once, and how much
 * a design that pools memory per thread, per size class or both must hold
 * at the least.
 *
 *   LD_PRELOAD="build/bench/live_bound.so build/libtidemalloc.so" PROGRAM...
 *
 * (this library first: it forwards the allocation calls to the next one,
 * with a 16-byte header of its own before each block, so the program runs
 * at about the speed of the allocator under it.) Each block is charged at
 * the size tidemalloc hands out for it (its class's block size up to 32 KiB,
 * then whole OS pages) to the thread that allocated it, until some thread
 * frees it: what a heap per thread owns. At exit it prints on stderr the
 * peak of the live bytes taken together, which no allocator can go below,
 * and the sums of the peaks of each thread's bytes, of each class's and of
 * each (thread, class) pair's: what pools of those kinds hold by the end if
 * none gives memory to another once its blocks are freed. Class pages that
 * long-lived blocks keep from emptying are such pools (a queue per heap and
 * class in tidemalloc), so the gap between those sums and the first figure
 * is what the partition costs, whatever the allocator does inside a pool.
 * Blocks over 32 KiB count as one class (a heap's slices serve any of
 * them), and the main thread counts as a thread. A thread that exits gives
 * its counters to the next one that starts, as tidemalloc's heap gives its
 * segments to the next thread that needs one; past 64 threads at once,
 * later ones share the last counters, which the report says.
 * A diagnostic, not a benchmark: every call updates
 * shared counters. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../src/internal.h"
#include "next_alloc.h"

#define THREADS_MAX 64
#define CLASSES     (SMALL_CLASS_COUNT + 1) /* the last: blocks over SMALL_MAX */
#define HEADER      16

/* Before each block: who is charged, how much, and how far the block's
 * own allocation starts before it (16, or the alignment of memalign). */
struct header {
    uint8_t thread;
    uint8_t cls;
    uint16_t unused;
    uint32_t offset;
    uint64_t charged;
};

struct counter {
    _Atomic int64_t live, peak;
};

static struct counter pair[THREADS_MAX][CLASSES], per_thread[THREADS_MAX], per_class[CLASSES],
    total;
static _Atomic uint64_t slots_taken; /* bit i: thread counters i in use */
static _Atomic unsigned slots_high, threads_shared;
static __thread int thread_index = -1;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static unsigned class_of(size_t size, uint64_t *charged) {
    if (size <= SMALL_MAX) {
        unsigned cls = size_class_of(size);
        if (cls == 0) cls = 1; /* class 0 stays empty: malloc(0) takes class 1 */
        *charged = g_class_size[cls];
        return cls;
    }
    long page = sysconf(_SC_PAGESIZE);
    *charged = (size + (size_t)page - 1) & ~((size_t)page - 1);
    return CLASSES - 1;
}

static void counter_add(struct counter *c, int64_t bytes) {
    int64_t now = atomic_fetch_add_explicit(&c->live, bytes, memory_order_relaxed) + bytes;
    int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &c->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void charge(struct header *h, int64_t sign) {
    int64_t bytes = sign * (int64_t)h->charged;
    counter_add(&pair[h->thread][h->cls], bytes);
    counter_add(&per_thread[h->thread], bytes);
    counter_add(&per_class[h->cls], bytes);
    counter_add(&total, bytes);
}

static void slot_release(void *slot) {
    atomic_fetch_and(&slots_taken, ~((uint64_t)1 << ((uintptr_t)slot - 1)));
}
static void exit_key_create(void) {
    (void)pthread_key_create(&exit_key, slot_release);
}

/* The lowest counters no running thread holds; the last ones if all are. */
static int slot_take(void) {
    uint64_t taken = atomic_load(&slots_taken);
    for (;;) {
        if (taken == ~(uint64_t)0) {
            atomic_fetch_add(&threads_shared, 1);
            return THREADS_MAX - 1;
        }
        int slot = __builtin_ctzll(~taken);
        if (atomic_compare_exchange_weak(&slots_taken, &taken, taken | (uint64_t)1 << slot)) {
            unsigned high = atomic_load(&slots_high);
            while ((unsigned)slot + 1 > high &&
                   !atomic_compare_exchange_weak(&slots_high, &high, (unsigned)slot + 1)) {
            }
            pthread_once(&exit_key_once, exit_key_create);
            thread_index = slot; /* before setspecific, which may allocate */
            (void)pthread_setspecific(exit_key, (void *)(uintptr_t)(slot + 1));
            return slot;
        }
    }
}

/* Sets up the header of a block whose allocation starts `offset` bytes
 * before it, and charges the calling thread. */
static void *account(char *start, size_t offset, size_t size) {
    if (start == NULL) return NULL;
    if (thread_index < 0) thread_index = slot_take();
    struct header *h = (struct header *)(start + offset) - 1;
    h->thread = (uint8_t)thread_index;
    h->cls = (uint8_t)class_of(size, &h->charged);
    h->offset = (uint32_t)offset;
    charge(h, 1);
    return start + offset;
}

static struct header *header_of(void *p) {
    return (struct header *)p - 1;
}

void *malloc(size_t size) {
    next_resolve();
    if (size > SIZE_MAX - HEADER) return NULL;
    return account(next_malloc(size + HEADER), HEADER, size);
}
void *calloc(size_t count, size_t size) {
    if (size != 0 && count > (SIZE_MAX - HEADER) / size) return NULL;
    if (next_calloc == NULL) {
        void *early = early_calloc(count * size);
        if (early != NULL) return early;
        next_resolve();
    }
    return account(next_calloc(1, count * size + HEADER), HEADER, count * size);
}
void free(void *p) {
    if (p == NULL || early_owns(p)) return;
    struct header *h = header_of(p);
    charge(h, -1);
    next_free((char *)p - h->offset);
}
void *realloc(void *p, size_t size) {
    next_resolve();
    if (p == NULL || early_owns(p)) return malloc(size);
    struct header *h = header_of(p);
    if (h->offset != HEADER || size > SIZE_MAX - HEADER) {
        /* an aligned block: a copy keeps its header where free looks */
        void *q = malloc(size);
        if (q == NULL) return NULL;
        uint64_t old = h->charged;
        memcpy(q, p, old < size ? old : size);
        free(p);
        return q;
    }
    struct header saved = *h;
    charge(h, -1);
    char *start = next_realloc((char *)p - HEADER, size + HEADER);
    if (start == NULL) {
        charge(&saved, 1); /* the old block stays */
        return NULL;
    }
    return account(start, HEADER, size);
}
void *memalign(size_t alignment, size_t size) {
    next_resolve();
    if (alignment < HEADER) alignment = HEADER;
    if (size > SIZE_MAX - alignment) return NULL;
    return account(next_memalign(alignment, size + alignment), alignment, size);
}
void *aligned_alloc(size_t alignment, size_t size) {
    return memalign(alignment, size);
}
int posix_memalign(void **out, size_t alignment, size_t size) {
    void *p = memalign(alignment, size);
    if (p == NULL) return 12; /* ENOMEM */
    *out = p;
    return 0;
}
void *valloc(size_t size) {
    return memalign((size_t)sysconf(_SC_PAGESIZE), size);
}
size_t malloc_usable_size(void *p) {
    if (p == NULL || early_owns(p)) return 0;
    return header_of(p)->charged;
}

static double mib(int64_t bytes) {
    return (double)bytes / (1 << 20);
}

static int64_t peak_of(struct counter *c) {
    return atomic_load_explicit(&c->peak, memory_order_relaxed);
}

__attribute__((destructor)) static void report(void) {
    int64_t threads = 0, classes = 0, pairs = 0, pairs_small = 0;
    for (unsigned t = 0; t < THREADS_MAX; t++) {
        threads += peak_of(&per_thread[t]);
        for (unsigned c = 0; c < CLASSES; c++) {
            pairs += peak_of(&pair[t][c]);
            if (c < CLASSES - 1) pairs_small += peak_of(&pair[t][c]);
        }
    }
    for (unsigned c = 0; c < CLASSES; c++)
        classes += peak_of(&per_class[c]);
    char line[1024];
    unsigned high = atomic_load(&slots_high), shared = atomic_load(&threads_shared);
    int n = snprintf(
        line, sizeof line,
        "live_bound: peaks of live bytes (tidemalloc's block sizes), MiB; %u threads at once%s\n"
        "  all blocks together                %8.2f\n"
        "  sum of each thread's peak          %8.2f\n"
        "  sum of each class's peak           %8.2f\n"
        "  sum of each (thread, class) peak   %8.2f  (classes up to 32 KiB: %.2f)\n",
        high, shared ? " (and more sharing the last counters)" : "", mib(peak_of(&total)),
        mib(threads), mib(classes), mib(pairs), mib(pairs_small));
    if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}
