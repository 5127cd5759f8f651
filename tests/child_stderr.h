/* Runs a function in a forked child whose stderr is a pipe, for the tests
 * that expect an abort with a message: returns the child's wait status (-1
 * if the pipe, the fork or the wait failed) and the first line it wrote to
 * stderr in msg. The child dumps no core, and exits 0 if the function
 * returns. Shared by the behaviour tests (common.h) and the release tests
 * (release/release.h), which have check macros of their own. */
#ifndef TIDEMALLOC_CHILD_STDERR_H
#define TIDEMALLOC_CHILD_STDERR_H

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int run_in_child(void (*fn)(void *), void *arg, char *msg, size_t size) {
    int fds[2];
    msg[0] = 0;
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t r;
    while (len < size - 1 && (r = read(fds[0], msg + len, size - 1 - len)) > 0)
        len += (size_t)r;
    msg[len] = 0;
    close(fds[0]);
    char *newline = strchr(msg, '\n');
    if (newline) *newline = 0;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

/* free(p), for run_in_child with a pointer the test expects refused: the
 * volatile copy hides it from the compiler, which would warn. */
static inline void free_laundered(void *p) {
    void *volatile slot = p;
    free(slot);
}

#endif
