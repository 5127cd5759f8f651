/* A small spin lock for the allocator's rare shared slow paths (segment
 * registry, abandoned list, huge table). It never allocates, so it is safe
 * inside malloc, and pthread_atfork can hold it across fork. */
#ifndef TIDEMALLOC_LOCK_H
#define TIDEMALLOC_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct spin_lock {
    _Atomic int held;
};

/* Allocator locks this thread holds: fork() from a signal handler that
 * interrupted one of them must not wait for it (fork.c). The purger thread
 * has no TLS of its own (purge.c), so it keeps no count: it is recognised by
 * its stack. */
extern __thread unsigned t_locks_held __attribute__((tls_model("initial-exec")))
__attribute__((visibility("hidden")));
#define PURGER_STACK_SIZE ((uintptr_t)64 * 1024)
extern char g_purger_stack[PURGER_STACK_SIZE] __attribute__((visibility("hidden")));

static inline bool on_purger_stack(void) {
    return (uintptr_t)__builtin_frame_address(0) - (uintptr_t)g_purger_stack < PURGER_STACK_SIZE;
}
#define SPIN_LOCK_INIT                                                                             \
    { 0 }

/* The count covers the lock for as long as it is held, the moments around
 * the exchange and the release included: a signal handler that forks there
 * must see it (it once saw 0 right after an unlock's count went down, took
 * the still-held lock and spun for good: glibc's tst-mallocfork timed out).
 * The signal fences keep the compiler from moving the count across. */
static inline bool spin_try_lock(struct spin_lock *lock) {
    bool counted = !on_purger_stack();
    if (counted) t_locks_held++;
    atomic_signal_fence(memory_order_seq_cst);
    bool taken = atomic_exchange_explicit(&lock->held, 1, memory_order_acquire) == 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (!taken && counted) t_locks_held--;
    return taken;
}

/* The wait, out of line (lock.c): each file's spin_lock is the exchange
 * alone. Inlined whole, the loop took 120-150 bytes of code in each of ten
 * files, and the library's code a page more in every process. */
void spin_lock_contended(struct spin_lock *lock) __attribute__((visibility("hidden")));

static inline void spin_lock_inline(struct spin_lock *lock) {
    if (__builtin_expect(spin_try_lock(lock), 1)) return;
    spin_lock_contended(lock);
}

static inline void spin_unlock_inline(struct spin_lock *lock) {
    atomic_store_explicit(&lock->held, 0, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    if (!on_purger_stack()) t_locks_held--;
}

/* Files built for size (the Makefile's COLD_SRCS) call one shared copy
 * (lock.c): gcc kept an out-of-line copy of each function in every such
 * file, nine of each, 1 KiB of the code that every program maps. */
void spin_lock_shared(struct spin_lock *lock) __attribute__((visibility("hidden")));
void spin_unlock_shared(struct spin_lock *lock) __attribute__((visibility("hidden")));

static inline void spin_lock(struct spin_lock *lock) {
#ifdef __OPTIMIZE_SIZE__
    spin_lock_shared(lock);
#else
    spin_lock_inline(lock);
#endif
}

static inline void spin_unlock(struct spin_lock *lock) {
#ifdef __OPTIMIZE_SIZE__
    spin_unlock_shared(lock);
#else
    spin_unlock_inline(lock);
#endif
}

#endif
