/* glibc's statistics mapped onto tidemalloc (issue 5): mallinfo2 fields move
 * the way their meaning says, malloc_stats prints glibc's lines, malloc_info
 * writes one <heap> per thread heap and our syscall counters. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "introspect: %s (line %d)\n", what, __LINE__);                         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static pthread_barrier_t barrier;
static void *worker(void *arg) {
    (void)arg;
    void *volatile p = malloc(1000);
    pthread_barrier_wait(&barrier); /* alive while main looks */
    pthread_barrier_wait(&barrier);
    free(p);
    return NULL;
}

static void *free_all(void *blocks) {
    for (int i = 0; i < 1000; i++)
        free(((void **)blocks)[i]);
    return NULL;
}

int main(void) {
    struct mallinfo2 before = mallinfo2();
    enum { N = 1000 };
    void *blocks[N];
    for (int i = 0; i < N; i++)
        blocks[i] = malloc(1000);
    void *volatile huge = malloc(64 << 20); /* above any dynamic mmap threshold */
    struct mallinfo2 during = mallinfo2();
    CHECK(during.uordblks >= before.uordblks + N * 1000, "uordblks did not grow by the blocks");
    CHECK(during.hblks >= 1 && during.hblkhd >= (64u << 20), "hblks/hblkhd miss the mapping");
    CHECK(during.arena >= during.uordblks, "arena smaller than bytes in use");
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    free(huge);
    struct mallinfo2 after = mallinfo2();
    CHECK(after.uordblks + N * 1000 <= during.uordblks, "uordblks did not shrink");
    CHECK(after.hblks + 1 == during.hblks, "hblks did not drop");
    CHECK(after.fordblks > 0, "no free bytes reported");

    /* blocks another thread freed are free at once, before their owner
     * collects them */
    for (int i = 0; i < N; i++)
        blocks[i] = malloc(1000);
    struct mallinfo2 owned = mallinfo2();
    pthread_t freer;
    pthread_create(&freer, NULL, free_all, blocks);
    pthread_join(freer, NULL);
    struct mallinfo2 freed = mallinfo2();
    CHECK(freed.uordblks + N * 1000 <= owned.uordblks,
          "blocks freed by another thread still in use");

    pthread_barrier_init(&barrier, NULL, 3);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    pthread_barrier_wait(&barrier);
    char *xml = NULL;
    size_t length = 0;
    FILE *f = open_memstream(&xml, &length);
    CHECK(malloc_info(0, f) == 0, "malloc_info failed");
    fclose(f);
    CHECK(malloc_info(1, stdout) != 0, "malloc_info accepted options != 0");
    int heaps = 0;
    for (char *s = xml; (s = strstr(s, "<heap nr=")) != NULL; s++)
        heaps++;
    CHECK(heaps >= 3, "fewer than one <heap> per live thread heap");
    CHECK(strstr(xml, "<syscalls mmap=") != NULL, "no syscall counters");
    CHECK(strstr(xml, "</malloc>") != NULL, "unterminated XML");
    /* malloc_info formats its own numbers (no snprintf): every value is a
     * decimal number, with no format left in the text, and the system
     * bytes of the total are those of the heaps and more */
    CHECK(strncmp(xml, "<malloc version=\"1\">\n", 20) == 0, "XML does not start with <malloc>");
    CHECK(strchr(xml, '%') == NULL, "a format specifier left in the XML");
    int numbers = 0;
    for (char *s = xml; (s = strstr(s, "=\"")) != NULL;) {
        int is_type = s - xml >= 4 && strncmp(s - 4, "type", 4) == 0;
        s += 2;
        if (is_type) continue; /* type="fast", "current": names */
        size_t digits = strspn(s, "0123456789");
        CHECK(digits > 0 && digits < 21 && s[digits] == '"', "an attribute that is not a number");
        numbers++;
    }
    CHECK(numbers >= 3 * 9 + 10, "fewer numbers than the heaps and the totals hold");
    const char *total = strstr(xml, "</heap>\n<total type=\"fast\"");
    CHECK(total != NULL, "no totals after the heaps");
    static const char current_tag[] = "<system type=\"current\" size=\"";
    const char *current = strstr(total, current_tag);
    CHECK(current != NULL, "no current system size in the totals");
    unsigned long long system_total = strtoull(current + sizeof current_tag - 1, NULL, 10);
    CHECK(system_total >= 4ull << 20, "the total system size is under one segment");
    free(xml);
    malloc_stats(); /* the suite checks stderr */
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    return 0;
}
