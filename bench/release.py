"""The release-policy benchmarks of issue 3: the ebizzy-like records/s and sys
time (`make bench-ebizzy`) and seed 001's ghostscript average RSS
(`make bench-gs`)."""

import os
import re

from harness import (BIN, Progress, alloc_env, available_allocators, base_env, failure_text, fmt,
                     log, machine_text, md_table, median, pkg_version, rotated, run_once,
                     section_head, text_table, write_section)


# ---------------------------------------------------------------- make bench-ebizzy

def cmd_ebizzy(args):
    allocs = available_allocators(args.allocs)
    secs = 2
    reps = args.reps or 3
    variants = [("mixed 192 KiB-1 MiB", "0"), ("fixed 192 KiB", "192")]
    configs = []   # (label, alloc, extra env)
    for a in allocs:
        configs.append((a["name"], a, None))
    # seed 000's setting: glibc 2.36 makes one madvise per free with it
    for a in allocs:
        if a["name"] in ("tidemalloc", "glibc"):
            configs.append((a["name"] + " MMAP_THRESHOLD_=256K", a,
                            {"MALLOC_MMAP_THRESHOLD_": "262144"}))
    prog = Progress(len(variants) * 2 * reps * len(configs))
    res = {}
    for vname, vsize in variants:
        for threads in (1, 2):
            for rep in range(reps):
                for label, a, extra in rotated(configs, rep):
                    prog.show("ebizzy %s %dT rep %d %s" % (vsize, threads, rep + 1, label))
                    r = run_once([os.path.join(BIN, "ebizzy"), str(threads), str(secs), vsize],
                                 alloc_env(a, extra), timeout=60)
                    prog.step()
                    m = re.search(r"records_per_s=(\d+)", r["out"])
                    if r["rc"] != 0 or not m:
                        prog.end()
                        log("FAILED ebizzy with %s: %s" % (label, failure_text(r)))
                        continue
                    r["rps"] = int(m.group(1))
                    res.setdefault((vname, threads, label), []).append(r)
    prog.end()
    hdr = ["allocator", "records/s", "ratio to best peer", "sys s", "user s", "peak RSS MiB"]
    md = [*section_head("ebizzy-like: large buffer allocate/search/free (`make bench-ebizzy`)",
                        machine_text(allocs)),
          "- Method: `build/bench/ebizzy THREADS %d SIZE`: worker threads (created threads, also "
          "with one) loop malloc(buffer), memcpy 192 KiB-1 MiB into it, 64 binary searches, free, "
          "for %d s; median of %d interleaved runs. sys s is kernel time in the %d s run: the goal "
          "is close to 0. Rows with `MMAP_THRESHOLD_=256K` set `MALLOC_MMAP_THRESHOLD_=262144`, "
          "seed 000's setting that turns glibc's dynamic threshold off." % (secs, secs, reps, secs),
          ""]
    for vname, _ in variants:
        for threads in (1, 2):
            rows = []
            best = max((median([r["rps"] for r in res[(vname, threads, a["name"])]])
                        for a in allocs if a["peer"] and (vname, threads, a["name"]) in res), default=None)
            for label, a, extra in configs:
                runs = res.get((vname, threads, label))
                if not runs:
                    rows.append([label, "failed", "", "", "", ""])
                    continue
                rps = median([r["rps"] for r in runs])
                rows.append([label, "%.0f" % rps, fmt(rps / best if best else None, "%.2f"),
                             "%.3f" % median([r["sys"] for r in runs]),
                             "%.3f" % median([r["user"] for r in runs]),
                             "%.1f" % (median([r["rss"] for r in runs]) / 1024)])
            title = "ebizzy, %s, %d thread%s" % (vname, threads, "s" if threads > 1 else "")
            log("== " + title)
            log(text_table(hdr, rows))
            log("")
            md += ["### " + title, "", md_table(hdr, rows), ""]
    if not args.no_doc:
        write_section("ebizzy", "\n".join(md))
    return 0


# ---------------------------------------------------------------- make bench-gs

def gen_ps(path, pages=24):
    """A PostScript document of text and vector graphics, generated here."""
    import random
    rng = random.Random(77)
    words = ("allocator heap segment page purge release madvise kernel thread cache span arena "
             "block chunk free list size class retain decay trim threshold mapping resident "
             "memory fragment latency throughput benchmark").split()
    fonts = ["Times-Roman", "Helvetica", "Courier", "Times-Bold", "Helvetica-Oblique", "Palatino-Roman"]
    out = ["%!PS-Adobe-3.0", "%%Pages: " + str(pages), "%%BoundingBox: 0 0 612 792",
           "%%EndComments"]
    for p in range(1, pages + 1):
        out += ["%%%%Page: %d %d" % (p, p), "save"]
        # background: many filled and stroked random curves
        for i in range(250):
            out.append("%.2f %.2f %.2f setrgbcolor newpath %d %d moveto %d %d %d %d %d %d curveto "
                       "%d %d lineto closepath %s" % (
                           rng.random(), rng.random(), rng.random(), rng.randrange(612),
                           rng.randrange(792), rng.randrange(612), rng.randrange(792),
                           rng.randrange(612), rng.randrange(792), rng.randrange(612),
                           rng.randrange(792), rng.randrange(612), rng.randrange(792),
                           "fill" if i % 3 else "0.7 setlinewidth stroke"))
        # a chart: a polyline with many points
        out.append("0 0 0 setrgbcolor 0.4 setlinewidth newpath 40 400 moveto")
        yv = 400.0
        for x in range(41, 572):
            yv = max(250.0, min(550.0, yv + rng.uniform(-6, 6)))
            out.append("%d %.1f lineto" % (x, yv))
        out.append("stroke")
        # a procedural grey image (the data string is allocated by the interpreter)
        out.append("gsave 400 640 translate 160 120 scale 64 48 8 [64 0 0 -48 0 48] "
                   "{ 64 string 0 1 63 { 1 index exch dup %d add 4 mul 255 and put } for } image grestore"
                   % p)
        # text in several fonts and sizes
        y = 760
        for line in range(46):
            size = rng.choice([7, 8, 9, 10, 12, 14])
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 14)))
            out.append("/%s findfont %d scalefont setfont 0 0 0.3 setrgbcolor %d %d moveto (%s) show"
                       % (rng.choice(fonts), size, 30 + rng.randrange(40), y, text))
            y -= 16
        out += ["restore", "showpage"]
    out.append("%%EOF")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


GS_CONFIGS = [
    # label, allocator, extra environment
    ("glibc", "glibc", {}),
    ("tidemalloc", "tidemalloc", {}),
    ("tidemalloc aggressive", "tidemalloc", {"MALLOC_AGGRESSIVE_MADVISE_": "1"}),
    ("jemalloc", "jemalloc", {}),
    ("jemalloc prompt", "jemalloc", {"MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}),
    ("tcmalloc", "tcmalloc", {}),
    ("tcmalloc prompt", "tcmalloc", {"TCMALLOC_RELEASE_RATE": "10",
                                     "TCMALLOC_AGGRESSIVE_DECOMMIT": "true"}),
    ("mimalloc", "mimalloc", {}),
    ("mimalloc prompt", "mimalloc", {"MIMALLOC_PURGE_DELAY": "0", "MIMALLOC_RESET_DELAY": "0",
                                     "MIMALLOC_SEGMENT_DECOMMIT_DELAY": "0"}),
]
GS_RES = 100


def cmd_gs(args):
    if not os.path.exists("/usr/bin/gs"):
        log("skipping bench-gs: /usr/bin/gs not found (apt-get install ghostscript)")
        return 0
    allocs = {a["name"]: a for a in available_allocators(args.allocs)}
    reps = args.reps or 3
    gdir = os.path.join(BIN, "gs")
    os.makedirs(gdir, exist_ok=True)
    ps, pdf = os.path.join(gdir, "doc.ps"), os.path.join(gdir, "doc.pdf")
    if not os.path.exists(pdf):
        gen_ps(ps)
        r = run_once(["gs", "-q", "-dSAFER", "-dBATCH", "-dNOPAUSE", "-sDEVICE=pdfwrite",
                      "-sOutputFile=" + pdf, ps], base_env(), timeout=300)
        if r["rc"] != 0:
            log("FAILED to make %s: %s" % (pdf, failure_text(r)))
            return 1
    argv = ["gs", "-q", "-dSAFER", "-dBATCH", "-dNOPAUSE", "-sDEVICE=png16m", "-r%d" % GS_RES,
            "-sOutputFile=/dev/null", pdf]
    configs = [c for c in GS_CONFIGS if c[1] in allocs]
    prog = Progress(reps * len(configs))
    res = {}
    for rep in range(reps):
        for label, an, extra in rotated(configs, rep):
            prog.show("gs rep %d/%d %s" % (rep + 1, reps, label))
            r = run_once(argv, alloc_env(allocs[an], extra), timeout=300, sample_rss=True)
            prog.step()
            if r["rc"] != 0 or r["timeout"]:
                prog.end()
                log("FAILED gs with %s: %s" % (label, failure_text(r)))
                continue
            res.setdefault(label, []).append(r)
    prog.end()
    hdr = ["allocator (setting)", "avg RSS MiB", "peak RSS MiB", "wall s", "user s", "sys s",
           "avg RSS vs glibc", "wall vs glibc"]
    base = res.get("glibc")
    b_rss = median([r["avg_rss"] for r in base]) if base else None
    b_wall = median([r["wall"] for r in base]) if base else None
    rows, med = [], {}
    for label, an, extra in configs:
        runs = res.get(label)
        if not runs:
            rows.append([label, "failed", "", "", "", "", "", ""])
            continue
        m = {k: median([r[k] for r in runs]) for k in ("avg_rss", "rss", "wall", "user", "sys")}
        med[label] = m
        rows.append([label, "%.1f" % (m["avg_rss"] / 1024), "%.1f" % (m["rss"] / 1024),
                     "%.3f" % m["wall"], "%.3f" % m["user"], "%.3f" % m["sys"],
                     fmt(m["avg_rss"] / b_rss if b_rss else None, "%.2f"),
                     fmt(m["wall"] / b_wall if b_wall else None, "%.3f")])
    log(text_table(hdr, rows))
    verdict = ""
    off, on = med.get("tidemalloc"), med.get("tidemalloc aggressive")
    if off and on:
        drop = 1 - on["avg_rss"] / off["avg_rss"]
        cost = on["wall"] / off["wall"] - 1
        cpu = (on["user"] + on["sys"]) / (off["user"] + off["sys"]) - 1
        ok = drop >= 0.14 and cost <= 0.024
        verdict = ("tidemalloc aggressive mode vs default: average RSS %+.1f%%, wall time %+.1f%% "
                   "(user+sys %+.1f%%); goal: at least 14%% less RSS for at most 2.4%% more time: %s."
                   % (-100 * drop, 100 * cost, 100 * cpu, "met" if ok else "NOT met"))
        log(verdict)
    envs = "; ".join("%s: `%s`" % (l, " ".join("%s=%s" % kv for kv in e.items()))
                     for l, _, e in configs if e)
    md = [*section_head("ghostscript RSS, seed 001's experiment (`make bench-gs`)",
                        "%s; ghostscript %s" % (machine_text(list(allocs.values())),
                                                pkg_version("ghostscript"))),
          "- Document: generated by `bench/release.py` (%s): 24 pages of text in 6 fonts, 250 random "
          "filled/stroked curves, a 530-point polyline and a procedural image per page, converted "
          "once to PDF with pdfwrite." % "build/bench/gs/doc.ps",
          "- Command: `gs -q -dSAFER -dBATCH -dNOPAUSE -sDEVICE=png16m -r%d "
          "-sOutputFile=/dev/null build/bench/gs/doc.pdf`; VmRSS sampled every 10 ms from "
          "/proc/PID/status and averaged; median of %d interleaved runs." % (GS_RES, reps),
          "- Settings: " + envs, "", md_table(hdr, rows, ["l"] + ["r"] * 7), ""]
    if verdict:
        md += [verdict, ""]
    if not args.no_doc:
        write_section("gs", "\n".join(md))
    return 0
