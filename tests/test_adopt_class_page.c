/* A new thread that adopts an abandoned segment serves its first block from
 * an adopted page of the class asked for, if one has room, instead of
 * setting up a second page of the class beside it. Thread A leaves a page of
 * 48-byte blocks with one block live and exits (its segment is abandoned);
 * thread B's first malloc(48) must come from that page's slice. (Before,
 * the first page a new thread needed came from a new run of the adopted
 * segment: with the class's own slice taken by the adopted page, the run
 * went on the slice of another class, which then went on a third's, and so
 * on; threads that allocate only small objects and exit in waves faulted
 * in 12 times the pages, as each thread's exit gave back what the next
 * carved again.) */
#include <pthread.h>

#include "common.h"

#define SIZE        48
#define BLOCKS      200
#define SLICE_SHIFT 16

static void *kept;

static void *thread_a(void *unused) {
    (void)unused;
    void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        if ((blocks[i] = malloc(SIZE)) == NULL) FAILF("malloc(%d) failed", SIZE);
    kept = blocks[BLOCKS / 2];
    for (int i = 0; i < BLOCKS; i++)
        if (blocks[i] != kept) free(blocks[i]);
    return NULL;
}

static void *thread_b(void *result) {
    *(void **)result = malloc(SIZE);
    return NULL;
}

int main(void) {
    if (tm_stats_required_if_expected() == NULL) SKIP("needs tidemalloc (a placement test)");
    run_in_thread(thread_a, NULL);
    void *first = NULL;
    run_in_thread(thread_b, &first);
    CHECKF(first != NULL, "malloc(%d) failed in the second thread", SIZE);
    CHECKF((uintptr_t)first >> SLICE_SHIFT == (uintptr_t)kept >> SLICE_SHIFT,
           "the new thread's first block %p is not on the adopted page of %p", first, kept);
    free(first);
    free(kept);
    return 0;
}
