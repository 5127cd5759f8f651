#!/usr/bin/env bash
# Unpack, from Debian's glibc-source package, only the parts of glibc 2.36
# that its malloc tests and malloc benchmarks need.  The package's tarball is
# Debian's patched tree (release-branch updates included, e.g. the newer
# tst-malloc-too-large), i.e. the tests the installed libc6 was built with.
#
# usage: extract.sh DESTDIR
#   DESTDIR/glibc/      the unpacked subset (malloc/, support/, benchtests/,
#                       include/, test-skeleton.c, a few sysdeps headers)
#   DESTDIR/inc/        links to the internal headers that the tests include
#                       with <...> (libc-diag.h, array_length.h, ...)
#   DESTDIR/.stamp      written last; when present nothing is done again.
#
# GLIBC_SOURCE_DIR overrides /usr/src/glibc.  Nothing is copied into the
# repository: everything lives under DESTDIR (inside build/).
set -euo pipefail

dest=${1:?usage: extract.sh DESTDIR}
srcdir=${GLIBC_SOURCE_DIR:-/usr/src/glibc}
[ -f "$dest/.stamp" ] && exit 0

shopt -s nullglob
tarballs=("$srcdir"/glibc-*.tar.xz)
shopt -u nullglob
if [ ${#tarballs[@]} -ne 1 ]; then
  echo "extract.sh: expected exactly one $srcdir/glibc-*.tar.xz" \
       "(apt-get install glibc-source)" >&2
  exit 1
fi
tarball=${tarballs[0]}
top=$(basename "$tarball" .tar.xz) # glibc-2.36

rm -rf "$dest"
mkdir -p "$dest/tmp"
members=(malloc support benchtests include test-skeleton.c
         sysdeps/generic/malloc-size.h sysdeps/generic/malloc-alignment.h
         sysdeps/generic/hp-timing.h sysdeps/generic/hp-timing-common.h)
tar -xJf "$tarball" -C "$dest/tmp" "${members[@]/#/$top/}"
mv "$dest/tmp/$top" "$dest/glibc"
rmdir "$dest/tmp"

# Internal headers the tests include as <name.h>.  Only these are exposed:
# glibc's include/ directory as a whole wraps the public headers and cannot
# be put on the include path of a program built against the installed libc.
mkdir -p "$dest/inc"
for h in include/libc-diag.h include/array_length.h include/intprops.h \
         include/libc-pointer-arith.h include/scratch_buffer.h \
         sysdeps/generic/malloc-size.h sysdeps/generic/malloc-alignment.h \
         malloc/dynarray.h sysdeps/generic/hp-timing-common.h; do
  ln -sf "../glibc/$h" "$dest/inc/$(basename "$h")"
done

echo "$tarball" > "$dest/.stamp"
