/* Which threads' pages of the classes of 640 B to 1 KiB span 8 slices
 * (src/size_class.c, g_class_slices): a thread that has freed another
 * thread's block gets them, a thread that only allocates keeps pages of one
 * slice. Seen from outside: a one-slice page of 640-byte blocks holds 102 of
 * them from its slice's start, so none crosses a 64 KiB boundary, while in a
 * page of 8 slices block 102 does (65,280 to 65,920). Every block of such a
 * page passes free's block test, the ones across a boundary included: its
 * usable size is 640, a pointer 16 bytes into a block whose start lies in a
 * later slice is refused (the abort, in a child), and every block is freed
 * and allocated again with its contents intact. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "child_stderr.h"
#include "common.h"

#define SIZE   640
#define BLOCKS 2000 /* 1.25 MB: several pages of either width */
#define SLICE  ((uintptr_t)64 << 10)

static char *blocks[BLOCKS];
static void *foreign; /* the main thread's block, freed by the worker */

static unsigned straddling(void) {
    unsigned n = 0;
    for (int i = 0; i < BLOCKS; i++) {
        uintptr_t start = (uintptr_t)blocks[i];
        n += start / SLICE != (start + SIZE - 1) / SLICE;
    }
    return n;
}

static void allocate_blocks(void) {
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], i & 0xff, SIZE);
        size_t usable = malloc_usable_size(blocks[i]);
        CHECKF(tm_expected() ? usable == SIZE : usable >= SIZE, "usable size %zu", usable);
    }
}

static void free_blocks(void) {
    for (int i = 0; i < BLOCKS; i++) {
        for (size_t j = 0; j < SIZE; j += 64)
            CHECKF(blocks[i][j] == (char)(i & 0xff), "block %d byte %zu changed", i, j);
        free(blocks[i]);
    }
}

/* A new thread's heap is young: sizes up to 1 KiB take power-of-two
 * classes until it has carved a few OS pages of them (src/heap.c). */
static void grow_up(void) {
    static void *young[4096];
    int n = 0;
    while (tm_expected() && n < 4096) {
        young[n] = malloc(SIZE);
        CHECK(young[n] != NULL);
        if (malloc_usable_size(young[n++]) == SIZE) break;
    }
    CHECKF(n < 4096, "the heap stayed young");
    while (n > 0)
        free(young[--n]);
}

static void *only_allocates(void *arg) {
    (void)arg;
    grow_up();
    allocate_blocks();
    if (tm_expected())
        CHECKF(straddling() == 0,
               "%u blocks of a thread that frees nobody's blocks straddle a slice", straddling());
    free_blocks();
    return NULL;
}

static void *frees_others(void *arg) {
    (void)arg;
    free(malloc(SIZE)); /* a heap of its own, so the next free is batched */
    free(foreign);
    grow_up();
    allocate_blocks();
    unsigned n = straddling();
    if (tm_expected()) CHECKF(n > 0, "no block of a thread that frees others' blocks straddles");
    /* each block across a boundary, and a pointer into its later slice */
    for (int i = 0; i < BLOCKS && tm_expected(); i++) {
        uintptr_t start = (uintptr_t)blocks[i];
        if (start / SLICE == (start + SIZE - 1) / SLICE) continue;
        char msg[512];
        int status = run_in_child(free_laundered, blocks[i] + (SIZE - 16), msg, sizeof msg);
        CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, "free(): "),
               "a pointer into the later slice of block %d: not refused (status %d, \"%s\")", i,
               status, msg);
    }
    /* half freed and allocated again: the wide pages' lists in use */
    for (int i = 0; i < BLOCKS; i += 2)
        free(blocks[i]);
    for (int i = 0; i < BLOCKS; i += 2) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], i & 0xff, SIZE);
    }
    free_blocks();
    return NULL;
}

int main(void) {
    run_in_thread(only_allocates, NULL);
    foreign = malloc(SIZE);
    CHECK(foreign != NULL);
    run_in_thread(frees_others, NULL);
    return 0;
}
