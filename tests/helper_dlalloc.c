/* A library that test_dlopen loads with dlopen: it allocates in its
 * constructor, in its functions and in a thread of its own, and frees what
 * the main program hands it. Built as build/tests/libdlalloc.so. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char *ctor_block;

__attribute__((constructor)) static void dl_ctor(void) {
    ctor_block = malloc(777);
    if (ctor_block) memset(ctor_block, 'c', 777);
}

__attribute__((destructor)) static void dl_dtor(void) {
    free(ctor_block);
}

char *dl_ctor_block(void) {
    return ctor_block;
}

void *dl_alloc(size_t n) {
    void *p = malloc(n);
    if (p) memset(p, 0xD1, n);
    return p;
}

void *dl_calloc(size_t n, size_t m) {
    return calloc(n, m);
}
void *dl_realloc(void *p, size_t n) {
    return realloc(p, n);
}
void dl_free(void *p) {
    free(p);
}
char *dl_strdup(const char *s) {
    return strdup(s);
}

static void *thread_alloc(void *arg) {
    size_t n = *(size_t *)arg;
    void *p = malloc(n);
    if (p) memset(p, 0xD2, n);
    return p;
}

/* Allocates n bytes in a new thread that exits at once. */
void *dl_alloc_in_thread(size_t n) {
    pthread_t t;
    void *res = NULL;
    if (pthread_create(&t, NULL, thread_alloc, &n) != 0) return NULL;
    pthread_join(t, &res);
    return res;
}
