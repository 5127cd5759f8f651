// C++ operator new and delete go through malloc: new'd pointers are known to
// malloc_usable_size, a huge new[] shows up in tidemalloc_stats (when the
// counters are present), aligned new honours the alignment, new of an absurd
// size throws std::bad_alloc and nothrow new returns nullptr.
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <map>
#include <new>
#include <string>
#include <vector>

#include "tidemalloc.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

struct alignas(256) Wide {
    unsigned char bytes[300];
};

static volatile size_t sink;

template <class T> static T *escape(T *p) {
    sink = sink + (size_t)(uintptr_t)p; // keeps the compiler from eliding new/delete
    return p;
}

int main() {
    typedef void (*stats_fn)(struct tidemalloc_stats *);
    stats_fn st = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "tidemalloc_stats"));
    const char *exp = getenv("TEST_EXPECT_TIDEMALLOC");
    if (!st && exp && exp[0] == '1') {
        fprintf(stderr, "tidemalloc_stats not found although tidemalloc is preloaded\n");
        return 1;
    }

    for (size_t n = 1; n <= 100000; n = n * 3 + 1) {
        char *p = escape(new char[n]);
        CHECK(malloc_usable_size(p) >= n);
        memset(p, 0x11, malloc_usable_size(p));
        delete[] p;
        int *q = escape(new int(42));
        CHECK(malloc_usable_size(q) >= sizeof(int) && *q == 42);
        delete q;
    }

    // Memory from new may be freed with free() when it came from malloc; we
    // only check the reverse direction's bookkeeping: sizes agree.
    std::vector<std::string> v;
    for (int i = 0; i < 10000; i++)
        v.push_back(std::string(static_cast<size_t>(i % 100) + 20, 'x'));
    std::map<int, std::vector<int>> m;
    for (int i = 0; i < 5000; i++)
        m[i * 7 % 1000].push_back(i);
    CHECK(v[9999].size() == 99 + 20 && m.size() == 1000);

    // A huge new[] is visible in the allocator's counters.
    const size_t huge = static_cast<size_t>(64) << 20;
    struct tidemalloc_stats s0, s1, s2;
    if (st) st(&s0);
    char *h = escape(new char[huge]);
    CHECK(malloc_usable_size(h) >= huge);
    memset(h, 1, huge);
    if (st) {
        st(&s1);
        if (!(s1.huge_blocks >= s0.huge_blocks + 1 && s1.huge_bytes >= s0.huge_bytes + huge &&
              s1.bytes_mapped >= s0.bytes_mapped + huge)) {
            fprintf(stderr,
                    "new char[64 MiB] not seen by tidemalloc_stats: huge_blocks %llu -> %llu, "
                    "huge_bytes %llu -> %llu, bytes_mapped %llu -> %llu\n",
                    (unsigned long long)s0.huge_blocks, (unsigned long long)s1.huge_blocks,
                    (unsigned long long)s0.huge_bytes, (unsigned long long)s1.huge_bytes,
                    (unsigned long long)s0.bytes_mapped, (unsigned long long)s1.bytes_mapped);
            return 1;
        }
    }
    delete[] h;
    if (st) {
        st(&s2);
        if (!(s2.huge_blocks == s1.huge_blocks - 1 && s2.huge_bytes + huge <= s1.huge_bytes)) {
            fprintf(stderr, "delete[] of 64 MiB not seen: huge_blocks %llu -> %llu\n",
                    (unsigned long long)s1.huge_blocks, (unsigned long long)s2.huge_blocks);
            return 1;
        }
    }

    // Over-aligned new (C++17) goes through the aligned allocators.
    for (int i = 0; i < 100; i++) {
        Wide *w = escape(new Wide);
        CHECK((reinterpret_cast<uintptr_t>(w) & 255) == 0);
        CHECK(malloc_usable_size(w) >= sizeof(Wide));
        memset(w->bytes, 7, sizeof w->bytes);
        delete w;
        Wide *wa = escape(new Wide[5]);
        CHECK((reinterpret_cast<uintptr_t>(wa) & 255) == 0);
        delete[] wa;
    }

    // Failure: bad_alloc from new, nullptr from nothrow new.
    volatile size_t absurd = SIZE_MAX / 2;
    bool thrown = false;
    try {
        char *x = escape(new char[absurd]);
        delete[] x;
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    char *y = escape(new (std::nothrow) char[absurd]);
    CHECK(y == nullptr);
    return 0;
}
