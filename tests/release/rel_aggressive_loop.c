/* Aggressive mode must not turn a malloc/free loop of small blocks into a
 * syscall per free. Seed 001 released only whole pages inside freed chunks,
 * which a block of up to 4 KiB never holds; freeing the last block of the only
 * page of its class keeps that page (as the default mode does), instead of
 * releasing its slice and faulting it back at the next malloc. glibc's
 * tst-malloc-too-large, which loops over malloc(16)/free, took 41 s in
 * aggressive mode (422,721 madvise calls) before.
 *   rel_aggressive_loop   (run with MALLOC_AGGRESSIVE_MADVISE_=1) */
#include <malloc.h>

#include "release.h"

#define ROUNDS 20000

int main(void) {
    static const size_t sizes[] = {16, 100, 1000, 4000};
    void *volatile p;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        p = malloc(sizes[s]); /* the class's page exists before counting */
        free(p);
    }
    struct tidemalloc_stats s0 = rel_stats();
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int i = 0; i < ROUNDS; i++) {
            p = malloc(sizes[s]);
            REL_CHECK(p != NULL, "malloc(%zu) failed", sizes[s]);
            memset(p, 1, sizes[s]);
            free(p);
        }
    }
    struct tidemalloc_stats s1 = rel_stats();
    uint64_t calls = rel_release_calls(&s1) - rel_release_calls(&s0);
    REL_FIGURES("aggressive=%s loops=%d release_calls=%llu",
                getenv("MALLOC_AGGRESSIVE_MADVISE_") ? getenv("MALLOC_AGGRESSIVE_MADVISE_")
                                                     : "(unset)",
                ROUNDS * 4, (unsigned long long)calls);
    REL_CHECK(calls <= 4, "%llu release syscalls in %d malloc/free pairs of small blocks",
              (unsigned long long)calls, ROUNDS * 4);
    return 0;
}
