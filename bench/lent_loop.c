/* What a malloc/free loop costs in a segment the arena lent: where address
 * space ran short (RLIMIT_AS), a thread's segment is carved from an arena
 * chunk's free run, and each page there goes back once empty (PAGE_LENT),
 * so a loop with nothing else live gives its page, and its segment, back at
 * each free. Prints ns per malloc+free pair, in rounds of 1,000,000 pairs.
 *
 * usage: lent_loop SIZE MODE
 *   MODE none       no limit: the loop in a segment of its own (baseline)
 *   MODE sustained  the limit filled with 1 MiB blocks but a 14 MiB run, for
 *                   the whole loop: the loop's segment is lent
 *   MODE released   the same, but the 1 MiB blocks are freed once the loop's
 *                   first segment was lent: after the purge delay (1 s) the
 *                   loop takes a segment of its own again */
#include "common.h"
#include <malloc.h>
#include <stdbool.h>
#include <pthread.h>
#include <sys/resource.h>

#define MIB    ((size_t)1 << 20)
#define ROUNDS 3
#define PAIRS  1000000
#define BLOCKS 600

static size_t size;

static void die(const char *why) {
    fprintf(stderr, "lent_loop: %s\n", why);
    exit(1);
}
static pthread_barrier_t start, first_done;

static void *loop(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    void *p = xmalloc(size); /* its segment: lent in the limited modes */
    free(p);
    pthread_barrier_wait(&first_done);
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now_s();
        for (int i = 0; i < PAIRS; i++) {
            unsigned char *q = xmalloc(size);
            q[0] = (unsigned char)i;
            free(q);
        }
        printf("malloc(%zu)+free round %d: %.1f ns a pair\n", size, round + 1,
               (now_s() - t0) * 1e9 / PAIRS);
    }
    return NULL;
}

int main(int argc, char **argv) {
    size = argc > 1 ? strtoul(argv[1], NULL, 10) : 48;
    const char *mode = argc > 2 ? argv[2] : "sustained";
    bool limited = strcmp(mode, "none") != 0, released = strcmp(mode, "released") == 0;
    if (limited && !released && strcmp(mode, "sustained") != 0)
        die("usage: lent_loop SIZE none|sustained|released");
    /* 1 MiB blocks from the arena's chunks, not mappings of their own */
    if (mallopt(M_MMAP_THRESHOLD, 8 * (int)MIB) != 1) die("mallopt refused");
    pthread_t thread;
    pthread_barrier_init(&start, NULL, 2);
    pthread_barrier_init(&first_done, NULL, 2);
    /* before the limit: the thread's stack is mapped */
    if (pthread_create(&thread, NULL, loop, NULL) != 0) die("pthread_create");
    static void *blocks[BLOCKS];
    int count = 0;
    if (limited) {
        size_t pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f == NULL || fscanf(f, "%zu", &pages) != 1) die("/proc/self/statm");
        fclose(f);
        struct rlimit limit = {pages * 4096 + 160 * MIB, RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &limit) != 0) die("setrlimit");
        while (count < BLOCKS && (blocks[count] = malloc(MIB)) != NULL)
            memset(blocks[count++], 1, 4096);
        /* a free run in the first chunk, where the thread's segment goes */
        for (int i = 1; i < 15 && i < count; i++)
            free(blocks[i]);
    }
    pthread_barrier_wait(&start);
    pthread_barrier_wait(&first_done);
    if (released)
        for (int i = 0; i < count; i++)
            if (i == 0 || i >= 15) free(blocks[i]);
    pthread_join(thread, NULL);
    return 0;
}
