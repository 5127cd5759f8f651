/* fork: every allocator lock is taken, in one fixed order, before fork and
 * released in both processes after it, so the child finds consistent state
 * and can allocate at once even if the parent had many threads.
 * Lock order: purge, exit heap, heaps, each heap's page cache, segment cache,
 * abandoned, registry, each segment's lock (registry order), huge, each arena
 * chunk's (slot order). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/single_threaded.h>

#include "internal.h"

extern struct spin_lock g_purge_lock INTERNAL;

/* What fork_prepare took: 0 nothing (fork from a signal handler that
 * interrupted this thread inside one of our locks: waiting would deadlock,
 * and glibc gives such a child no guarantee either), 1 the purge lock only (a
 * single-threaded process, whose only other thread can be our purger: it
 * holds other locks only inside a pass, under the purge lock), 2 all.
 * A fork in a signal handler that interrupted a fork nests inside it
 * (prepare, prepare, parent, parent), so each level keeps its own: with one
 * value for all, the inner fork's 0 made the outer one's parent handler
 * leave the locks it had taken held. */
#define FORK_NESTING_MAX 8
static __thread uint8_t fork_locking_by_level[FORK_NESTING_MAX]
    __attribute__((tls_model("initial-exec")));
static __thread unsigned fork_depth __attribute__((tls_model("initial-exec")));

/* The mode of the fork whose handlers run now (levels too deep to record
 * took nothing). */
static int fork_locking(void) {
    unsigned level = fork_depth - 1;
    return level < FORK_NESTING_MAX ? fork_locking_by_level[level] : 0;
}

/* glibc takes its stdio list lock only after running the prepare handlers.
 * A thread inside getline() holds a FILE lock and may wait for one of our
 * locks, while a thread in fflush(NULL) holds the list lock and waits for
 * that FILE: so we take the list lock first, as glibc does for its own
 * malloc (glibc bug 19431, tst-malloc-fork-deadlock). */
extern void _IO_list_lock(void);
extern void _IO_list_unlock(void);
__thread unsigned t_locks_held __attribute__((tls_model("initial-exec")));

static void fork_prepare(void) {
    unsigned level = fork_depth++;
    /* a fork in a handler that interrupts us from here on takes the next level */
    atomic_signal_fence(memory_order_seq_cst);
    int mode = t_locks_held != 0 ? 0 : __libc_single_threaded ? 1 : 2;
    if (level < FORK_NESTING_MAX) fork_locking_by_level[level] = (uint8_t)mode;
    if (fork_locking() == 0) return;
    spin_lock(&g_purge_lock);
    if (fork_locking() == 1) return;
    _IO_list_lock();
    spin_lock(&g_exit_heap_lock); /* held around heap work: before the rest */
    shared_depot_fork_lock();
    spin_lock(&g_heaps_lock);
    for (struct heap *h = g_heaps; h; h = h->next_heap)
        spin_lock(&h->cache_lock);
    spin_lock(&g_segment_cache_lock);
    spin_lock(&g_abandoned_lock);
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next)
        spin_lock(&s->lock);
    spin_lock(&g_huge_lock);
    arena_fork_lock();
}

static void fork_unlock_ours(void) {
    if (fork_locking() == 0) return;
    if (fork_locking() == 2) {
        arena_fork_unlock();
        spin_unlock(&g_huge_lock);
        for (struct segment *s = g_registry; s; s = s->all_next)
            spin_unlock(&s->lock);
        spin_unlock(&g_registry_lock);
        spin_unlock(&g_abandoned_lock);
        spin_unlock(&g_segment_cache_lock);
        for (struct heap *h = g_heaps; h; h = h->next_heap)
            spin_unlock(&h->cache_lock);
        spin_unlock(&g_heaps_lock);
        shared_depot_fork_unlock();
        spin_unlock(&g_exit_heap_lock);
    }
    spin_unlock(&g_purge_lock);
}

/* Back to the enclosing fork's level, once this one's locks are released. */
static void fork_level_end(void) {
    atomic_signal_fence(memory_order_seq_cst);
    fork_depth--;
}

static void fork_parent(void) {
    fork_unlock_ours();
    if (fork_locking() == 2) _IO_list_unlock();
    fork_level_end();
}

/* In the child glibc has already reset the stdio list lock. */
static void fork_child(void) {
    fork_unlock_ours();
    heap_atfork_child(fork_locking() != 0);
    purge_atfork_child();
    fork_level_end();
}

/* The library links without gcc's start files (-nostartfiles, Makefile),
 * whose crtbeginS.o defines this handle: pthread_atfork (libc_nonshared.a)
 * registers the handlers under it. Weak: a program that links our objects
 * (the static archive, the sanitizer builds) has its own from crtbegin. */
__attribute__((weak, visibility("hidden"))) void *__dso_handle = &__dso_handle;

void fork_handlers_install(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
