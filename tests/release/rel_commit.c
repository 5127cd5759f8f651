/* What the library adds to the process's commit charge (the memory the
 * kernel accounts against vm.overcommit_memory=2's limit, Committed_AS): the
 * sum of the mappings whose VmFlags carry "ac" in /proc/self/smaps. The
 * segment map is 32 MiB of .bss, which was charged whole (33 MiB a process,
 * against glibc's 0.4); it is mapped read-only at start-up and a page made
 * writable only when a segment needs it. A process with blocks in two
 * threads' segments, one of them freed by the other thread, must stay under
 * 4 MiB of charged mappings (the library before: 33 MiB more). */
#include "release.h"

/* Bytes of the mappings the kernel charges (VmFlags "ac"). */
static unsigned long long charged_bytes(void) {
    FILE *f = fopen("/proc/self/smaps", "r");
    REL_CHECK(f != NULL, "cannot open /proc/self/smaps");
    char line[512];
    unsigned long long total = 0, lo = 0, hi = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char dash;
        if (sscanf(line, "%llx%c%llx ", &a, &dash, &b) == 3 && dash == '-') {
            lo = a;
            hi = b;
            continue;
        }
        if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " ac")) total += hi - lo;
    }
    fclose(f);
    return total;
}

static void *in_thread(void *arg) {
    char *p = malloc(48);
    REL_CHECK(p != NULL, "malloc failed");
    p[0] = 1;
    free(arg); /* a block of the main thread's segment */
    return p;
}

int main(void) {
    rel_stats(); /* skips under other allocators */
    char *mine = malloc(32);
    char *theirs = malloc(64);
    REL_CHECK(mine && theirs, "malloc failed");
    mine[0] = theirs[0] = 1;
    pthread_t thread;
    pthread_attr_t attr; /* a small stack: glibc's 8 MiB ones are charged too */
    REL_CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, 256 << 10) == 0,
              "pthread_attr failed");
    void *from_thread = NULL;
    REL_CHECK(pthread_create(&thread, &attr, in_thread, theirs) == 0, "pthread_create failed");
    pthread_attr_destroy(&attr);
    REL_CHECK(pthread_join(thread, &from_thread) == 0, "pthread_join failed");
    unsigned long long charged = charged_bytes();
    free(from_thread);
    free(mine);
    REL_FIGURES("charged_kib=%llu", charged >> 10);
    REL_CHECK(charged < (4ull << 20), "%llu KiB of charged mappings (limit 4 MiB)", charged >> 10);
    return 0;
}
