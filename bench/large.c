/* Large blocks of 64 KiB - 8 MiB with realloc growth (malloc-large shape).
 * A set of SLOTS slots; each step picks a slot: an empty slot gets a new
 * block (log-uniform size), a full one is grown with realloc by 25-100%
 * (freed instead once it would pass 8 MiB) or freed. Every page of new or
 * grown memory is touched, as a program filling its buffers would.
 *
 * With LARGE_TOUCH_REPORT=1 in the environment it also prints, on stderr,
 * where the time of the page writes went: writes to new blocks, split by
 * calls that faulted and calls that did not (on a host with shadow page
 * tables, a page that mremap moved costs microseconds at its next write
 * with no fault counted), writes to grown blocks, and the realloc calls.
 *
 * usage: large [thousand-steps] */
#include "common.h"
#include <sys/resource.h>

#define SLOTS 24
#define MINSZ (64u * 1024)
#define MAXSZ (8u * 1024 * 1024)

/* LARGE_TOUCH_REPORT: seconds and pages of each kind of write */
enum { NEW_NO_FAULT, NEW_FAULTED, GROWN, REALLOC_CALLS, KINDS };
static double report_seconds[KINDS], report_pages[KINDS];
static long report_faults;
static int reporting;

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/* touch_pages on a new block, timed when reporting */
static void touch_new(unsigned char *p, size_t n, unsigned char v) {
    if (!reporting) {
        touch_pages(p, n, v);
        return;
    }
    long faults = minor_faults();
    double t = seconds_now();
    touch_pages(p, n, v);
    t = seconds_now() - t;
    faults = minor_faults() - faults;
    int kind = faults ? NEW_FAULTED : NEW_NO_FAULT;
    report_seconds[kind] += t;
    report_pages[kind] += (double)n / 4096;
    report_faults += faults;
}

static void report(void) {
    fprintf(stderr,
            "large: new blocks: %.0fk pages in calls without a fault %.3f s (%.3f us/page), "
            "%.0fk pages in calls with %ldk faults %.3f s; grown parts %.0fk pages %.3f s; "
            "%.0f realloc calls %.3f s\n",
            report_pages[NEW_NO_FAULT] / 1e3, report_seconds[NEW_NO_FAULT],
            report_pages[NEW_NO_FAULT]
                ? report_seconds[NEW_NO_FAULT] / report_pages[NEW_NO_FAULT] * 1e6
                : 0.0,
            report_pages[NEW_FAULTED] / 1e3, report_faults / 1000, report_seconds[NEW_FAULTED],
            report_pages[GROWN] / 1e3, report_seconds[GROWN], report_pages[REALLOC_CALLS],
            report_seconds[REALLOC_CALLS]);
}

static size_t large_size(rng_t *r) {
    /* log-uniform in [64 KiB, 8 MiB): 7 doublings */
    unsigned e = (unsigned)rng_below(r, 7);
    size_t base = (size_t)MINSZ << e;
    return base + rng_below(r, base);
}

int main(int argc, char **argv) {
    long steps = arg_long(argc, argv, 1, 40) * 1000L;
    rng_t r;
    rng_seed(&r, 31337);
    unsigned char *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    uint64_t sum = 0;
    const char *report_env = getenv("LARGE_TOUCH_REPORT");
    reporting = report_env != NULL && report_env[0] == '1';
    for (long s = 0; s < steps; s++) {
        size_t i = rng_below(&r, SLOTS);
        if (!p[i]) {
            sz[i] = large_size(&r);
            p[i] = xmalloc(sz[i]);
            touch_new(p[i], sz[i], (unsigned char)s);
        } else if (rng_next(&r) & 1) {
            size_t n = sz[i] + sz[i] / 4 + rng_below(&r, sz[i] * 3 / 4);
            if (n > MAXSZ) {
                sum += p[i][0];
                free(p[i]);
                p[i] = NULL;
                continue;
            }
            double t = reporting ? seconds_now() : 0;
            p[i] = xrealloc(p[i], n);
            double grown = reporting ? seconds_now() : 0;
            touch_pages(p[i] + sz[i], n - sz[i], (unsigned char)s);
            if (reporting) {
                report_seconds[REALLOC_CALLS] += grown - t;
                report_pages[REALLOC_CALLS] += 1;
                report_seconds[GROWN] += seconds_now() - grown;
                report_pages[GROWN] += (double)(n - sz[i]) / 4096;
            }
            sz[i] = n;
        } else {
            sum += p[i][0] + p[i][sz[i] - 1];
            free(p[i]);
            p[i] = NULL;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(p[i]);
    if (reporting) report();
    printf("large steps=%ld sum=%llu\n", steps, (unsigned long long)sum);
    return 0;
}
