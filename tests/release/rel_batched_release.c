/* Release passes give many ranges back in one system call where the kernel
 * allows it (process_madvise on the process itself), and fall back to one
 * madvise per range where it does not: the memory goes back either way.
 *   rel_batched_release batched  kernel as it is: a malloc_trim of 32
 *                                separate ranges makes at most 3 calls when
 *                                the kernel takes process_madvise(PIDFD_SELF,
 *                                MADV_DONTNEED) (the test probes it itself),
 *                                else one per range
 *   rel_batched_release refused  a seccomp filter makes process_madvise fail
 *                                (ENOSYS, or EPERM with "eperm"): the ranges
 *                                still go back, with one madvise each, in
 *                                two rounds (the refusal is remembered: the
 *                                second makes one call less)
 *   rel_batched_release off env|mallopt
 *                                M_BATCHED_RELEASE 0 (TIDEMALLOC_BATCHED_RELEASE=0
 *                                in the environment, which the suite sets,
 *                                or mallopt): a seccomp filter kills the
 *                                process at its first process_madvise, and
 *                                the process lives, one madvise per range (a
 *                                child with it on dies of SIGSYS: the control).
 *                                mallopt also refuses values other than 0, 1
 * Workload: 64 blocks of 96 KiB (large blocks, 2 slices each, laid out in
 * order in fresh segments), every page touched; the even ones are freed, so
 * the free slices form 32 runs separated by live blocks; malloc_trim(0). */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <signal.h>

#include "release.h"

#define BLOCKS            64
#define BLOCK_SIZE        ((size_t)96 << 10)
#define PIDFD_SELF_THREAD (-10000) /* the calling thread: its memory is the process's */

static void *blocks[BLOCKS];

/* Does this kernel release two ranges of our own memory in one call? */
static int kernel_takes_batches(void) {
    size_t size = (size_t)256 << 10;
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REL_CHECK(p != MAP_FAILED, "mmap failed");
    memset(p, 1, size);
    struct iovec ranges[2] = {{p, 65536}, {p + 131072, 65536}};
    long r = syscall(SYS_process_madvise, PIDFD_SELF_THREAD, ranges, 2, MADV_DONTNEED, 0);
    int works = r == 131072 && p[0] == 0 && p[65536] == 1 && p[131072] == 0;
    munmap(p, size);
    return works;
}

/* process_madvise fails with `err` (0: kills the process); everything else
 * is allowed. */
static void refuse_process_madvise(int err) {
    unsigned action = err ? SECCOMP_RET_ERRNO | (unsigned)err : SECCOMP_RET_KILL_PROCESS;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    rel_seccomp_install(filter, sizeof filter / sizeof filter[0]);
}

/* Allocates and touches the blocks, frees the even ones, trims. Returns the
 * release calls the trim made; *fell: the RSS it gave back. */
static uint64_t round_of_trim(size_t *fell) {
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK_SIZE);
        REL_CHECK(blocks[i] != NULL, "malloc(%zu) failed", BLOCK_SIZE);
        rel_touch(blocks[i], BLOCK_SIZE);
    }
    for (int i = 0; i < BLOCKS; i += 2) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
    size_t before_rss = rel_rss();
    struct tidemalloc_stats before = rel_stats();
    REL_CHECK(malloc_trim(0) == 1, "malloc_trim(0) released nothing");
    struct tidemalloc_stats after = rel_stats();
    size_t after_rss = rel_rss();
    *fell = before_rss > after_rss ? before_rss - after_rss : 0;
    for (int i = 1; i < BLOCKS; i += 2)
        free(blocks[i]);
    malloc_trim(0); /* the next round starts from fresh segments, laid out alike */
    return rel_release_calls(&after) - rel_release_calls(&before);
}

int main(int argc, char **argv) {
    int refused = argc >= 2 && strcmp(argv[1], "refused") == 0;
    int off = argc >= 3 && strcmp(argv[1], "off") == 0;
    if (argc < 2 || (!refused && !off && strcmp(argv[1], "batched") != 0)) {
        fprintf(stderr, "usage: rel_batched_release batched | refused [eperm] | off env|mallopt\n");
        return 2;
    }
    int err = argc >= 3 && strcmp(argv[2], "eperm") == 0 ? EPERM : ENOSYS;
    rel_stats(); /* skips under another allocator */
    if (off && strcmp(argv[2], "mallopt") == 0) {
        REL_CHECK(mallopt(M_BATCHED_RELEASE, 2) == 0 && mallopt(M_BATCHED_RELEASE, -1) == 0,
                  "mallopt(M_BATCHED_RELEASE) accepted a value other than 0 and 1");
        REL_CHECK(mallopt(M_BATCHED_RELEASE, 0) == 1, "mallopt(M_BATCHED_RELEASE, 0) refused");
    }
    int batches = !refused && !off && kernel_takes_batches();
    if (refused) refuse_process_madvise(err);
    if (off) {
        /* the control: with batching on, the same filter ends a child */
        pid_t child = fork();
        REL_CHECK(child >= 0, "fork failed");
        if (child == 0) {
            size_t fell;
            mallopt(M_BATCHED_RELEASE, 1);
            refuse_process_madvise(0);
            round_of_trim(&fell);
            _exit(0);
        }
        int status = 0;
        REL_CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
        REL_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS,
                  "control: batching on, the filter did not end the child (status %#x)", status);
        refuse_process_madvise(0); /* a process_madvise now ends this process */
    }
    size_t freed = (size_t)(BLOCKS / 2) * BLOCK_SIZE, fell1, fell2;
    uint64_t calls1 = round_of_trim(&fell1);
    uint64_t calls2 = round_of_trim(&fell2);
    REL_FIGURES("kernel_batches=%d calls_round1=%llu calls_round2=%llu rss_fell_mib=%.2f,%.2f "
                "freed_mib=%.2f",
                batches, (unsigned long long)calls1, (unsigned long long)calls2, rel_mib(fell1),
                rel_mib(fell2), rel_mib(freed));
    /* 96 KiB blocks take 128 KiB of slices: the trim gives back about the blocks' bytes */
    REL_CHECK(fell1 >= freed / 10 * 9 && fell2 >= freed / 10 * 9,
              "RSS fell by %.2f and %.2f MiB, freed %.2f MiB", rel_mib(fell1), rel_mib(fell2),
              rel_mib(freed));
    if (batches) {
        REL_CHECK(calls1 <= 3 && calls2 <= 3,
                  "%llu and %llu release calls for 32 ranges: not batched",
                  (unsigned long long)calls1, (unsigned long long)calls2);
    } else {
        /* one call per range: 32 ranges, and the first round's refused try */
        REL_CHECK(calls1 >= BLOCKS / 2 && calls2 >= BLOCKS / 2,
                  "%llu and %llu release calls for 32 ranges, one madvise each expected",
                  (unsigned long long)calls1, (unsigned long long)calls2);
        if (off)
            REL_CHECK(calls2 == calls1, "%llu then %llu calls: the same layout expected",
                      (unsigned long long)calls1, (unsigned long long)calls2);
        if (refused)
            REL_CHECK(calls2 + 1 == calls1, "the refusal was not remembered: %llu then %llu calls",
                      (unsigned long long)calls1, (unsigned long long)calls2);
    }
    return 0;
}
