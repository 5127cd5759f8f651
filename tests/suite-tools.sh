#!/usr/bin/env bash
# The tidemalloc(1) command, the man pages, and `make install` / `make uninstall`
# with a program built through pkg-config (shared, fully static, archive).
# Prints one PASS/FAIL/SKIP line per test and always exits 0.
set -u
ROOT=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || { echo "FAIL tools-setup cannot cd to $ROOT"; exit 0; }
ROOT=$(pwd -P)
BUILD=build
CC=${CC:-cc}
CFLAGS_USER="-std=c11 -O2 -Wall -Wextra -Werror"

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1 $2"; }
skip() { echo "SKIP $1 $2"; }
# One line of a log file, for a FAIL reason.
why() { tr '\n' ' ' < "$1" | cut -c1-300; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tm-tools.XXXXXX") || { echo "FAIL tools-setup mktemp"; exit 0; }
TMP=$(cd "$TMP" && pwd -P)
trap 'rm -rf "$TMP"' EXIT
# Run programs as a user would: not under whatever the caller preloads.
unset LD_PRELOAD TIDEMALLOC_STATS MALLOC_AGGRESSIVE_MADVISE_ MALLOC_TRIM_THRESHOLD_ \
      MALLOC_MMAP_THRESHOLD_ TIDEMALLOC_PURGE_DELAY_MS

VERSION=$(sed -n 's/^#define TIDEMALLOC_VERSION "\(.*\)"$/\1/p' include/tidemalloc.h)

# --- man pages: render without warnings ------------------------------------
if command -v groff >/dev/null 2>&1; then
  for m in tidemalloc.1 tidemalloc.3; do
    out=$(groff -man -ww -z -Tutf8 "tools/$m" 2>&1)
    if [ -n "$out" ]; then fail "tools-man-$m" "$(echo "$out" | head -3 | tr '\n' ' ')"
    elif ! grep -q "$VERSION" "tools/$m"; then fail "tools-man-$m" "does not name version $VERSION"
    else pass "tools-man-$m"; fi
  done
else
  skip tools-man "groff not installed"
fi

# --- the command, from the build tree --------------------------------------
if ! make -s tools >"$TMP/make-tools.log" 2>&1 || [ ! -x "$BUILD/tidemalloc" ]; then
  fail tools-build "make tools: $(why "$TMP/make-tools.log")"
  exit 0
fi
pass tools-build
CMD=$ROOT/$BUILD/tidemalloc

out=$("$CMD" --version 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$out" = "tidemalloc $VERSION" ]; then pass tools-version
else fail tools-version "rc=$rc output='$out', want 'tidemalloc $VERSION'"; fi

out=$("$CMD" --help 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q -- '--trim-threshold'; then pass tools-help
else fail tools-help "rc=$rc"; fi

# Bad usage: exit 2 with a message on stderr naming the problem.
bad_ok=1 bad_why=
for args in "--bogus -- true" "--trim-threshold=abc -- true" "--mmap-threshold=12Q -- true" \
            "--purge-delay=1K -- true" "--purge-delay=3600001 -- true" "--mmap-threshold=17179869184G -- true" \
            "--mmap-threshold=18446744073709551616 -- true" "--trim-threshold=99999999999999999999999 -- true" \
            "--trim-threshold=17179869184G -- true" \
            "--trim-threshold" "--" "--stats"; do
  # shellcheck disable=SC2086
  err=$("$CMD" $args 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ] || [ -z "$err" ]; then bad_ok=0; bad_why="$bad_why [$args: rc=$rc]"; fi
done
if [ $bad_ok -eq 1 ]; then pass tools-bad-options-exit-2; else fail tools-bad-options-exit-2 "$bad_why"; fi

# --- everything else needs the library --------------------------------------
if [ ! -e "$BUILD/libtidemalloc.so.$VERSION" ] || [ ! -e "$BUILD/libtidemalloc.a" ]; then
  for t in install pkgconfig-shared pkgconfig-static pkgconfig-archive cmd-exit-code \
           cmd-signal cmd-not-found cmd-preload cmd-preload-build-tree cmd-env \
           destdir uninstall; do
    skip "tools-$t" "library not built ($BUILD/libtidemalloc.so.$VERSION, $BUILD/libtidemalloc.a)"
  done
  exit 0
fi

# --- install into a temporary prefix ----------------------------------------
PREFIX=$TMP/prefix
LIBDIR=$PREFIX/lib
FILES="lib/libtidemalloc.so.$VERSION lib/libtidemalloc.so.0 lib/libtidemalloc.so lib/libtidemalloc.a
include/tidemalloc.h lib/pkgconfig/tidemalloc.pc bin/tidemalloc share/man/man1/tidemalloc.1
share/man/man3/tidemalloc.3"
installed=0
if make -s install PREFIX="$PREFIX" >"$TMP/install.log" 2>&1; then
  missing=
  for f in $FILES; do [ -e "$PREFIX/$f" ] || missing="$missing $f"; done
  problems=$missing
  [ "$(readlink "$LIBDIR/libtidemalloc.so.0")" = "libtidemalloc.so.$VERSION" ] || problems="$problems so.0-link"
  [ -L "$LIBDIR/libtidemalloc.so" ] || problems="$problems so-link"
  [ -x "$PREFIX/bin/tidemalloc" ] || problems="$problems bin-not-executable"
  grep -qx "prefix=$PREFIX" "$LIBDIR/pkgconfig/tidemalloc.pc" || problems="$problems pc-prefix"
  if command -v readelf >/dev/null 2>&1; then
    readelf -d "$LIBDIR/libtidemalloc.so.$VERSION" | grep -q 'SONAME.*\[libtidemalloc\.so\.0\]' \
      || problems="$problems soname"
  fi
  if [ -z "$problems" ]; then pass tools-install; installed=1
  else fail tools-install "missing or wrong:$problems"; fi
else
  fail tools-install "make install: $(why "$TMP/install.log")"
fi

# --- a program built with pkg-config ----------------------------------------
if ! command -v pkg-config >/dev/null 2>&1; then
  for t in pkgconfig-shared pkgconfig-static pkgconfig-archive; do
    skip "tools-$t" "pkg-config not installed (apt-get install pkg-config)"
  done
elif [ $installed -eq 0 ]; then
  for t in pkgconfig-shared pkgconfig-static pkgconfig-archive; do skip "tools-$t" "install failed"; done
else
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
  SRC=$ROOT/tests/tools/pkgconfig_user.c
  if ! pc_cflags=$(pkg-config --cflags tidemalloc 2>"$TMP/pc.log") ||
     ! pc_libs=$(pkg-config --libs tidemalloc 2>>"$TMP/pc.log") ||
     ! pc_static=$(pkg-config --static --libs tidemalloc 2>>"$TMP/pc.log") ||
     [ "$(pkg-config --modversion tidemalloc)" != "$VERSION" ]; then
    for t in pkgconfig-shared pkgconfig-static pkgconfig-archive; do
      fail "tools-$t" "pkg-config tidemalloc: $(why "$TMP/pc.log")"
    done
  else
    # Shared: links libtidemalloc.so.0 (by soname), run with LD_LIBRARY_PATH.
    # shellcheck disable=SC2086
    if ! $CC $CFLAGS_USER $pc_cflags "$SRC" $pc_libs -o "$TMP/user-shared" >"$TMP/cc.log" 2>&1; then
      fail tools-pkgconfig-shared "build: $(why "$TMP/cc.log")"
    elif ! readelf -d "$TMP/user-shared" 2>/dev/null | grep -q 'NEEDED.*\[libtidemalloc\.so\.0\]'; then
      fail tools-pkgconfig-shared "program does not record libtidemalloc.so.0 as NEEDED"
    elif out=$(LD_LIBRARY_PATH=$LIBDIR "$TMP/user-shared" shared 2>&1) && [ "${out#ok}" != "$out" ]; then
      pass tools-pkgconfig-shared
    else
      fail tools-pkgconfig-shared "run: $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
    fi

    # Fully static: pkg-config --static, -static; libtidemalloc.a must replace
    # libc.a's malloc (the program checks our counters saw its blocks).
    if [ ! -e /usr/lib/x86_64-linux-gnu/libc.a ] && ! $CC -print-file-name=libc.a | grep -q /; then
      skip tools-pkgconfig-static "static libc (libc.a) not installed"
    # shellcheck disable=SC2086
    elif ! $CC $CFLAGS_USER -static $pc_cflags "$SRC" $pc_static -o "$TMP/user-static" >"$TMP/cc.log" 2>&1; then
      fail tools-pkgconfig-static "build: $(why "$TMP/cc.log")"
    elif readelf -d "$TMP/user-static" 2>/dev/null | grep -q NEEDED; then
      fail tools-pkgconfig-static "program is not static"
    elif out=$("$TMP/user-static" static 2>&1) && [ "${out#ok}" != "$out" ]; then
      pass tools-pkgconfig-static
    else
      fail tools-pkgconfig-static "run: $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
    fi

    # The archive in a dynamically linked program (the usual "link it in").
    pc_archive=$(echo " $pc_static " | sed 's/ -ltidemalloc / -l:libtidemalloc.a /')
    # shellcheck disable=SC2086
    if ! $CC $CFLAGS_USER $pc_cflags "$SRC" $pc_archive -o "$TMP/user-archive" >"$TMP/cc.log" 2>&1; then
      fail tools-pkgconfig-archive "build: $(why "$TMP/cc.log")"
    elif readelf -d "$TMP/user-archive" 2>/dev/null | grep -q 'NEEDED.*libtidemalloc'; then
      fail tools-pkgconfig-archive "program needs the shared library"
    elif out=$("$TMP/user-archive" archive 2>&1) && [ "${out#ok}" != "$out" ]; then
      pass tools-pkgconfig-archive
    else
      fail tools-pkgconfig-archive "run: $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
    fi
  fi
fi

# --- the installed command ---------------------------------------------------
ICMD=$PREFIX/bin/tidemalloc
if [ $installed -eq 0 ]; then
  for t in cmd-exit-code cmd-signal cmd-not-found cmd-preload cmd-env; do
    skip "tools-$t" "install failed"
  done
else
  "$ICMD" -- sh -c 'exit 7' >/dev/null 2>&1; rc7=$?
  "$ICMD" -- true >/dev/null 2>&1; rc0=$?
  "$ICMD" sh -c 'exit 3' >/dev/null 2>&1; rc3=$?     # without "--"
  if [ $rc7 -eq 7 ] && [ $rc0 -eq 0 ] && [ $rc3 -eq 3 ]; then pass tools-cmd-exit-code
  else fail tools-cmd-exit-code "exit 7 -> $rc7, true -> $rc0, exit 3 (no --) -> $rc3"; fi

  # exec'd, not waited for: the program keeps the command's process ID, and a
  # signal that kills it is seen by the caller.
  pids=$(sh -c 'echo $$; exec "$0" -- sh -c "echo \$\$"' "$ICMD" 2>&1 | tr '\n' ' ')
  { "$ICMD" -- sh -c 'kill -TERM $$'; } >/dev/null 2>&1; rc=$?   # no "Terminated" notice
  set -- $pids
  if [ $rc -eq 143 ] && [ $# -eq 2 ] && [ "$1" = "$2" ]; then pass tools-cmd-signal
  else fail tools-cmd-signal "SIGTERM'd program: status $rc (want 143); pids before/after exec: $pids"; fi

  "$ICMD" -- "$TMP/no-such-program" >/dev/null 2>"$TMP/nf.log"; rc=$?
  if [ $rc -eq 127 ] && [ -s "$TMP/nf.log" ]; then pass tools-cmd-not-found
  else fail tools-cmd-not-found "status $rc, want 127"; fi

  # The program run under the command has our library mapped.
  maps=$("$ICMD" -- cat /proc/self/maps 2>&1)
  if echo "$maps" | grep -q " $LIBDIR/libtidemalloc\.so"; then pass tools-cmd-preload
  else fail tools-cmd-preload "$LIBDIR/libtidemalloc.so* not in /proc/self/maps: $(echo "$maps" | grep -i -m3 -e malloc -e error | tr '\n' ' ')"; fi

  # Options become environment variables; LD_PRELOAD is prepended to.
  printf 'int tm_tools_dummy;\n' > "$TMP/dummy.c"
  if $CC -shared -fPIC "$TMP/dummy.c" -o "$TMP/dummy.so" 2>"$TMP/cc.log"; then
    envout=$(LD_PRELOAD=$TMP/dummy.so "$ICMD" --stats --aggressive --trim-threshold=1000 \
               --mmap-threshold=64K --purge-delay 50 -- env 2>/dev/null)
    # thresholds past 2G-1 and 32M: the library takes any size, as glibc 2.36
    bigout=$("$ICMD" --trim-threshold=4G --mmap-threshold 64MiB -- env 2>/dev/null)
    plain=$("$ICMD" -- env 2>/dev/null)
    missing=
    for want in "LD_PRELOAD=$LIBDIR/libtidemalloc.so.0:$TMP/dummy.so" TIDEMALLOC_STATS=1 \
                MALLOC_AGGRESSIVE_MADVISE_=1 MALLOC_TRIM_THRESHOLD_=1000 \
                MALLOC_MMAP_THRESHOLD_=65536 TIDEMALLOC_PURGE_DELAY_MS=50; do
      echo "$envout" | grep -qxF "$want" || missing="$missing $want"
    done
    for want in MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_MMAP_THRESHOLD_=67108864; do
      echo "$bigout" | grep -qxF "$want" || missing="$missing $want"
    done
    echo "$plain" | grep -qxF "LD_PRELOAD=$LIBDIR/libtidemalloc.so.0" || missing="$missing plain-LD_PRELOAD"
    if echo "$plain" | grep -q -e '^TIDEMALLOC_STATS=' -e '^MALLOC_.*_=' -e '^TIDEMALLOC_PURGE'; then
      missing="$missing (settings present without options)"
    fi
    if [ -z "$missing" ]; then pass tools-cmd-env; else fail tools-cmd-env "not as expected:$missing"; fi
  else
    fail tools-cmd-env "cannot build a dummy preload library: $(why "$TMP/cc.log")"
  fi
fi

# The build-tree command preloads the build-tree library.
maps=$("$CMD" -- cat /proc/self/maps 2>&1)
if echo "$maps" | grep -q " $ROOT/$BUILD/libtidemalloc\.so"; then pass tools-cmd-preload-build-tree
else fail tools-cmd-preload-build-tree "$ROOT/$BUILD/libtidemalloc.so* not mapped: $(echo "$maps" | grep -m2 -i -e tidemalloc -e error | tr '\n' ' ')"; fi

# --- DESTDIR staging ---------------------------------------------------------
STAGE=$TMP/stage
SPREFIX=/opt/tidemalloc-suite-test
if make -s install PREFIX=$SPREFIX DESTDIR="$STAGE" >"$TMP/stage.log" 2>&1; then
  missing=
  for f in $FILES; do [ -e "$STAGE$SPREFIX/$f" ] || missing="$missing $f"; done
  grep -qx "prefix=$SPREFIX" "$STAGE$SPREFIX/lib/pkgconfig/tidemalloc.pc" 2>/dev/null || missing="$missing pc-prefix"
  [ -e "$SPREFIX" ] && missing="$missing (wrote outside DESTDIR)"
  make -s uninstall PREFIX=$SPREFIX DESTDIR="$STAGE" >>"$TMP/stage.log" 2>&1
  left=$(find "$STAGE" ! -type d | head -5)
  if [ -z "$missing" ] && [ -z "$left" ]; then pass tools-destdir
  else fail tools-destdir "missing:$missing left after uninstall: $left"; fi
else
  fail tools-destdir "make install DESTDIR: $(why "$TMP/stage.log")"
fi

# --- uninstall: our files gone, nothing else touched -------------------------
if [ $installed -eq 0 ]; then
  skip tools-uninstall "install failed"
else
  echo keep > "$LIBDIR/not-ours.txt"
  if make -s uninstall PREFIX="$PREFIX" >"$TMP/uninstall.log" 2>&1; then
    left=$(cd "$PREFIX" && find . ! -type d ! -name not-ours.txt | head -5 | tr '\n' ' ')
    if [ -n "$left" ]; then fail tools-uninstall "left behind: $left"
    elif [ ! -e "$LIBDIR/not-ours.txt" ]; then fail tools-uninstall "removed a file that is not ours"
    else pass tools-uninstall; fi
  else
    fail tools-uninstall "make uninstall: $(why "$TMP/uninstall.log")"
  fi
fi
exit 0
