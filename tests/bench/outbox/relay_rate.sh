#!/usr/bin/env bash
# relay_rate - the outbox relay's publishing rate in the same run as the
# inbox rate it serves, on one PostgreSQL server and one sbemu.
#
#   tests/bench/outbox/relay_rate.sh [N] [CONCURRENCY]      (defaults 5000, 0)
#
# CONCURRENCY 0 runs inboxd at its defaults (nothing set but the route,
# the connections and outbox.batch); another number sets
# servicebus.max_concurrent_calls to it and prefetch to four times it.
# Phase 1: inboxd applies N messages with a one-insert route (no emit).
# Phase 2: inboxd applies N fresh messages with the same route plus one
# emit per message (relay in the same process, target queue with duplicate
# detection). The inbox's rate is timed from its first business row's
# commit to its last (clock_timestamp() in the row), so start-up is not
# counted; the relay's from that first commit until the broker holds all N.
# Prints messages/s for both, rows published/s, and the ratios.
# Phase 3: N rows inserted by one application transaction, published by
# inboxd --relay-only alone: the relay's own ceiling, timed from the first
# row in the queue to the last. Not a test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
N=${1:-5000}
C=${2:-0}
build=${BUILD:-$root/build}
W=$(mktemp -d /tmp/inboxd-relay-bench.XXXXXX); chmod 755 "$W"
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
echo '{"queues":[{"name":"q1"},{"name":"q2"},{"name":"out","duplicate_detection_window_s":600}]}' >"$W/topo.json"
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" --stats-every-ms 50 >"$W/sbemu.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"
DB_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x"
for _ in $(seq 1 100); do [ -s "$W/stats.json" ] && break; sleep 0.05; done
# broker_stat ENTITY FIELD: a counter from sbemu's stats file; a missing file,
# entity or field ends the run rather than reading as 0.
broker_stat() {
  jq -er --arg e "$1" --arg f "$2" '.entities[$e][$f] // error("absent")' "$W/stats.json" 2>/dev/null \
    || { echo "relay_rate: FAIL: no stats $1.$2 in $W/stats.json" >&2; kill -TERM $$; exit 1; }
}

# cpu_s PID: the CPU seconds (user + system) PID has used so far.
ticks=$(getconf CLK_TCK)
cpu_s() { awk -v t="$ticks" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
emu_pid=${pids[0]}

# run PHASE QUEUE EMIT_JSON: prints "start inbox_done relay_done inboxd_cpu_s sbemu_cpu_s".
run() {
  local q=$2 emit=$3
  psql -d bench -c "CREATE TABLE items_$1 (id text PRIMARY KEY, n bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null
  awk -v n="$N" -v p="$1" 'BEGIN { pad = sprintf("%0960d", 0)
    for (i = 1; i <= n; i++) printf "{\"message_id\":\"%s-%d\",\"body\":{\"id\":\"%s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", p, i, p, i, i, pad }' >"$W/$1.jsonl"
  "$build/inboxctl" send --connection-string "$SB_CS" --entity "$q" --file "$W/$1.jsonl" 2>/dev/null
  jq -n --arg sb "$SB_CS" --arg db "$DB_CS" --arg q "$q" --arg sql "INSERT INTO items_$1 (id, n) VALUES (?, ?)" \
    --argjson emit "$emit" --argjson c "$C" '{consumer: $q,
     servicebus: ({connection_string: $sb, entity: $q}
                  + (if $c > 0 then {prefetch: ($c * 4), max_concurrent_calls: $c} else {} end)),
     db: {connection_string: $db, dialect: "postgresql"},
     routes: [{match: "*", sql: $sql, params: ["$.id", "$.n"], idempotency_key: "item:{$.id}"}
              + (if $emit then {emit: $emit} else {} end)],
     outbox: {batch: 100}, http: {listen: ""}, log: {level: "warn"}}' >"$W/$1.json"
  "$build/inboxd" --config "$W/$1.json" >"$W/$1.log" 2>&1 &
  local ipid=$! t0 ti="" tr="" e0 ic
  pids+=($ipid)
  e0=$(cpu_s "$emu_pid")
  t0=$(date +%s.%N)
  while :; do
    [ -z "$ti" ] && [ "$(broker_stat "$q" completed)" -ge "$N" ] && ti=$(date +%s.%N)
    if [ -n "$ti" ]; then
      if [ "$emit" = null ] || [ "$(broker_stat out sent)" -ge "$N" ]; then tr=$(date +%s.%N); break; fi
    fi
    kill -0 $ipid 2>/dev/null || { echo "bench: inboxd died" >&2; tail "$W/$1.log" >&2; exit 1; }
    sleep 0.02
  done
  ic=$(cpu_s "$ipid")
  kill -TERM $ipid; wait $ipid || true
  # The first and last business commits, on the machine's clock as date's.
  read -r t0 ti < <(psql -d bench -tAc "SELECT extract(epoch FROM min(at)), extract(epoch FROM max(at)) FROM items_$1" | tr '|' ' ')
  echo "$t0 $ti $tr $ic $(awk -v a="$e0" -v b="$(cpu_s "$emu_pid")" 'BEGIN { printf "%.3f", b - a }')"
}
read -r a0 ai _ ac ae < <(run p1 q1 null)
read -r b0 bi br bc be < <(run p2 q2 '[{"entity": "out", "message_id": "out:{$.id}", "body": "$.id", "properties": {"n": "$.n"}}]')
published=$(psql -d bench -tAc "SELECT count(*) FROM inboxd_outbox WHERE status = 'published'")
[ "$published" = "$N" ] || { echo "bench: $published of $N outbox rows published"; exit 1; }
# Phase 3: the relay alone on a backlog of N application rows.
psql -d bench -c "INSERT INTO inboxd_outbox (entity, message_id, body) SELECT 'out', 'app-' || i, '{}' FROM generate_series(1, $N) i" >/dev/null
"$build/inboxd" --relay-only --config "$W/p2.json" >"$W/relay.log" 2>&1 &
rpid=$!
pids+=($rpid)
# Timed from the first row in the queue to the last: the process's start
# (connections, authorization, attach) is not the relay's rate.
while [ "$(broker_stat out sent)" -le "$N" ]; do
  kill -0 $rpid 2>/dev/null || { echo "bench: relay died" >&2; exit 1; }
  sleep 0.01
done
c0=$(date +%s.%N)
s0=$(broker_stat out sent)
while [ "$(broker_stat out sent)" -lt $((2 * N)) ]; do
  kill -0 $rpid 2>/dev/null || { echo "bench: relay died" >&2; exit 1; }
  sleep 0.02
done
c1=$(date +%s.%N)
kill -TERM $rpid; wait $rpid || true
awk -v n="$N" -v s0="$s0" -v c0="$c0" -v c1="$c1" 'BEGIN { printf "relay alone (--relay-only, a backlog of %d rows): %.0f rows/s\n", n, (2 * n - s0) / (c1 - c0) }'
awk -v n="$N" -v c="$C" -v ac="$ac" -v ae="$ae" -v bc="$bc" -v be="$be" -v a0="$a0" -v ai="$ai" -v b0="$b0" -v bi="$bi" -v br="$br" 'BEGIN {
  printf "messages: %d (1 KiB JSON), %s, PostgreSQL, relay batch 100\n", n, (c > 0 ? "concurrency " c : "inboxd at its defaults")
  printf "inbox without emit:          %.0f msg/s\n", n / (ai - a0)
  printf "inbox with one emit/message: %.0f msg/s\n", n / (bi - b0)
  printf "ratio with emit / without:   %.2f\n", (n / (bi - b0)) / (n / (ai - a0))
  printf "relay (same run):            %.0f rows/s published (all %d in the queue after %.1f s)\n", n / (br - b0), n, br - b0
  printf "ratio relay / inbox-with-emit: %.2f\n", (n / (br - b0)) / (n / (bi - b0))
  printf "CPU ms per 1,000 messages, inboxd (its relay included) / sbemu: without emit %.1f / %.1f, with %.1f / %.1f\n", ac * 1e6 / n, ae * 1e6 / n, bc * 1e6 / n, be * 1e6 / n
}'
