/* fork: every allocator lock is taken, in one fixed order, before fork and
 * released in both processes after it, so the child finds consistent state
 * and can allocate at once even if the parent had many threads.
 * Lock order: purge, heaps, each heap's page cache, segment cache,
 * abandoned, registry, each segment's lock (registry order), huge. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/single_threaded.h>

#include "internal.h"

extern struct spin_lock g_purge_lock INTERNAL;

/* A single-threaded process may fork from a signal handler that interrupted
 * malloc (glibc allows it): then no lock is taken, as glibc does. Likewise
 * when the handler interrupted this very thread inside one of our locks. */
static bool locked_for_fork;
__thread unsigned t_locks_held __attribute__((tls_model("initial-exec")));

static void fork_prepare(void) {
    locked_for_fork = !__libc_single_threaded && t_locks_held == 0;
    if (!locked_for_fork) return;
    spin_lock(&g_purge_lock);
    spin_lock(&g_heaps_lock);
    for (struct heap *h = g_heaps; h; h = h->next_heap) spin_lock(&h->cache_lock);
    spin_lock(&g_segment_cache_lock);
    spin_lock(&g_abandoned_lock);
    spin_lock(&g_registry_lock);
    for (struct segment *s = g_registry; s; s = s->all_next) spin_lock(&s->lock);
    spin_lock(&g_huge_lock);
}

static void fork_release(void) {
    if (!locked_for_fork) return;
    spin_unlock(&g_huge_lock);
    for (struct segment *s = g_registry; s; s = s->all_next) spin_unlock(&s->lock);
    spin_unlock(&g_registry_lock);
    spin_unlock(&g_abandoned_lock);
    spin_unlock(&g_segment_cache_lock);
    for (struct heap *h = g_heaps; h; h = h->next_heap) spin_unlock(&h->cache_lock);
    spin_unlock(&g_heaps_lock);
    spin_unlock(&g_purge_lock);
}

static void fork_child(void) {
    fork_release();
    heap_atfork_child();
    purge_atfork_child();
}

void fork_handlers_install(void) { pthread_atfork(fork_prepare, fork_release, fork_child); }
