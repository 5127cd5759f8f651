#!/bin/sh
# One PostgreSQL session for the programs suite, run in the current
# directory: initdb, a server (LD_PRELOAD and the MALLOC_* variables
# inherited from the caller, so every backend it forks has our heap as the
# postmaster left it), pgbench's TPC-B-like load from 4 clients, then a sort
# past work_mem, a hash aggregate, a recursive query and an index build. It
# prints what must not depend on the allocator: the transactions done, the
# accounts' balance against the history's, and the queries' results.
# pgbench's rates are timings, so they are not printed. As root (CI) it
# runs as the `postgres` user, since initdb refuses root.
#   usage: pg_session.sh
set -u
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bin/initdb" ] || { echo "no PostgreSQL server installed" >&2; exit 1; }
out=$PWD
if [ "$(id -u)" = 0 ]; then
  # a directory the server user may write, and a copy of the preloaded
  # library it may read wherever the build lies
  run=$(mktemp -d "${TMPDIR:-/tmp}/tidemalloc-pg.XXXXXX")
  if [ -n "${LD_PRELOAD:-}" ]; then
    cp "$LD_PRELOAD" "$run/preload.so"
    LD_PRELOAD=$run/preload.so
  fi
  chown -R postgres "$run"
  runuser -p -u postgres -- env LD_PRELOAD="${LD_PRELOAD:-}" PG_SESSION_DIR="$run" sh "$0" \
    >"$out/session.out" 2>"$out/session.err"
  rc=$?
  cat "$out/session.out"
  cat "$out/session.err" >&2
  rm -rf "$run"
  exit $rc
fi
run=${PG_SESSION_DIR:-$out}
cd "$run" || exit 1
data=$run/data
port=$((20000 + $$ % 20000))
P="-h $run -p $port"
fail() {
  [ -f "$data/log" ] && echo "server log: $(grep -E 'PANIC|FATAL|signal|abort' "$data/log" | head -n 3 | tr '\n' ' ')" >&2
  "$bin/pg_ctl" -D "$data" stop -m immediate >/dev/null 2>&1
  echo "$1" >&2
  exit 1
}
"$bin/initdb" -D "$data" -A trust --no-sync >initdb.out 2>&1 || fail "initdb: $(tail -c 300 initdb.out)"
"$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-p $port -k $run -c listen_addresses='' \
  -c shared_buffers=32MB -c work_mem=4MB -c fsync=off -c synchronous_commit=off" start \
  >start.out 2>&1 || fail "server did not start: $(tail -c 300 start.out)"
# the preload must be in the server, or the session tests glibc's malloc
if [ -n "${LD_PRELOAD:-}" ]; then
  grep -q -F "$LD_PRELOAD" "/proc/$(head -n 1 "$data/postmaster.pid")/maps" ||
    fail "the postmaster does not map $LD_PRELOAD"
fi
"$bin/pgbench" $P -i -s 4 -q postgres >init.out 2>&1 || fail "pgbench -i: $(tail -c 300 init.out)"
"$bin/pgbench" $P -c 4 -j 2 -t 1000 postgres >bench.out 2>&1 || fail "pgbench: $(tail -c 300 bench.out)"
grep -E '^number of (transactions actually processed|failed transactions)' bench.out
"$bin/psql" $P -X -A -t -v ON_ERROR_STOP=1 postgres >queries.out 2>&1 <<'SQL' || fail "queries: $(tail -c 300 queries.out)"
select (select sum(abalance) from pgbench_accounts) = (select sum(delta) from pgbench_history),
       (select count(*) from pgbench_history);
create table t as select g, md5(g::text) h, repeat(md5(g::text), 1 + g % 20) big
  from generate_series(1, 200000) g;
create index on t (h);
select count(*), sum(length(big)) from t where h like 'a%';
select md5(string_agg(h, ',' order by h)) from (select h from t order by big, h limit 40000) s;
select count(*), md5(string_agg(n::text, ',' order by n))
  from (select g % 997 n, array_agg(h order by h) a from t group by g % 997) x;
with recursive r(n, s) as (select 1, ''::text union all select n + 1, s || n from r where n < 2000)
  select length(max(s)) from r;
SQL
cat queries.out
"$bin/pg_ctl" -D "$data" stop -m fast >stop.out 2>&1 || fail "server did not stop: $(tail -c 300 stop.out)"
# a backend that died (an abort, a crash) is logged even if the queries passed
if grep -q -E 'PANIC|terminated by signal|was terminated' "$data/log"; then
  fail "server log: $(grep -E 'PANIC|terminated by signal|was terminated' "$data/log" | head -n 2 | tr '\n' ' ')"
fi
exit 0
