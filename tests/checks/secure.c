/* Secure mode and MALLOC_PERTURB_ (docs/security.md). Run with the library
 * preloaded and MALLOC_CHECK_=3 (or MALLOC_PERTURB_ for "perturb"); the case
 * named by argv[1] either must abort (the suite checks the signal and the
 * message) or must exit 0. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
    fprintf(stderr, "secure: %s\n", what);
    return 1;
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
        return 0;
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
