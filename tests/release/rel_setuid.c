/* Issue 3 must-deliver 2: the environment is ignored in set-uid programs
 * (AT_SECURE), as glibc does. glibc's ld.so already strips its own MALLOC_*
 * variables from a secure program's environment, so the check uses a variable
 * only we read: MALLOC_AGGRESSIVE_MADVISE_=1. In aggressive mode, freeing a
 * 64 KiB block (a segment block, below the mmap threshold) gives its pages
 * back at once (madvise); otherwise nothing is released.
 *   rel_setuid on    (run normally, with the variable set): aggressive mode is on
 *   rel_setuid off   (run as a set-uid program with the variable set): it is off
 * suite-release.sh builds the set-uid copy (build/release/rel_setuid_linked,
 * linked against the library with an absolute rpath, since a secure program
 * ignores LD_PRELOAD paths), owned by nobody with mode 4755, and runs it as
 * root, which makes AT_SECURE 1. */
#include <sys/auxv.h>

#include "release.h"

#define BLOCK  ((size_t)64 << 10)
#define BLOCKS 64

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "on") != 0 && strcmp(argv[1], "off") != 0)) {
        fprintf(stderr, "usage: rel_setuid on|off\n");
        return 2;
    }
    int expect_on = strcmp(argv[1], "on") == 0;
    unsigned long secure = getauxval(AT_SECURE);
    if (!expect_on && !secure) REL_SKIPF("AT_SECURE is 0: not run as a set-uid program");
    void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        REL_CHECK(blocks[i] != NULL, "malloc failed");
        rel_touch(blocks[i], BLOCK);
    }
    struct tidemalloc_stats s0 = rel_stats();
    for (int i = 0; i < BLOCKS; i++)
        free(blocks[i]);
    struct tidemalloc_stats s1 = rel_stats();
    uint64_t released = rel_release_calls(&s1) - rel_release_calls(&s0);
    REL_FIGURES("at_secure=%lu env_aggressive=%s release_on_free=%llu", secure,
                getenv("MALLOC_AGGRESSIVE_MADVISE_") ? getenv("MALLOC_AGGRESSIVE_MADVISE_")
                                                     : "(unset)",
                (unsigned long long)released);
    if (expect_on)
        REL_CHECK(released > 0, "MALLOC_AGGRESSIVE_MADVISE_=1 had no effect in a normal program");
    else
        REL_CHECK(released == 0,
                  "a set-uid program obeyed MALLOC_AGGRESSIVE_MADVISE_=1 (%llu release syscalls)",
                  (unsigned long long)released);
    return 0;
}
