/* Out of memory (issue 6 item 3). Run with the allocator in LD_PRELOAD:
 *   oom st     one thread: each allocation function in turn, at several sizes
 *   oom mt     the same with 4 threads exhausting memory together
 *   oom table  huge-block realloc when the huge table must grow and cannot
 *   oom arena  a block above the mmap threshold, then small blocks, when only
 *              the arena's chunks, a few blocks in each, hold free address space
 *   oom reserve the arena's first chunk leaves the program room for its own
 *              mappings under the limit
 *   oom lent   big blocks beside a segment the arena's free space holds,
 *              and where it was once its blocks are freed
 * After the mode, "data": the limit is RLIMIT_DATA instead of RLIMIT_AS.
 * The address space is capped with setrlimit(RLIMIT_AS) inside the process:
 * 200 MiB (or 200 MiB above the current size, if that is already over 64 MiB).
 * Every function must eventually return NULL with errno == ENOMEM
 * (posix_memalign: return ENOMEM, *result untouched), nothing may crash or
 * abort, realloc must leave the old block intact, and once everything is
 * freed the same allocations must succeed again, as must large ones of
 * another kind (freed memory must not stay reserved). Exit 0 on success;
 * "oom: why" on stderr and exit 1 on failure. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define MIB     ((size_t)1 << 20)
#define LIMIT   (200 * MIB)
#define THREADS 4

/* Output without allocating: a stack buffer and write(2). */
static void say(int fd, const char *format, ...) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    if (n > (int)sizeof buffer - 1) n = (int)sizeof buffer - 1;
    if (n > 0 && write(fd, buffer, (size_t)n) < 0) _exit(3);
}
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        say(2, "oom: " __VA_ARGS__);                                                               \
        say(2, " (line %d)\n", __LINE__);                                                          \
        _exit(1);                                                                                  \
    } while (0)

/* A number of KiB from /proc/self/status ("VmData:"), in bytes. */
static size_t status_bytes(const char *key) {
    char line[256];
    size_t kib = 0, length = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, length) == 0) kib = strtoull(line + length, NULL, 10);
    if (f) fclose(f);
    return kib * 1024;
}

/* The limit the tests set: RLIMIT_AS, or with "data" after the mode
 * RLIMIT_DATA (private writable mappings, counted since Linux 4.7). */
static int limit_resource = RLIMIT_AS;

/* What the limit counts now. */
static size_t vm_size(void) {
    if (limit_resource == RLIMIT_DATA) return status_bytes("VmData:");
    char buffer[128];
    FILE *f = fopen("/proc/self/statm", "r");
    size_t pages = 0;
    if (f && fgets(buffer, sizeof buffer, f)) pages = strtoull(buffer, NULL, 10);
    if (f) fclose(f);
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void set_limit(size_t bytes) {
    struct rlimit r = {bytes, RLIM_INFINITY};
    if (setrlimit(limit_resource, &r) != 0)
        FAIL("setrlimit(%zu) failed: %s", bytes, strerror(errno));
}

enum fn {
    F_MALLOC,
    F_CALLOC,
    F_REALLOC,
    F_MEMALIGN,
    F_POSIX_MEMALIGN,
    F_ALIGNED_ALLOC,
    F_VALLOC,
    F_PVALLOC,
    F_REALLOCARRAY,
    F_COUNT
};
static const char *const fn_name[F_COUNT] = {"malloc",   "calloc",         "realloc",
                                             "memalign", "posix_memalign", "aligned_alloc",
                                             "valloc",   "pvalloc",        "reallocarray"};
static const size_t sizes[] = {48, 3008, 40000, 300000, 3 * MIB, 9 * MIB};
#define SIZE_COUNT (sizeof sizes / sizeof sizes[0])

static size_t alignment_of(enum fn f) {
    switch (f) {
    case F_MEMALIGN:
        return 256;
    case F_POSIX_MEMALIGN:
    case F_ALIGNED_ALLOC:
        return 64;
    case F_VALLOC:
    case F_PVALLOC:
        return 4096;
    default:
        return 16;
    }
}

/* Blocks are kept on a list threaded through themselves: no other storage. */
struct node {
    struct node *next;
    size_t size;
    uint64_t check;
};

static uint64_t tag(const void *p, size_t size) {
    return ((uintptr_t)p * 0x9E3779B97F4A7C15ull) ^ size;
}

/* One allocation with function f. *err: errno, or posix_memalign's result. */
static void *alloc_one(enum fn f, size_t size, int *err) {
    void *p = NULL;
    errno = 0;
    switch (f) {
    case F_MALLOC:
        p = malloc(size);
        break;
    case F_CALLOC:
        p = calloc(size / 16, 16);
        break;
    case F_REALLOC:
        p = realloc(NULL, size);
        break;
    case F_MEMALIGN:
        p = memalign(256, size);
        break;
    case F_POSIX_MEMALIGN: {
        void *sentinel = (void *)(uintptr_t)0x5a5a5a50;
        p = sentinel;
        int rc = posix_memalign(&p, 64, size);
        if (rc != 0) {
            if (p != sentinel) FAIL("posix_memalign failed (%d) but changed *result", rc);
            *err = rc;
            return NULL;
        }
        if (p == NULL) FAIL("posix_memalign returned 0 and a NULL block");
        *err = 0;
        return p;
    }
    case F_ALIGNED_ALLOC:
        p = aligned_alloc(64, size);
        break;
    case F_VALLOC:
        p = valloc(size);
        break;
    case F_PVALLOC:
        p = pvalloc(size);
        break;
    case F_REALLOCARRAY:
        p = reallocarray(NULL, size / 16, 16);
        break;
    default:
        break;
    }
    *err = errno;
    return p;
}

/* Writes the node header and touches the block's first and last bytes. */
static void node_init(struct node *n, size_t size, enum fn f) {
    if (f == F_CALLOC) {
        const unsigned char *c = (const unsigned char *)n;
        size_t span = size < 65536 ? size : 4096;
        for (size_t i = 0; i < span; i++)
            if (c[i]) FAIL("calloc(%zu): byte %zu not zero", size, i);
        for (size_t i = size - (size < 4096 ? size : 4096); i < size; i++)
            if (c[i]) FAIL("calloc(%zu): byte %zu not zero", size, i);
    }
    n->size = size;
    n->check = tag(n, size);
    ((unsigned char *)n)[size - 1] = (unsigned char)size;
}

static void node_verify(const struct node *n) {
    if (n->check != tag(n, n->size) ||
        ((const unsigned char *)n)[n->size - 1] != (unsigned char)n->size)
        FAIL("block %p (%zu bytes) corrupted", (const void *)n, n->size);
}

static void free_list(struct node *list) {
    while (list) {
        struct node *next = list->next;
        node_verify(list);
        free(list);
        list = next;
    }
}

/* Allocates with f until it fails; returns the list, *bytes the total. */
static struct node *exhaust(enum fn f, size_t size, size_t *bytes, const char *who) {
    struct node *list = NULL;
    size_t total = 0, align = alignment_of(f);
    for (;;) {
        int err;
        void *p = alloc_one(f, size, &err);
        if (p == NULL) {
            if (err != ENOMEM)
                FAIL("%s %s(%zu) returned NULL with %s %d (%s), not ENOMEM after %zu MiB", who,
                     fn_name[f], size, f == F_POSIX_MEMALIGN ? "result" : "errno", err,
                     strerror(err), total / MIB);
            break;
        }
        if ((uintptr_t)p % align)
            FAIL("%s %s(%zu) = %p not %zu-aligned", who, fn_name[f], size, p, align);
        struct node *n = p;
        node_init(n, size, f);
        n->next = list;
        list = n;
        total += size;
        if (total > 4096 * MIB)
            FAIL("%s %s(%zu): 4 GiB allocated, RLIMIT_AS ignored?", who, fn_name[f], size);
    }
    *bytes = total;
    return list;
}

/* realloc/reallocarray growth: each block grows by 1.5x from 16 bytes to
 * `cap`, then the next one starts; the failing call must keep the block. */
static struct node *exhaust_growing(enum fn f, size_t cap, size_t *bytes, const char *who) {
    struct node *list = NULL;
    size_t total = 0;
    struct node *cur = NULL;
    size_t size = 0;
    for (;;) {
        size_t next_size = cur == NULL ? 32 : ((size + size / 2) + 15) & ~(size_t)15;
        if (next_size > cap) {
            cur->next = list;
            list = cur;
            total += size;
            cur = NULL;
            continue;
        }
        errno = 0;
        void *p = f == F_REALLOC ? realloc(cur, next_size) : reallocarray(cur, next_size / 16, 16);
        if (p == NULL) {
            int err = errno;
            if (err != ENOMEM)
                FAIL("%s %s(%zu -> %zu) returned NULL with errno %d (%s)", who, fn_name[f], size,
                     next_size, err, strerror(err));
            if (cur) {
                node_verify(cur); /* the old block must still be intact */
                cur->next = list;
                list = cur;
                total += size;
            }
            break;
        }
        struct node *n = p;
        if (cur) {
            if (n->size != size) FAIL("%s %s lost the block's contents", who, fn_name[f]);
            unsigned char last = ((unsigned char *)n)[size - 1];
            if (last != (unsigned char)size)
                FAIL("%s %s lost the block's last byte", who, fn_name[f]);
        }
        node_init(n, next_size, F_MALLOC);
        cur = n;
        size = next_size;
        if (total > 4096 * MIB) FAIL("%s %s: 4 GiB allocated, RLIMIT_AS ignored?", who, fn_name[f]);
    }
    *bytes = total;
    return list;
}

static struct node *run_exhaust(enum fn f, size_t size, size_t *bytes, const char *who) {
    if (f == F_REALLOC || f == F_REALLOCARRAY)
        return exhaust_growing(f, size < 64 ? 64 : size, bytes, who);
    return exhaust(f, size, bytes, who);
}

/* After a full free: `count` allocations of `size` with f must succeed. */
static void must_allocate(enum fn f, size_t size, int count, const char *who) {
    struct node *list = NULL;
    for (int i = 0; i < count; i++) {
        int err;
        void *p = alloc_one(f, size, &err);
        if (p == NULL)
            FAIL("%s after freeing everything, %s(%zu) #%d still fails (%s)", who, fn_name[f], size,
                 i, strerror(err));
        struct node *n = p;
        node_init(n, size, f);
        n->next = list;
        list = n;
    }
    free_list(list);
}

/* Once memory of one kind was exhausted and freed, big blocks of another kind
 * must get most of it: freed memory must not stay reserved. */
static size_t recovered_bytes(size_t block) {
    size_t bytes;
    struct node *list = exhaust(F_MALLOC, block, &bytes, "recovery");
    free_list(list);
    return bytes;
}

static void single_threaded(void) {
    size_t base = vm_size();
    size_t limit = base + 64 * MIB > LIMIT ? base + LIMIT : LIMIT;
    say(1, "address space %zu MiB, limit %zu MiB\n", base / MIB, limit / MIB);
    set_limit(limit);
    size_t best = 0;
    for (enum fn f = 0; f < F_COUNT; f++) {
        for (size_t s = 0; s < SIZE_COUNT; s++) {
            size_t bytes;
            struct node *list = run_exhaust(f, sizes[s], &bytes, "st");
            /* Still no crash at the limit: a larger and a tiny request. */
            int err;
            void *big = alloc_one(f, 512 * MIB, &err);
            if (big != NULL)
                FAIL("%s(512 MiB) succeeded under a %zu MiB limit", fn_name[f], limit / MIB);
            if (err != ENOMEM) FAIL("%s(512 MiB) failed with %d, not ENOMEM", fn_name[f], err);
            void *tiny = malloc(16); /* may fail or not; must not crash */
            free(tiny);
            free_list(list);
            must_allocate(f, sizes[s], 3, "st");
            if (bytes > best) best = bytes;
            say(1, "%-14s %8zu B: NULL/ENOMEM after %4zu MiB, allocates again\n", fn_name[f],
                sizes[s], bytes / MIB);
        }
    }
    /* Small blocks everywhere, then only big blocks. */
    size_t small;
    free_list(exhaust(F_MALLOC, 64, &small, "st"));
    size_t big = recovered_bytes(8 * MIB);
    say(1, "after %zu MiB of 64 B blocks freed: %zu MiB of 8 MiB blocks\n", small / MIB, big / MIB);
    if (big < small / 2)
        FAIL("only %zu MiB of 8 MiB blocks after freeing %zu MiB of small blocks", big / MIB,
             small / MIB);
    size_t mid;
    free_list(exhaust(F_MALLOC, 200000, &mid, "st"));
    big = recovered_bytes(8 * MIB);
    say(1, "after %zu MiB of 200000 B blocks freed: %zu MiB of 8 MiB blocks\n", mid / MIB,
        big / MIB);
    if (big < mid / 2)
        FAIL("only %zu MiB of 8 MiB blocks after freeing %zu MiB of 200000 B blocks", big / MIB,
             mid / MIB);
    size_t large;
    free_list(exhaust(F_MALLOC, 9 * MIB, &large, "st"));
    size_t small_again = recovered_bytes(64);
    say(1, "after %zu MiB of 9 MiB blocks freed: %zu MiB of 64 B blocks\n", large / MIB,
        small_again / MIB);
    if (small_again < large / 2)
        FAIL("only %zu MiB of 64 B blocks after freeing %zu MiB of 9 MiB blocks", small_again / MIB,
             large / MIB);
    say(1, "best %zu MiB\n", best / MIB);
}

/* ---- 4 threads exhausting memory together ---- */
static pthread_barrier_t barrier;

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    char who[16];
    snprintf(who, sizeof who, "mt%d", id);
    for (enum fn f = 0; f < F_COUNT; f++) {
        for (size_t s = 0; s < SIZE_COUNT; s++) {
            /* each thread its own size, so classes and huge blocks mix */
            size_t size = sizes[(s + (size_t)id) % SIZE_COUNT];
            pthread_barrier_wait(&barrier);
            size_t bytes;
            struct node *list = run_exhaust(f, size, &bytes, who);
            pthread_barrier_wait(&barrier); /* everyone is out of memory */
            free_list(list);
            pthread_barrier_wait(&barrier); /* everything is freed */
            must_allocate(f, size, 3, who);
            if (id == 0) say(1, "%-14s 4 threads: NULL/ENOMEM, allocates again\n", fn_name[f]);
        }
    }
    return NULL;
}

static void multi_threaded(void) {
    pthread_t threads[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i) != 0)
            FAIL("pthread_create");
    /* The threads exist (stacks mapped) before the limit is set. */
    size_t base = vm_size();
    size_t limit = base + 64 * MIB > LIMIT ? base + LIMIT : LIMIT;
    say(1, "address space %zu MiB, limit %zu MiB\n", base / MIB, limit / MIB);
    set_limit(limit);
    for (enum fn f = 0; f < F_COUNT; f++) {
        for (size_t s = 0; s < SIZE_COUNT; s++) {
            pthread_barrier_wait(&barrier);
            pthread_barrier_wait(&barrier);
            pthread_barrier_wait(&barrier);
        }
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
}

/* ---- the huge-block table must grow while memory is out ---- */
static void huge_table(void) {
    /* Blocks of 72 KiB are mapped on their own below a 64 KiB threshold. */
    if (mallopt(M_MMAP_THRESHOLD, 64 * 1024) != 1) FAIL("mallopt(M_MMAP_THRESHOLD) refused");
    enum { BLOCKS = 1700 };
    static void *blocks[BLOCKS];
    size_t size = 72 * 1024;
    int failures = 0;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(size);
        if (blocks[i] == NULL) FAIL("malloc(%zu) #%d failed without a limit", size, i);
        memset(blocks[i], i & 0xff, 64);
        /* Now no new mapping fits: growing a block must fail cleanly. */
        set_limit(vm_size());
        errno = 0;
        void *p = realloc(blocks[0], 2 * MIB + 4096); /* past huge_realloc's in-place range */
        int err = errno;
        set_limit(RLIM_INFINITY);
        if (p != NULL) {
            blocks[0] = p; /* it fitted after all (in place) */
            continue;
        }
        if (err != ENOMEM) FAIL("realloc under the limit: NULL with errno %d", err);
        failures++;
        for (int j = 0; j < 64; j++)
            if (((unsigned char *)blocks[0])[j] != 0) FAIL("realloc failure changed block 0");
    }
    for (int i = 0; i < BLOCKS; i++)
        free(blocks[i]);
    say(1, "huge table: %d realloc failures, no abort\n", failures);
    if (failures == 0) FAIL("no realloc failed: the limit had no effect");
}

/* ---- a block of its own while the arena's chunks hold the address space ---- */
#define ARENA_MAX_BLOCKS 512

/* Under a limit 160 MiB above what the process has, 1 MiB blocks (from the
 * arena's chunks: the caller set the mmap threshold past them), each filled,
 * until none is left; returns how many. */
static int arena_fill(unsigned char **blocks) {
    set_limit(vm_size() + 160 * MIB);
    int count = 0;
    for (; count < ARENA_MAX_BLOCKS; count++) {
        errno = 0;
        blocks[count] = malloc(MIB);
        if (blocks[count] == NULL) break;
        memset(blocks[count], count & 0xff, MIB);
    }
    if (count == ARENA_MAX_BLOCKS) FAIL("512 MiB allocated, RLIMIT_AS ignored?");
    if (errno != ENOMEM) FAIL("malloc(1 MiB) failed with errno %d, not ENOMEM", errno);
    if (count < 80) FAIL("only %d MiB of 1 MiB blocks under a 160 MiB limit", count);
    return count;
}

static void arena_space(void) {
    /* 1 MiB blocks come from the arena's chunks, 12 MiB ones are mapped */
    if (mallopt(M_MMAP_THRESHOLD, 8 * MIB) != 1) FAIL("mallopt(M_MMAP_THRESHOLD) refused");
    static unsigned char *blocks[ARENA_MAX_BLOCKS];
    int count = arena_fill(blocks);
    /* The first 64 blocks lie in the first chunks (16 MiB each under this
     * limit, a sixteenth of it at the least), carved in order; the last ones
     * may lie in chunks of one block, which would go back whole if their
     * blocks were freed. So free 60 of the first 64, keeping every 16th:
     * free runs of 15 MiB in chunks that cannot go back, and nowhere else to
     * map 12 MiB. */
    int kept = 0;
    for (int i = 0; i < count; i++) {
        if (i >= 64 || i % 16 == 0)
            blocks[kept++] = blocks[i];
        else
            free(blocks[i]);
    }
    say(1, "%d MiB of 1 MiB blocks, %d kept\n", count, kept);
    for (int round = 0; round < 3; round++) {
        errno = 0;
        unsigned char *big = malloc(12 * MIB);
        if (big == NULL)
            FAIL("round %d: malloc(12 MiB) failed (%s) with %d MiB of 1 MiB blocks freed", round,
                 strerror(errno), count - kept);
        memset(big, 0xa5, 12 * MIB);
        for (size_t i = 0; i < 12 * MIB; i += 4096)
            if (big[i] != 0xa5) FAIL("the 12 MiB block lost a write");
        if (malloc_usable_size(big) < 12 * MIB) FAIL("malloc_usable_size of the 12 MiB block");
        free(big);
    }
    say(1, "a 12 MiB block three times in the arena's free address space\n");
    /* Small blocks need segments, 4 MiB aligned: the same free runs hold
     * two or three each. Then the big block again, once they are freed. */
    size_t small;
    struct node *list = exhaust(F_MALLOC, 4000, &small, "arena");
    say(1, "then %zu MiB of 4000 B blocks\n", small / MIB);
    if (small < 24 * MIB)
        FAIL("only %zu MiB of 4000 B blocks with %d MiB of 1 MiB blocks freed", small / MIB,
             count - kept);
    free_list(list);
    void *big = malloc(12 * MIB);
    if (big == NULL) FAIL("malloc(12 MiB) failed once the small blocks were freed");
    free(big);
    for (int i = 0; i < kept; i++)
        free(blocks[i]);
}

/* ---- a segment in the arena's free address space, and back ---- */
/* The helper's block each round: a large page (rounds 1 and 2), a class's
 * only page, which a heap keeps once empty but for a lent segment (3), and
 * a block of a class over 1 KiB, from the heap all threads share, which a
 * thread caches once freed but for a lent segment's (4). */
#define LENT_ROUNDS 4
static const size_t lent_sizes[LENT_ROUNDS] = {100000, 100000, 48, 3008};
static pthread_barrier_t lent_step;
static void *lent_block;

/* The other thread, each round: its block needs a segment (it has none),
 * which only the arena's free run can hold; it keeps the block for a step,
 * then frees it. */
static void *lent_helper(void *arg) {
    (void)arg;
    for (int round = 0; round < LENT_ROUNDS; round++) {
        pthread_barrier_wait(&lent_step); /* memory is out */
        lent_block = malloc(lent_sizes[round]);
        if (lent_block) memset(lent_block, 0x5c, lent_sizes[round]);
        pthread_barrier_wait(&lent_step); /* main thread allocates beside it */
        pthread_barrier_wait(&lent_step);
        free(lent_block);
        pthread_barrier_wait(&lent_step); /* freed */
        /* alive until the round's last check: an exiting thread's heap
         * gives its segments back */
        pthread_barrier_wait(&lent_step);
    }
    return NULL;
}

/* One round: the chunk's free run starts at run_start and ends with the
 * chunk; the helper's block takes a segment there. `beside`: what must fit
 * beside that segment, `whole`: once the helper freed its block. */
static void lent_round(int round, const unsigned char *chunk, const unsigned char *run_start,
                       size_t beside, size_t whole) {
    size_t size = lent_sizes[round];
    pthread_barrier_wait(&lent_step);
    pthread_barrier_wait(&lent_step);
    unsigned char *p = lent_block;
    if (p == NULL) FAIL("the thread's malloc(%zu) failed with a free run in a chunk", size);
    if (p < run_start || p >= chunk + 16 * MIB)
        FAIL("setup: the thread's segment for malloc(%zu) is not in the chunk's free run", size);
    unsigned char *big = malloc(beside);
    if (big == NULL)
        FAIL("malloc(%zu KiB) failed beside a segment lent at %zu KiB past the chunk's first "
             "block",
             beside / 1024, (size_t)(p - chunk) / 1024);
    memset(big, 0xa5, beside);
    free(big);
    for (size_t i = 0; i < size; i += 4096)
        if (p[i] != 0x5c) FAIL("the lent segment's block lost its contents");
    pthread_barrier_wait(&lent_step);
    pthread_barrier_wait(&lent_step);
    /* No heap keeps an empty lent segment, no heap an empty page in one, no
     * thread cache a block of one: the whole run is free. */
    big = malloc(whole);
    if (big == NULL)
        FAIL("malloc(%zu KiB) failed once the lent segment's block of %zu bytes was freed",
             whole / 1024, size);
    memset(big, 0x3c, whole);
    free(big);
    pthread_barrier_wait(&lent_step);
    say(1,
        "round %d: %zu KiB beside a segment lent at %zu KiB past the chunk's first block for "
        "malloc(%zu), %zu KiB once it is freed\n",
        round + 1, beside / 1024, (size_t)(p - chunk) / 1024, size, whole / 1024);
}

/* A block too big for its own mapping must find room beside a segment lent
 * from the arena, and all of it once that segment holds nothing: 4 threads'
 * segments, each at a 16 MiB chunk's first free 4 MiB boundary and kept
 * empty by its heap, left no room for 9 MiB in any chunk (oom mt failed a
 * run in six). */
static void lent_segment(void) {
    if (mallopt(M_MMAP_THRESHOLD, 8 * MIB) != 1) FAIL("mallopt(M_MMAP_THRESHOLD) refused");
    pthread_t helper;
    pthread_barrier_init(&lent_step, NULL, 2);
    if (pthread_create(&helper, NULL, lent_helper, NULL) != 0) FAIL("pthread_create");
    malloc_trim(0);
    static unsigned char *blocks[ARENA_MAX_BLOCKS];
    int count = arena_fill(blocks);
    /* one free run of 15 MiB, in the first 16 MiB chunk, which holds 15 */
    unsigned char *chunk = blocks[0];
    for (int i = 1; i < 15; i++) {
        if (blocks[i] < chunk || blocks[i] >= chunk + 16 * MIB)
            FAIL("setup: 1 MiB block %d not in the first block's 16 MiB chunk", i);
        free(blocks[i]);
    }
    /* The run starts 1 MiB past the chunk's header and ends with the chunk.
     * A chunk 2 MiB aligned (the kernel places big mappings on huge-page
     * boundaries; then the first block lies a header past one): a segment
     * at the run's first 4 MiB boundary leaves 8 MiB in one piece where the
     * chunk is 4 MiB aligned; at the run's other edge, 10.9 MiB (10 MiB in
     * the other case, both edges). Any alignment: the better edge leaves
     * at least 7.4 MiB. */
    bool huge_aligned = ((uintptr_t)chunk & (2 * MIB - 1)) < MIB / 4;
    lent_round(0, chunk, chunk + MIB, huge_aligned ? 9 * MIB + MIB / 2 : 7 * MIB, 14 * MIB);
    /* Round 2: the run 2 MiB shorter at its start. Its last boundary leaves
     * the longer piece whichever the chunk's alignment (8.9 MiB where the
     * first leaves 8, 6.9 where it leaves 6), so the segment splits a free
     * extent there; at least 6.4 MiB at any alignment. */
    for (int i = 1; i < 3; i++)
        if ((blocks[i] = malloc(MIB)) == NULL) FAIL("malloc(1 MiB) failed in a 15 MiB free run");
    if (blocks[1] < chunk || blocks[2] < chunk || blocks[1] > chunk + 2 * MIB ||
        blocks[2] > chunk + 2 * MIB)
        FAIL("setup: two 1 MiB blocks not at the start of the chunk's free run");
    /* Rounds 3 and 4: the same run, a small block's segment. */
    for (int round = 1; round < LENT_ROUNDS; round++)
        lent_round(round, chunk, chunk + 3 * MIB, huge_aligned ? 6 * MIB + MIB / 2 : 6 * MIB,
                   12 * MIB);
    pthread_join(helper, NULL);
    for (int i = 0; i < count; i++)
        if (i < 3 || i >= 15) free(blocks[i]); /* 3-14 went in round 1 */
}

/* ---- what one arena block reserves under an address-space limit ---- */
/* 256 MiB above what the process has. */
static void arena_reserve(void) {
    if (mallopt(M_MMAP_THRESHOLD, MIB) != 1) FAIL("mallopt(M_MMAP_THRESHOLD) refused");
    size_t base = vm_size();
    set_limit(base + 256 * MIB);
    unsigned char *block = malloc(300000); /* from the arena: a chunk is mapped */
    if (block == NULL) FAIL("malloc(300000) failed under a 256 MiB limit");
    memset(block, 1, 300000);
    size_t reserved = vm_size() - base;
    say(1, "malloc(300000) took %zu MiB of the limit\n", reserved / MIB);
    /* The program's own mapping, as a file or a thread stack would be. */
    void *own = mmap(NULL, 200 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own == MAP_FAILED)
        FAIL("a 200 MiB mapping of the program's own failed beside one 300000-byte block "
             "(%zu MiB reserved)",
             reserved / MIB);
    munmap(own, 200 * MIB);
    for (size_t i = 0; i < 300000; i += 4096)
        if (block[i] != 1) FAIL("the block lost its contents");
    free(block);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "st";
    if (argc > 2 && strcmp(argv[2], "data") == 0) limit_resource = RLIMIT_DATA;
    if (strcmp(mode, "st") == 0)
        single_threaded();
    else if (strcmp(mode, "mt") == 0)
        multi_threaded();
    else if (strcmp(mode, "table") == 0)
        huge_table();
    else if (strcmp(mode, "arena") == 0)
        arena_space();
    else if (strcmp(mode, "reserve") == 0)
        arena_reserve();
    else if (strcmp(mode, "lent") == 0)
        lent_segment();
    else
        FAIL("usage: oom st|mt|table|arena|reserve|lent [data]");
    say(1, "ok\n");
    return 0;
}
