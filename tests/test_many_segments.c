/* A heap of many segments keeps every block intact while large blocks come
 * and go: 2000 blocks of 100-200 KB (over 32 segments, so a segment given
 * slices back moves to the front of its heap's list, segment_lifecycle.c) are
 * replaced at random 100,000 times, with class blocks and reallocs in
 * between; each block carries a pattern at its start and its end, checked
 * before it is freed, and every block is checked at the end. */
#include <malloc.h>

#include "common.h"

#define LIVE  2000
#define STEPS 100000

struct slot {
    unsigned char *p;
    size_t size;
};

static void fill(struct slot *s, uint64_t key) {
    memcpy(s->p, &key, sizeof key);
    memcpy(s->p + s->size - sizeof key, &key, sizeof key);
}

static void check(const struct slot *s, uint64_t key, const char *when) {
    uint64_t head, tail;
    memcpy(&head, s->p, sizeof head);
    memcpy(&tail, s->p + s->size - sizeof tail, sizeof tail);
    CHECKF(head == key && tail == key, "%s: block %p of %zu bytes lost its pattern", when,
           (void *)s->p, s->size);
}

static uint64_t key_of(const struct slot *s) {
    return ((uint64_t)(uintptr_t)s->p * 0x9E3779B97F4A7C15ull) ^ s->size;
}

int main(void) {
    static struct slot slots[LIVE];
    uint64_t r = 12345;
    for (int i = 0; i < LIVE; i++) {
        /* under the initial mmap threshold (128 KiB): all in segments */
        slots[i].size = 100000 + (size_t)(i * 37 % 30000);
        slots[i].p = malloc(slots[i].size);
        CHECK(slots[i].p != NULL);
        fill(&slots[i], key_of(&slots[i]));
    }
    tm_stats_fn stats = tm_stats_required_if_expected();
    if (stats) {
        struct tidemalloc_stats s;
        stats(&s);
        CHECKF(s.segments > 32, "only %llu segments: the long-list path is not reached",
               (unsigned long long)s.segments);
    }
    void *small[64] = {0};
    for (int step = 0; step < STEPS; step++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        struct slot *s = &slots[(r >> 33) % LIVE];
        check(s, key_of(s), "before free");
        if ((r >> 20) % 8 == 0) { /* grow or shrink in place or by a move */
            size_t size = 60000 + (size_t)((r >> 40) % 200000);
            unsigned char *q = realloc(s->p, size);
            CHECK(q != NULL);
            uint64_t head;
            memcpy(&head, q, sizeof head);
            CHECKF(head == key_of(s), "realloc %zu -> %zu lost the block's start", s->size, size);
            s->p = q;
            s->size = size;
        } else {
            free(s->p);
            s->size = 100000 + (size_t)((r >> 40) % 100000);
            s->p = malloc(s->size);
            CHECK(s->p != NULL);
        }
        fill(s, key_of(s));
        unsigned k = (unsigned)(r >> 12) % 64; /* class pages share the segments */
        free(small[k]);
        small[k] = malloc(16 + (r >> 50) % 4000);
        CHECK(small[k] != NULL);
    }
    for (int i = 0; i < LIVE; i++) {
        check(&slots[i], key_of(&slots[i]), "at the end");
        free(slots[i].p);
    }
    for (int k = 0; k < 64; k++)
        free(small[k]);
    return 0;
}
