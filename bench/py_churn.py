# Python object churn for the tidemalloc benchmarks; run with
# PYTHONMALLOC=malloc so every object goes through malloc. Fixed work, fixed seed.
import random
import sys

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
rng = random.Random(1234)
keep = []
total = 0
for r in range(rounds):
    objs = []
    for i in range(40000):
        k = rng.randrange(5)
        if k == 0:
            objs.append({"id": i, "name": "obj%d" % i, "tags": [r, i, str(i)]})
        elif k == 1:
            objs.append(("x" * rng.randrange(1, 200), i, float(i)))
        elif k == 2:
            objs.append([j * r for j in range(rng.randrange(1, 30))])
        elif k == 3:
            objs.append({str(j): j for j in range(rng.randrange(1, 12))})
        else:
            objs.append(str(i) * rng.randrange(1, 8))
    rng.shuffle(objs)
    total += sum(len(o) for o in objs[:5000])
    keep.extend(objs[::50])
    if len(keep) > 20000:
        del keep[: len(keep) // 2]
    del objs
print("py_churn", rounds, total, len(keep))
