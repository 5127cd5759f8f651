/* A sandbox that refuses the releases (a seccomp filter failing madvise and
 * process_madvise with EPERM): the memory stays, the program goes on, and
 * the allocator does not retry at every pass. The main thread allocates 48
 * MiB in 64 KiB blocks, touches them, frees them, and takes a block in and
 * out for 1.5 s, so that every free empties a page past the retain bound.
 *   rel_release_refused  at most 8 release calls (attempts, by the
 *                        library's count) in the 1.5 s; until the
 *                        seventy-third session every pass tried every range
 *                        again (mstress: 428 refused calls in 0.15 s) */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>

#include "release.h"

#define BLOCK  ((size_t)64 << 10)
#define BLOCKS 768 /* 48 MiB */

static void *blocks[BLOCKS];

static void refuse_releases(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    rel_seccomp_install(filter, sizeof filter / sizeof filter[0]);
}

int main(void) {
    refuse_releases();
    struct tidemalloc_stats before = rel_stats();
    rel_burst(blocks, BLOCKS, BLOCK);
    long frees = rel_block_in_and_out(BLOCK, 1.5);
    /* the program goes on: the memory kept is reused */
    rel_burst(blocks, BLOCKS, BLOCK);
    struct tidemalloc_stats after = rel_stats();
    uint64_t calls = after.madvise_calls - before.madvise_calls;
    printf("FIGURES release_calls=%llu frees=%ld released_mib=%.1f retained_mib=%.1f\n",
           (unsigned long long)calls, frees, rel_mib(after.bytes_released - before.bytes_released),
           rel_mib(after.bytes_retained));
    REL_CHECK(calls >= 1 && calls <= 8, "%llu release calls in 1.5 s", (unsigned long long)calls);
    return 0;
}
