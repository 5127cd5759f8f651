/* What the kernel's side of memory costs on this machine, per 4 KiB page:
 * a first-touch fault, a write to a resident page, madvise(MADV_DONTNEED)
 * and the refault after it, the first write after mremap moved a resident
 * mapping, and a copy between resident pages. On a virtual machine these
 * vary from host to host by several times, and they decide what an
 * allocator's release policy costs (docs/benchmark-history.md,
 * twentieth session). No allocator is involved: it maps its own memory.
 *
 * usage: faultcost [MiB] [rounds] */
#include "common.h"
#include <sys/mman.h>

static void write_pages(unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i += 4096)
        p[i] = v;
}

static unsigned char *map(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    size_t n = (size_t)arg_long(argc, argv, 1, 64) << 20;
    long rounds = arg_long(argc, argv, 2, 3);
    double pages = (double)(n / 4096);
    printf("ns per 4 KiB page, %zu MiB:\n", n >> 20);
    printf("%6s %10s %10s %10s %10s %12s %10s\n", "round", "fault", "resident", "madvise",
           "refault", "after-move", "copy");
    for (long r = 0; r < rounds; r++) {
        unsigned char *p = map(n);
        double t0 = now_s();
        write_pages(p, n, 1);
        double t1 = now_s();
        for (int k = 0; k < 10; k++)
            write_pages(p, n, (unsigned char)k);
        double t2 = now_s();
        madvise(p, n, MADV_DONTNEED);
        double t3 = now_s();
        write_pages(p, n, 2);
        double t4 = now_s();
        /* twice the size: the kernel has to move it elsewhere */
        unsigned char *q = mremap(p, n, 2 * n, MREMAP_MAYMOVE);
        if (q == MAP_FAILED) {
            perror("mremap");
            return 1;
        }
        double t5 = now_s();
        write_pages(q, n, 3);
        double t6 = now_s();
        unsigned char *d = map(n);
        write_pages(d, n, 4);
        double t7 = now_s();
        for (int k = 0; k < 5; k++)
            memcpy(d, q, n);
        double t8 = now_s();
        printf("%6ld %10.0f %10.1f %10.0f %10.0f %12.0f %10.0f%s\n", r + 1, (t1 - t0) / pages * 1e9,
               (t2 - t1) / (10 * pages) * 1e9, (t3 - t2) / pages * 1e9, (t4 - t3) / pages * 1e9,
               (t6 - t5) / pages * 1e9, (t8 - t7) / (5 * pages) * 1e9,
               q == p ? " (mremap did not move)" : "");
        munmap(q, 2 * n);
        munmap(d, n);
    }
    return 0;
}
