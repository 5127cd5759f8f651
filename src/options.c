/* Every tunable in one place: glibc's mallopt parameters, its MALLOC_*_
 * environment variables and GLIBC_TUNABLES=glibc.malloc.*, and our own.
 * The environment is read without allocating, and not at all in set-uid
 * programs (AT_SECURE), as glibc does. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "../include/tidemalloc.h"
#include "internal.h"

#define DEFAULT_MMAP_THRESHOLD  ((size_t)128 << 10)
#define DEFAULT_TRIM_THRESHOLD  ((size_t)128 << 10)
#define DEFAULT_MMAP_MAX        65536
#define DEFAULT_PURGE_DELAY_MS  1000
#define DEFAULT_RETAIN_PERCENT  33
#define DEFAULT_REFAULT_PERCENT 12

struct options g_options = {
    .trim_threshold = DEFAULT_TRIM_THRESHOLD,
    .top_pad = 0,
    .mmap_threshold = DEFAULT_MMAP_THRESHOLD,
    .mmap_max = DEFAULT_MMAP_MAX,
    .dynamic_threshold = true,
    .aggressive_madvise = false,
    .background_purge = 1,
    .batched_release = true,
    .populate = true,
    .print_stats = false,
    .fitted_classes = true,
    .purge_delay_ms = DEFAULT_PURGE_DELAY_MS,
    .retain_percent = DEFAULT_RETAIN_PERCENT,
    .refault_percent = DEFAULT_REFAULT_PERCENT,
    .perturb = 0,
    .check_action = 0,
};

extern _Atomic size_t g_small_limit INTERNAL;
static struct spin_lock options_lock = SPIN_LOCK_INIT;

/* Every free takes the slow path in checked mode and while aggressive mode is
 * on (its per-block release lives there); segments already owned learn it
 * through their owner ids, which the owners' fast path compares. */
static void free_slow_update(void) {
    bool slow = OPTION(checked) || OPTION(aggressive_madvise);
    OPTION_SET(free_slow, slow);
    segments_mark_slow_frees(slow);
}

static void small_limit_update(void);

/* Checked mode: secure mode (chosen at start-up: its blocks carry trailers)
 * or MALLOC_PERTURB_, which mallopt may set or clear at any time, as in
 * glibc: perturbed blocks have the default layout, so the paths can switch
 * under blocks already handed out. */
static void checked_update(void) {
    OPTION_SET(checked, g_options.secure || OPTION(perturb) != 0);
    free_slow_update();
    small_limit_update();
}

static void small_limit_update(void) {
    size_t limit = OPTION(checked) ? 0 /* every malloc takes the checked slow path */
                   : OPTION(mmap_max) <= 0 || OPTION(mmap_threshold) > SMALL_MAX ? SMALL_MAX
                   : OPTION(mmap_threshold) == 0                                 ? 0
                                                 : OPTION(mmap_threshold) - 1;
    atomic_store_explicit(&g_small_limit, limit, memory_order_relaxed);
    /* Only a change walks the heaps (under the heaps lock, taken inside the
     * options lock): the dynamic mmap threshold, which huge frees move,
     * stays above 1 KiB and never changes an entry. */
    if (size_class_table_limit(limit)) heap_class_tables_refresh();
}

/* glibc: freeing a mapped block raises the mmap threshold to its size (up to
 * 32 MiB) and the trim threshold to twice that, until the user sets one. */
WARM void options_note_huge_free(size_t size) {
    if (!OPTION(dynamic_threshold)) return;
    spin_lock(&options_lock);
    if (OPTION(dynamic_threshold) && size > OPTION(mmap_threshold) &&
        size <= DEFAULT_MMAP_THRESHOLD_MAX) {
        OPTION_SET(mmap_threshold, size);
        OPTION_SET(trim_threshold, 2 * size);
        small_limit_update();
    }
    spin_unlock(&options_lock);
}

RARE static int set_option(int param, long value) {
    switch (param) {
    case M_TRIM_THRESHOLD:
        OPTION_SET(trim_threshold, (size_t)value);
        OPTION_SET(dynamic_threshold, false);
        return 1;
    case M_TOP_PAD:
        OPTION_SET(top_pad, (size_t)value);
        OPTION_SET(dynamic_threshold, false);
        return 1;
    case M_MMAP_THRESHOLD:
        /* glibc 2.36 takes any value: a negative int becomes a size_t too
         * big for any request, so that nothing is mapped on its own */
        OPTION_SET(mmap_threshold, (size_t)value);
        OPTION_SET(dynamic_threshold, false);
        small_limit_update();
        return 1;
    case M_MMAP_MAX: /* 0 or less: nothing is mapped on its own, as in glibc */
        OPTION_SET(mmap_max, (int)value);
        OPTION_SET(dynamic_threshold, false);
        small_limit_update();
        return 1;
    case M_MXFAST: /* no fastbins here; glibc's range check is kept */
        return value >= 0 && value <= 160;
    case M_PERTURB:
        /* the whole int, as glibc: 256 perturbs (fills 0xff, then 0), only the
         * bytes written are its low eight bits */
        OPTION_SET(perturb, (int)value);
        checked_update();
        return 1;
    case M_CHECK_ACTION:
        OPTION_SET(check_action, (int)value);
        return 1;
    case M_ARENA_TEST:
    case M_ARENA_MAX: /* one heap per thread, no arenas; glibc returns 1 for any value */
        return 1;
    case M_AGGRESSIVE_MADVISE:
        if (value != 0 && value != 1) return 0;
        OPTION_SET(aggressive_madvise, value == 1);
        free_slow_update();
        return 1;
    case M_PURGE_DELAY_MS:
        if (value < 0 || value > 3600000) return 0;
        OPTION_SET(purge_delay_ms, (uint32_t)value);
        return 1;
    case M_BACKGROUND_PURGE:
        if (value < 0 || value > 2) return 0;
        OPTION_SET(background_purge, (uint8_t)value);
        return 1;
    case M_BATCHED_RELEASE:
        if (value != 0 && value != 1) return 0;
        OPTION_SET(batched_release, value == 1);
        return 1;
    case M_POPULATE:
        if (value != 0 && value != 1) return 0;
        OPTION_SET(populate, value == 1);
        return 1;
    case M_RETAIN_PERCENT:
        if (value < 0 || value > 10000) return 0;
        OPTION_SET(retain_percent, (uint32_t)value);
        return 1;
    case M_REFAULT_PERCENT:
        if (value < 0 || value > 100) return 0;
        OPTION_SET(refault_percent, (uint32_t)value);
        return 1;
    case M_FITTED_CLASSES:
        if (value != 0 && value != 1) return 0;
        OPTION_SET(fitted_classes, value == 1);
        return 1;
    default:
        return 1; /* glibc accepts unknown parameters */
    }
}

RARE API int TM_NAME(mallopt)(int param, int value) {
    allocator_init();
    spin_lock(&options_lock);
    int result = set_option(param, value);
    spin_unlock(&options_lock);
    return result;
}
/* glibc exports it too, for programs that call it directly. */
#ifndef TIDEMALLOC_PREFIX
API int __libc_mallopt(int param, int value) __attribute__((alias("mallopt"), copy(mallopt)));
#endif

/* Decimal, 0x hex or 0 octal, like strtoul, up to 2^64 - 1; false on
 * anything else. */
RARE static bool parse_number(const char *s, size_t length, uint64_t *out) {
    uint64_t value = 0, base = 10;
    size_t i = 0;
    if (length == 0) return false;
    if (length > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        base = 16, i = 2;
    else if (length > 1 && s[0] == '0')
        base = 8, i = 1;
    for (; i < length; i++) {
        unsigned digit;
        char c = s[i];
        if (c >= '0' && c <= '9')
            digit = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            digit = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            digit = (unsigned)(c - 'A' + 10);
        else
            return false;
        if (digit >= base || value > (UINT64_MAX - digit) / base) return false;
        value = value * base + digit;
    }
    *out = value;
    return true;
}

/* name=value pairs from the environment and from GLIBC_TUNABLES. */
struct tunable {
    const char *env_name;     /* MALLOC_*_ style variable, or NULL */
    const char *tunable_name; /* glibc.malloc.<name>, or NULL */
    int param;                /* mallopt parameter it maps to, TUNABLE_HUGETLB, or 0:
                                 accepted, no effect */
    uint64_t min, max;        /* glibc's bounds (elf/dl-tunables.list): a value
                                 outside them is ignored, as there */
};
/* glibc.malloc.hugetlb has no mallopt parameter: it is read at start-up only. */
#define TUNABLE_HUGETLB (-1000)

#define ANY_SIZE 0, UINT64_MAX
static const struct tunable tunables[] = {
    {"MALLOC_TRIM_THRESHOLD_", "trim_threshold", M_TRIM_THRESHOLD, ANY_SIZE},
    {"MALLOC_TOP_PAD_", "top_pad", M_TOP_PAD, ANY_SIZE},
    {"MALLOC_MMAP_THRESHOLD_", "mmap_threshold", M_MMAP_THRESHOLD, ANY_SIZE},
    {"MALLOC_MMAP_MAX_", "mmap_max", M_MMAP_MAX, 0, INT32_MAX},
    {"MALLOC_PERTURB_", "perturb", M_PERTURB, 0, 0xff},
    {"MALLOC_CHECK_", "check", M_CHECK_ACTION, 0, 3},
    {"MALLOC_ARENA_MAX", "arena_max", M_ARENA_MAX, 1, UINT64_MAX},
    {"MALLOC_ARENA_TEST", "arena_test", M_ARENA_TEST, 1, UINT64_MAX},
    {NULL, "mxfast", M_MXFAST, ANY_SIZE},
    {NULL, "tcache_max", 0, ANY_SIZE},
    {NULL, "tcache_count", 0, ANY_SIZE},
    {NULL, "tcache_unsorted_limit", 0, ANY_SIZE},
    {NULL, "hugetlb", TUNABLE_HUGETLB, ANY_SIZE},
    /* ours: set_option checks their ranges (a value past LONG_MAX reads as
     * negative there and is refused) */
    {"MALLOC_AGGRESSIVE_MADVISE_", "aggressive_madvise", M_AGGRESSIVE_MADVISE, ANY_SIZE},
    {"TIDEMALLOC_PURGE_DELAY_MS", NULL, M_PURGE_DELAY_MS, ANY_SIZE},
    {"TIDEMALLOC_BACKGROUND_PURGE", NULL, M_BACKGROUND_PURGE, ANY_SIZE},
    {"TIDEMALLOC_RETAIN_PERCENT", NULL, M_RETAIN_PERCENT, ANY_SIZE},
    {"TIDEMALLOC_BATCHED_RELEASE", NULL, M_BATCHED_RELEASE, ANY_SIZE},
    {"TIDEMALLOC_POPULATE", NULL, M_POPULATE, ANY_SIZE},
    {"TIDEMALLOC_REFAULT_PERCENT", NULL, M_REFAULT_PERCENT, ANY_SIZE},
    {"TIDEMALLOC_FITTED_CLASSES", NULL, M_FITTED_CLASSES, ANY_SIZE},
};

RARE static void apply(const struct tunable *t, const char *value, size_t length) {
    uint64_t number;
    if (t->param == 0 || !parse_number(value, length, &number)) return;
    if (number < t->min || number > t->max) return;
    if (t->param == TUNABLE_HUGETLB)
        os_huge_pages_configure(number);
    else
        set_option(t->param, (long)number); /* a size_t past LONG_MAX converts back */
}

RARE static NOINLINE void parse_glibc_tunables(const char *s) {
    static const char prefix[] = "glibc.malloc.";
    while (*s) {
        const char *end = s;
        while (*end && *end != ':')
            end++;
        const char *eq = s;
        while (eq < end && *eq != '=')
            eq++;
        size_t prefix_length = sizeof prefix - 1;
        if (eq < end && (size_t)(eq - s) > prefix_length && text_same(s, prefix, prefix_length)) {
            const char *name = s + prefix_length;
            size_t name_length = (size_t)(eq - name);
            for (size_t i = 0; i < sizeof tunables / sizeof tunables[0]; i++) {
                const char *t = tunables[i].tunable_name;
                if (t && text_length(t) == name_length && text_same(t, name, name_length))
                    apply(&tunables[i], eq + 1, (size_t)(end - eq - 1));
            }
        }
        s = *end ? end + 1 : end;
    }
}

/* One MALLOC_* or TIDEMALLOC_* entry of the environment: rare code, which
 * a program maps only if its environment sets one. */
RARE static NOINLINE void option_entry_apply(const char *entry) {
    if (text_starts_with(entry, "TIDEMALLOC_SECURE=")) {
        g_options.secure = entry[18] != '\0' && entry[18] != '0';
        return;
    }
    if (text_starts_with(entry, "TIDEMALLOC_STATS=")) {
        g_options.print_stats = entry[17] != '\0' && entry[17] != '0';
        return;
    }
    for (size_t i = 0; i < sizeof tunables / sizeof tunables[0]; i++) {
        const char *name = tunables[i].env_name;
        if (name == NULL) continue;
        size_t n = text_length(name);
        if (text_starts_with(entry, name) && entry[n] == '=')
            apply(&tunables[i], entry + n + 1, text_length(entry + n + 1));
    }
}

void options_init_from_environment(void) {
    extern char **environ;
    if (getauxval(AT_SECURE)) return;
    char **env = environ;
    if (env == NULL) return;
    for (; *env; env++) {
        const char *entry = *env;
        /* every name we read starts so: most entries fail at their first
         * byte (the scan was 40,000 instructions of a 200,000-instruction
         * start-up, with a shell's environment) */
        if (text_starts_with(entry, "MALLOC_") || text_starts_with(entry, "TIDEMALLOC_"))
            option_entry_apply(entry); /* GLIBC_TUNABLES= included: below */
    }
    /* GLIBC_TUNABLES wins over an alias such as MALLOC_MMAP_THRESHOLD_
     * wherever each stands in the environment, as in glibc (which skips an
     * alias whose tunable is set already, and lets GLIBC_TUNABLES override
     * one set before it): so it is read last. */
    for (env = environ; *env; env++)
        if (text_starts_with(*env, "GLIBC_TUNABLES=")) parse_glibc_tunables(*env + 15);
    /* Secure mode is chosen once, before any block has its layout. */
    g_options.secure = g_options.secure || OPTION(check_action) == 3;
    checked_update();
}
