/* realloc of blocks mapped on their own, moved by mremap in 4 threads while
 * 2 others map and unmap 200 blocks at a time, so that the out-of-band table
 * of such blocks grows from its static first entries while blocks move (a
 * moving block keeps its slot and takes a new one for its new address
 * under the same lock: coming back cannot fail for want of a slot). Every
 * byte pattern survives every move; with tidemalloc preloaded, the moves
 * were made by mremap. */
#include <malloc.h>
#include <pthread.h>

#include "common.h"

#define MB ((size_t)1 << 20)

static void *mover(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    for (int round = 0; round < 50; round++) {
        size_t size = (1 + (size_t)(seed % 4)) * MB;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t key = seed ^ (uint64_t)round;
        unsigned char *p = malloc(size);
        CHECKF(p != NULL, "malloc(%zu) failed", size);
        pat_fill_k(p, size, key);
        for (int step = 0; step < 3; step++) {
            unsigned char *q = realloc(p, size * 2);
            CHECKF(q != NULL, "realloc(%zu) failed", size * 2);
            size_t bad = pat_check_k(q, size, key);
            CHECKF(bad == (size_t)-1, "realloc to %zu lost byte %zu", size * 2, bad);
            pat_fill_k(q, size * 2, key); /* all of it, for the next step */
            p = q;
            size *= 2;
        }
        free(p);
    }
    return NULL;
}

static void *filler(void *arg) {
    (void)arg;
    void *blocks[200];
    for (int round = 0; round < 30; round++) {
        for (int i = 0; i < 200; i++) {
            blocks[i] = malloc(300000 + (size_t)i * 4096);
            CHECKF(blocks[i] != NULL, "malloc of a mapped block failed");
            ((unsigned char *)blocks[i])[0] = (unsigned char)i;
        }
        for (int i = 0; i < 200; i++) {
            CHECK(((unsigned char *)blocks[i])[0] == (unsigned char)i);
            free(blocks[i]);
        }
    }
    return NULL;
}

int main(void) {
    /* every block here mapped on its own: a fixed threshold, no arena */
    CHECK(mallopt(M_MMAP_THRESHOLD, 256 * 1024) == 1);
    tm_stats_fn stats = tm_stats_required_if_expected();
    struct tidemalloc_stats before = {0}, after = {0};
    if (stats) stats(&before);
    pthread_t threads[6];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&threads[i], NULL, mover, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 4; i < 6; i++)
        CHECK(pthread_create(&threads[i], NULL, filler, NULL) == 0);
    for (int i = 0; i < 6; i++)
        pthread_join(threads[i], NULL);
    if (stats) {
        stats(&after);
        CHECKF(after.mremap_calls - before.mremap_calls >= 4 * 50 * 3,
               "%llu mremap calls for 600 growths",
               (unsigned long long)(after.mremap_calls - before.mremap_calls));
    }
    puts("ok");
    return 0;
}
