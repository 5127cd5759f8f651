# Object churn for the real-program test: dicts, lists, strings, tuples, sets
# and bytearrays are built, mutated and dropped in waves; a deterministic
# checksum of what was computed is printed. Run with PYTHONMALLOC=malloc so
# that every object goes through the C allocator.
import sys
import zlib

def wave(seed, n):
    rnd = seed
    objs = []
    d = {}
    for i in range(n):
        rnd = (rnd * 1103515245 + 12345) & 0x7FFFFFFF
        k = rnd % 7
        if k == 0:
            objs.append({"k%d" % j: [j] * (rnd % 13) for j in range(rnd % 17)})
        elif k == 1:
            objs.append([str(rnd)] * (rnd % 31))
        elif k == 2:
            objs.append("x" * (rnd % 5000) + str(i))
        elif k == 3:
            objs.append(tuple(range(rnd % 50)))
        elif k == 4:
            objs.append(bytearray(rnd % 70000))
        elif k == 5:
            objs.append({rnd % 1000 + j for j in range(rnd % 40)})
        else:
            d[str(rnd % 20011)] = (i, "v" * (rnd % 300))
        if len(objs) > 3000:
            # drop a random-ish half, keeping the rest alive longer
            objs = objs[rnd % 2::2]
    h = 0
    for o in objs:
        h = zlib.crc32(repr(o)[:200].encode(), h)
    for key in sorted(d):
        h = zlib.crc32(key.encode(), h)
        h = zlib.crc32(str(d[key][0]).encode(), h)
    return h, len(objs), len(d)

def strings(n):
    parts = []
    for i in range(n):
        s = ("%06d" % (i * 7919 % 1000003)) * (1 + i % 9)
        parts.append(s[::-1].upper())
        if len(parts) > 500:
            joined = "|".join(parts)
            parts = joined.split("|")[250:]
    return zlib.crc32("".join(parts).encode())

total = 0
for w in range(int(sys.argv[1]) if len(sys.argv) > 1 else 12):
    h, a, b = wave(w + 1, 40000)
    print("wave", w, h, a, b)
    total = zlib.crc32(str(h).encode(), total)
s = strings(200000)
print("strings", s)
print("checksum", zlib.crc32(str(s).encode(), total))
