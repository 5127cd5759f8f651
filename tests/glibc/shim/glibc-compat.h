/* Forced include (-include) for building glibc's malloc tests outside the
 * glibc tree.  Inside glibc every file is compiled with libc-symbols.h,
 * which defines the symbol-visibility macros below; here they are no-ops
 * because the tests and the few helper files we compile with them are
 * linked straight into ordinary executables. */
#ifndef TIDEMALLOC_GLIBC_COMPAT_H
#define TIDEMALLOC_GLIBC_COMPAT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#define libc_hidden_proto(name, ...)
#define libc_hidden_def(name)
#define libc_hidden_data_def(name)
#define libc_hidden_weak(name)
#define libc_hidden_ver(local, name)
#define hidden_proto(name, ...)
#define hidden_def(name)
#define attribute_hidden
#define attribute_relro
#define internal_function

/* The tests are built as tests (MODULE_NAME=testsuite in glibc), never as
 * part of libc itself. */
#define IS_IN(lib) 0
#define IS_IN_LIB  0

/* Inside glibc, include/errno.h provides __set_errno and include/limits.h
 * is reached from most internal headers; a few support/ files rely on both
 * without including them. */
#include <errno.h>
#include <limits.h>
#ifndef __set_errno
#define __set_errno(val) (errno = (val))
#endif

#endif
