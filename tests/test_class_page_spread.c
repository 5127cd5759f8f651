/* Which threads' pages of the classes of 320 B to 1 KiB span several slices
 * (src/size_class.c, g_class_slices: 4 up to 512 B, 8 from 640 B): a thread
 * that has freed another thread's block gets them, a thread that only
 * allocates keeps pages of one slice. Seen from outside: a one-slice page
 * of 640-byte blocks holds 102 of them from its slice's start (of 384-byte
 * ones 170), so none crosses a 64 KiB boundary, while in a wider page block
 * 102 (170) does, at 65,280. Every block of such a page passes free's block
 * test, the ones across a boundary included: its usable size is its class
 * size, a pointer 16 bytes before its end, in the later slice, is refused
 * (the abort, in a child), and every block is freed and allocated again
 * with its contents intact. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "child_stderr.h"
#include "common.h"

#define BLOCKS 2000 /* 0.8-1.3 MB: several pages of either width */
#define SLICE  ((uintptr_t)64 << 10)

static size_t size; /* 384 or 640 */
static char *blocks[BLOCKS];
static void *foreign; /* the main thread's block, freed by the worker */

static unsigned straddling(void) {
    unsigned n = 0;
    for (int i = 0; i < BLOCKS; i++) {
        uintptr_t start = (uintptr_t)blocks[i];
        n += start / SLICE != (start + size - 1) / SLICE;
    }
    return n;
}

static void allocate_blocks(void) {
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(size);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], i & 0xff, size);
        size_t usable = malloc_usable_size(blocks[i]);
        CHECKF(tm_expected() ? usable == size : usable >= size, "usable size %zu", usable);
    }
}

static void free_blocks(void) {
    for (int i = 0; i < BLOCKS; i++) {
        for (size_t j = 0; j < size; j += 64)
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
        young[n] = malloc(size);
        CHECK(young[n] != NULL);
        if (malloc_usable_size(young[n++]) == size) break;
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
    free(malloc(size)); /* a heap of its own, so the next free is batched */
    free(foreign);
    grow_up();
    allocate_blocks();
    unsigned n = straddling();
    if (tm_expected()) CHECKF(n > 0, "no block of a thread that frees others' blocks straddles");
    /* each block across a boundary, and a pointer into its later slice */
    for (int i = 0; i < BLOCKS && tm_expected(); i++) {
        uintptr_t start = (uintptr_t)blocks[i];
        if (start / SLICE == (start + size - 1) / SLICE) continue;
        char msg[512];
        int status = run_in_child(free_laundered, blocks[i] + (size - 16), msg, sizeof msg);
        CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, "free(): "),
               "a pointer into the later slice of block %d: not refused (status %d, \"%s\")", i,
               status, msg);
    }
    /* half freed and allocated again: the wide pages' lists in use */
    for (int i = 0; i < BLOCKS; i += 2)
        free(blocks[i]);
    for (int i = 0; i < BLOCKS; i += 2) {
        blocks[i] = malloc(size);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], i & 0xff, size);
    }
    free_blocks();
    return NULL;
}

int main(void) {
    static const size_t sizes[] = {384, 640};
    for (int s = 0; s < 2; s++) {
        size = sizes[s];
        run_in_thread(only_allocates, NULL);
        foreign = malloc(size);
        CHECK(foreign != NULL);
        run_in_thread(frees_others, NULL);
    }
    return 0;
}
