#!/usr/bin/env bash
# glibc 2.36's own malloc tests, built from Debian's glibc-source package at
# test time (tests/glibc/glibc.mk) and run with tidemalloc in LD_PRELOAD.
# See tests/glibc/README.md.
set -u
root=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
lib=${TIDEMALLOC_LIB:-$root/build/libtidemalloc.so}
cd "$root" || exit 0
if ! out=$(make -s glibc-tests 2>&1); then
  echo "FAIL glibc/build make glibc-tests failed: $(printf '%s\n' "$out" | grep -v '^\s*$' | tail -n 1 | cut -c1-160)"
  exit 0
fi
bash tests/glibc/run.sh --lib "$lib" --label tidemalloc
# The same tests in the modes whose frees all take the slow path: aggressive
# mode once made tst-tcfree3 abort and tst-malloc-too-large crawl (41 s).
MALLOC_AGGRESSIVE_MADVISE_=1 bash tests/glibc/run.sh --lib "$lib" --label tidemalloc-aggressive \
  --suffix @aggressive
MALLOC_CHECK_=3 bash tests/glibc/run.sh --lib "$lib" --label tidemalloc-secure --suffix @secure
exit 0
