/* Huge blocks: mapped on their own, tracked out of band in an open-addressing
 * table keyed by the address we returned (so free() of a pointer we never
 * returned is recognised). Blocks allocated below the mmap threshold (too big
 * for a segment) are kept in a small cache when freed, and released by the
 * purge policy like any other retained memory; one that can hold a segment
 * becomes the next new segment (segment_create). */
#define _GNU_SOURCE
#include <string.h>

#include "internal.h"

struct huge_entry {
    uintptr_t user;  /* address returned to the caller; 0 = empty, 1 = deleted */
    uintptr_t base;  /* start of the mapping */
    size_t map_size; /* bytes mapped */
    bool retain;     /* allocated below the mmap threshold: cache it on free */
    bool hugetlb;    /* on explicit huge pages (os_map_huge_pages): never cached,
                        and mremap, which wants whole huge pages, is not tried */
};

struct cached_mapping {
    uintptr_t base; /* 0 = empty slot */
    size_t map_size;
    uint32_t freed_at_ms; /* for the purge delay */
};

struct spin_lock g_huge_lock = SPIN_LOCK_INIT;
static struct huge_entry *table; /* huge lock */
static size_t table_capacity;    /* huge lock; power of two */
static size_t table_used;        /* huge lock; live + deleted entries */
/* Freed mappings kept for reuse: at most this many, and this many bytes;
 * beyond that they go back to the kernel at once. */
#define CACHE_SLOTS          32
#define HUGE_CACHE_MAX_BYTES ((uint64_t)64 << 20)
static struct cached_mapping cache[CACHE_SLOTS]; /* huge lock */

_Atomic uint64_t g_huge_count, g_huge_bytes, g_huge_max_bytes, g_huge_max_count;
_Atomic uint64_t g_huge_cached_bytes;

static size_t hash_address(uintptr_t a) {
    return (size_t)((a >> 12) * 0x9E3779B97F4A7C15ull);
}

static struct huge_entry *table_find(uintptr_t user) {
    if (table_capacity == 0) return NULL;
    size_t mask = table_capacity - 1;
    for (size_t i = hash_address(user) & mask;; i = (i + 1) & mask) {
        if (table[i].user == user) return &table[i];
        if (table[i].user == 0) return NULL;
    }
}

static bool table_grow(void) {
    size_t capacity = table_capacity ? table_capacity * 2 : 1024;
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
    if (table) os_unmap(table, table_capacity * sizeof *table);
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

static bool table_insert(struct huge_entry entry) {
    /* Growing keeps probes short; without memory for it, a free slot or a
     * tombstone still takes the entry (realloc must not fail for metadata). */
    if ((table_used + 1) * 4 > table_capacity * 3 && !table_grow() &&
        (table_capacity == 0 || (table_used >= table_capacity && !table_has_tombstone())))
        return false;
    size_t mask = table_capacity - 1;
    size_t i = hash_address(entry.user) & mask;
    while (table[i].user > 1)
        i = (i + 1) & mask;
    if (table[i].user == 0) table_used++;
    table[i] = entry;
    return true;
}

static void note_live(size_t map_size, bool add) {
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

/* Takes slot i's mapping out of the cache (huge lock held). */
static struct cached_mapping cache_remove(int i) {
    struct cached_mapping c = cache[i];
    cache[i].base = 0;
    /* relaxed: a statistic and a purge trigger; the lock guards the cache */
    atomic_fetch_sub_explicit(&g_huge_cached_bytes, c.map_size, memory_order_relaxed);
    return c;
}

/* Takes the smallest cached mapping that fits, else the biggest one. Its resident pages save
 * faults, so only one more than eight times too big is cut down in place with mremap (the tail goes
 * back to the kernel): `large` 1.10 s -> 0.58 s, faults 308k -> 166k. */
static struct cached_mapping cache_take(size_t map_size) {
    struct cached_mapping best = {0, 0, 0};
    int best_slot = -1;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        size_t s = cache[i].map_size;
        if (cache[i].base && s >= map_size && (best_slot < 0 || s < cache[best_slot].map_size))
            best_slot = i;
    }
    /* None fits: the biggest, which the caller grows with mremap, so that its
     * resident pages serve the block instead of idling beside a new mapping
     * (`large`: peak RSS 115.2 -> 113.1 MiB at the same time). */
    for (int i = 0; best_slot < 0 && i < CACHE_SLOTS; i++) {
        if (cache[i].base && (best_slot < 0 || cache[i].map_size > cache[best_slot].map_size))
            best_slot = i;
    }
    if (best_slot >= 0) best = cache_remove(best_slot);
    return best;
}

/* Records a new mapping as a live block; on failure the mapping goes back. */
static bool huge_register(struct huge_entry entry) {
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

void *huge_alloc(size_t size, size_t alignment, bool zero_needed, bool retain_on_free) {
    if (alignment < OS_PAGE_SIZE) alignment = OS_PAGE_SIZE;
    if (size > PTRDIFF_MAX - alignment - OS_PAGE_SIZE) return NULL;
    if (size == 0) size = 1; /* an aligned start must leave a usable byte */
    size_t map_size =
        (size + (alignment - OS_PAGE_SIZE) + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1);
    if (map_size == 0) map_size = OS_PAGE_SIZE; /* malloc(0) with an mmap threshold of 0 */
    uintptr_t base = 0;
    size_t mapped = map_size;
    bool reused = false;
    uint64_t generation = os_unmapping_generation();
    if (retain_on_free) {
        spin_lock(&g_huge_lock);
        struct cached_mapping c = cache_take(map_size);
        spin_unlock(&g_huge_lock);
        if (c.base && c.map_size / 8 > map_size) {
            /* shrink in place: MREMAP_MAYMOVE never moves a shrinking mapping */
            if (os_remap((void *)c.base, c.map_size, map_size) == (void *)c.base)
                c.map_size = map_size;
        } else if (c.base && c.map_size < map_size) {
            void *grown = os_remap((void *)c.base, c.map_size, map_size);
            if (grown == NULL) os_unmap((void *)c.base, c.map_size);
            c.base = (uintptr_t)grown;
            c.map_size = map_size;
        }
        if (c.base) {
            base = c.base;
            mapped = c.map_size;
            reused = true;
        }
    }
    bool hugetlb = false;
    if (base == 0) {
        /* huge-page aligned, so any alignment up to a huge page holds */
        base = (uintptr_t)os_map_huge_pages(map_size, &mapped);
        hugetlb = base != 0;
    }
    if (base == 0) {
        base =
            (uintptr_t)(retain_on_free && map_size >= SEGMENT_SIZE ? os_map_block_aligned(map_size)
                                                                   : os_map_block(map_size));
        if (base == 0) {
            /* Memory is short (RLIMIT_AS, overcommit): give cached mappings
             * (up to 64 MiB) and cached empty segments (up to 1040, 4 MiB of
             * address space each) back and try once more, and again while
             * other threads' trims give address space back. */
            bool freed = huge_cache_trim(true, 0);
            freed |= segment_cache_trim(true, 0);
            if (freed) base = (uintptr_t)os_map_block(map_size);
            if (base == 0) base = (uintptr_t)os_map_after_trims(os_map_block, map_size, generation);
            if (base == 0) return NULL;
        }
        os_advise_huge_pages((void *)base, map_size);
    }
    uintptr_t user = (base + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (!huge_register((struct huge_entry){user, base, mapped, retain_on_free, hugetlb}))
        return NULL;
    if (reused && zero_needed) memset((void *)user, 0, size);
    return (void *)user;
}

bool huge_free(void *p) {
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    if (found == NULL) {
        spin_unlock(&g_huge_lock);
        return false;
    }
    struct huge_entry entry = *found;
    found->user = 1; /* deleted */
    bool cached = false;
    /* relaxed: a soft cap; a race lets the cache overshoot by one mapping */
    bool room = atomic_load_explicit(&g_huge_cached_bytes, memory_order_relaxed) + entry.map_size <=
                HUGE_CACHE_MAX_BYTES;
    if (entry.retain && !entry.hugetlb && room && !OPTION(aggressive_madvise) &&
        entry.map_size < OPTION(mmap_threshold)) {
        for (int i = 0; i < CACHE_SLOTS && !cached; i++) {
            if (cache[i].base == 0) {
                cache[i] = (struct cached_mapping){entry.base, entry.map_size, clock_ms()};
                cached = true;
            }
        }
    }
    spin_unlock(&g_huge_lock);
    note_live(entry.map_size, false);
    if (cached) {
        atomic_fetch_add_explicit(&g_huge_cached_bytes, entry.map_size, memory_order_relaxed);
        purge_after_free();
        return true;
    }
    os_unmap((void *)entry.base, entry.map_size);
    if (!entry.retain) options_note_huge_free(entry.map_size + 1); /* glibc counts a header */
    return true;
}

size_t huge_usable_size(const void *p) {
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    size_t usable = found ? found->base + found->map_size - found->user : 0;
    if (found && g_options.secure) usable -= OS_PAGE_SIZE; /* the guard page */
    spin_unlock(&g_huge_lock);
    return usable;
}

/* Grows the mapping with mremap (in place when the kernel can, else it moves
 * the pages), or shrinks it in place, giving the pages past the new size back
 * as glibc does for its mapped chunks. NULL: the caller copies instead (p
 * untouched). */
void *huge_realloc(void *p, size_t size) {
    if (size <= LARGE_MAX / 2 || size > PTRDIFF_MAX - OS_PAGE_SIZE) return NULL;
    size_t map_size = (size + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1);
    spin_lock(&g_huge_lock);
    struct huge_entry *found = table_find((uintptr_t)p);
    if (found == NULL || found->user != found->base) {
        spin_unlock(&g_huge_lock);
        return NULL;
    }
    struct huge_entry entry = *found;
    /* A block from the cache may have a mapping up to 8 times its request:
     * growing within it, or shrinking while half of it is still needed,
     * keeps it whole. Other mappings fit their request: they shrink to it. */
    bool keep = map_size == entry.map_size ||
                (entry.retain && map_size < entry.map_size && map_size >= entry.map_size / 2);
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
    found->user = 1; /* out of the table while it moves */
    spin_unlock(&g_huge_lock);
    void *moved = os_remap((void *)entry.base, entry.map_size, map_size);
    struct huge_entry updated = entry;
    if (moved) {
        updated.user = updated.base = (uintptr_t)moved;
        updated.map_size = map_size;
    }
    spin_lock(&g_huge_lock);
    bool ok = table_insert(updated);
    spin_unlock(&g_huge_lock);
    if (!ok) fatal_error("realloc(): out of memory for metadata");
    if (moved) {
        note_live(entry.map_size, false);
        note_live(map_size, true);
    }
    return moved;
}

/* Unmaps cached mappings: all, or those unused for the purge delay. */
bool huge_cache_trim(bool everything, uint32_t now) {
    bool released = false;
    os_unmapping_begin();
    for (int i = 0; i < CACHE_SLOTS; i++) {
        spin_lock(&g_huge_lock);
        bool take = cache[i].base && (everything || (uint32_t)(now - cache[i].freed_at_ms) >=
                                                        OPTION(purge_delay_ms));
        struct cached_mapping c = take ? cache_remove(i) : cache[i];
        spin_unlock(&g_huge_lock);
        if (!take) continue;
        os_unmap((void *)c.base, c.map_size);
        released = true;
    }
    os_unmapping_end();
    return released;
}

/* A cached mapping that starts on a segment boundary and holds a whole
 * segment, for a new segment: its pages are resident already. */
void *huge_cache_take_segment(void) {
    /* relaxed: a hint that spares the lock; the scan under it decides */
    if (atomic_load_explicit(&g_huge_cached_bytes, memory_order_relaxed) < SEGMENT_SIZE)
        return NULL;
    spin_lock(&g_huge_lock);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].base && (cache[i].base & SEGMENT_MASK) == 0 &&
            cache[i].map_size >= SEGMENT_SIZE &&
            (best < 0 || cache[i].map_size < cache[best].map_size))
            best = i;
    struct cached_mapping c = {0, 0, 0};
    if (best >= 0) c = cache_remove(best);
    spin_unlock(&g_huge_lock);
    if (c.base == 0) return NULL;
    if (c.map_size > SEGMENT_SIZE)
        os_unmap((void *)(c.base + SEGMENT_SIZE), c.map_size - SEGMENT_SIZE);
    return (void *)c.base;
}

/* Secure mode: the block ends right before a PROT_NONE page. */
void *huge_alloc_guarded(size_t size, size_t alignment) {
    if (alignment < ALIGNMENT) alignment = ALIGNMENT;
    if (size > PTRDIFF_MAX - alignment - 2 * OS_PAGE_SIZE) return NULL;
    /* A block of 0 bytes still gets 16: else an aligned start could land on
     * the guard page itself, which malloc_usable_size took for no block. */
    size_t body = size == 0 ? ALIGNMENT : (size + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
    size_t map_size =
        ((body + alignment + OS_PAGE_SIZE - 1) & ~(size_t)(OS_PAGE_SIZE - 1)) + OS_PAGE_SIZE;
    uintptr_t base = (uintptr_t)os_map_block(map_size);
    if (base == 0) return NULL;
    uintptr_t guard = base + map_size - OS_PAGE_SIZE;
    os_protect_none((void *)guard, OS_PAGE_SIZE);
    uintptr_t user = (guard - body) & ~(uintptr_t)(alignment - 1);
    if (!huge_register((struct huge_entry){user, base, map_size, false, false})) return NULL;
    return (void *)user;
}
