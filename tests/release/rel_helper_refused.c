/* The purge helper cannot start (clone refused, as under RLIMIT_NPROC or a
 * cgroup's pids.max): the allocator tries again at most once a second, and
 * the frees make the releases themselves, also with M_BACKGROUND_PURGE 2.
 * A seccomp filter fails clone and clone3 with EAGAIN (a trap could not
 * be counted: the start blocks every signal, and a blocked SIGSYS kills);
 * the main thread allocates 48 MiB in 64 KiB blocks, touches them, frees
 * them, and takes a block in and out for 1.5 s, so that every free empties
 * a page past the trim threshold. Each start maps the helper's stack first
 * and unmaps it when the clone fails, so the counters count the tries.
 *   rel_helper_refused  (default, or with TIDEMALLOC_BACKGROUND_PURGE=2)
 *                       few mmap calls and at most 8 munmap calls (until
 *                       the seventy-third session every such free tried
 *                       again: 2,302 clone calls and 2,354 mmap calls in
 *                       1 s, each leaving a 64 KiB stack mapped), and 32 MiB
 *                       given back all the same */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>

#include "release.h"

#define BLOCK  ((size_t)64 << 10)
#define BLOCKS 768 /* 48 MiB */

static void *blocks[BLOCKS];

static void refuse_clone(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    rel_seccomp_install(filter, sizeof filter / sizeof filter[0]);
}

int main(void) {
    refuse_clone();
    struct tidemalloc_stats before = rel_stats();
    rel_burst(blocks, BLOCKS, BLOCK);
    long frees = rel_block_in_and_out(BLOCK, 1.5);
    struct tidemalloc_stats after = rel_stats();
    size_t released = after.bytes_released - before.bytes_released;
    uint64_t maps = after.mmap_calls - before.mmap_calls;
    uint64_t unmaps = after.munmap_calls - before.munmap_calls;
    printf("FIGURES mmap_calls=%llu munmap_calls=%llu frees=%ld released_mib=%.1f\n",
           (unsigned long long)maps, (unsigned long long)unmaps, frees, rel_mib(released));
    REL_CHECK(maps <= 64, "%llu mmap calls in 1.5 s", (unsigned long long)maps);
    REL_CHECK(unmaps >= 1 && unmaps <= 8, "%llu munmap calls (a start's stack each)",
              (unsigned long long)unmaps);
    REL_CHECK(released >= ((size_t)32 << 20), "only %.1f MiB went back", rel_mib(released));
    return 0;
}
