#!/usr/bin/env python3
"""A PostScript document for the ghostscript test: each page has filled and
stroked curves, text in several fonts, a gradient image and a pattern fill,
so the interpreter allocates and frees blocks of many sizes. Deterministic.

usage: gen_ps.py PAGES > doc.ps"""
import random
import sys

pages = int(sys.argv[1]) if len(sys.argv) > 1 else 4
rng = random.Random(2024)
fonts = ["Times-Roman", "Helvetica-Bold", "Courier", "Palatino-Italic"]
words = "heap page slice segment purge thread block list free size class trim".split()
out = ["%!PS-Adobe-3.0", "%%Pages: %d" % pages, "%%BoundingBox: 0 0 612 792", "%%EndComments",
       "<< /PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 12 12] /XStep 12 /YStep 12",
       "   /PaintProc { pop 0.2 0.5 0.8 setrgbcolor 0 0 6 6 rectfill } >> matrix makepattern",
       "/Dots exch def"]
for p in range(1, pages + 1):
    out += ["%%%%Page: %d %d" % (p, p), "save"]
    for i in range(120):
        pts = " ".join(str(rng.randrange(600)) for _ in range(8))
        out.append("%.2f %.2f %.2f setrgbcolor newpath %s moveto curveto closepath %s"
                   % (rng.random(), rng.random(), rng.random(),
                      " ".join(pts.split()[:2]) + " " + " ".join(pts.split()[2:]),
                      "fill" if i % 2 else "1.5 setlinewidth stroke"))
    out.append("gsave 50 50 translate 200 150 scale 96 72 8 [96 0 0 -72 0 72] "
               "{ 96 string 0 1 95 { 1 index exch dup %d mul 255 and put } for } image grestore" % p)
    out.append("gsave Dots setpattern 300 60 250 180 rectfill grestore")
    y = 740
    for line in range(30):
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(4, 12)))
        out.append("/%s findfont %d scalefont setfont 0 0 0 setrgbcolor 40 %d moveto (%s) show"
                   % (rng.choice(fonts), rng.choice([8, 10, 12, 16]), y, text))
        y -= 20
    out += ["restore", "showpage"]
out.append("%%EOF")
sys.stdout.write("\n".join(out) + "\n")
