/* A backtrace taken in the abort that a bad free causes reaches the caller
 * of free: the library's unwind tables are there when needed, although they
 * sit apart from everything a run reads (src/rodata.ld), so that a normal run
 * never maps them. A crash handler's or a debugger's backtrace of a heap
 * corruption report depends on this. The child frees an address in static
 * data whose header words read zero (each allocator under test aborts on it;
 * for a peer that does not, or crashes instead, the test is skipped); its
 * SIGABRT handler walks the stack with backtrace(3) and exits 0 only if one
 * of the frames returns into bad_free_caller. */
#include <execinfo.h>
#include <signal.h>

#include "child_stderr.h"
#include "common.h"

#define CALLER_BYTES 256 /* more than bad_free_caller's code */

static void *volatile launder_slot;
static volatile int after_free;

static __attribute__((noinline)) void bad_free_caller(void *p) {
    launder_slot = p;
    free(launder_slot);
    after_free = 1; /* no tail call: this frame stays on the stack */
}

static void on_abort(int sig) {
    (void)sig;
    void *frames[64];
    int n = backtrace(frames, 64);
    uintptr_t begin = (uintptr_t)&bad_free_caller;
    for (int i = 0; i < n; i++) {
        uintptr_t at = (uintptr_t)frames[i];
        if (at > begin && at < begin + CALLER_BYTES) {
            write(2, "reached the caller\n", 19);
            _exit(0);
        }
    }
    write(2, "backtrace stopped before the caller\n", 36);
    _exit(3);
}

static void child(void *arg) {
    (void)arg;
    /* the first backtrace loads the unwinder, which allocates: not in the
     * handler of an allocator's abort */
    void *warm[4];
    backtrace(warm, 4);
    signal(SIGABRT, on_abort);
    static _Alignas(64) char area[128];
    bad_free_caller(area + 64);
    write(2, "no abort\n", 9);
    _exit(4);
}

int main(void) {
    char msg[256];
    int status = run_in_child(child, NULL, msg, sizeof msg);
    CHECKF(status != -1, "could not run the child");
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    if ((code == 4 || code > 128) && !tm_expected())
        SKIP("this allocator does not abort on a bad free (exit %d)", code);
    CHECKF(code == 0, "exit %d: %s", code, msg);
    return 0;
}
