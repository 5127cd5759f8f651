/* The spin lock's wait (lock.h): test and test-and-set with `pause`, then
 * sched_yield once the holder has kept it for 64 tries, so that a holder
 * that lost its CPU gets it back. And the one copy of the lock and unlock
 * that the files built for size call. */
#include "internal.h"

void spin_lock_contended(struct spin_lock *lock) {
    for (unsigned spins = 0;; spins++) {
        /* relaxed: only a hint to retry; the exchange synchronizes. */
        while (atomic_load_explicit(&lock->held, memory_order_relaxed)) {
            if (++spins > 64)
                os_yield();
            else
                __builtin_ia32_pause();
        }
        if (spin_try_lock(lock)) return;
    }
}

void spin_lock_shared(struct spin_lock *lock) {
    spin_lock_inline(lock);
}

void spin_unlock_shared(struct spin_lock *lock) {
    spin_unlock_inline(lock);
}
