/* Process-wide initialisation: options, fork handlers. Runs on the
 * first allocation of any thread, or from the library constructor. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>

#include "internal.h"

_Atomic int g_initialized; /* 0: not yet, 1: in progress, 2: done */

void allocator_init(void) {
    /* acquire: a thread that sees 2 sees the options set before. */
    if (likely(atomic_load_explicit(&g_initialized, memory_order_acquire) == 2)) return;
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&g_initialized, &expected, 1, memory_order_acquire,
                                                memory_order_acquire)) {
        os_clock_init();
        options_init_from_environment();
        os_segments_init(); /* after the options (glibc.malloc.hugetlb), before any segment */
        atomic_store_explicit(&g_initialized, 2, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&g_initialized, memory_order_acquire) != 2)
        __builtin_ia32_pause();
}

int g_stats_fd = 2; /* stderr, or a copy of it that outlives close(2) */

__attribute__((constructor)) static void library_constructor(void) {
    allocator_init();
    fork_handlers_install();
    /* Programs such as ls close stderr in an atexit handler, before our
     * destructor runs: keep a private copy for the exit summary. */
    if (g_options.print_stats) {
        int fd = (int)raw_syscall6(SYS_fcntl, 2, F_DUPFD_CLOEXEC, 100, 0, 0, 0);
        if (fd >= 0) g_stats_fd = fd;
    }
}

__attribute__((destructor)) static void library_destructor(void) {
    if (g_options.print_stats) stats_print_at_exit();
}
