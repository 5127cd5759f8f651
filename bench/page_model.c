/* A model of two ways to keep a page's free blocks, each with and without
 * issue 6's default detection, on the same workloads; not the allocator.
 *
 *   L  per-page free list through the blocks (tidemalloc's design): links
 *      stored as next ^ block ^ KEY and checked when popped, a free key in
 *      the block's second word for double frees, the block-start test
 *   l  the same list, no checks (plain links, no key, no block test)
 *   B  a bitmap of free blocks per page (bit set: free) at the page's start,
 *      with a summary word of the non-empty bitmap words; malloc takes the
 *      lowest free block and never reads a block, free finds the block's
 *      index from the block test's 128-bit product and aborts on a set bit
 *   b  the same bitmap without the block-start test and the bit test
 *
 * Segments of 4 MiB hold their pages' descriptors in slice 0 (and L's list
 * ends, as ours do) and 64 KiB pages of one class in slices 1-63; one thread,
 * classes 16 B-1 KiB as tidemalloc's. Workloads: `churn` (SLOTS live
 * blocks, each step frees a random one after reading its first byte and
 * allocates a new one of a random size, writing up to 32 bytes: the shape of
 * bench/churn.c) and `shuffle` (rounds of SLOTS allocations, shuffled, then
 * all freed: bench/py_churn.py's shape). Prints the time per step.
 *
 * usage: page_model L|l|B|b churn|shuffle SLOTS STEPS
 * Instructions per step: callgrind at two STEPS, the difference divided. */
#include "common.h"
#include <stdbool.h>
#include <stdnoreturn.h>
#include <sys/mman.h>

#define ALWAYS_INLINE __attribute__((always_inline))
#define NOINLINE      __attribute__((noinline))
#define likely(x)     __builtin_expect(!!(x), 1)
#define unlikely(x)   __builtin_expect(!!(x), 0)

#define SEG_SHIFT 22
#define SEG_SIZE  ((uintptr_t)1 << SEG_SHIFT)
#define PAGE_SIZE ((uintptr_t)1 << 16)
#define LINK_KEY  0xffffffffd6a40000ull
#define NCLASS    20
#define ARENA     ((size_t)1 << 34) /* address space only */

static const uint32_t class_size[NCLASS] = {16,  32,  48,  64,  80,  96,  112, 128, 160, 192,
                                            224, 256, 320, 384, 448, 512, 640, 768, 896, 1024};

struct block {
    uintptr_t link; /* L: next ^ this ^ LINK_KEY; l: next */
    uintptr_t key;  /* L: the page's descriptor while free */
};

struct page {
    uintptr_t start;    /* block 0; the last block ends the page */
    uint64_t inverse;   /* block test: (floor(2^40 / size) + 1) << 24, as tidemalloc's */
    struct block *free; /* L, l: list head, ending in the segment's list_end */
    uint64_t summary;   /* B, b: bit g set iff bits[g] != 0 */
    uint64_t *bits;     /* B, b: bit i set iff block i is free */
    uint32_t used;      /* blocks handed out */
    uint32_t size;      /* block size */
    struct page *next;  /* ring of the class's pages */
    char padding[8];
};

struct segment {
    struct block list_end; /* every list of the segment ends here: link 0 fails L's check */
    char padding[48];
    struct page pages[64];
};

static char *arena_next, *arena_end;
static struct page *head[NCLASS];

static noreturn void die(const char *message) {
    fprintf(stderr, "%s\n", message);
    abort();
}

static inline struct segment *segment_of(const void *p) {
    return (struct segment *)((uintptr_t)p & ~(SEG_SIZE - 1));
}

static inline struct page *page_of(const void *p) {
    return &segment_of(p)->pages[((uintptr_t)p >> 16) & 63];
}

/* A new page of class cls, carved whole, at the head of the class's ring. */
static struct page *page_new(unsigned cls, bool bitmap, bool checks) {
    static struct segment *segment;
    static unsigned next_slice = 64;
    if (next_slice == 64) {
        if (arena_next + SEG_SIZE > arena_end) die("page_model: out of address space");
        segment = (struct segment *)arena_next;
        arena_next += SEG_SIZE;
        next_slice = 1;
    }
    unsigned slice = next_slice++;
    struct page *page = &segment->pages[slice];
    char *base = (char *)segment + slice * PAGE_SIZE;
    uint32_t size = class_size[cls], count = (uint32_t)(PAGE_SIZE / size);
    page->size = size;
    page->used = 0;
    page->inverse = ((((uint64_t)1 << 40) / size) + 1) << 24;
    if (bitmap) {
        while ((uintptr_t)(count + 63) / 64 * 8 + (uintptr_t)count * size > PAGE_SIZE)
            count--;
        page->bits = (uint64_t *)base;
        uint32_t words = (count + 63) / 64;
        for (uint32_t w = 0; w < words; w++)
            page->bits[w] = count - w * 64 >= 64 ? ~0ull : ((uint64_t)1 << (count - w * 64)) - 1;
        page->summary = words == 64 ? ~0ull : ((uint64_t)1 << words) - 1;
    }
    page->start = (uintptr_t)base + PAGE_SIZE - (uintptr_t)count * size;
    if (!bitmap) {
        struct block *next = &segment->list_end;
        for (uint32_t k = count; k-- > 0;) {
            struct block *b = (struct block *)(page->start + (uintptr_t)k * size);
            b->link = checks ? (uintptr_t)next ^ LINK_KEY ^ (uintptr_t)b : (uintptr_t)next;
            b->key = 0;
            next = b;
        }
        page->free = next;
    }
    page->next = head[cls] ? head[cls]->next : page;
    if (head[cls]) head[cls]->next = page;
    head[cls] = page;
    return page;
}

static inline bool page_has_free(const struct page *page, bool bitmap) {
    return bitmap ? page->summary != 0 : page->free != &segment_of(page)->list_end;
}

/* The class's next page with a free block (a new one if none) as its head. */
static NOINLINE struct page *page_find(unsigned cls, bool bitmap, bool checks) {
    struct page *last = head[cls];
    if (last != NULL)
        for (struct page *page = last->next;; page = page->next) {
            if (page_has_free(page, bitmap)) return head[cls] = page;
            if (page == last) break;
        }
    return page_new(cls, bitmap, checks);
}

/* ---- the list ---- */

static inline ALWAYS_INLINE void *list_malloc(unsigned cls, bool checks) {
    struct page *page = head[cls];
    if (unlikely(page == NULL)) page = page_find(cls, false, checks);
    for (;;) {
        struct block *b = page->free, *next;
        if (checks) {
            uintptr_t delta = b->link ^ LINK_KEY; /* next ^ b */
            if (likely((delta >> SEG_SHIFT) == 0)) {
                next = (struct block *)(delta ^ (uintptr_t)b);
            } else {
                if (b != &segment_of(page)->list_end) die("malloc(): corrupted free list");
                page = page_find(cls, false, checks);
                continue;
            }
        } else {
            if (unlikely(b == &segment_of(page)->list_end)) {
                page = page_find(cls, false, checks);
                continue;
            }
            next = (struct block *)b->link;
        }
        __builtin_prefetch(next);
        page->free = next;
        page->used++;
        if (checks) b->key = 0;
        return b;
    }
}

static inline ALWAYS_INLINE void list_free(void *p, bool checks) {
    struct page *page = page_of(p);
    struct block *b = p;
    if (checks) {
        if (unlikely((uint64_t)((uintptr_t)p - page->start) * page->inverse >= page->inverse))
            die("free(): invalid pointer");
        if (unlikely(b->key == (uintptr_t)page)) die("free(): double free detected");
        b->key = (uintptr_t)page;
        b->link = (uintptr_t)page->free ^ LINK_KEY ^ (uintptr_t)b;
    } else {
        b->link = (uintptr_t)page->free;
    }
    page->free = b;
    page->used--;
}

/* ---- the bitmap ---- */

static inline ALWAYS_INLINE void *bitmap_malloc(unsigned cls, bool checks) {
    struct page *page = head[cls];
    if (unlikely(page == NULL || page->summary == 0)) page = page_find(cls, true, checks);
    uint64_t summary = page->summary;
    unsigned group = (unsigned)__builtin_ctzll(summary);
    uint64_t word = page->bits[group];
    unsigned bit = (unsigned)__builtin_ctzll(word);
    word &= word - 1;
    page->bits[group] = word;
    if (word == 0) page->summary = summary & (summary - 1);
    page->used++;
    return (void *)(page->start + (uintptr_t)(group * 64 + bit) * page->size);
}

static inline ALWAYS_INLINE void bitmap_free(void *p, bool checks) {
    struct page *page = page_of(p);
    /* high half: the block's index; low half: the block test's product */
    unsigned __int128 product = (unsigned __int128)((uintptr_t)p - page->start) * page->inverse;
    if (checks && unlikely((uint64_t)product >= page->inverse)) die("free(): invalid pointer");
    uint64_t index = (uint64_t)(product >> 64);
    uint64_t *word = &page->bits[index >> 6];
    uint64_t mask = (uint64_t)1 << (index & 63), bits = *word;
    if (checks && unlikely(bits & mask)) die("free(): double free detected");
    *word = bits | mask;
    page->summary |= (uint64_t)1 << (index >> 6);
    page->used--;
}

/* ---- workloads ---- */

static inline unsigned class_of(size_t n) {
    unsigned cls = 0;
    while (class_size[cls] < n)
        cls++;
    return cls;
}

static inline size_t small_size(rng_t *r) {
    uint64_t x = rng_next(r);
    if ((x & 15) == 0) return 129 + (x >> 8) % 896; /* as bench/churn.c */
    return 16 + ((x >> 8) % 8) * 16 - ((x >> 20) & 7);
}

static inline ALWAYS_INLINE void *model_malloc(size_t n, bool bitmap, bool checks) {
    return bitmap ? bitmap_malloc(class_of(n), checks) : list_malloc(class_of(n), checks);
}

static inline ALWAYS_INLINE void model_free(void *p, bool bitmap, bool checks) {
    if (bitmap)
        bitmap_free(p, checks);
    else
        list_free(p, checks);
}

/* Returns the seconds the measured part took; *sum: what the program read. */
static inline ALWAYS_INLINE double run(bool shuffle, long slots, long steps, bool bitmap,
                                       bool checks, uint64_t *sum) {
    unsigned char **slot = xmalloc((size_t)slots * sizeof *slot);
    rng_t r;
    rng_seed(&r, 42);
    uint64_t read = 0;
    double t0 = now_s();
    if (!shuffle) {
        for (long i = 0; i < slots; i++) {
            size_t n = small_size(&r);
            slot[i] = model_malloc(n, bitmap, checks);
            slot[i][0] = (unsigned char)n;
        }
        t0 = now_s();
        for (long s = 0; s < steps; s++) {
            size_t i = rng_below(&r, (uint64_t)slots);
            read += slot[i][0];
            model_free(slot[i], bitmap, checks);
            size_t n = small_size(&r);
            slot[i] = model_malloc(n, bitmap, checks);
            memset(slot[i], (int)s, n < 32 ? n : 32);
        }
    } else {
        for (long round = 0; round < steps / slots; round++) {
            for (long i = 0; i < slots; i++) {
                size_t n = small_size(&r);
                slot[i] = model_malloc(n, bitmap, checks);
                memset(slot[i], (int)i, n < 32 ? n : 32);
            }
            for (long i = slots - 1; i > 0; i--) {
                long j = (long)rng_below(&r, (uint64_t)i + 1);
                unsigned char *t = slot[i];
                slot[i] = slot[j];
                slot[j] = t;
            }
            for (long i = 0; i < slots; i++) {
                read += slot[i][0];
                model_free(slot[i], bitmap, checks);
            }
        }
    }
    double seconds = now_s() - t0;
    free(slot);
    *sum = read;
    return seconds;
}

static NOINLINE double run_list_checked(bool shuffle, long slots, long steps, uint64_t *sum) {
    return run(shuffle, slots, steps, false, true, sum);
}
static NOINLINE double run_list(bool shuffle, long slots, long steps, uint64_t *sum) {
    return run(shuffle, slots, steps, false, false, sum);
}
static NOINLINE double run_bitmap_checked(bool shuffle, long slots, long steps, uint64_t *sum) {
    return run(shuffle, slots, steps, true, true, sum);
}
static NOINLINE double run_bitmap(bool shuffle, long slots, long steps, uint64_t *sum) {
    return run(shuffle, slots, steps, true, false, sum);
}

int main(int argc, char **argv) {
    if (argc != 5 || strchr("LlBb", argv[1][0]) == NULL || argv[1][1] != 0) {
        fprintf(stderr, "usage: page_model L|l|B|b churn|shuffle SLOTS STEPS\n");
        return 2;
    }
    bool shuffle = strcmp(argv[2], "shuffle") == 0;
    long slots = arg_long(argc, argv, 3, 8192), steps = arg_long(argc, argv, 4, 4000000);
    if (slots < 2 || steps < slots) return 2;
    char *arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) return 1;
    arena_next = (char *)(((uintptr_t)arena + SEG_SIZE - 1) & ~(SEG_SIZE - 1));
    arena_end = arena + ARENA;
    uint64_t sum = 0;
    double seconds = argv[1][0] == 'L'   ? run_list_checked(shuffle, slots, steps, &sum)
                     : argv[1][0] == 'l' ? run_list(shuffle, slots, steps, &sum)
                     : argv[1][0] == 'B' ? run_bitmap_checked(shuffle, slots, steps, &sum)
                                         : run_bitmap(shuffle, slots, steps, &sum);
    printf("page_model %s %s slots=%ld steps=%ld: %.4f s, %.2f ns a step (sum %llu)\n", argv[1],
           argv[2], slots, steps, seconds, seconds * 1e9 / (double)steps, (unsigned long long)sum);
    return 0;
}
