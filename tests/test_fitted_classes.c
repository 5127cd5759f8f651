/* Fitted classes (src/size_class.c): a class over 1 KiB whose mallocs ask
 * mostly one size well below its block size gets a class of that size.
 * Here 1032-byte blocks (sqlite3's page cache: the 1152-byte class) are
 * allocated until malloc_usable_size says a block of 1040 bytes came back,
 * and then:
 * - 1032 and 1040 bytes get 1040, 1041 the fixed class's 1152, and 1024
 *   the class below (1024): the fitted class takes no size it cannot hold;
 * - every block's contents stay intact, the fitted ones included, through
 *   frees by another thread, realloc across the classes and a fork;
 * - aligned allocations keep to the fixed classes' alignment;
 * - a free of a pointer into a fitted block, or of one twice, aborts;
 * - every malloc of the size after the fit gets a fitted block;
 * - with M_FITTED_CLASSES 0 (a fork child) no class is fitted, and
 *   mallopt refuses values other than 0 and 1.
 * Under another allocator only the contents and the aborts' absence of
 * corruption are checked. */
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "child_stderr.h"
#include "common.h"

#define SIZE      1032
#define FITTED    1040
#define MAX_COUNT 120000 /* 133 MiB of 1152-byte blocks at most */

static int strict;
static void *blocks[MAX_COUNT];

/* Allocates SIZE-byte blocks, each filled, until one is a fitted block (or
 * MAX_COUNT); returns how many. */
static int allocate_until_fitted(void) {
    int n = 0;
    while (n < MAX_COUNT) {
        void *p = malloc(SIZE);
        CHECKF(p != NULL, "malloc(%d) failed after %d blocks", SIZE, n);
        pat_fill(p, SIZE);
        blocks[n++] = p;
        if (malloc_usable_size(p) == FITTED) break;
    }
    return n;
}

static void check_and_free(int from, int to) {
    for (int i = from; i < to; i++) {
        CHECKF(pat_check(blocks[i], SIZE) == (size_t)-1, "block %d (%p) was changed", i, blocks[i]);
        free(blocks[i]);
    }
}

static void control_without_fitting(void *unused) {
    (void)unused;
    if (mallopt(M_FITTED_CLASSES, 0) != 1) _exit(2);
    int n = allocate_until_fitted();
    if (n != MAX_COUNT) _exit(3); /* a fitted block came back */
    _exit(0);
}

static void *free_half_in_thread(void *arg) {
    int *range = arg;
    check_and_free(range[0], range[1]);
    return NULL;
}

static void free_interior(void *p) {
    free_laundered((char *)p + 16);
}

static void free_twice(void *p) {
    free(p);
    free_laundered(p);
}

static void expect_abort(void (*fn)(void *), void *p, const char *message) {
    char msg[256];
    int status = run_in_child(fn, p, msg, sizeof msg);
    CHECKF(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
           "expected an abort with \"%s\", got status %d", message, status);
    CHECKF(strstr(msg, message) != NULL, "expected \"%s\", got \"%s\"", message, msg);
}

int main(void) {
    strict = tm_stats_required_if_expected() != NULL;
    if (strict) {
        CHECK(mallopt(M_FITTED_CLASSES, 2) == 0);
        char msg[64];
        int status = run_in_child(control_without_fitting, NULL, msg, sizeof msg);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "with M_FITTED_CLASSES 0 a class was fitted (status %d)", status);
    }

    int n = allocate_until_fitted();
    if (strict)
        CHECKF(n < MAX_COUNT, "no block of %d bytes after %d mallocs of %d", FITTED, n, SIZE);
    printf("fitted class after %d mallocs of %d bytes\n", n, SIZE);
    fflush(stdout);

    /* the sizes around the fitted one */
    static const struct {
        size_t size, usable;
    } around[] = {
        {SIZE, FITTED}, {FITTED, FITTED}, {FITTED + 1, 1152}, {1024, 1024}, {1025, FITTED}};
    for (unsigned i = 0; i < sizeof around / sizeof around[0]; i++) {
        void *p = malloc(around[i].size);
        CHECK(p != NULL);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable >= around[i].size, "malloc(%zu): %zu usable", around[i].size, usable);
        if (strict)
            CHECKF(usable == around[i].usable, "malloc(%zu): %zu usable, expected %zu",
                   around[i].size, usable, around[i].usable);
        pat_fill(p, usable);
        CHECK(pat_check(p, usable) == (size_t)-1);
        free(p);
    }

    /* every malloc of the size after the fit gets a fitted block */
    int more = n + 4000 <= MAX_COUNT ? n + 4000 : MAX_COUNT;
    int fitted = 0;
    for (int i = n; i < more; i++) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        pat_fill(blocks[i], SIZE);
        fitted += malloc_usable_size(blocks[i]) == FITTED;
    }
    if (strict)
        CHECKF(fitted == more - n, "%d of %d mallocs of %d after the fit got %d bytes", fitted,
               more - n, SIZE, FITTED);

    /* aligned blocks of the size keep to the fixed classes */
    void *aligned = NULL;
    CHECK(posix_memalign(&aligned, 64, SIZE) == 0);
    CHECKF(((uintptr_t)aligned & 63) == 0, "posix_memalign(64, %d) gave %p", SIZE, aligned);
    CHECK(malloc_usable_size(aligned) >= SIZE);
    free(aligned);

    /* realloc across the fitted and the fixed class keeps the contents */
    void *r = malloc(SIZE);
    CHECK(r != NULL);
    pat_fill_k(r, SIZE, 77);
    void *grown = realloc(r, 1100);
    CHECK(grown != NULL);
    CHECKF(pat_check_k(grown, SIZE, 77) == (size_t)-1, "realloc to 1100 changed the contents");
    if (strict) CHECK(malloc_usable_size(grown) == 1152);
    void *fitted_block = malloc(SIZE);
    CHECK(fitted_block != NULL);
    free(grown);

    /* a fork child sees the fitted blocks intact and allocates them too */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        for (int i = 0; i < more; i++)
            if (pat_check(blocks[i], SIZE) != (size_t)-1) _exit(4);
        void *c = malloc(SIZE);
        if (c == NULL || (strict && malloc_usable_size(c) != FITTED)) _exit(5);
        _exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child failed (status %d)", status);

    /* a fitted block: interior free and double free abort */
    if (strict) {
        expect_abort(free_interior, fitted_block, "free(): invalid pointer");
        expect_abort(free_twice, fitted_block, "free(): double free detected");
    }
    free(fitted_block);

    /* half freed by another thread, half here; then the class serves again */
    int range[2] = {0, more / 2};
    run_in_thread(free_half_in_thread, range);
    check_and_free(more / 2, more);
    for (int i = 0; i < 1000; i++) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        pat_fill(blocks[i], SIZE);
    }
    check_and_free(0, 1000);
    return 0;
}
