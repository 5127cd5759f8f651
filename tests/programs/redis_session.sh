#!/bin/sh
# One redis-server session for the programs suite, run in the current
# directory: the server (with LD_PRELOAD inherited from the caller) serves a
# Unix socket with 2 I/O threads, so query buffers are allocated on one
# thread and freed on another. It loads a generated dataset, forks for a
# BGSAVE while redis-benchmark drives 20 clients in another database,
# reloads from its own RDB, and prints what must not depend on the
# allocator: database sizes, DEBUG DIGEST before and after the reload, and a
# few values. redis-benchmark's figures are timings, so only its status is
# checked.
#   usage: redis_session.sh GEN_REDIS_PY OPERATIONS
set -u
gen=$1 ops=$2
sock=$PWD/redis.sock
rm -f dump.rdb "$sock" # a dump left here would be loaded at start
cli() { redis-cli -s "$sock" "$@"; }
redis-server --port 0 --unixsocket "$sock" --dir "$PWD" --dbfilename dump.rdb --save "" \
  --appendonly no --io-threads 2 --io-threads-do-reads yes --enable-debug-command yes \
  --daemonize no --logfile "$PWD/server.log" &
server=$!
for _ in $(seq 100); do
  [ "$(cli ping 2>/dev/null)" = PONG ] && break
  sleep 0.1
done
[ "$(cli ping 2>/dev/null)" = PONG ] || { echo "server did not start" >&2; exit 1; }

# fail: says why on stderr, the server's own last words first
fail() {
  kill -0 "$server" 2>/dev/null || echo "redis-server died: $(tail -n 3 server.log | tr '\n' ' ')" >&2
  echo "$1" >&2
  exit 1
}
/usr/bin/python3 "$gen" "$ops" 2>gen.err | cli --pipe >pipe.out 2>&1 || fail "loading: $(tail -c 300 pipe.out)"
grep -q 'errors: 0' pipe.out || fail "loading: $(tail -c 300 pipe.out)"
echo "dbsize $(cli dbsize)"
echo "digest $(cli debug digest)"

# a fork while 20 clients keep the I/O threads busy in database 1
cli bgsave >/dev/null
redis-benchmark -s "$sock" --dbnum 1 -c 20 -n 20000 -P 4 -d 200 -r 5000 -q \
  -t set,get,lpush,lpop,sadd,hset,incr,mset >bench.out 2>&1 || fail "redis-benchmark: $(tail -c 300 bench.out)"
for _ in $(seq 300); do
  cli info persistence | grep -q 'rdb_bgsave_in_progress:0' && break
  sleep 0.1
done
cli info persistence | grep -q 'rdb_last_bgsave_status:ok' || fail "bgsave failed"
threaded=$(cli info stats | tr -d '\r' | sed -n 's/^io_threaded_reads_processed://p')
[ "${threaded:-0}" -gt 0 ] || fail "the I/O threads read no query"
echo "$threaded" >threaded_reads
cli -n 1 flushdb >/dev/null

# the server reloads the dataset from the RDB it writes now
cli debug reload >/dev/null
echo "dbsize after reload $(cli dbsize)"
echo "digest after reload $(cli debug digest)"
echo "strlen grow:7 $(cli strlen grow:7)"
echo "llen l:3 $(cli llen l:3)"
echo "hlen h:5 $(cli hlen h:5)"
echo "scard set:4 $(cli scard set:4)"
echo "zrange z:9 $(cli zrange z:9 0 4 withscores | tr '\n' ' ')"
echo "counter:3 $(cli get counter:3)"
echo "strlen big:1 $(cli strlen big:1)"
cli info memory | grep -q '^used_memory:' || fail "INFO memory failed"

cli shutdown nosave >/dev/null 2>&1
wait "$server"
status=$?
echo "server exit $status"
[ "$status" = 0 ]
