#!/usr/bin/env python3
"""Writes a deterministic stream of Redis commands (RESP) for the programs
suite: strings that grow by APPEND and SETRANGE (realloc), lists, hashes,
sets (small ones stay intsets/listpacks, big ones become hash tables),
sorted sets, counters, deletes, and a few values of 200 KiB to 1 MiB (blocks
past the mmap threshold). No command draws on randomness, so the dataset and
its DEBUG DIGEST are the same under every allocator.

usage: gen_redis.py N   (N operations, about 2 commands each)
"""
import sys


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = b"%d" % a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def value(i, n):
    unit = b"%08x" % (i * 2654435761 % (1 << 32))
    return (unit * (n // 8 + 1))[:n]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    w = sys.stdout.buffer
    for i in range(n):
        w.write(resp("SET", "s:%d" % i, value(i, (i * 37) % 1500 + 1)))
        k = i % 11
        if k == 0:
            w.write(resp("APPEND", "grow:%d" % (i % 500), value(i, 100 + i % 900)))
        elif k == 1:
            w.write(resp("RPUSH", "l:%d" % (i % 100), value(i, 10 + i % 200)))
        elif k == 2:
            w.write(resp("HSET", "h:%d" % (i % 200), "f:%d" % i, value(i, 5 + i % 300)))
        elif k == 3:
            w.write(resp("SADD", "set:%d" % (i % 50), i if i % 3 else "m:%d" % i))
        elif k == 4:
            w.write(resp("ZADD", "z:%d" % (i % 50), (i * 7919) % 100003, "m:%d" % i))
        elif k == 5:
            w.write(resp("SETRANGE", "s:%d" % (i // 2), (i * 13) % 5000, value(i, 64)))
        elif k == 6 and i >= 10:
            w.write(resp("DEL", "s:%d" % (i - 10)))
        elif k == 7:
            w.write(resp("INCRBY", "counter:%d" % (i % 10), i))
        elif k == 8:
            w.write(resp("LPOP", "l:%d" % ((i * 3) % 100)))
        elif k == 9:
            w.write(resp("HDEL", "h:%d" % ((i * 7) % 200), "f:%d" % (i - 9)))
        if i % 1499 == 0:
            w.write(resp("SET", "big:%d" % (i % 7), value(i, 200 * 1024 + (i * 131) % (800 * 1024))))
        if i % 2999 == 0 and i:
            w.write(resp("DEL", "big:%d" % ((i + 3) % 7)))


if __name__ == "__main__":
    main()
