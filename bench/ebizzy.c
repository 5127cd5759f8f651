/* An ebizzy-like benchmark: each thread repeatedly allocates a large buffer
 * (192 KiB - 1 MiB), fills it with a copy of part of a shared sorted table,
 * runs binary searches for random keys in it, and frees it. One such cycle
 * is a record. Runs for a fixed time and prints records/s.
 *
 * usage: ebizzy [threads] [seconds] [fixed-size-KiB or 0 for mixed] */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

#define TABLE_WORDS (1u << 17) /* 1 MiB of uint64_t */
#define SEARCHES    64

static uint64_t *table;
static double seconds, t0;
static size_t fixed_bytes;
static atomic_long total_records;
static atomic_ulong total_hits;

static const size_t sizes[] = {192 << 10, 256 << 10, 384 << 10, 512 << 10, 768 << 10, 1024 << 10};

static void *worker(void *arg) {
    rng_t r;
    rng_seed(&r, 77 + (uint64_t)(intptr_t)arg);
    long records = 0;
    unsigned long hits = 0;
    while (now_s() - t0 < seconds) {
        size_t bytes = fixed_bytes ? fixed_bytes : sizes[rng_below(&r, 6)];
        size_t words = bytes / sizeof(uint64_t);
        size_t off = rng_below(&r, TABLE_WORDS - words + 1);
        uint64_t *buf = xmalloc(bytes);
        memcpy(buf, table + off, bytes);
        for (int s = 0; s < SEARCHES; s++) {
            uint64_t key = rng_below(&r, (uint64_t)TABLE_WORDS * 4);
            size_t lo = 0, hi = words;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (buf[mid] < key)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            hits += lo < words && buf[lo] == key;
        }
        free(buf);
        records++;
    }
    atomic_fetch_add(&total_records, records);
    atomic_fetch_add(&total_hits, hits);
    return NULL;
}

int main(int argc, char **argv) {
    int nt = (int)arg_long(argc, argv, 1, 1);
    seconds = (double)arg_long(argc, argv, 2, 2);
    fixed_bytes = (size_t)arg_long(argc, argv, 3, 0) * 1024;
    if (nt < 1 || nt > 64 || fixed_bytes > TABLE_WORDS * sizeof(uint64_t)) return 2;
    table = xmalloc(TABLE_WORDS * sizeof *table);
    for (size_t i = 0; i < TABLE_WORDS; i++)
        table[i] = i * 4 + (i & 3);
    pthread_t th[64];
    t0 = now_s();
    /* workers are created threads even with one thread, as in seed 000 */
    for (int t = 0; t < nt; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    double el = now_s() - t0;
    long rec = atomic_load(&total_records);
    printf("ebizzy threads=%d seconds=%.3f records=%ld hits=%lu records_per_s=%.0f\n", nt, el, rec,
           atomic_load(&total_hits), (double)rec / el);
    free(table);
    return 0;
}
