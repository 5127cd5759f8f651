/* Soak test (issue 6 item 5), run with the allocator in LD_PRELOAD:
 *   soak SECONDS [THREADS] [FORK_EVERY]
 * THREADS workers (default 4) take blocks from shared slots (so most frees
 * are cross-thread), check them, free, realloc or put them back, and fill
 * empty slots with new blocks of random sizes across every class (16 B to
 * 4 MiB, weighted to small) from every allocation function. Workers exit
 * after a while and new ones start (their heaps are abandoned and adopted).
 * Halfway through (and every 60 s on long runs) the process forks while the
 * workers run; the child checks the inherited blocks, frees some, allocates
 * from several threads, checks, and exits 0. With FORK_EVERY (seconds), it
 * forks from the first second on, every FORK_EVERY: each fork stops the
 * workers wherever they are, and the child must cope with the pages they
 * left half-updated (`make test` runs it so, as fork-storm); RSS is then
 * reported but not judged.
 * Each block holds its size and a pattern derived from its address and size,
 * checked in full whenever a block is taken. RSS is printed every second;
 * at the end the RSS must have plateaued: the median RSS of the last third
 * is at most 1.25 x the median of the first third + 16 MiB, and its highest
 * at most twice the first third's highest + 16 MiB. Medians, because the live
 * set swings by half from one second to the next (87-170 MiB in one run):
 * the highest of ten samples measured that swing, not a growth. Exit 0 when
 * all holds; "soak: why" on stderr and exit 1 otherwise. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tidemalloc.h"

#define SLOTS       2048
#define MAX_THREADS 64
#define MIB         (1024.0 * 1024.0)

static _Atomic(uint64_t *) slots[SLOTS];
static _Atomic int stop;
static _Atomic uint64_t total_ops, total_checked_bytes;

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "soak: " __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                                       \
        fflush(stderr);                                                                            \
        _exit(1);                                                                                  \
    } while (0)

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n samples (sorted on a copy). */
static double median(const double *v, int n) {
    if (n <= 0) return 0;
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (sorted == NULL) DIE("out of memory for the RSS median");
    memcpy(sorted, v, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
    double m = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    free(sorted);
    return m;
}

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return *state = x;
}

/* 16 B .. 4 MiB, weighted to small. Sizes are multiples of 8. */
static size_t random_size(uint64_t *r) {
    uint64_t v = next_random(r);
    unsigned pick = (unsigned)(v % 1000);
    v >>= 10;
    size_t size;
    if (pick < 600)
        size = 16 + v % 256;
    else if (pick < 850)
        size = 16 + v % 4096;
    else if (pick < 960)
        size = 16 + v % (64 * 1024);
    else if (pick < 990)
        size = 16 + v % (512 * 1024);
    else if (pick < 998)
        size = 16 + v % (2 * 1024 * 1024);
    else
        size = 16 + v % (4 * 1024 * 1024 - 16);
    return size & ~(size_t)7;
}

/* Word 0: size in bytes. Word i: pattern from address, size and i. */
static uint64_t word_of(const uint64_t *block, uint64_t size, size_t i) {
    uint64_t x = ((uintptr_t)block ^ (size << 20)) + i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}

static void fill(uint64_t *block, size_t size) {
    block[0] = size;
    for (size_t i = 1; i < size / 8; i++)
        block[i] = word_of(block, size, i);
}

static size_t check(const uint64_t *block, const char *when) {
    size_t size = block[0];
    if (size < 16 || size > 4 * 1024 * 1024)
        DIE("%s: block %p has a bad size word %zu", when, (void *)block, size);
    size_t usable = malloc_usable_size((void *)block);
    if (usable < size) DIE("%s: block %p usable %zu < %zu", when, (void *)block, usable, size);
    for (size_t i = 1; i < size / 8; i++)
        if (block[i] != word_of(block, size, i))
            DIE("%s: block %p (%zu bytes) corrupt at byte %zu", when, (void *)block, size, i * 8);
    atomic_fetch_add_explicit(&total_checked_bytes, size, memory_order_relaxed);
    return size;
}

static uint64_t *allocate(uint64_t *r, size_t size) {
    void *p = NULL;
    size_t align = 16;
    switch (next_random(r) % 10) {
    case 0:
        p = calloc(size / 8, 8);
        if (p && ((uint64_t *)p)[size / 8 - 1] != 0) DIE("calloc(%zu) not zeroed", size);
        break;
    case 1:
        align = (size_t)32 << (next_random(r) % 8);
        p = memalign(align, size);
        break;
    case 2:
        align = 64;
        if (posix_memalign(&p, 64, size) != 0) p = NULL;
        break;
    case 3:
        align = 4096;
        p = aligned_alloc(4096, size);
        break;
    default:
        p = malloc(size);
        break;
    }
    if (p == NULL) DIE("allocation of %zu bytes failed: %s", size, strerror(errno));
    if ((uintptr_t)p % align) DIE("%p is not %zu-aligned", p, align);
    fill(p, size);
    return p;
}

static void put(unsigned i, uint64_t *block) {
    uint64_t *old = atomic_exchange_explicit(&slots[i], block, memory_order_acq_rel);
    if (old) {
        check(old, "displaced");
        free(old);
    }
}

static void one_op(uint64_t *r) {
    unsigned i = (unsigned)(next_random(r) % SLOTS);
    uint64_t *block = atomic_exchange_explicit(&slots[i], NULL, memory_order_acq_rel);
    if (block == NULL) {
        put(i, allocate(r, random_size(r)));
        return;
    }
    size_t size = check(block, "taken");
    unsigned action = (unsigned)(next_random(r) % 10);
    if (action < 4) {
        free(block);
    } else if (action < 6) {
        size_t new_size = random_size(r);
        uint64_t *moved = realloc(block, new_size);
        if (moved == NULL) DIE("realloc(%zu -> %zu) failed", size, new_size);
        /* the old contents (pattern of the old address) must have moved */
        size_t keep = (size < new_size ? size : new_size) / 8;
        for (size_t k = 1; k < keep; k++)
            if (moved[k] != word_of(block, size, k))
                DIE("realloc(%zu -> %zu) lost word %zu", size, new_size, k);
        fill(moved, new_size);
        put(i, moved);
    } else {
        put(i, block);
    }
}

struct worker {
    pthread_t thread;
    uint64_t seed;
    _Atomic int finished;
    int running;
};
static struct worker workers[MAX_THREADS];

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t r = w->seed;
    /* Each worker lives for a random number of operations. */
    uint64_t lifetime = 20000 + next_random(&r) % 200000;
    for (uint64_t n = 0; n < lifetime && !atomic_load_explicit(&stop, memory_order_relaxed); n++) {
        one_op(&r);
        if ((n & 1023) == 0) atomic_fetch_add_explicit(&total_ops, 1024, memory_order_relaxed);
    }
    atomic_store(&w->finished, 1);
    return NULL;
}

static uint64_t seed_counter = 0x1234567;

static void worker_start(struct worker *w) {
    w->seed = (seed_counter += 0x9E3779B97F4A7C15ull) | 1;
    atomic_store(&w->finished, 0);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) DIE("pthread_create failed");
    w->running = 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / MIB;
}

/* ---- the fork in the middle ---- */

static void *child_thread(void *arg) {
    uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull | 1;
    uint64_t *own[256];
    for (int round = 0; round < 20; round++) {
        for (int k = 0; k < 256; k++)
            own[k] = allocate(&r, random_size(&r) % 65536 + 16);
        for (int k = 0; k < 256; k++) {
            check(own[k], "child own");
            free(own[k]);
        }
    }
    return NULL;
}

static void child_main(void) {
    alarm(60); /* a deadlock after fork must not hang the test */
    uint64_t r = 0xC0FFEE;
    size_t inherited = 0;
    /* Inherited blocks (from every parent thread): check, free every other. */
    for (unsigned i = 0; i < SLOTS; i++) {
        uint64_t *block = atomic_load(&slots[i]);
        if (block == NULL) continue;
        check(block, "child inherited");
        inherited++;
        if (i & 1) {
            free(block);
            atomic_store(&slots[i], NULL);
        }
    }
    for (int n = 0; n < 20000; n++)
        one_op(&r);
    pthread_t t[3];
    for (int k = 0; k < 3; k++)
        if (pthread_create(&t[k], NULL, child_thread, (void *)(uintptr_t)(k + 1)) != 0)
            DIE("child: pthread_create");
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    for (unsigned i = 0; i < SLOTS; i++) {
        uint64_t *block = atomic_exchange(&slots[i], NULL);
        if (block) {
            check(block, "child final");
            free(block);
        }
    }
    printf("child: %zu inherited blocks checked, allocated from 4 threads, exit 0\n", inherited);
    fflush(stdout);
    _exit(0);
}

static void fork_check(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) DIE("fork failed: %s", strerror(errno));
    if (pid == 0) child_main();
    int status;
    if (waitpid(pid, &status, 0) != pid) DIE("waitpid failed");
    if (WIFSIGNALED(status))
        DIE("fork child killed by signal %d%s", WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? " (deadlock?)" : "");
    if (WEXITSTATUS(status) != 0) DIE("fork child exited %d", WEXITSTATUS(status));
}

int main(int argc, char **argv) {
    if (argc < 2) DIE("usage: soak SECONDS [THREADS] [FORK_EVERY]");
    double seconds = atof(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    double fork_every = argc > 3 ? atof(argv[3]) : 0;
    if (seconds < 3 || threads < 1 || threads > MAX_THREADS) DIE("bad arguments");
    setvbuf(stdout, NULL, _IOLBF, 0);
    typedef void (*stats_fn)(struct tidemalloc_stats *);
    stats_fn stats = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "tidemalloc_stats");
    memcpy(&stats, &sym, sizeof stats);

    enum { MAX_SAMPLES = 100000 };
    static double samples[MAX_SAMPLES];
    int count = 0;
    double start = now_s(), next_sample = start + 1;
    double next_fork = start + (fork_every > 0 ? 1 : seconds / 2);
    unsigned spawned = 0, forks = 0;
    for (int i = 0; i < threads; i++, spawned++)
        worker_start(&workers[i]);
    for (;;) {
        double t = now_s();
        if (t - start >= seconds) break;
        for (int i = 0; i < threads; i++) {
            if (atomic_load(&workers[i].finished)) {
                pthread_join(workers[i].thread, NULL);
                worker_start(&workers[i]);
                spawned++;
            }
        }
        if (t >= next_fork) {
            fork_check();
            forks++;
            next_fork = fork_every > 0   ? now_s() + fork_every
                        : seconds >= 120 ? next_fork + 60
                                         : start + seconds * 10;
        }
        if (t >= next_sample) {
            double rss = rss_mib();
            if (count < MAX_SAMPLES) samples[count++] = rss;
            struct tidemalloc_stats st = {0};
            if (stats) stats(&st);
            printf("t=%4.0fs rss=%7.1f MiB ops=%llu checked=%.0f MiB threads_started=%u forks=%u "
                   "mapped=%.1f MiB segments=%llu heaps=%llu\n",
                   t - start, rss, (unsigned long long)atomic_load(&total_ops),
                   (double)atomic_load(&total_checked_bytes) / MIB, spawned, forks,
                   (double)st.bytes_mapped / MIB, (unsigned long long)st.segments,
                   (unsigned long long)st.heaps);
            next_sample += 1;
        }
        usleep(20000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(workers[i].thread, NULL);
    size_t left = 0;
    for (unsigned i = 0; i < SLOTS; i++) {
        uint64_t *block = atomic_exchange(&slots[i], NULL);
        if (block) {
            check(block, "final");
            free(block);
            left++;
        }
    }
    if (forks == 0) DIE("no fork happened");
    if (count < 3) DIE("too few RSS samples (%d)", count);
    int third = count / 3;
    double first = 0, last = 0;
    for (int i = 0; i < third; i++)
        first = samples[i] > first ? samples[i] : first;
    for (int i = count - third; i < count; i++)
        last = samples[i] > last ? samples[i] : last;
    double first_median = median(samples, third);
    double last_median = median(samples + count - third, third);
    printf("RSS: median first third %.1f MiB, last third %.1f MiB (limit %.1f MiB); max %.1f and "
           "%.1f MiB (limit %.1f MiB); %u threads started, %u forks, %zu blocks left\n",
           first_median, last_median, first_median * 1.25 + 16, first, last, first * 2 + 16,
           spawned, forks, left);
    /* A fork storm's 20 s swing too much for a plateau: the soak checks it. */
    if (fork_every == 0 && last_median > first_median * 1.25 + 16)
        DIE("RSS did not plateau: median %.1f MiB at the end vs %.1f MiB early", last_median,
            first_median);
    if (fork_every == 0 && last > first * 2 + 16)
        DIE("RSS ran away: %.1f MiB at the end vs %.1f MiB early", last, first);
    if (stats) {
        struct tidemalloc_stats st;
        stats(&st);
        /* Every worker has exited: only this thread (and the purge helper,
         * which does not allocate) may still have a heap. */
        if (st.heaps > 2)
            DIE("%llu heaps still alive after every worker exited", (unsigned long long)st.heaps);
    }
    printf("ok\n");
    return 0;
}
