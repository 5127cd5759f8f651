/* glibc's shared-with-gnulib sources (malloc/scratch_buffer_*.c) include
 * <libc-config.h> when built outside glibc (no _LIBC).  In gnulib that
 * header maps glibc-internal macros onto gnulib's; everything those files
 * need here already comes from glibc-compat.h and the installed headers. */
#ifndef TIDEMALLOC_LIBC_CONFIG_H
#define TIDEMALLOC_LIBC_CONFIG_H
#endif
