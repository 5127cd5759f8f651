/* realloc's copy into pages that are not resident populates them first
 * (MADV_POPULATE_WRITE, one call for the range instead of a fault a page),
 * and only there. A seccomp filter traps madvise(..., MADV_POPULATE_WRITE):
 * the SIGSYS handler counts the call and answers it itself (0, or -EPERM
 * when told to refuse), so the copy then faults its pages in as before.
 *   rel_populate default   a 100 KiB block grown to 3 MiB (a fresh mapping
 *                          of its own): one call, over the copy's pages;
 *                          with the mmap threshold at 64 MiB (an arena
 *                          block on fresh memory) one call too; a 200 KiB
 *                          block grown into 3 MiB that a freed block left
 *                          resident: none; a 48 KiB block grown to 3 MiB (a
 *                          copy under 64 KiB): none. Every copy keeps its
 *                          contents
 *   rel_populate refused   the first call fails with EPERM: the copy still
 *                          keeps its contents, and the refusal is kept (the
 *                          next fresh copy makes no call)
 *   rel_populate checked   MALLOC_CHECK_=3 (secure mode): no call
 *   rel_populate off env|mallopt
 *                          M_POPULATE 0 (TIDEMALLOC_POPULATE=0 in the
 *                          environment, which the suite sets, or mallopt):
 *                          a filter that kills the process at its first
 *                          populate call, and the process lives through a
 *                          fresh copy (a child with it on dies of SIGSYS:
 *                          the control). mallopt also refuses values other
 *                          than 0 and 1 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>

#include "release.h"

#define MADV_POPULATE_WRITE_ADVICE 23
#define GROWN                      ((size_t)3 << 20)

static volatile sig_atomic_t populate_calls, refuse;
static volatile unsigned long populate_start, populate_length;

static void on_sigsys(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    ucontext_t *uc = context;
    populate_calls++;
    populate_start = (unsigned long)uc->uc_mcontext.gregs[REG_RDI];
    populate_length = (unsigned long)uc->uc_mcontext.gregs[REG_RSI];
    uc->uc_mcontext.gregs[REG_RAX] = refuse ? -EPERM : 0;
}

/* madvise(..., MADV_POPULATE_WRITE) raises SIGSYS (kill: ends the
 * process); everything else runs. */
static void trap_populate(int kill) {
    rel_on_sigsys(on_sigsys);
    unsigned verdict = kill ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_TRAP;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_POPULATE_WRITE_ADVICE, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, verdict),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    rel_seccomp_install(filter, sizeof filter / sizeof filter[0]);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed);
}

static void check_fill(const unsigned char *p, size_t n, unsigned seed, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed))
            REL_FAIL("%s: byte %zu of the copy is %u, not %u", what, i, p[i],
                     (unsigned char)(i * 31 + seed));
}

/* A block of `size` bytes, filled, grown to GROWN: the populate calls that
 * made. The grown block is freed. */
static int grow_calls(size_t size, unsigned seed, const char *what) {
    unsigned char *p = malloc(size);
    REL_CHECK(p != NULL, "%s: malloc(%zu) failed", what, size);
    fill(p, size, seed);
    int before = populate_calls;
    populate_start = populate_length = 0;
    unsigned char *q = realloc(p, GROWN);
    REL_CHECK(q != NULL, "%s: realloc to %zu failed", what, GROWN);
    int calls = populate_calls - before;
    check_fill(q, size, seed, what);
    if (calls == 1) {
        /* whole pages inside the block, covering the copy's end */
        uintptr_t start = populate_start, end = populate_start + populate_length;
        REL_CHECK(start % 4096 == 0 && end % 4096 == 0, "%s: the range is not whole pages", what);
        REL_CHECK(start >= (uintptr_t)q && end <= (uintptr_t)q + GROWN + 4095 &&
                      end >= (uintptr_t)q + size,
                  "%s: populated [%#lx, %#lx), the copy is [%p, %p)", what, (unsigned long)start,
                  (unsigned long)end, (void *)q, (void *)(q + size));
    }
    free(q);
    return calls;
}

int main(int argc, char **argv) {
    const char *mode = argc >= 2 ? argv[1] : "";
    int off = strcmp(mode, "off") == 0 && argc >= 3;
    if (strcmp(mode, "default") != 0 && strcmp(mode, "refused") != 0 &&
        strcmp(mode, "checked") != 0 && !off) {
        fprintf(stderr, "usage: rel_populate default | refused | checked | off env|mallopt\n");
        return 2;
    }
    rel_stats(); /* skips under another allocator */
    if (off) {
        if (strcmp(argv[2], "mallopt") == 0) {
            REL_CHECK(mallopt(M_POPULATE, 2) == 0 && mallopt(M_POPULATE, -1) == 0,
                      "mallopt(M_POPULATE) accepted a value other than 0 and 1");
            REL_CHECK(mallopt(M_POPULATE, 0) == 1, "mallopt(M_POPULATE, 0) refused");
        }
        /* the control: with it on, the same filter ends a child */
        pid_t child = fork();
        REL_CHECK(child >= 0, "fork failed");
        if (child == 0) {
            mallopt(M_POPULATE, 1);
            trap_populate(1);
            grow_calls((size_t)100 << 10, 8, "control");
            _exit(0);
        }
        int status = 0;
        REL_CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
        REL_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS,
                  "control: populate on, the filter did not end the child (status %#x)", status);
        trap_populate(1); /* a populate call now ends this process */
        grow_calls((size_t)100 << 10, 9, "populate off");
        REL_FIGURES("populate_off=%s", argv[2]);
        return 0;
    }
    trap_populate(0);
    if (strcmp(mode, "checked") == 0) {
        int calls = grow_calls((size_t)100 << 10, 1, "secure mode");
        REL_CHECK(calls == 0, "secure mode: %d populate calls, expected none", calls);
        REL_FIGURES("calls_secure=%d", calls);
        return 0;
    }
    if (strcmp(mode, "refused") == 0) {
        refuse = 1;
        int first = grow_calls((size_t)100 << 10, 2, "refused, first");
        int second = grow_calls((size_t)120 << 10, 3, "refused, second");
        REL_CHECK(first == 1, "refused: the first fresh copy made %d calls, expected 1", first);
        REL_CHECK(second == 0, "refused: the refusal was not kept (%d more calls)", second);
        REL_FIGURES("calls_first=%d calls_after_refusal=%d", first, second);
        return 0;
    }
    int mapped = grow_calls((size_t)100 << 10, 4, "fresh mapping");
    REL_CHECK(mapped == 1, "fresh mapping: %d populate calls, expected 1", mapped);
    /* Blocks under the threshold come from the arena: a fresh chunk reads as
     * zeros; a freed block's pages stay resident until the purge delay. */
    REL_CHECK(mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1, "mallopt(M_MMAP_THRESHOLD) refused");
    int arena = grow_calls((size_t)200 << 10, 6, "arena, fresh");
    REL_CHECK(arena == 1, "arena, fresh: %d populate calls, expected 1", arena);
    unsigned char *resident = malloc(GROWN);
    REL_CHECK(resident != NULL, "malloc(%zu) failed", GROWN);
    rel_touch(resident, GROWN);
    free(resident);
    int reused = grow_calls((size_t)200 << 10, 7, "arena, resident");
    REL_CHECK(reused == 0, "arena, resident: %d populate calls, expected none", reused);
    int small = grow_calls((size_t)48 << 10, 5, "48 KiB copy");
    REL_CHECK(small == 0, "48 KiB copy: %d populate calls, expected none", small);
    REL_FIGURES("calls_mapping=%d calls_48k=%d calls_arena=%d calls_resident=%d", mapped, small,
                arena, reused);
    return 0;
}
