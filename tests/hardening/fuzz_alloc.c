/* libFuzzer harness for the prefixed library (issue 6 item 4). Built with
 * clang -fsanitize=fuzzer,address,undefined against the src/ files compiled with
 * -DTIDEMALLOC_PREFIX, so tm_malloc & co. are the allocator under test while
 * libc's malloc (ASan's) holds the harness's own shadow copies.
 *
 * The input is a sequence of operations on 64 slots. Each operation runs on
 * one of 4 threads: the fuzzer's own (0) or one of 3 workers (1-3) that
 * execute one operation at a time on request, so runs are deterministic and
 * blocks move between threads (remote frees, adoption after a worker exits).
 * Every block is filled, over its whole usable size, with bytes from a seed;
 * a shadow copy is kept and compared before every free and realloc, on
 * usable-size checks and at the end of each input. Also checked: calloc
 * zeroing, alignment, usable size >= requested and stable, realloc keeping
 * the old contents, realloc(p, 0) freeing. Any mismatch aborts (a crash for
 * libFuzzer); so does any error the allocator itself detects. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tm_api.h"

#define SLOTS   64
#define WORKERS 4 /* simulated threads; 0 is the caller's */

struct slot {
    unsigned char *p;      /* block from tm_*, or NULL */
    size_t size;           /* requested */
    size_t usable;         /* malloc_usable_size at allocation */
    unsigned char *shadow; /* copy of all `usable` bytes (libc malloc) */
};
static struct slot slots[SLOTS];

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "fuzz_alloc: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* ---- block contents ---- */

static void fill(unsigned char *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    for (; i < n; i++)
        p[i] = (unsigned char)(x >> (8 * (i & 7)));
}

static void check_contents(const struct slot *s, size_t n, const char *when) {
    if (n > s->usable) n = s->usable;
    if (memcmp(s->p, s->shadow, n) != 0) {
        size_t i = 0;
        while (s->p[i] == s->shadow[i])
            i++;
        DIE("%s: block %p (size %zu usable %zu) differs from its shadow at byte %zu: %02x != %02x",
            when, (void *)s->p, s->size, s->usable, i, s->p[i], s->shadow[i]);
    }
}

/* A fresh block: check what the caller promised, then fill it. */
static void adopt_block(struct slot *s, void *p, size_t size, size_t align, uint64_t seed,
                        const char *what) {
    if ((uintptr_t)p % align != 0) DIE("%s(%zu) = %p is not %zu-aligned", what, size, p, align);
    size_t usable = tm_malloc_usable_size(p);
    if (usable < size) DIE("%s(%zu): usable size %zu is less", what, size, usable);
    if (usable > size + (size_t)64 * 1024 * 1024)
        DIE("%s(%zu): usable size %zu absurd", what, size, usable);
    for (int i = 0; i < SLOTS; i++) {
        const struct slot *o = &slots[i];
        if (o != s && o->p && (unsigned char *)p < o->p + o->usable &&
            o->p < (unsigned char *)p + usable)
            DIE("%s(%zu) = %p overlaps live block %p (usable %zu)", what, size, p, (void *)o->p,
                o->usable);
    }
    unsigned char *shadow = realloc(s->shadow, usable ? usable : 1);
    if (shadow == NULL) DIE("shadow allocation failed");
    s->p = p;
    s->size = size;
    s->usable = usable;
    s->shadow = shadow;
    fill(s->p, usable, seed);
    memcpy(s->shadow, s->p, usable);
}

static void release(struct slot *s) {
    if (s->p == NULL) return;
    check_contents(s, s->usable, "free");
    tm_free(s->p);
    s->p = NULL;
    s->size = s->usable = 0;
}

/* ---- operations ---- */

enum {
    OP_MALLOC,
    OP_CALLOC,
    OP_REALLOC,
    OP_MEMALIGN,
    OP_POSIX_MEMALIGN,
    OP_ALIGNED_ALLOC,
    OP_FREE,
    OP_USABLE,
    OP_REALLOC_ZERO,
    OP_TRIM,
    OP_RESTART,
    OP_COUNT
};

struct op {
    unsigned code, slot;
    size_t size, align;
    uint64_t seed;
};

static void run_op(const struct op *o) {
    struct slot *s = &slots[o->slot];
    switch (o->code) {
    case OP_MALLOC: {
        release(s);
        void *p = tm_malloc(o->size);
        if (p == NULL) DIE("malloc(%zu) failed", o->size);
        adopt_block(s, p, o->size, 16, o->seed, "malloc");
        break;
    }
    case OP_CALLOC: {
        release(s);
        size_t unit = o->align, count = o->size / unit;
        void *p = tm_calloc(count, unit);
        if (p == NULL) DIE("calloc(%zu, %zu) failed", count, unit);
        for (size_t i = 0; i < count * unit; i++)
            if (((unsigned char *)p)[i] != 0)
                DIE("calloc(%zu, %zu): byte %zu is not zero", count, unit, i);
        adopt_block(s, p, count * unit, 16, o->seed, "calloc");
        break;
    }
    case OP_REALLOC: {
        if (s->p) check_contents(s, s->usable, "before realloc");
        if (s->p && o->size == 0) { /* glibc 2.36: frees, returns NULL */
            if (tm_realloc(s->p, 0) != NULL) DIE("realloc(p, 0) did not free");
            s->p = NULL;
            s->size = s->usable = 0;
            break;
        }
        size_t old_size = s->size;
        void *p = tm_realloc(s->p, o->size);
        if (p == NULL) DIE("realloc(%p, %zu) failed", (void *)s->p, o->size);
        size_t keep = old_size < o->size ? old_size : o->size;
        if (s->p && memcmp(p, s->shadow, keep) != 0)
            DIE("realloc(%zu -> %zu) lost the contents", old_size, o->size);
        s->p = NULL; /* handed over to realloc */
        adopt_block(s, p, o->size, 16, o->seed, "realloc");
        break;
    }
    case OP_MEMALIGN:
    case OP_POSIX_MEMALIGN:
    case OP_ALIGNED_ALLOC: {
        release(s);
        void *p = NULL;
        const char *what = "memalign";
        if (o->code == OP_MEMALIGN) {
            p = tm_memalign(o->align, o->size);
        } else if (o->code == OP_POSIX_MEMALIGN) {
            what = "posix_memalign";
            int rc = tm_posix_memalign(&p, o->align, o->size);
            if (rc != 0) DIE("posix_memalign(%zu, %zu) = %d", o->align, o->size, rc);
        } else {
            what = "aligned_alloc";
            p = tm_aligned_alloc(o->align, o->size);
        }
        if (p == NULL) DIE("%s(%zu, %zu) failed", what, o->align, o->size);
        adopt_block(s, p, o->size, o->align, o->seed, what);
        break;
    }
    case OP_FREE:
        release(s);
        break;
    case OP_USABLE:
        if (s->p == NULL) {
            if (tm_malloc_usable_size(NULL) != 0) DIE("malloc_usable_size(NULL) != 0");
            break;
        }
        if (tm_malloc_usable_size(s->p) != s->usable)
            DIE("usable size of %p changed: %zu, was %zu", (void *)s->p,
                tm_malloc_usable_size(s->p), s->usable);
        check_contents(s, s->usable, "usable-size check");
        break;
    case OP_REALLOC_ZERO:
        if (s->p == NULL) break;
        check_contents(s, s->usable, "before realloc(p, 0)");
        if (tm_realloc(s->p, 0) != NULL)
            DIE("realloc(p, 0) did not free (glibc 2.36 returns NULL)");
        s->p = NULL;
        s->size = s->usable = 0;
        break;
    case OP_TRIM:
        tm_malloc_trim(o->size & 0xffff);
        break;
    default:
        break;
    }
}

/* ---- workers: real threads, one operation at a time ---- */

struct worker {
    pthread_t thread;
    sem_t go, done;
    const struct op *job; /* NULL: exit */
};
static struct worker workers[WORKERS];

static void *worker_main(void *arg) {
    struct worker *w = arg;
    for (;;) {
        while (sem_wait(&w->go) != 0) {
        }
        if (w->job == NULL) break;
        run_op(w->job);
        sem_post(&w->done);
    }
    return NULL;
}

static void worker_start(struct worker *w) {
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) DIE("pthread_create failed");
}

/* The thread exits (its heap is abandoned with whatever it still owns). */
static void worker_restart(struct worker *w) {
    w->job = NULL;
    sem_post(&w->go);
    pthread_join(w->thread, NULL);
    worker_start(w);
}

static void run_on(unsigned thread, const struct op *o) {
    if (thread == 0) {
        run_op(o);
        return;
    }
    struct worker *w = &workers[thread];
    w->job = o;
    sem_post(&w->go);
    while (sem_wait(&w->done) != 0) {
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 1; i < WORKERS; i++) {
        sem_init(&workers[i].go, 0, 0);
        sem_init(&workers[i].done, 0, 0);
        worker_start(&workers[i]);
    }
    return 0;
}

/* ---- input decoding ---- */

struct input {
    const uint8_t *data;
    size_t left;
};
static unsigned take8(struct input *in) {
    if (in->left == 0) return 0;
    in->left--;
    return *in->data++;
}
static unsigned take16(struct input *in) {
    return take8(in) | take8(in) << 8;
}

/* Sizes across every range: mostly small, sometimes up to 4 MiB. */
static size_t take_size(struct input *in) {
    unsigned c = take8(in), v = take16(in);
    switch (c & 7) {
    case 0:
    case 1:
    case 2:
    case 3:
        return v % 1025; /* 0 .. 1 KiB */
    case 4:
    case 5:
        return v % (16 * 1024 + 1); /* .. 16 KiB */
    case 6:
        return ((size_t)v << 3) % (256 * 1024 + 1); /* .. 256 KiB */
    default:
        if (c & 0x38) return ((size_t)v << 5) % (2 * 1024 * 1024 + 1); /* .. 2 MiB */
        return ((size_t)v << 6) % (4 * 1024 * 1024 + 1);               /* .. 4 MiB */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct input in = {data, size};
    uint64_t seed = size;
    unsigned restarts = 0;
    while (in.left > 0) {
        unsigned b = take8(&in);
        struct op o = {0};
        unsigned thread = (b >> 6) & 3;
        o.code = (b & 63) % OP_COUNT;
        o.slot = take8(&in) % SLOTS;
        o.seed = ++seed;
        switch (o.code) {
        case OP_MALLOC:
        case OP_REALLOC:
            o.size = take_size(&in);
            break;
        case OP_CALLOC:
            o.size = take_size(&in);
            o.align = 1 + take8(&in) % 64; /* element size */
            break;
        case OP_MEMALIGN: {
            unsigned a = take8(&in);
            o.size = take_size(&in);
            o.align = (size_t)1 << (a % 17);                   /* 1 .. 64 KiB */
            if (a & 0x80) o.align = (size_t)1 << (17 + a % 5); /* .. 2 MiB, rarely */
            if (o.align > 65536 && o.size > 1024 * 1024) o.size /= 4;
            break;
        }
        case OP_POSIX_MEMALIGN:
        case OP_ALIGNED_ALLOC: {
            unsigned a = take8(&in);
            o.size = take_size(&in);
            o.align = (size_t)8 << (a % 14); /* 8 .. 64 KiB */
            if (o.code == OP_ALIGNED_ALLOC && o.align < 16) o.align = 16;
            break;
        }
        case OP_TRIM:
            o.size = take16(&in);
            break;
        case OP_RESTART:
            if (thread != 0 && restarts < 8) {
                restarts++;
                worker_restart(&workers[thread]);
            }
            continue;
        default:
            break;
        }
        run_on(thread, &o);
    }
    /* Everything goes back, freed from varying threads. */
    for (unsigned i = 0; i < SLOTS; i++) {
        struct op o = {.code = OP_FREE, .slot = i};
        run_on(i % WORKERS, &o);
    }
    return 0;
}
