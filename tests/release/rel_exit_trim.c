/* A thread's exit gives back what earlier threads touched on its pages'
 * slices and it did not carve (heap_exit_trim), when that comes to a slice
 * (64 KiB) or more, in one call.
 *
 * The first thread fills one page of each of CLASSES size classes (64 KiB
 * of blocks each), frees them and exits: its segment goes to the cache,
 * every slice resident. The second thread takes that segment; a block of
 * each class lands on the slice its class used before, and the thread
 * exits with the blocks still in use (main frees them). Its pages carved one
 * OS page each.
 *   rel_exit_trim many   CLASSES classes: after the second exit each slice
 *                        holds at most its first pages, and the allocator
 *                        made a release call during that thread's life
 *   rel_exit_trim one    one class (under 64 KiB to give back): no call, and
 *                        the slice stays resident
 * Run with the idle purger, the retain bound and the trim threshold out of
 * the way (suite-release.sh), so that nothing else releases the slices.
 * Under an allocator without the counters, skipped. */
#include <stdbool.h>
#include <sys/mman.h>

#include "release.h"

#define CLASSES    4
#define SLICE      ((size_t)64 << 10)
#define PAGE       ((size_t)4096)
#define MAX_BLOCKS 4096

static const size_t sizes[CLASSES] = {48, 96, 192, 384};
static int classes;
static void *kept[CLASSES];

static uintptr_t slice_of(const void *p) {
    return (uintptr_t)p & ~(uintptr_t)(SLICE - 1);
}

/* OS pages of the slice that holds p that are resident. */
static unsigned slice_resident_pages(const void *p) {
    unsigned char v[SLICE / PAGE];
    REL_CHECK(mincore((void *)slice_of(p), SLICE, v) == 0, "mincore failed");
    unsigned n = 0;
    for (size_t i = 0; i < SLICE / PAGE; i++)
        n += v[i] & 1;
    return n;
}

static uintptr_t first_slices[CLASSES];
static unsigned first_resident[CLASSES];

static void *fill_and_free(void *arg) {
    (void)arg;
    static void *blocks[MAX_BLOCKS];
    for (int c = 0; c < classes; c++) {
        size_t n = (SLICE - PAGE) / sizes[c];
        for (size_t i = 0; i < n; i++) {
            blocks[i] = malloc(sizes[c]);
            REL_CHECK(blocks[i] != NULL, "malloc(%zu) failed", sizes[c]);
            memset(blocks[i], 0x5a, sizes[c]);
        }
        first_slices[c] = slice_of(blocks[0]);
        for (size_t i = 1; i < n; i++)
            REL_CHECK(slice_of(blocks[i]) == first_slices[c],
                      "%zu blocks of %zu bytes did not fit one slice", n, sizes[c]);
        first_resident[c] = slice_resident_pages(blocks[0]);
        for (size_t i = 0; i < n; i++)
            free(blocks[i]);
    }
    return NULL;
}

static void *take_one_each(void *arg) {
    (void)arg;
    for (int c = 0; c < classes; c++) {
        kept[c] = malloc(sizes[c]);
        REL_CHECK(kept[c] != NULL, "malloc(%zu) failed", sizes[c]);
        memset(kept[c], 0xa5, sizes[c]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "many") != 0 && strcmp(argv[1], "one") != 0)) {
        fprintf(stderr, "usage: rel_exit_trim many|one\n");
        return 2;
    }
    bool many = strcmp(argv[1], "many") == 0;
    classes = many ? CLASSES : 1;
    rel_stats(); /* skips under an allocator without the counters */
    pthread_t t;
    REL_CHECK(pthread_create(&t, NULL, fill_and_free, NULL) == 0, "pthread_create failed");
    REL_CHECK(pthread_join(t, NULL) == 0, "pthread_join failed");
    struct tidemalloc_stats before = rel_stats();
    REL_CHECK(pthread_create(&t, NULL, take_one_each, NULL) == 0, "pthread_create failed");
    REL_CHECK(pthread_join(t, NULL) == 0, "pthread_join failed");
    struct tidemalloc_stats after = rel_stats();
    uint64_t calls = after.madvise_calls - before.madvise_calls;
    unsigned most_after = 0;
    for (int c = 0; c < classes; c++) {
        /* the placement this relies on: a class's new page goes on a
         * resident slice that last held the class */
        REL_CHECK(slice_of(kept[c]) == first_slices[c],
                  "the %zu-byte block went to another slice than its class used before", sizes[c]);
        REL_CHECK(first_resident[c] >= SLICE / PAGE - 1,
                  "the first thread's %zu-byte page had only %u OS pages resident", sizes[c],
                  first_resident[c]);
        unsigned now = slice_resident_pages(kept[c]);
        if (now > most_after) most_after = now;
        if (many)
            REL_CHECK(now <= 2,
                      "after the second thread's exit the %zu-byte slice still has %u of %zu "
                      "OS pages resident (it carved one)",
                      sizes[c], now, SLICE / PAGE);
        else
            REL_CHECK(now >= SLICE / PAGE - 1,
                      "with under 64 KiB to give back, the slice went down to %u resident pages",
                      now);
    }
    if (many)
        REL_CHECK(calls >= 1, "no release call during the second thread's life");
    else
        REL_CHECK(calls == 0, "%llu release calls for under 64 KiB", (unsigned long long)calls);
    for (int c = 0; c < classes; c++)
        free(kept[c]);
    REL_FIGURES("classes=%d release_calls=%llu most_resident_pages_after=%u", classes,
                (unsigned long long)calls, most_after);
    return 0;
}
