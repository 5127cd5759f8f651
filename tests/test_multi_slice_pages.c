/* free and malloc_usable_size test a pointer against the descriptor of the
 * 64 KiB slice it falls in, which holds a copy of its page's block test
 * (src/page.c, page_block_test_set). Every block of the classes whose pages
 * span 2 and 4 slices (10-32 KiB), and every slice of a large block grown in
 * place by realloc, must pass as its page's: each block's usable size is its
 * class size (at least that with another allocator), an interior pointer in
 * a later slice is refused (in a child: the abort), and every block is freed
 * and allocated again without one. */
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>

#include "child_stderr.h"
#include "common.h"

#define BLOCKS 64

static const size_t sizes[] = {10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768};

static void expect_abort(char *p, const char *what) {
    char msg[1024];
    int status = run_in_child(free_laundered, p, msg, sizeof msg);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, "free(): "),
           "%s: not refused (status %d, \"%s\")", what, status, msg);
}

int main(void) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        char *blocks[BLOCKS];
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < BLOCKS; i++) {
                blocks[i] = malloc(sizes[s]);
                CHECK(blocks[i] != NULL);
                memset(blocks[i], i, sizes[s]);
                size_t usable = malloc_usable_size(blocks[i]);
                /* ours is the class size; others' may be more */
                CHECKF(tm_expected() ? usable == sizes[s] : usable >= sizes[s],
                       "usable size of a %zu block: %zu", sizes[s], usable);
            }
            if (round == 0 && tm_expected()) {
                /* a pointer 16 bytes into the block, wherever its slice is */
                for (int i = 0; i < BLOCKS; i += 7)
                    expect_abort(blocks[i] + 16, "16 bytes into a class block");
            }
            /* odd blocks first: pages are left partly used, then emptied */
            for (int i = 1; i < BLOCKS; i += 2)
                free(blocks[i]);
            for (int i = 0; i < BLOCKS; i += 2) {
                for (size_t j = 0; j < sizes[s]; j += 4096)
                    CHECK(blocks[i][j] == (char)i);
                free(blocks[i]);
            }
        }
    }
    if (tm_expected()) {
        /* a large block (threshold raised: no mapping of its own) grown in
         * place over the free slices after it, then its new last slice */
        CHECK(mallopt(M_MMAP_THRESHOLD, 8 << 20) == 1);
        char *p = malloc(100000);
        CHECK(p != NULL);
        memset(p, 1, 100000);
        char *q = realloc(p, 500000);
        CHECK(q != NULL);
        memset(q + 100000, 2, 400000);
        CHECK(malloc_usable_size(q) >= 500000);
        expect_abort(q + 450000, "a pointer into a grown large block's new slice");
        expect_abort(q + 65536, "a pointer at a grown large block's second slice");
        free(q);
    }
    return 0;
}
