/* Secure mode and MALLOC_PERTURB_ (docs/security.md). Run with the library
 * preloaded and MALLOC_CHECK_=3 (or MALLOC_PERTURB_ for "perturb"); the case
 * named by argv[1] either must abort (the suite checks the signal and the
 * message) or must exit 0. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidemalloc.h"

static int fail(const char *what) {
    fprintf(stderr, "secure: %s\n", what);
    return 1;
}

/* The owner of the blocks another thread frees before malloc_trim; it
 * allocates them again afterwards, which checks their free fill. */
static void *remote[64];
static pthread_barrier_t barrier;
static void *released_owner(void *arg) {
    (void)arg;
    for (int i = 0; i < 64; i++)
        memset(remote[i] = malloc(16000), 7, 16000);
    pthread_barrier_wait(&barrier); /* the main thread frees half and trims */
    pthread_barrier_wait(&barrier);
    for (int i = 1; i < 64; i += 2)
        memset(remote[i] = malloc(16000), 1, 16000);
    for (int i = 0; i < 64; i++)
        free(remote[i]);
    return NULL;
}

/* mallopt(M_PERTURB) from one thread while another callocs: a calloc that
 * read the size limit before checked mode came on went through malloc's
 * slow path, got a perturbed block on a fresh page and zeroed only its first
 * 16 bytes (every run failed within milliseconds). */
static atomic_int race_stop, race_bad;
static void *perturb_toggler(void *arg) {
    (void)arg;
    for (int n = 0; !atomic_load(&race_stop); n++)
        mallopt(M_PERTURB, n & 1 ? 0xa5 : 0);
    return NULL;
}
static void *zero_caller(void *arg) {
    (void)arg;
    for (int r = 0; r < 500000 && !atomic_load(&race_bad); r++) {
        size_t n = 17 + (size_t)(r * 37) % 1000;
        unsigned char *p = calloc(1, n);
        for (size_t i = 0; p && i < n; i++)
            if (p[i]) atomic_store(&race_bad, 1);
        if (r % 3) free(p); /* keep a third: fresh pages keep coming */
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    if (strcmp(c, "overflow") == 0) { /* must abort in free */
        char *volatile p = malloc(100);
        p[100] = 1;
        free(p);
        return 0;
    }
    /* Blocks too big for a class: one byte past the request lies in the
     * rounding before the guard page (300001 bytes, rounded to 300016), or
     * in the room an alignment leaves (100 bytes aligned to 1 MiB): the
     * canary there catches it at free. */
    if (strcmp(c, "overflow-huge") == 0) {
        char *volatile p = malloc(300001);
        p[300001] = 1;
        free(p);
        return 0;
    }
    if (strcmp(c, "overflow-aligned") == 0) {
        char *volatile p = memalign((size_t)1 << 20, 100);
        p[100] = 1;
        free(p);
        return 0;
    }
    if (strcmp(c, "write-after-free") == 0) { /* must abort in malloc */
        char *volatile p = malloc(200);
        free(p);
        p[50] = 7;
        for (int i = 0; i < 64; i++) { /* volatile: the compiler may drop a malloc/free pair */
            char *volatile q = malloc(200);
            free(q);
        }
        return 0;
    }
    if (strcmp(c, "guard") == 0) { /* must fault past a large block */
        char *volatile p = malloc(300000);
        p[300000 + 64] = 1;
        free(p);
        return 0;
    }
    if (strcmp(c, "clean") == 0) { /* a correct program runs unharmed */
        for (int round = 0; round < 2000; round++) {
            size_t n = (size_t)(round * 37 % 5000) + 1;
            char *p = malloc(n);
            if (!p || malloc_usable_size(p) != n) return fail("usable size is not the request");
            memset(p, 0x5a, n);
            p = realloc(p, n * 2);
            if (!p || p[n - 1] != 0x5a) return fail("realloc lost contents");
            memset(p, 1, n * 2);
            char *z = calloc(n, 3);
            for (size_t i = 0; i < n * 3; i++)
                if (z[i]) return fail("calloc not zero");
            free(z);
            free(p);
        }
        void *a = memalign(256, 1000);
        if (((unsigned long)a & 255) != 0) return fail("memalign");
        free(a);
        /* blocks with a guard page: the usable size is the request too, every
         * byte of it can be written, realloc keeps it, free finds the canary
         * intact */
        for (int i = 0; i < 24; i++) {
            size_t n = 290000 + (size_t)i * 4099, align = (size_t)16 << (i % 18);
            char *p = memalign(align, n);
            if (p == NULL || ((unsigned long)p & (align - 1)) != 0) return fail("big memalign");
            if (malloc_usable_size(p) != n)
                return fail("big block's usable size is not the request");
            memset(p, 0x33, n);
            p = realloc(p, n + 5000);
            if (p == NULL || p[n - 1] != 0x33 || malloc_usable_size(p) != n + 5000)
                return fail("big block's realloc");
            memset(p, 0x44, n + 5000);
            free(p);
        }
        /* guarded mappings of 0 bytes: the block never starts on the guard
         * page (one in 16 did, and malloc_usable_size aborted); its usable
         * size is its request, 0 */
        void *zero[64];
        for (int i = 0; i < 64; i++) {
            zero[i] = memalign((size_t)1 << (16 + i % 4), 0);
            if (zero[i] == NULL || malloc_usable_size(zero[i]) != 0) return fail("memalign(, 0)");
        }
        for (int i = 0; i < 64; i++)
            free(zero[i]);
        return 0;
    }
    if (strcmp(c, "released") == 0) { /* no page inside a free block is given back */
        /* aggressive mode: its per-block release would zero the free fill */
        if (mallopt(M_AGGRESSIVE_MADVISE, 1) != 1) return fail("mallopt(M_AGGRESSIVE_MADVISE)");
        char *b[16];
        for (int i = 0; i < 16; i++)
            memset(b[i] = malloc(16000), 7, 16000);
        for (int i = 1; i < 16; i += 2)
            free(b[i]);
        for (int i = 1; i < 16; i += 2)
            memset(b[i] = malloc(16000), 1, 16000);
        mallopt(M_AGGRESSIVE_MADVISE, 0);
        /* malloc_trim: pages inside blocks another thread freed, still on a
         * live owner's lists */
        if (pthread_barrier_init(&barrier, NULL, 2) != 0) return fail("barrier");
        pthread_t t;
        if (pthread_create(&t, NULL, released_owner, NULL) != 0) return fail("pthread_create");
        pthread_barrier_wait(&barrier);
        for (int i = 1; i < 64; i += 2)
            free(remote[i]);
        malloc_trim(0);
        pthread_barrier_wait(&barrier);
        pthread_join(t, NULL);
        for (int i = 0; i < 16; i++)
            free(b[i]);
        return 0;
    }
    if (strcmp(c, "perturb-mallopt") == 0) { /* set while the heap is in use, as glibc allows */
        void *volatile before = malloc(64);
        free(before);
        if (mallopt(M_PERTURB, 165) != 1) return fail("mallopt(M_PERTURB)");
        static const size_t sizes[] = {64, 3000, 100000, 5000000};
        for (int k = 0; k < 4; k++) {
            unsigned char *p = malloc(sizes[k]);
            if (p == NULL) return fail("malloc");
            for (size_t i = 0; i < sizes[k]; i += 997)
                if (p[i] != 0x5a) return fail("memory not perturbed after mallopt(M_PERTURB)");
            memset(p, 0, sizes[k]);
            free(p);
        }
        unsigned char *z = calloc(1, 3000);
        for (int i = 0; i < 3000; i++)
            if (z[i]) return fail("calloc perturbed");
        free(z);
        if (mallopt(M_PERTURB, 0) != 1) return fail("mallopt(M_PERTURB, 0)");
        for (int i = 0; i < 1000; i++) { /* the fast paths again */
            char *volatile q = malloc(40);
            free(q);
        }
        return 0;
    }
    if (strcmp(c, "perturb-mallopt-race") == 0) {
        pthread_t toggler, caller;
        if (pthread_create(&toggler, NULL, perturb_toggler, NULL) != 0 ||
            pthread_create(&caller, NULL, zero_caller, NULL) != 0)
            return fail("pthread_create");
        pthread_join(caller, NULL);
        atomic_store(&race_stop, 1);
        pthread_join(toggler, NULL);
        return atomic_load(&race_bad) ? fail("calloc returned a non-zero byte") : 0;
    }
    if (strcmp(c, "perturb") == 0) { /* MALLOC_PERTURB_=165: ~165 = 0x5a on malloc */
        unsigned char *p = malloc(64);
        for (int i = 0; i < 64; i++)
            if (p[i] != 0x5a) return fail("malloc memory not perturbed");
        unsigned char *z = calloc(1, 64);
        for (int i = 0; i < 64; i++)
            if (z[i]) return fail("calloc perturbed");
        free(z);
        free(p);
        return 0;
    }
    return 2;
}
