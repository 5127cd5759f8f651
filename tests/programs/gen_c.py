# Writes a generated C program of about 3000 lines (many functions of varied
# shapes: loops, switches, structs, arrays, recursion, inline helpers) to
# stdout. Deterministic. Its main() prints a checksum of every function.
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
out = []
w = out.append
w("#include <stdio.h>\n#include <stdint.h>\n#include <string.h>\n")
w("struct pt { int64_t x, y, z; double w; };\n")
w("static inline uint64_t mixu(uint64_t a, uint64_t b) { a ^= b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2); return a; }\n")
for i in range(n):
    k = i % 5
    w("/* function %d */\n" % i)
    if k == 0:
        w("static uint64_t f%d(uint64_t a) {\n" % i)
        w("    uint64_t acc = %du;\n" % (i * 7 + 1))
        w("    for (int j = 0; j < %d; j++) {\n" % (10 + i % 37))
        w("        acc = mixu(acc, a + (uint64_t)j * %du);\n" % (i + 3))
        w("        if (acc & %du) acc ^= acc >> %d;\n" % (1 << (i % 16), 1 + i % 13))
        w("    }\n    return acc;\n}\n")
    elif k == 1:
        w("static uint64_t f%d(uint64_t a) {\n" % i)
        w("    switch (a %% %d) {\n" % (5 + i % 11))
        for c in range(5 + i % 11):
            w("    case %d: a = a * %du + %du; break;\n" % (c, 2 * c + 1 + i, c * i + 7))
        w("    default: a = ~a;\n    }\n    return a;\n}\n")
    elif k == 2:
        w("static uint64_t f%d(uint64_t a) {\n" % i)
        w("    struct pt p[%d];\n" % (4 + i % 9))
        w("    for (unsigned j = 0; j < %du; j++) {\n" % (4 + i % 9))
        w("        p[j].x = (int64_t)(a >> (j %% 32)); p[j].y = (int64_t)j * %d; p[j].z = p[j].x - p[j].y; p[j].w = (double)j / %d.0;\n" % (i + 1, i % 7 + 1))
        w("    }\n    uint64_t s = 0;\n")
        w("    for (unsigned j = 0; j < %du; j++) s = mixu(s, (uint64_t)(p[j].x + p[j].z) + (uint64_t)(p[j].w * 1000.0));\n" % (4 + i % 9))
        w("    return s;\n}\n")
    elif k == 3:
        w("static uint64_t f%d(uint64_t a) {\n" % i)
        w("    char buf[%d];\n" % (32 + i % 64))
        w("    snprintf(buf, sizeof buf, \"%%llu-%d\", (unsigned long long)a);\n" % i)
        w("    uint64_t h = %du;\n" % (i + 1469598103))
        w("    for (size_t j = 0; j < strlen(buf); j++) h = (h ^ (unsigned char)buf[j]) * 1099511628211ull;\n")
        w("    return h;\n}\n")
    else:
        w("static uint64_t f%d(uint64_t a) {\n" % i)
        w("    if (a < 2) return a + %d;\n" % i)
        w("    uint64_t r = f%d(a / 3) + (a %% %d);\n" % (i, 3 + i % 5))
        w("    return r * %du;\n}\n" % (1 + i % 19))
w("int main(void) {\n    uint64_t total = 0;\n")
for i in range(n):
    w("    total = mixu(total, f%d(%du));\n" % (i, i * 2654435761 % 1000000))
    if i % 25 == 24:
        w("    printf(\"after f%d: %%llu\\n\", (unsigned long long)total);\n" % i)
w("    printf(\"total %llu\\n\", (unsigned long long)total);\n    return 0;\n}\n")
sys.stdout.write("".join(out))
