/* Blocks that other threads free into pages whose owner still has local free
 * blocks come back exactly once. The owner learns how many blocks another
 * thread pushed from the push word itself and splices the shorter of the two
 * lists (its local one, or the pushed one) when it collects a page that is
 * not dry: at thread exit, and when another thread adopts the page. Both
 * splices are exercised: the owner frees 10% of its blocks locally and
 * another thread 90%, then the reverse. A later thread then allocates far
 * more than was freed: every pointer must be distinct, must not overlap a
 * live block, and must keep its contents, and every freed block must be
 * among them, so a lost or duplicated block (a wrong count or a bad splice)
 * is caught. */
#include <pthread.h>

#include "common.h"

#define N    6000 /* blocks per owner thread: a few pages of one class */
#define SIZE 48
#define KEEP 64 /* blocks the owner keeps live, so its pages stay in use */

static void *blocks[N];
static void *original[N]; /* the owner's block addresses, all freed */
static void *kept[KEEP];
static int local_percent;

static void *remote_freer(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        if (blocks[i] && (i % 100) >= local_percent) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
    }
    return NULL;
}

/* Allocates N blocks, frees local_percent of them itself, lets another thread
 * free the rest while it still holds KEEP blocks, then exits holding them. */
static void *owner(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        blocks[i] = original[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, SIZE);
    }
    for (int i = 0; i < KEEP; i++) {
        kept[i] = malloc(SIZE);
        CHECK(kept[i] != NULL);
        memset(kept[i], 0x11, SIZE);
    }
    for (int i = 0; i < N; i++) {
        if ((i % 100) < local_percent) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, remote_freer, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    return NULL; /* exits with both lists on its pages: collected at exit */
}

static int compare_pointers(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

#define TOTAL (4 * N)
static void *fresh[TOTAL];

/* A new thread (which adopts the abandoned pages) allocates many blocks:
 * all distinct, none overlapping, contents intact. */
static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < TOTAL; i++) {
        fresh[i] = malloc(SIZE);
        CHECK(fresh[i] != NULL);
        memset(fresh[i], (unsigned char)i, SIZE);
    }
    for (int i = 0; i < TOTAL; i++) {
        const unsigned char *p = fresh[i];
        for (int k = 0; k < SIZE; k++)
            CHECKF(p[k] == (unsigned char)i, "block %d byte %d overwritten: a duplicate", i, k);
    }
    static void *sorted[TOTAL + KEEP];
    memcpy(sorted, fresh, sizeof fresh);
    memcpy(sorted + TOTAL, kept, sizeof kept);
    qsort(sorted, TOTAL + KEEP, sizeof sorted[0], compare_pointers);
    for (int i = 1; i < TOTAL + KEEP; i++)
        CHECKF((uintptr_t)sorted[i] - (uintptr_t)sorted[i - 1] >= SIZE, "blocks %p and %p overlap",
               sorted[i - 1], sorted[i]);
    for (int i = 0; i < KEEP; i++) {
        const unsigned char *p = kept[i];
        for (int k = 0; k < SIZE; k++)
            CHECKF(p[k] == 0x11, "kept block %d overwritten", i);
    }
    /* Nothing was lost: the adopted pages hand out every freed block before
     * fresh ones are carved, so all of the owner's blocks are among these. */
    for (int i = 0; i < N; i++)
        CHECKF(bsearch(&original[i], sorted, TOTAL + KEEP, sizeof sorted[0], compare_pointers),
               "freed block %d (%p) was never handed out again: lost", i, original[i]);
    for (int i = 0; i < TOTAL; i++)
        free(fresh[i]);
    return NULL;
}

int main(void) {
    const int percents[] = {10, 90, 50};
    for (unsigned r = 0; r < sizeof percents / sizeof percents[0]; r++) {
        local_percent = percents[r];
        pthread_t t;
        CHECK(pthread_create(&t, NULL, owner, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
        CHECK(pthread_create(&t, NULL, consumer, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
        for (int i = 0; i < KEEP; i++)
            free(kept[i]);
    }
    return 0;
}
