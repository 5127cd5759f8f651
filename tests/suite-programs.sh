#!/usr/bin/env bash
# Real programs under LD_PRELOAD give the same output as under glibc:
#   python3 (PYTHONMALLOC=malloc) object churn, perl hash and sort churn,
#   gcc -O2 on a generated ~3000-line C file (assembly, object and the
#   program's output compared), sqlite3 on an in-memory database, and
#   ghostscript rendering a generated document in bands on 2 threads (the
#   pages compared), by default, in aggressive mode and in secure mode, and
#   CPython's own regression tests for its core types, threads and fork
#   (Debian's libpython3.X-testsuite), every object from malloc, and
#   redis-server with 2 I/O threads loading a generated dataset, forking for
#   a BGSAVE under redis-benchmark's load and reloading (the dataset's
#   DEBUG DIGEST compared), by default and in secure mode.
#   TEST_PRELOAD  library to preload; defaults to $TIDEMALLOC_LIB (set it to a
#                 peer, or to the empty string for glibc, to validate the suite).
#   TEST_TIMEOUT  seconds per program run (default 90).
# Prints PASS/FAIL/SKIP lines; always exits 0.
set -u
root=${TIDEMALLOC_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 0
preload=${TEST_PRELOAD-${TIDEMALLOC_LIB:-$root/build/libtidemalloc.so}}
tmo=${TEST_TIMEOUT:-90}
progs=$root/tests/programs
work=$(mktemp -d "${TMPDIR:-/tmp}/tidemalloc-programs.XXXXXX")
trap 'rm -rf "$work"' EXIT

gs_modes=(default aggressive secure)
names=(preload-active python3-churn perl-churn gcc-O2-generated sqlite3-memory)
for m in "${gs_modes[@]}"; do names+=("gs-render-$m"); done
names+=(python3-regrtest redis-server redis-server-secure postgres-pgbench postgres-pgbench-secure)
if [ -n "$preload" ] && [ ! -e "$preload" ]; then
  for n in "${names[@]}"; do echo "SKIP $n library $preload not built"; done
  exit 0
fi

# run_one OUTDIR CMD... : runs CMD in OUTDIR (stdout, stderr, rc files),
# with the library under test preloaded when OUTDIR ends in "test".
run_one() {
  local dir=$1; shift
  mkdir -p "$dir"
  local pre=()
  [ "${dir##*/}" = test ] && [ -n "$preload" ] && pre=(env LD_PRELOAD="$preload")
  # stderr of the waiting shell is dropped: bash's "Segmentation fault"
  # report must not land in the suite's output (the status file has it).
  { (cd "$dir" && timeout -k 5 "$tmo" "${pre[@]}" "$@" >stdout 2>stderr </dev/null)
    echo $? >"$dir/rc"; } 2>/dev/null
}

# verdict NAME FILE... : compares rc, stdout and each named output file of
# the reference run and the run under test.
verdict() {
  local name=$1; shift
  local ref=$work/$name/ref test=$work/$name/test
  local rr rt
  rr=$(cat "$ref/rc"); rt=$(cat "$test/rc")
  if [ "$rr" != 0 ]; then
    echo "FAIL $name reference run (glibc) failed with status $rr: $(head -c 200 "$ref/stderr" | tr '\n' ' ')"
    return
  fi
  if [ "$rt" != 0 ]; then
    local why="exit status $rt"
    [ "$rt" = 124 ] || [ "$rt" = 137 ] && why="timed out after ${tmo}s"
    [ "$rt" -gt 128 ] && [ "$rt" != 137 ] && why="killed by signal $((rt - 128)) ($(kill -l $((rt - 128)) 2>/dev/null))"
    echo "FAIL $name $why: $(head -c 200 "$test/stderr" | tr '\n' ' ')"
    return
  fi
  for f in stdout "$@"; do
    if ! cmp -s "$ref/$f" "$test/$f"; then
      echo "FAIL $name $f differs from glibc's: $(diff "$ref/$f" "$test/$f" 2>/dev/null | head -3 | tr '\n' ' ' | cut -c1-200)"
      return
    fi
  done
  if [ ! -s "$ref/stdout" ]; then
    echo "FAIL $name produced no output"
    return
  fi
  echo "PASS $name"
}

# The library really is loaded (otherwise every comparison passes trivially).
if [ -n "$preload" ]; then
  base=$(basename "$(readlink -f "$preload")")
  if LD_PRELOAD=$preload cat /proc/self/maps 2>/dev/null | grep -q -F "$base"; then
    echo "PASS preload-active"
  else
    echo "FAIL preload-active $preload does not appear in a preloaded process's maps"
  fi
else
  echo "SKIP preload-active no library preloaded (glibc run)"
fi

# python3 with every object from malloc.
if [ -x /usr/bin/python3 ]; then
  for side in ref test; do
    run_one "$work/python3-churn/$side" env PYTHONMALLOC=malloc PYTHONHASHSEED=0 \
      /usr/bin/python3 "$progs/churn.py" 12
  done
  verdict python3-churn
else
  echo "SKIP python3-churn /usr/bin/python3 not installed"
fi

# perl hash and sort churn.
if command -v perl >/dev/null; then
  for side in ref test; do
    run_one "$work/perl-churn/$side" env PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 \
      perl "$progs/churn.pl" 8
  done
  verdict perl-churn
else
  echo "SKIP perl-churn perl not installed"
fi

# gcc -O2 on a generated C file: the assembly, the object and the built
# program's output must be the same (the driver, cc1, as and ld all run
# with the library preloaded).
if command -v gcc >/dev/null && [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 "$progs/gen_c.py" 280 >"$work/gen.c"
  for side in ref test; do
    run_one "$work/gcc-O2-generated/$side" sh -c \
      'gcc -O2 -Wall -S "$1" -o gen.s && gcc -O2 -Wall -c "$1" -o gen.o && gcc gen.o -o gen && ./gen' \
      sh "$work/gen.c"
  done
  verdict gcc-O2-generated gen.s gen.o
else
  echo "SKIP gcc-O2-generated gcc or python3 not installed"
fi

# sqlite3 on an in-memory database.
if command -v sqlite3 >/dev/null; then
  for side in ref test; do
    run_one "$work/sqlite3-memory/$side" sh -c 'sqlite3 :memory: <"$1"' sh "$progs/sqlite.sql"
  done
  verdict sqlite3-memory
else
  echo "SKIP sqlite3-memory sqlite3 not installed"
fi

# ghostscript: 4 pages rendered in bands by 2 rendering threads, so blocks
# move between threads; every page must be the same image as under glibc.
if command -v gs >/dev/null && [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 "$progs/gen_ps.py" 4 >"$work/doc.ps"
  for m in "${gs_modes[@]}"; do
    case $m in
      default) mode_env=(X_TIDEMALLOC_MODE=default) ;;
      aggressive) mode_env=(MALLOC_AGGRESSIVE_MADVISE_=1) ;;
      secure) mode_env=(MALLOC_CHECK_=3) ;;
    esac
    for side in ref test; do
      run_one "$work/gs-render-$m/$side" env "${mode_env[@]}" gs -q -dSAFER -dBATCH -dNOPAUSE \
        -sDEVICE=png16m -r72 -dNumRenderingThreads=2 -dMaxBitmap=0 -dBufferSpace=200000 \
        -sOutputFile=page-%d.png "$work/doc.ps"
      # stdout is empty (-q): the verdict wants some, so list the pages made
      (cd "$work/gs-render-$m/$side" && ls page-*.png >>stdout 2>/dev/null)
    done
    verdict "gs-render-$m" page-1.png page-2.png page-3.png page-4.png
  done
else
  for m in "${gs_modes[@]}"; do echo "SKIP gs-render-$m ghostscript or python3 not installed"; done
fi

# CPython's regression tests: they must pass under the library as they do
# under glibc (regrtest's output holds timings, so the verdict is its status).
pytests=(test_thread test_queue test_dict test_list test_set test_bytes test_re test_json test_gc
  test_weakref test_collections test_unicode test_pickle test_fork1 test_mmap)
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
if [ -n "$pyver" ] && [ -f "/usr/lib/python$pyver/test/test_dict.py" ]; then
  for side in ref test; do
    run_one "$work/python3-regrtest/$side" env PYTHONMALLOC=malloc /usr/bin/python3 -m test -j2 \
      "${pytests[@]}"
  done
  d=$work/python3-regrtest
  if [ "$(cat "$d/ref/rc")" != 0 ]; then
    echo "FAIL python3-regrtest reference run (glibc) failed: $(grep -m3 -E 'failed|crashed' "$d/ref/stdout" | tr '\n' ' ' | cut -c1-200)"
  elif [ "$(cat "$d/test/rc")" != 0 ]; then
    echo "FAIL python3-regrtest exit status $(cat "$d/test/rc"): $(grep -m3 -E 'failed|crashed|Fatal|Abort' "$d/test/stdout" "$d/test/stderr" | tr '\n' ' ' | cut -c1-300)"
  else
    echo "PASS python3-regrtest"
  fi
else
  echo "SKIP python3-regrtest CPython's test package not installed (libpython3.X-testsuite)"
fi

# default_and_secure NAME COMMAND...: tests NAME (default mode) and
# NAME-secure (MALLOC_CHECK_=3), each against glibc's run of COMMAND in the
# same mode.
default_and_secure() {
  local base=$1; shift
  local name mode_env side
  for name in "$base" "$base-secure"; do
    mode_env=(X_TIDEMALLOC_MODE=default)
    [ "$name" = "$base-secure" ] && mode_env=(MALLOC_CHECK_=3)
    for side in ref test; do
      run_one "$work/$name/$side" env "${mode_env[@]}" "$@"
    done
    verdict "$name"
  done
}

# redis-server: Debian links it with jemalloc, so the reference run is
# jemalloc's and the preloaded library replaces it (malloc, free, realloc,
# calloc and malloc_usable_size; its mallctl calls still reach jemalloc).
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null &&
  [ -x /usr/bin/python3 ]; then
  default_and_secure redis-server sh "$progs/redis_session.sh" "$progs/gen_redis.py" 30000
else
  for name in redis-server redis-server-secure; do
    echo "SKIP $name redis-server or redis-tools not installed"
  done
fi

# PostgreSQL: a server that forks a backend per connection from the
# postmaster's heap, with pgbench's clients, a sort past work_mem and a
# hash aggregate (tests/programs/pg_session.sh). As root it runs as the
# postgres user, which the Debian package creates.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/pgbench" ] && [ -x "$pg_bin/psql" ] &&
  { [ "$(id -u)" != 0 ] || id postgres >/dev/null 2>&1; }; then
  default_and_secure postgres-pgbench sh "$progs/pg_session.sh"
else
  for name in postgres-pgbench postgres-pgbench-secure; do
    echo "SKIP $name postgresql (its server and pgbench) not installed"
  done
fi
exit 0
