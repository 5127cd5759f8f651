/* The purge helper cannot start (clone refused, as under RLIMIT_NPROC or a
 * cgroup's pids.max): the allocator tries again at most once a second, and
 * the frees make the releases themselves, also with M_BACKGROUND_PURGE 2.
 * A seccomp filter on the main thread sends its clone and clone3 calls to a
 * supervisor thread (user notification), which counts them and fails them
 * with EAGAIN (a trap could not be counted: the start blocks every signal,
 * and a blocked SIGSYS kills). The main thread allocates 48 MiB in 64 KiB
 * blocks, touches them, frees them, and takes a block in and out for
 * 1.5 s, so that every free empties a page past the trim threshold.
 *   rel_helper_refused  (default, or with TIDEMALLOC_BACKGROUND_PURGE=2) at
 *                       most 3 clone calls (until the seventy-third session
 *                       every such free tried again: 2,302 clone calls in 1
 *                       s, each leaving a 64 KiB stack mapped), and 32 MiB
 *                       given back all the same */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "release.h"

#define BLOCK  ((size_t)64 << 10)
#define BLOCKS 768 /* 48 MiB */

static void *blocks[BLOCKS];
static int listener = -1; /* set before the supervisor reads it (release) */
static int clones;        /* the supervisor's count (relaxed: read after a pause) */

/* Answers every clone of the main thread with EAGAIN, counting them. */
static void *supervise(void *unused) {
    (void)unused;
    int fd;
    while ((fd = __atomic_load_n(&listener, __ATOMIC_ACQUIRE)) < 0) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    for (;;) {
        struct seccomp_notif request;
        memset(&request, 0, sizeof request);
        if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &request) != 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        __atomic_add_fetch(&clones, 1, __ATOMIC_RELAXED);
        struct seccomp_notif_resp response;
        memset(&response, 0, sizeof response);
        response.id = request.id;
        response.error = -EAGAIN;
        ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &response);
    }
}

static void refuse_clone(void) {
    pthread_t thread; /* before the filter: it would hold its own clone */
    REL_CHECK(pthread_create(&thread, NULL, supervise, NULL) == 0, "pthread_create failed");
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        REL_SKIPF("cannot set no_new_privs: %s", strerror(errno));
    long fd =
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    if (fd < 0) REL_SKIPF("no seccomp user notification here: %s", strerror(errno));
    __atomic_store_n(&listener, (int)fd, __ATOMIC_RELEASE);
}

int main(void) {
    refuse_clone();
    struct tidemalloc_stats before = rel_stats();
    rel_burst(blocks, BLOCKS, BLOCK);
    long frees = rel_block_in_and_out(BLOCK, 1.5);
    struct tidemalloc_stats after = rel_stats();
    size_t released = after.bytes_released - before.bytes_released;
    int tries = __atomic_load_n(&clones, __ATOMIC_RELAXED);
    printf("FIGURES clone_calls=%d mmap_calls=%llu frees=%ld released_mib=%.1f\n", tries,
           (unsigned long long)(after.mmap_calls - before.mmap_calls), frees, rel_mib(released));
    REL_CHECK(tries >= 1 && tries <= 3, "%d clone calls in 1.5 s", tries);
    REL_CHECK(released >= ((size_t)32 << 20), "only %.1f MiB went back", rel_mib(released));
    return 0;
}
