/* The prefixed API of a -DTIDEMALLOC_PREFIX build of the src/ files: the same
 * functions as malloc.h's, named tm_*, interposing nothing. Used by the
 * sanitizer and fuzzer programs in tests/hardening/. */
#ifndef TIDEMALLOC_TM_API_H
#define TIDEMALLOC_TM_API_H

#include <malloc.h>
#include <stddef.h>
#include <stdio.h>

#include "tidemalloc.h"

void *tm_malloc(size_t size);
void tm_free(void *p);
void *tm_calloc(size_t count, size_t size);
void *tm_realloc(void *p, size_t size);
void *tm_reallocarray(void *p, size_t count, size_t size);
void *tm_memalign(size_t alignment, size_t size);
int tm_posix_memalign(void **result, size_t alignment, size_t size);
void *tm_aligned_alloc(size_t alignment, size_t size);
void *tm_valloc(size_t size);
void *tm_pvalloc(size_t size);
size_t tm_malloc_usable_size(void *p);
int tm_malloc_trim(size_t pad);
int tm_mallopt(int param, int value);
struct mallinfo2 tm_mallinfo2(void);
void tm_malloc_stats(void);
int tm_malloc_info(int options, FILE *fp);

#endif
