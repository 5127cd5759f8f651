/* malloc(32)+free pairs, for counting instructions per pair with callgrind:
 * run it with N and 2N pairs and divide the difference by N.
 *
 * usage: pair [pairs] [live]
 * live: 32-byte blocks allocated first and kept, so that the page of the
 * measured block never becomes empty (an allocator may do extra work when
 * the last block of a page is freed; live=0 measures that case). */
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], NULL, 0) : 1000000;
    long live = argc > 2 ? strtol(argv[2], NULL, 0) : 0;
    void **keep = live > 0 ? malloc((size_t)live * sizeof *keep) : NULL;
    for (long i = 0; i < live; i++)
        keep[i] = malloc(32);
    /* warm up: the first calls initialise the allocator */
    for (int i = 0; i < 1000; i++) {
        sink = malloc(32);
        free(sink);
    }
    for (long i = 0; i < n; i++) {
        sink = malloc(32);
        free(sink);
    }
    for (long i = 0; i < live; i++)
        free(keep[i]);
    free(keep);
    return 0;
}
