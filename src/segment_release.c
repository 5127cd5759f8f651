/* Giving segments' free slices back to the kernel: a purge pass gathers the
 * free resident slices of each segment into a batch of ranges and releases
 * them in one call where the kernel allows (segment_purge,
 * purge_batch_flush); pages whose every block other threads freed are
 * reclaimed whole (segment_reclaim_pages). Which slices may go and when is
 * purge.c's policy. */
#define _GNU_SOURCE
#include "internal.h"

/* The lowest run of adjacent set bits of m (not 0). */
static uint64_t lowest_run(uint64_t m) {
    unsigned first = (unsigned)__builtin_ctzll(m);
    uint64_t rest = ~(m >> first);
    return run_mask(first, rest == 0 ? 64 - first : (unsigned)__builtin_ctzll(rest));
}

/* The memory of a run of slices. */
static struct iovec run_range(struct segment *segment, uint64_t run) {
    return (struct iovec){(char *)segment + ((size_t)__builtin_ctzll(run) << SLICE_SHIFT),
                          (size_t)bit_count(run) << SLICE_SHIFT};
}

/* Releases the slices in `mask`, one range per run of adjacent ones, all in
 * one call where the kernel allows; *done: those that went back. Returns
 * their bytes. */
static size_t release_slice_runs(struct segment *segment, uint64_t mask, uint64_t *done) {
    struct iovec ranges[SLICES_PER_SEGMENT / 2]; /* runs are separated: at most 32 */
    uint64_t runs[SLICES_PER_SEGMENT / 2];
    unsigned count = 0;
    for (uint64_t m = mask; m; m &= ~runs[count++]) {
        runs[count] = lowest_run(m);
        ranges[count] = run_range(segment, runs[count]);
    }
    size_t released = 0;
    *done = 0;
    uint64_t went = count ? os_release_ranges(ranges, count) : 0;
    for (unsigned i = 0; i < count; i++) {
        if (!(went >> i & 1)) continue;
        *done |= runs[i];
        released += ranges[i].iov_len;
    }
    return released;
}

/* Gives the batch's ranges back in one call where the kernel allows, then
 * returns their slices to their segments' free sets: clean if they went
 * back. Returns the bytes released. */
size_t purge_batch_flush(struct purge_batch *batch) {
    uint64_t went = batch->count ? os_release_ranges(batch->ranges, batch->count) : 0;
    size_t released = 0;
    for (unsigned i = 0; i < batch->count;) {
        struct segment *segment = batch->segments[i];
        uint64_t taken = 0, done = 0;
        for (; i < batch->count && batch->segments[i] == segment; i++) {
            taken |= batch->runs[i];
            if (!(went >> i & 1)) continue;
            done |= batch->runs[i];
            released += batch->ranges[i].iov_len;
        }
        spin_lock(&segment->lock);
        free_slices_set(segment, segment->free_slices | taken);
        segment->purging_slices &= ~taken;
        segment->dirty_slices &= ~done;
        retained_slices_note(done, false);
        spin_unlock(&segment->lock);
    }
    batch->count = 0;
    return released;
}

size_t purge_batch_bytes(const struct purge_batch *batch) {
    size_t bytes = 0;
    for (unsigned i = 0; i < batch->count; i++)
        bytes += batch->ranges[i].iov_len;
    return bytes;
}

/* Adds the free resident slices that have stayed free at least min_age_ms to
 * the batch, one range per run of adjacent ones (flushing it when full).
 * Safe from any thread: the slices are out of the free set until the flush,
 * so the owner cannot hand them out meanwhile. Callers hold the registry
 * lock until the flush, so the segment cannot be unmapped. Returns the bytes
 * released by flushes on the way. */
size_t segment_purge(struct segment *segment, uint32_t now, uint32_t min_age_ms,
                     struct purge_batch *batch) {
    spin_lock(&segment->lock);
    uint64_t candidates = segment->free_slices & segment->dirty_slices & ~(uint64_t)1;
    if (min_age_ms > 0) {
        for (uint64_t m = candidates; m; m &= m - 1) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            if ((uint32_t)(now - segment->slice_freed_ms[i]) < min_age_ms)
                candidates &= ~((uint64_t)1 << i);
        }
    }
    free_slices_set(segment, segment->free_slices & ~candidates);
    segment->purging_slices |= candidates;
    spin_unlock(&segment->lock);

    size_t released = 0;
    for (uint64_t m = candidates; m;) {
        if (batch->count == PURGE_BATCH_MAX) released += purge_batch_flush(batch);
        uint64_t run = lowest_run(m);
        batch->segments[batch->count] = segment;
        batch->runs[batch->count] = run;
        batch->ranges[batch->count] = run_range(segment, run);
        batch->count++;
        m &= ~run;
    }
    return released;
}

/* Reclaims the pages of the segment whose every carved block other threads
 * freed, when their owner has left them so for min_age_ms: an owner that
 * sleeps (larson's main thread, in pthread_join while the workers free the
 * 4 MiB it set up) or has exited collects nothing, and the pages stayed
 * resident for good. The purger takes the blocks (the word becomes
 * THREAD_FREE_RECLAIMED), closes the block test and releases the memory;
 * the owner resets the page when it next collects it. Under the segment
 * lock: the owner changes `capacity` only under it, so a page whose list
 * holds `capacity` blocks holds all of them, and its reset waits for the
 * madvise. Purge lock held (reclaim_seen). */
__attribute__((no_sanitize("thread"))) size_t
segment_reclaim_pages(struct segment *segment, uint32_t now, uint32_t min_age_ms) {
    uint64_t reclaimed = 0;
    spin_lock(&segment->lock);
    uint64_t taken = ~(segment->free_slices | segment->purging_slices) & ~(uint64_t)1;
    for (uint64_t m = taken; m; m &= m - 1) {
        struct page *page = &segment->pages[__builtin_ctzll(m)];
        /* acquire: the pushers' writes into their blocks come before the
         * madvise that drops them */
        uintptr_t word = atomic_load_explicit(&page->thread_free, memory_order_acquire);
        if (thread_free_count(word) == 0) continue; /* empty, or reclaimed */
        /* a page's first slice, in use (a retired descriptor keeps no list:
         * its block test is closed, so nothing is pushed there) */
        if (page->first != page || page->area_size == 0) continue;
        if (thread_free_count(word) != page->capacity) continue;
        /* relaxed: a date; the pusher that filled the list set it */
        if (__atomic_load_n(&page->reclaim_seen, __ATOMIC_RELAXED) != word) {
            __atomic_store_n(&page->reclaim_seen, word, __ATOMIC_RELAXED);
            __atomic_store_n(&page->reclaim_seen_ms, now, __ATOMIC_RELAXED);
            if (min_age_ms > 0) continue;
        } else if ((uint32_t)(now - __atomic_load_n(&page->reclaim_seen_ms, __ATOMIC_RELAXED)) <
                   min_age_ms) {
            continue;
        }
        /* acq_rel: acquire as above; release pairs with the owner's exchange */
        if (!atomic_compare_exchange_strong_explicit(&page->thread_free, &word,
                                                     THREAD_FREE_RECLAIMED, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        page_block_test_set(page, 0); /* no free() gets in */
        if (thread_free_count(word) == page->reserved)
            remote_freed_page_note((uint64_t)page->slice_count << SLICE_SHIFT, false);
        /* slice_count is fixed now: no block is out to be realloc'ed */
        reclaimed |= run_mask((unsigned)(page - segment->pages), page->slice_count);
    }
    /* adjacent pages in one call: reclaiming 34 MiB of 64 KiB pages one by
     * one took 549 calls (rel_remote_reclaim), in runs 27 */
    uint64_t done;
    size_t released = release_slice_runs(segment, reclaimed, &done);
    spin_unlock(&segment->lock);
    return released;
}

/* Every free resident slice of the segment goes back now: in aggressive
 * mode, or an empty segment that the cache keeps without its memory. The
 * caller keeps the segment mapped (its owner, or the thread releasing it). */
void segment_purge_now(struct segment *segment, uint32_t now) {
    struct purge_batch batch;
    batch.count = 0;
    segment_purge(segment, now, 0, &batch);
    purge_batch_flush(&batch);
}
