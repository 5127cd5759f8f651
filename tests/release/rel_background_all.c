/* M_BACKGROUND_PURGE 2 (TIDEMALLOC_BACKGROUND_PURGE=2): the helper thread
 * makes every release, so that no call of the program's waits for one. The
 * main thread frees enough to start the helper; then a seccomp filter on the
 * main thread alone (the helper, started before it, is not filtered) traps
 * every munmap, process_madvise and madvise(MADV_DONTNEED) the main thread
 * makes: the SIGSYS handler counts it, and the call fails with EPERM. Then
 * the main thread allocates 48 MiB in 64 KiB blocks (large blocks, from the
 * segments' slices, under the mmap threshold), touches them, frees them and
 * goes on with a block in and out for 400 ms, as a program does.
 *   rel_background_all helper  (with TIDEMALLOC_BACKGROUND_PURGE=2) no call
 *                              of the main thread's trapped, and the memory
 *                              went back anyway, within 2 s
 *   rel_background_all mallopt the same, set with mallopt(M_BACKGROUND_PURGE,
 *                              2) first (which refuses 3 and -1)
 *   rel_background_all inline  (the default, the control) the main thread's
 *                              own frees made release calls */
#include <linux/filter.h>
#include <malloc.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "release.h"

#define BLOCK  ((size_t)64 << 10)
#define BLOCKS 768 /* 48 MiB */

static void *blocks[BLOCKS];
static volatile sig_atomic_t trapped;

static void on_sigsys(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    trapped++;
    ((ucontext_t *)context)->uc_mcontext.gregs[REG_RAX] = -EPERM;
}

/* Traps this thread's munmap, process_madvise and madvise(MADV_DONTNEED). */
static void trap_releases(void) {
    rel_on_sigsys(on_sigsys);
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_munmap, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_DONTNEED, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    rel_seccomp_install(filter, sizeof filter / sizeof filter[0]);
}

/* 48 MiB in, touched, and out again; then a block in and out for `ms`. */
static void burst_then_churn(long ms) {
    rel_burst(blocks, BLOCKS, BLOCK);
    rel_block_in_and_out(BLOCK, (double)ms / 1000);
}

int main(int argc, char **argv) {
    int by_mallopt = argc > 1 && strcmp(argv[1], "mallopt") == 0;
    int helper = by_mallopt || (argc > 1 && strcmp(argv[1], "helper") == 0);
    if (argc < 2 || (!helper && strcmp(argv[1], "inline") != 0))
        REL_FAIL("usage: rel_background_all helper|mallopt|inline");
    if (by_mallopt) {
        REL_CHECK(mallopt(M_BACKGROUND_PURGE, 3) == 0 && mallopt(M_BACKGROUND_PURGE, -1) == 0,
                  "mallopt(M_BACKGROUND_PURGE) took a value out of 0..2");
        REL_CHECK(mallopt(M_BACKGROUND_PURGE, 2) == 1, "mallopt(M_BACKGROUND_PURGE, 2) refused");
    }
    /* the helper starts at the first free past the trim threshold */
    burst_then_churn(20);
    trap_releases();
    struct tidemalloc_stats before = rel_stats();
    size_t rss_before = rel_rss();
    /* past the recent peak's window (100-200 ms), which a single heap's
     * bound keeps, so that the frees' own passes would release */
    burst_then_churn(400);
    double deadline = rel_now_s() + 2.0;
    struct tidemalloc_stats after = rel_stats();
    while (after.bytes_released - before.bytes_released < ((size_t)32 << 20) &&
           rel_now_s() < deadline) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
        after = rel_stats();
    }
    size_t released = after.bytes_released - before.bytes_released;
    printf("FIGURES trapped=%d released_mib=%.1f rss_mib=%.1f->%.1f release_calls=%llu\n",
           (int)trapped, rel_mib(released), rel_mib(rss_before), rel_mib(rel_rss()),
           (unsigned long long)(rel_release_calls(&after) - rel_release_calls(&before)));
    if (helper) {
        REL_CHECK(trapped == 0, "the main thread made %d release calls", (int)trapped);
        REL_CHECK(released >= ((size_t)32 << 20), "only %.1f MiB went back in 2 s",
                  rel_mib(released));
    } else {
        REL_CHECK(trapped > 0, "the main thread made no release call: the control failed");
    }
    return 0;
}
