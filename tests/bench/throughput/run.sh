#!/usr/bin/env bash
# throughput - inboxd's end-to-end rate against PostgreSQL's own commit rate,
# measured in the same run on the same server.
#
#   tests/bench/throughput/run.sh [N] [CONCURRENCY]      (defaults 20000, 8)
#
# 1. Preloads N messages (1 KiB JSON bodies) into sbemu.
# 2. Runs inboxd with a one-insert route on PostgreSQL until the queue is
#    empty: messages/s, CPU seconds per 1,000 messages, peak RSS.
# 3. Runs pgbench with the identical transaction (inbox insert + business
#    insert + commit) at the same concurrency for the same number of
#    transactions: the database's own ceiling.
# Prints the ratio inboxd / pgbench. Not a test: nothing here asserts a speed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
N=${1:-20000}
C=${2:-8}
build=${BUILD:-$root/build}
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "bench: $build/$b missing; build first (cmake -S . -B build && cmake --build build)"; exit 2; }
done
command -v pgbench >/dev/null || { echo "bench: pgbench missing (apt-get install postgresql-contrib)"; exit 2; }

W=$(mktemp -d /tmp/inboxd-bench.XXXXXX); chmod 755 "$W"
pids=()
cleanup() {
  for p in "${pids[@]+"${pids[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
  "$root/tests/lib/pg.sh" stop "$W/pg" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

port=$("$root/tests/lib/pg.sh" start "$W/pg")
psql() { command psql -h 127.0.0.1 -p "$port" -U postgres -X -q "$@"; }
psql -c "CREATE DATABASE bench" >/dev/null
psql -d bench -c "CREATE TABLE items (id text PRIMARY KEY, n bigint NOT NULL, message_id text NOT NULL)" >/dev/null

echo '{"queues":[{"name":"bench","lock_duration_s":60,"max_delivery_count":10}]}' >"$W/topo.json"
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" >"$W/sbemu.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"

awk -v n="$N" 'BEGIN { pad = sprintf("%0960d", 0)
  for (i = 1; i <= n; i++) printf "{\"message_id\":\"b-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"b-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", i, i, i, pad }' >"$W/msgs.jsonl"
t0=$(date +%s.%N)
"$build/inboxctl" send --connection-string "$SB_CS" --entity bench --file "$W/msgs.jsonl" 2>/dev/null
t1=$(date +%s.%N)

cat >"$W/inboxd.json" <<JSON
{"consumer": "bench", "servicebus": {"connection_string": "$SB_CS", "entity": "bench",
  "prefetch": $((C * 4)), "max_concurrent_calls": $C},
 "db": {"connection_string": "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x",
        "dialect": "postgresql"},
 "routes": [{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
             "params": ["\$.id", "\$.n", "message_id"], "idempotency_key": "item:{\$.id}"}],
 "http": {"listen": ""}, "log": {"level": "warn"}}
JSON
"$build/inboxd" --config "$W/inboxd.json" >"$W/inboxd.log" 2>&1 &
ipid=$!
pids+=($ipid)
start=$(date +%s.%N)
peak=0
while :; do
  rss=$(awk '/VmHWM/ { print $2 }' /proc/$ipid/status 2>/dev/null || echo 0)
  [ "${rss:-0}" -gt "$peak" ] && peak=$rss
  # The broker's stats file (rewritten every second) says when all are completed;
  # polling the database instead would load the server being measured.
  completed=$(jq -r '.entities.bench.completed // 0' "$W/stats.json" 2>/dev/null || echo 0)
  [ "$completed" -ge "$N" ] && break
  kill -0 $ipid 2>/dev/null || { echo "bench: inboxd died"; tail "$W/inboxd.log"; exit 1; }
  sleep 0.1
done
end=$(date +%s.%N)
rows=$(psql -d bench -tAc "SELECT count(*) FROM items")
[ "$rows" = "$N" ] || { echo "bench: $rows rows for $N messages"; exit 1; }
ticks=$(getconf CLK_TCK)
cpu=$(awk -v t="$ticks" '{ printf "%.3f", ($14 + $15) / t }' /proc/$ipid/stat)
kill -TERM $ipid; wait $ipid || true

# The database's own ceiling: the same two inserts and a commit, same concurrency.
cat >"$W/txn.sql" <<'SQL'
\set r random(1, 1000000000000)
BEGIN;
INSERT INTO inboxd_inbox (consumer, message_id, idempotency_key, body_sha256, entity, sequence_number, delivery_count, enqueued_at, received_at, processed_at, status)
  VALUES ('pgbench', 'p-' || :client_id || '-' || :r, 'k-' || :client_id || '-' || :r, '0000000000000000000000000000000000000000000000000000000000000000', 'bench', :r, 1, now(), now(), now(), 'processed');
INSERT INTO items (id, n, message_id) VALUES ('p-' || :client_id || '-' || :r, :r, 'p-' || :r);
END;
SQL
per_client=$(( N / C ))
pgb=$(command pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c "$C" -j "$C" -t "$per_client" -f "$W/txn.sql" bench 2>&1 | awk '/^tps/ { print $3; exit }')

awk -v n="$N" -v s="$start" -v e="$end" -v cpu="$cpu" -v rss="$peak" -v pgb="$pgb" -v c="$C" \
    -v st0="$t0" -v st1="$t1" 'BEGIN {
  rate = n / (e - s)
  printf "messages:                 %d (1 KiB JSON), concurrency %d\n", n, c
  printf "preload (inboxctl send):  %.0f msg/s\n", n / (st1 - st0)
  printf "inboxd:                   %.0f msg/s\n", rate
  printf "pgbench same transaction: %.0f tx/s\n", pgb
  printf "ratio inboxd/pgbench:     %.2f\n", rate / pgb
  printf "inboxd CPU per 1000 msgs: %.3f s\n", cpu / n * 1000
  printf "inboxd peak RSS:          %.1f MiB\n", rss / 1024
}'
