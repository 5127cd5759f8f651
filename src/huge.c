/* Huge blocks: those too big for a segment's slices. One allocated below
 * the mmap threshold comes from the arena (arena.c), which records it in its
 * chunk and keeps it when freed, for the release policy to give back; one at
 * or above the threshold is mapped on its own, tracked out of band in an
 * open-addressing table keyed by the address we returned (so free() of a
 * pointer we never returned is recognised), and unmapped when freed, as
 * glibc's are. */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"

struct huge_entry {
    uintptr_t user;   /* address returned to the caller; 0 = empty, 1 = deleted */
    uintptr_t base;   /* start of the mapping */
    size_t map_size;  /* bytes mapped */
    bool retain;      /* allocated below the mmap threshold: freeing it does
                         not move the dynamic threshold */
    bool hugetlb;     /* on explicit huge pages (os_map_huge_pages): mremap,
                         which wants whole huge pages, is not tried */
    bool moving;      /* realloc's mremap is at work on it, lock dropped:
                         lookups see no block (another entry may then take
                         the same address, once the old range is unmapped) */
    bool guarded;     /* secure mode: a guard page ends the mapping, and the
                         bytes from user + requested up to it are a canary */
    size_t requested; /* guarded: the size asked for (its usable size) */
};

struct spin_lock g_huge_lock = SPIN_LOCK_INIT;
/* The first entries need no mapping: a program's first huge blocks then
 * never fail for metadata when address space is short (under RLIMIT_AS a
 * 32 KiB table mapped after the block's own was refused, so the block went
 * back and malloc returned NULL), and one with few huge blocks maps none. */
#define TABLE_INITIAL 64
LARGE_BSS static struct huge_entry initial_table[TABLE_INITIAL];
static struct huge_entry *table = initial_table; /* huge lock */
static size_t table_capacity = TABLE_INITIAL;    /* huge lock; power of two */
static size_t table_used;                        /* huge lock; live + deleted entries */

/* The addresses of the last huge blocks freed (huge lock): the table keeps
 * no trace of a block once freed, and a second free of one should say that
 * it is a double free rather than a pointer never returned. */
#define FREED_RECENT 64
LARGE_BSS static uintptr_t freed_recent[FREED_RECENT];
static unsigned freed_recent_next;

/* direct mappings only (glibc's mmapped chunks): the arena counts its own */
_Atomic uint64_t g_huge_count, g_huge_bytes, g_huge_max_bytes, g_huge_max_count;

static size_t hash_address(uintptr_t a) {
    return (size_t)((a >> 12) * 0x9E3779B97F4A7C15ull);
}

WARM static struct huge_entry *table_find_in(uintptr_t user, bool moving) {
    size_t mask = table_capacity - 1;
    for (size_t i = hash_address(user) & mask;; i = (i + 1) & mask) {
        if (table[i].user == user && table[i].moving == moving) return &table[i];
        if (table[i].user == 0) return NULL;
    }
}

static struct huge_entry *table_find(uintptr_t user) {
    return table_find_in(user, false);
}

static bool table_grow(void) {
    size_t capacity = table_capacity < 1024 ? 1024 : table_capacity * 2;
    struct huge_entry *fresh = os_map(capacity * sizeof *fresh);
    if (fresh == NULL) return false;
    for (size_t j = 0; j < table_capacity; j++) {
        if (table[j].user <= 1) continue;
        size_t i = hash_address(table[j].user) & (capacity - 1);
        while (fresh[i].user)
            i = (i + 1) & (capacity - 1);
        fresh[i] = table[j];
    }
    size_t live = 0;
    for (size_t j = 0; j < table_capacity; j++)
        live += table[j].user > 1;
    if (table != initial_table) os_unmap(table, table_capacity * sizeof *table);
    table = fresh;
    table_capacity = capacity;
    table_used = live;
    return true;
}

static bool table_has_tombstone(void) {
    for (size_t i = 0; i < table_capacity; i++)
        if (table[i].user == 1) return true;
    return false;
}

WARM static bool table_insert(struct huge_entry entry) {
    /* Growing keeps probes short; without memory for it, a free slot or a
     * tombstone still takes the entry (realloc must not fail for metadata). */
    if ((table_used + 1) * 4 > table_capacity * 3 && !table_grow() &&
        table_used >= table_capacity && !table_has_tombstone())
        return false;
    size_t mask = table_capacity - 1;
    size_t i = hash_address(entry.user) & mask;
    while (table[i].user > 1)
        i = (i + 1) & mask;
    if (table[i].user == 0) table_used++;
    table[i] = entry;
    return true;
}

WARM static void note_live(size_t map_size, bool add) {
    /* relaxed: statistics for mallinfo and the mmap_max limit. */
    if (add) {
        uint64_t count = atomic_fetch_add_explicit(&g_huge_count, 1, memory_order_relaxed) + 1;
        uint64_t bytes =
            atomic_fetch_add_explicit(&g_huge_bytes, map_size, memory_order_relaxed) + map_size;
        if (count > atomic_load_explicit(&g_huge_max_count, memory_order_relaxed))
            atomic_store_explicit(&g_huge_max_count, count, memory_order_relaxed);
        if (bytes > atomic_load_explicit(&g_huge_max_bytes, memory_order_relaxed))
            atomic_store_explicit(&g_huge_max_bytes, bytes, memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&g_huge_count, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&g_huge_bytes, map_size, memory_order_relaxed);
    }
}

/* Records a new mapping of its own as a live block; on failure the mapping
 * goes back. (The arena records its blocks itself.) */
WARM static bool huge_register(struct huge_entry entry) {
    spin_lock(&g_huge_lock);
    bool ok = table_insert(entry);
    spin_unlock(&g_huge_lock);
    if (!ok) {
        os_unmap((void *)entry.base, entry.map_size);
        return false;
    }
    note_live(entry.map_size, true);
    return true;
}

WARM void *huge_alloc(size_t size, size_t alignment, bool zero_needed, bool retain_on_free) {
    if (alignment < OS_PAGE_SIZE) alignment = OS_PAGE_SIZE;
    if (size > PTRDIFF_MAX - alignment - OS_PAGE_SIZE) return NULL;
    if (size == 0) size = 1; /* malloc(0) with an mmap threshold of 0 */
    /* the block's pages; a mapping of its own is taken with room for the
     * alignment, and cut down to them */
    size_t kept = (size + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1);
    size_t map_size = kept + (alignment - OS_PAGE_SIZE);
    uintptr_t base = 0, dirty_end = 0;
    size_t mapped = map_size;
    bool in_arena = false, hugetlb = false;
    uint64_t generation = os_unmapping_generation();
    /* explicit huge pages (glibc.malloc.hugetlb=2) map every block on its own */
    base = (uintptr_t)os_map_huge_pages(map_size, &mapped);
    hugetlb = base != 0;
    /* Over the dynamic threshold, but under the most it can rise to: freed
     * memory the arena holds resident serves, if it covers the block, as
     * though the threshold had risen. A threshold the user set is kept to
     * the letter. */
    bool resident_only = !retain_on_free && alignment == OS_PAGE_SIZE &&
                         OPTION(dynamic_threshold) && kept <= DEFAULT_MMAP_THRESHOLD_MAX;
    if (base == 0 && (retain_on_free || resident_only)) {
        base = (uintptr_t)arena_alloc(kept, alignment, resident_only, retain_on_free, &dirty_end,
                                      t_heap);
        in_arena = base != 0;
    }
    if (base == 0) {
        base = (uintptr_t)os_map_block(map_size);
        if (base == 0) {
            /* Memory is short (RLIMIT_AS, overcommit): give the arena's free
             * chunks, the shared heap's waiting blocks and the cached empty
             * segments (up to 1040, 4 MiB of address space each) back and
             * try once more, and again while other threads' trims give
             * address space back. */
            bool freed = arena_release(true, 0);
            freed |= shared_heap_give_back(); /* before the segment cache's trim */
            freed |= segment_cache_trim(true, 0);
            if (freed) base = (uintptr_t)os_map_block(map_size);
            if (base == 0) base = (uintptr_t)os_map_after_trims(os_map_block, map_size, generation);
        }
        if (base != 0) os_advise_huge_pages((void *)base, map_size);
    }
    if (base == 0) {
        /* Still no room for a mapping of its own: the free address space of
         * the arena's chunks, which stay mapped while any block lies in them
         * (oom mt: 96 MiB of chunks holding three blocks of 300 KB and three
         * of 3 MiB left no room for a second block of 9 MiB, 2 runs in 300),
         * or a chunk the trims above made room for. The block goes back to
         * the arena when freed, as the arena's own do. */
        base = (uintptr_t)arena_alloc(kept, alignment, false, retain_on_free, &dirty_end, t_heap);
        in_arena = base != 0;
    }
    if (base == 0) return NULL;
    if (in_arena) mapped = kept; /* taken aligned, the room before it left free */
    /* A mapping's room for an alignment past a page goes back, before the
     * block and after it: posix_memalign(64 MiB, 256 KiB) held 64 MiB of
     * address space until freed, and the arena's blocks 2 MiB for 64 KiB
     * aligned to 2 MiB (glibc puts the head and the tail back in its heap).
     * Explicit huge pages stay whole. */
    if (!in_arena && !hugetlb && alignment > OS_PAGE_SIZE) {
        base = (uintptr_t)os_cut_aligned((void *)base, mapped, kept, alignment);
        mapped = kept;
    }
    uintptr_t user = (base + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (!in_arena && !huge_register((struct huge_entry){.user = user,
                                                        .base = base,
                                                        .map_size = mapped,
                                                        .retain = retain_on_free,
                                                        .hugetlb = hugetlb}))
        return NULL;
    /* the arena's clean pages read as zeros: only those up to the last dirty one */
    if (zero_needed && dirty_end > user) memset((void *)user, 0, dirty_end - user);
    return (void *)user;
}

/* A guarded block's canary, from its requested end to the guard page. */
static bool guarded_canary_intact(const struct huge_entry *entry) {
    const unsigned char *from = (const unsigned char *)(entry->user + entry->requested);
    const unsigned char *guard =
        (const unsigned char *)(entry->base + entry->map_size - OS_PAGE_SIZE);
    for (; from < guard; from++)
        if (*from != CANARY_BYTE) return false;
    return true;
}

WARM bool huge_free(void *p) {
    size_t size;
    bool retain;
    int in_arena = arena_free(p, &size, &retain);
    if (in_arena != ARENA_NONE) {
        if (in_arena == ARENA_NO) return false;
        /* over the threshold when taken: its free moves the threshold as a
         * mapping's would */
        if (!retain) options_note_huge_free(size + 1);
        purge_after_free();
        return true;
    }
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    if (found == NULL) {
        spin_unlock(&g_huge_lock);
        return false;
    }
    struct huge_entry entry = *found;
    if (entry.guarded && !guarded_canary_intact(&entry)) {
        spin_unlock(&g_huge_lock);
        fatal_error(g_free_heap_overflow);
    }
    freed_recent[freed_recent_next++ % FREED_RECENT] = entry.user;
    found->user = 1; /* deleted */
    spin_unlock(&g_huge_lock);
    note_live(entry.map_size, false);
    os_unmap((void *)entry.base, entry.map_size);
    if (!entry.retain) options_note_huge_free(entry.map_size + 1); /* glibc counts a header */
    return true;
}

RARE bool huge_recently_freed(const void *p) {
    bool found = arena_recently_freed(p);
    spin_lock(&g_huge_lock);
    for (unsigned i = 0; i < FREED_RECENT; i++)
        found |= freed_recent[i] == (uintptr_t)p;
    spin_unlock(&g_huge_lock);
    return found;
}

/* clean_from (NULL: not wanted): where the block, as it was handed out,
 * starts to hold pages that read as zeros and are not resident (UINTPTR_MAX:
 * none known), for realloc's copy (populate_for_copy): a mapping of its own
 * is fresh but on huge pages or guarded, an arena block keeps its own. */
WARM bool huge_usable_size(const void *p, size_t *usable, uintptr_t *clean_from) {
    if (clean_from) *clean_from = UINTPTR_MAX;
    int in_arena = arena_usable_size(p, usable, clean_from);
    if (in_arena != ARENA_NONE) return in_arena == ARENA_DONE;
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    if (found) {
        *usable = found->guarded ? found->requested : found->base + found->map_size - found->user;
        if (clean_from && !found->hugetlb && !found->guarded) *clean_from = found->user;
    }
    spin_unlock(&g_huge_lock);
    return found != NULL;
}

/* Grows the mapping with mremap (in place when the kernel can, else it moves
 * the pages), or shrinks it in place, giving the pages past the new size back
 * as glibc does for its mapped chunks. NULL: the caller copies instead (p
 * untouched). */
WARM void *huge_realloc(void *p, size_t size) {
    if (size > PTRDIFF_MAX - OS_PAGE_SIZE) return NULL;
    size_t map_size = (size + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1);
    /* An arena block gives its tail back or grows into the free extent
     * after it; else the caller copies (into resident memory, most often). */
    int in_arena = arena_resize(p, map_size);
    if (in_arena != ARENA_NONE) return in_arena == ARENA_DONE ? p : NULL;
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    if (found == NULL || found->user != found->base || found->guarded) {
        spin_unlock(&g_huge_lock);
        return NULL;
    }
    struct huge_entry entry = *found;
    /* small enough for a segment's slices, or to be copied */
    if (size <= LARGE_MAX / 2) {
        spin_unlock(&g_huge_lock);
        return NULL;
    }
    bool keep = map_size == entry.map_size;
    /* huge pages: a block that still fits stays, as glibc leaves a mapped
     * chunk whose mremap failed; a bigger one is copied */
    if (entry.hugetlb && !keep) {
        spin_unlock(&g_huge_lock);
        return map_size < entry.map_size ? p : NULL;
    }
    if (keep) {
        spin_unlock(&g_huge_lock);
        return p;
    }
    /* It keeps its slot while it moves, so that coming back cannot fail
     * for want of one (other threads could fill the table meanwhile). */
    found->moving = true;
    spin_unlock(&g_huge_lock);
    void *moved = os_remap((void *)entry.base, entry.map_size, map_size);
    spin_lock(&g_huge_lock);
    found = table_find_in(entry.user, true); /* the table may have grown meanwhile */
    found->moving = false;
    if (moved) {
        /* a new address, a new slot: the tombstone left is room for it */
        struct huge_entry updated = entry;
        updated.user = updated.base = (uintptr_t)moved;
        updated.map_size = map_size;
        found->user = 1;
        if (!table_insert(updated)) fatal_error("realloc(): huge block table corrupted");
    }
    spin_unlock(&g_huge_lock);
    if (moved) {
        note_live(entry.map_size, false);
        note_live(map_size, true);
    }
    return moved;
}

/* Secure mode's blocks too big for a class: a mapping of their own that a
 * guard page ends. The block ends as near the guard as its alignment lets
 * it (flush with it at 16 bytes, so that an overflow faults at once); the
 * bytes from its requested end to the guard, fewer than a page and 16, are
 * a canary that free checks, so that a 1-byte overflow is caught there too
 * (it went unnoticed within the 15 bytes of rounding before 2026-12-03,
 * and within up to an alignment's room with memalign). An alignment past a
 * page puts the block at its mapping's start, the room before it and past
 * the guard given back. */
RARE void *huge_alloc_guarded(size_t size, size_t alignment) {
    if (alignment < ALIGNMENT) alignment = ALIGNMENT;
    if (size > PTRDIFF_MAX - alignment - 2 * OS_PAGE_SIZE) return NULL;
    /* A block of 0 bytes still gets 16: else an aligned start could land on
     * the guard page itself, which malloc_usable_size took for no block. */
    size_t body = size == 0 ? ALIGNMENT : (size + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
    size_t map_size =
        ((body + alignment + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1)) + OS_PAGE_SIZE;
    uintptr_t base = (uintptr_t)os_map_block(map_size);
    if (base == 0) return NULL;
    uintptr_t user, guard;
    if (alignment <= OS_PAGE_SIZE) {
        guard = base + map_size - OS_PAGE_SIZE;
        user = (guard - body) & ~(uintptr_t)(alignment - 1);
    } else {
        size_t kept = ((body + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1)) + OS_PAGE_SIZE;
        base = user = (uintptr_t)os_cut_aligned((void *)base, map_size, kept, alignment);
        map_size = kept;
        guard = base + map_size - OS_PAGE_SIZE;
    }
    os_protect_none((void *)guard, OS_PAGE_SIZE);
    memset((void *)(user + size), CANARY_BYTE, guard - (user + size));
    if (!huge_register((struct huge_entry){
            .user = user, .base = base, .map_size = map_size, .guarded = true, .requested = size}))
        return NULL;
    return (void *)user;
}
