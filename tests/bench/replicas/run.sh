#!/usr/bin/env bash
# replicas - several inboxd on one queue and one PostgreSQL, against one.
#
#   tests/bench/replicas/run.sh [N] [REPLICAS...]     (defaults 40000, 1 2 4)
#
# Phase "sql": N messages of 1 KiB JSON preloaded into one queue, then R
# inboxd processes at their defaults (nothing set but the connection
# strings and the route) started together; the rate is timed from the
# first completion the broker counts to the last (its stats file,
# rewritten every 50 ms). Every business row once is checked after each.
# Phase "cluster": an HTTP route with rate_per_s RATE (env; default 50)
# and limit_scope "cluster" to a local destination answering 201 at once
# (tests/fakehttp/fakehttp.js); HN (env; default 400) messages, R
# replicas: the rate the destination saw (its ledger's request times),
# which should stay near RATE whatever R.
# Prints one table; a benchmark, not a test: nothing asserts a speed.
# PHASES="sql cluster" (env) runs only the phases named. POOL_SCOPE=process
# (env) runs the replicas with db.pool_scope process (each its whole pool,
# as before the default became cluster) instead of the default.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
N=${1:-40000}
shift || true
REPLICAS=("${@:-1}")
[ $# -gt 0 ] || REPLICAS=(1 2 4)
RATE=${RATE:-50}
HN=${HN:-400}
PHASES=${PHASES:-sql cluster}
build=${BUILD:-$root/build}
want() { [[ " $PHASES " == *" $1 "* ]]; }
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "bench: $build/$b missing; build first"; exit 2; }
done

W=$(mktemp -d /tmp/inboxd-replicas.XXXXXX); chmod 755 "$W"
pids=()
cleanup() {
  [ -n "${KEEP:-}" ] && return 0
  for p in "${pids[@]+"${pids[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
  "$root/tests/lib/pg.sh" stop "$W/pg" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
port=$("$root/tests/lib/pg.sh" start "$W/pg")
psql() { command psql -h 127.0.0.1 -p "$port" -U postgres -X -q "$@"; }
psql -c "CREATE DATABASE bench" >/dev/null
psql -d bench -c "CREATE TABLE items (id text PRIMARY KEY, n bigint NOT NULL, message_id text NOT NULL)" \
  -c "CREATE TABLE charges (order_id text PRIMARY KEY, charge_id text)" >/dev/null
queues=""
for r in "${REPLICAS[@]}"; do queues+="{\"name\":\"q$r\",\"lock_duration_s\":60},{\"name\":\"h$r\",\"lock_duration_s\":60},"; done
echo "{\"queues\":[${queues%,}]}" >"$W/topo.json"
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" \
  --stats-every-ms 50 >"$W/sbemu.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"
PG_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x"

completed() { # completed QUEUE -> the broker's count of completed messages
  jq -r --arg q "$1" '.entities[$q].completed // 0' "$W/stats.json" 2>/dev/null || echo 0
}

# run QUEUE COUNT R ROUTES -> "rate" (first completion to last)
run() {
  local q=$1 count=$2 r=$3 routes=$4 start="" i ps=()
  cat >"$W/$q.json" <<JSON
{"consumer": "bench", "servicebus": {"connection_string": "$SB_CS", "entity": "$q"},
 "db": {"connection_string": "$PG_CS", "dialect": "postgresql"${POOL_SCOPE:+, \"pool_scope\": \"$POOL_SCOPE\"}},
 "routes": $routes, "http": {"listen": ""}, "log": {"level": "warn"}}
JSON
  for i in $(seq 1 "$r"); do
    "$build/inboxd" --config "$W/$q.json" >"$W/$q.$i.log" 2>&1 &
    ps+=($!); pids+=($!)
  done
  while :; do
    n=$(completed "$q")
    [ -z "$start" ] && [ "$n" -gt 0 ] && start=$(date +%s.%N) && first=$n
    [ "$n" -ge "$count" ] && break
    sleep 0.05
  done
  end=$(date +%s.%N)
  for i in "${ps[@]}"; do kill -TERM "$i"; wait "$i" || true; done
  awk -v t=$((count - first)) -v s="$start" -v e="$end" 'BEGIN { printf "%.0f\n", (e > s) ? t / (e - s) : 0 }'
}

preload() { # preload QUEUE COUNT SUBJECT
  awk -v n="$2" -v q="$1" -v s="$3" 'BEGIN { pad = sprintf("%0900d", 0)
    for (i = 1; i <= n; i++)
      printf "{\"message_id\":\"%s-%d\",\"subject\":\"%s\",\"body\":{\"id\":\"%s-%d\",\"orderId\":\"%s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", q, i, s, q, i, q, i, i, pad }' >"$W/msgs.jsonl"
  "$build/inboxctl" send --connection-string "$SB_CS" --entity "$1" --file "$W/msgs.jsonl" 2>/dev/null
}

sql_routes='[{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
             "params": ["$.id", "$.n", "message_id"], "idempotency_key": "item:{$.id}"}]'
declare -A srate crate
if want sql; then
  for r in "${REPLICAS[@]}"; do
    echo "bench: sql, $r replica(s), $N messages" >&2
    preload "q$r" "$N" Item
    psql -d bench -c "TRUNCATE items" -c "CHECKPOINT" >/dev/null
    srate[$r]=$(run "q$r" "$N" "$r" "$sql_routes")
    got=$(psql -d bench -tAc "SELECT count(*) FROM items")
    [ "$got" = "$N" ] || { echo "bench: $got rows for $N messages" >&2; exit 1; }
    dup=$(psql -d bench -tAc "SELECT count(*) - count(DISTINCT message_id) FROM items")
    echo "bench:   ${srate[$r]} msg/s, applied twice $dup" >&2
  done
fi

if want cluster; then
  node "$root/tests/fakehttp/fakehttp.js" --mode idempotent --detach >"$W/dest.port" 2>"$W/dest.log" &
  pids+=($!)
  for _ in $(seq 1 100); do dport=$(head -n 1 "$W/dest.port" 2>/dev/null || true); [ -n "$dport" ] && break; sleep 0.05; done
  http_routes='[{"match": "*", "idempotency_key": "charge:{$.orderId}",
    "http": {"method": "POST", "url": "http://127.0.0.1:'"$dport"'/charges", "body": "body",
             "idempotency_header": "Idempotency-Key", "idempotent": true, "remote_id": "$.id",
             "rate_per_s": '"$RATE"', "limit_scope": "cluster"},
    "sql": ["INSERT INTO charges (order_id, charge_id) VALUES (?, ?)"],
    "params": [["$.orderId", "response:$.id"]]}]'
  for r in "${REPLICAS[@]}"; do
    echo "bench: cluster rate $RATE/s, $r replica(s), $HN messages" >&2
    curl -sf -X POST "http://127.0.0.1:$dport/_reset" >/dev/null
    preload "h$r" "$HN" Charge
    run "h$r" "$HN" "$r" "$http_routes" >/dev/null
    crate[$r]=$(curl -sf "http://127.0.0.1:$dport/_ledger" |
      jq '[.requests[] | .t] | sort | ((length - 1) * 1000 / (.[-1] - .[0]) * 10 | round / 10)')
    echo "bench:   destination saw ${crate[$r]} requests/s" >&2
  done
fi

printf "%-10s %12s %10s %22s\n" replicas "sql msg/s" "/ one" "cluster rate (of $RATE)"
for r in "${REPLICAS[@]}"; do
  one=${srate[${REPLICAS[0]}]:-0}
  printf "%-10s %12s %10s %22s\n" "$r" "${srate[$r]:--}" \
    "$(awk -v a="${srate[$r]:-0}" -v b="$one" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
    "${crate[$r]:--}"
done
