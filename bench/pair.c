/* malloc(32)+free pairs, for counting instructions per pair with callgrind:
 * run it with N and 2N pairs and divide the difference by N.
 *
 * usage: pair [pairs] */
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 0) : 1000000;
    /* warm up: the first calls initialise the allocator */
    for (int i = 0; i < 1000; i++) {
        sink = malloc(32);
        free(sink);
    }
    for (long i = 0; i < n; i++) {
        sink = malloc(32);
        free(sink);
    }
    return 0;
}
