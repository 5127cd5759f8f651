/* tidemalloc(1): run a program with libtidemalloc preloaded.
 *
 *   tidemalloc [OPTIONS] [--] PROGRAM [ARGS...]
 *
 * The options become environment variables that the library reads at start-up;
 * the library path is prepended to LD_PRELOAD and PROGRAM is exec'd in place of
 * this process, so its exit status and signals are the program's own.
 *
 * The library is found relative to this executable (after resolving symlinks):
 *   DIR/../lib/libtidemalloc.so.0   installed layout (PREFIX/bin, PREFIX/lib)
 *   DIR/libtidemalloc.so.0          build tree (build/tidemalloc)
 */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tidemalloc.h"

#define LIB_NAME "libtidemalloc.so.0"

/* Exit statuses of the command itself, as env(1) and the shells use them. */
enum { EXIT_USAGE = 2, EXIT_CANNOT_EXEC = 126, EXIT_NOT_FOUND = 127 };

static const char *prog_name = "tidemalloc";

static void usage(FILE *to) {
    fprintf(to,
            "Usage: %s [OPTIONS] [--] PROGRAM [ARGS...]\n"
            "Run PROGRAM with the tidemalloc allocator preloaded.\n"
            "\n"
            "Options:\n"
            "  --stats               print allocator statistics when PROGRAM exits\n"
            "                        (TIDEMALLOC_STATS=1)\n"
            "  --aggressive          give free pages back to the OS at once\n"
            "                        (MALLOC_AGGRESSIVE_MADVISE_=1)\n"
            "  --trim-threshold=N    bytes of free memory kept before any is released\n"
            "                        (MALLOC_TRIM_THRESHOLD_=N)\n"
            "  --mmap-threshold=N    smallest request served by its own mapping\n"
            "                        (MALLOC_MMAP_THRESHOLD_=N)\n"
            "  --purge-delay=MS      milliseconds free memory stays unused before release\n"
            "                        (TIDEMALLOC_PURGE_DELAY_MS=MS)\n"
            "  -h, --help            show this help and exit\n"
            "  -V, --version         show the version and exit\n"
            "\n"
            "N is a number of bytes, optionally followed by K, M or G (powers of 1024);\n"
            "either threshold may be any size that fits in 64 bits; the purge delay is\n"
            "at most 3600000 ms.\n"
            "The exit status is PROGRAM's; 2 for a bad option, 126 if PROGRAM cannot be\n"
            "run, 127 if it (or the library) is not found. See tidemalloc(1).\n",
            prog_name);
}

static _Noreturn void usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", prog_name);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", prog_name);
    exit(EXIT_USAGE);
}

/* Largest values the library accepts from the environment (src/options.c):
 * glibc 2.36's tunables take any size for both thresholds (a threshold
 * past every request keeps memory, or never maps a block on its own); the
 * purge delay is ours, and the library ignores a longer one, so the command
 * refuses it instead. */
#define MAX_THRESHOLD      ((unsigned long long)SIZE_MAX)
#define MAX_PURGE_DELAY_MS 3600000ULL

/* Parses a decimal number with an optional K/M/G suffix (binary multiples)
 * into *out. Returns 0 on success, -1 if malformed or above max. */
static int parse_size(const char *s, int allow_suffix, unsigned long long max,
                      unsigned long long *out) {
    unsigned long long v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (ULLONG_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (*p != '\0') {
        unsigned shift;
        if (!allow_suffix) return -1;
        switch (*p) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        default:
            return -1;
        }
        p++;
        if (*p == 'i' && p[1] == 'B')
            p += 2; /* KiB, MiB, GiB */
        else if (*p == 'B')
            p++;
        if (*p != '\0') return -1;
        if (v > (ULLONG_MAX >> shift)) return -1;
        v <<= shift;
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

static void set_env(const char *name, const char *value) {
    if (setenv(name, value, 1) != 0) {
        fprintf(stderr, "%s: cannot set %s: %s\n", prog_name, name, strerror(errno));
        exit(EXIT_CANNOT_EXEC);
    }
}

static void set_env_number(const char *name, unsigned long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", v);
    set_env(name, buf);
}

/* If arg is "--NAME=VALUE" or "--NAME" followed by VALUE in the next argument,
 * returns VALUE (advancing *i in the second case); returns NULL if arg is not
 * this option. */
static const char *option_value(const char *arg, const char *name, int argc, char **argv, int *i) {
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return NULL;
    if (arg[n] == '=') return arg + n + 1;
    if (arg[n] != '\0') return NULL;
    if (*i + 1 >= argc) usage_error("option '%s' needs a value", name);
    *i += 1;
    return argv[*i];
}

/* Finds the library next to this executable and writes its canonical path
 * (directory resolved, file name kept as the soname link) to out. On failure
 * writes the places looked at to tried. */
static int find_library(char *out, size_t outlen, char *tried, size_t triedlen) {
    static const char *const candidates[] = {"/../lib", ""};
    char *exe = realpath("/proc/self/exe", NULL);
    tried[0] = '\0';
    if (exe == NULL) {
        snprintf(tried, triedlen, "(cannot resolve /proc/self/exe: %s)", strerror(errno));
        return -1;
    }
    *strrchr(exe, '/') = '\0'; /* directory of the executable; "" for "/" */

    for (size_t k = 0; k < sizeof candidates / sizeof candidates[0]; k++) {
        char dir[PATH_MAX + 16], path[PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s%s", exe, candidates[k]);
        snprintf(path, sizeof path, "%s/%s", dir, LIB_NAME);
        size_t used = strlen(tried);
        snprintf(tried + used, triedlen - used, "%s%s", used ? ", " : "", path);
        if (access(path, R_OK) != 0) continue;
        char *rdir = realpath(dir[0] ? dir : "/", NULL);
        if (rdir == NULL) continue;
        int w = snprintf(out, outlen, "%s/%s", strcmp(rdir, "/") == 0 ? "" : rdir, LIB_NAME);
        free(rdir);
        if (w > 0 && (size_t)w < outlen) {
            free(exe);
            return 0;
        }
    }
    free(exe);
    return -1;
}

int main(int argc, char **argv) {
    int stats = 0, aggressive = 0;
    int have_trim = 0, have_mmap = 0, have_delay = 0;
    unsigned long long trim = 0, mmap_thr = 0, delay = 0;
    int i;

    if (argc > 0 && argv[0] != NULL && argv[0][0] != '\0') {
        const char *base = strrchr(argv[0], '/');
        prog_name = base ? base + 1 : argv[0];
    }

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val;
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0') break; /* first operand: the program */
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return fflush(stdout) == 0 ? 0 : 1;
        }
        if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
            printf("tidemalloc %s\n", TIDEMALLOC_VERSION);
            return fflush(stdout) == 0 ? 0 : 1;
        }
        if (strcmp(arg, "--stats") == 0) {
            stats = 1;
        } else if (strcmp(arg, "--aggressive") == 0) {
            aggressive = 1;
        } else if ((val = option_value(arg, "--trim-threshold", argc, argv, &i))) {
            if (parse_size(val, 1, MAX_THRESHOLD, &trim) != 0)
                usage_error("invalid --trim-threshold value '%s' (expected bytes, e.g. 131072 or "
                            "128K)",
                            val);
            have_trim = 1;
        } else if ((val = option_value(arg, "--mmap-threshold", argc, argv, &i))) {
            if (parse_size(val, 1, MAX_THRESHOLD, &mmap_thr) != 0)
                usage_error("invalid --mmap-threshold value '%s' (expected bytes, e.g. 131072 or "
                            "128K)",
                            val);
            have_mmap = 1;
        } else if ((val = option_value(arg, "--purge-delay", argc, argv, &i))) {
            if (parse_size(val, 0, MAX_PURGE_DELAY_MS, &delay) != 0)
                usage_error("invalid --purge-delay value '%s' (expected milliseconds up to "
                            "3600000, e.g. 1000)",
                            val);
            have_delay = 1;
        } else {
            usage_error("unknown option '%s'", arg);
        }
    }
    if (i >= argc) usage_error("%s", "no program given");

    char lib[PATH_MAX + 64], tried[3 * PATH_MAX + 256];
    if (find_library(lib, sizeof lib, tried, sizeof tried) != 0) {
        fprintf(stderr, "%s: cannot find %s (looked for %s)\n", prog_name, LIB_NAME, tried);
        return EXIT_NOT_FOUND;
    }
    /* ld.so splits LD_PRELOAD at spaces and colons: such a path cannot be
     * preloaded, so say so instead of preloading the wrong thing. */
    if (strpbrk(lib, " :\t\n") != NULL) {
        fprintf(stderr,
                "%s: library path '%s' contains a space or colon; LD_PRELOAD cannot name it\n",
                prog_name, lib);
        return EXIT_NOT_FOUND;
    }

    const char *old = getenv("LD_PRELOAD");
    if (old != NULL && old[0] != '\0') {
        size_t n = strlen(lib) + 1 + strlen(old) + 1;
        char *pre = malloc(n);
        if (pre == NULL) {
            fprintf(stderr, "%s: out of memory\n", prog_name);
            return EXIT_CANNOT_EXEC;
        }
        snprintf(pre, n, "%s:%s", lib, old);
        set_env("LD_PRELOAD", pre);
        free(pre);
    } else {
        set_env("LD_PRELOAD", lib);
    }
    if (stats) set_env("TIDEMALLOC_STATS", "1");
    if (aggressive) set_env("MALLOC_AGGRESSIVE_MADVISE_", "1");
    if (have_trim) set_env_number("MALLOC_TRIM_THRESHOLD_", trim);
    if (have_mmap) set_env_number("MALLOC_MMAP_THRESHOLD_", mmap_thr);
    if (have_delay) set_env_number("TIDEMALLOC_PURGE_DELAY_MS", delay);

    execvp(argv[i], argv + i);
    int err = errno;
    fprintf(stderr, "%s: cannot run '%s': %s\n", prog_name, argv[i], strerror(err));
    return err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
}
