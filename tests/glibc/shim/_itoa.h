/* glibc's sysdeps/generic/hp-timing-common.h includes <_itoa.h> for its
 * HP_TIMING_PRINT macro, which the malloc benchmarks never use; glibc's
 * internal _itoa is therefore not needed and this header is empty. */
#ifndef TIDEMALLOC_ITOA_H
#define TIDEMALLOC_ITOA_H
#endif
