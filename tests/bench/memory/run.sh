#!/usr/bin/env bash
# memory - inboxd's peak RSS against servicebus.max_held_mb when large
# messages are mixed with small ones (sbemu at Premium's 100 MB limit).
#
#   tests/bench/memory/run.sh            (every mix at budgets 16 and 64 MiB,
#                                          and at 16 with the entity poll off)
#   MIXES="8:24:240 100:2:20" BUDGETS="16" NOPOLL_BUDGETS="" tests/bench/memory/run.sh
#
# A mix SIZE_MIB:LARGE:SMALL sends LARGE messages of SIZE_MIB MiB JSON, one
# after every SMALL/LARGE messages of 1 KiB (SMALL of them alone when LARGE
# is 0), into a queue of their own, then runs inboxd at its defaults but for
# max_held_mb until the broker has had every one of them settled (its stats,
# not a timer). Prints one line per run: the mix, the budget, the process's
# peak RSS (VmHWM) and the business rows written (all of them, or it stops).
# Each mix runs at every budget of BUDGETS, then at every budget of
# NOPOLL_BUDGETS with servicebus.entity_poll_s 0. SB_EXTRA (env) adds
# servicebus settings to every run. Not a test: nothing here asserts a figure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$root/build}
MIXES=${MIXES:-0:0:240 8:24:240 16:10:100 100:2:20}
BUDGETS=${BUDGETS-16 64}
NOPOLL_BUDGETS=${NOPOLL_BUDGETS-16}
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "bench: $build/$b missing; build first"; exit 2; }
done

W=$(mktemp -d /tmp/inboxd-mem.XXXXXX); chmod 755 "$W"
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
PG_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x"

# One queue per run: q1, q2, ...
runs=0
for _ in $MIXES; do for _ in $BUDGETS $NOPOLL_BUDGETS; do runs=$((runs + 1)); done; done
jq -n --argjson n "$runs" '{queues: [range(1; $n + 1) | {name: "q\(.)", lock_duration_s: 60, max_delivery_count: 10}]}' >"$W/topo.json"
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" \
  --stats-every-ms 100 --max-message-bytes 104857600 >"$W/sbemu.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"

# mix_file SIZE_MIB LARGE SMALL > jsonl (a large body stays under the broker's limit)
mix_file() {
  awk -v mib="$1" -v nl="$2" -v ns="$3" 'BEGIN {
    big = "0"; want = mib * 1048576 - 4096
    while (length(big) < want) big = big big
    big = substr(big, 1, want); small = sprintf("%0960d", 0)
    every = nl > 0 ? int(ns / nl) : 0; k = 0
    if (nl == 0) for (j = 0; j < ns; j++) { k++
      printf "{\"message_id\":\"s-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", k, k, k, small }
    for (i = 1; i <= nl; i++) {
      for (j = 0; j < every; j++) { k++
        printf "{\"message_id\":\"s-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", k, k, k, small }
      printf "{\"message_id\":\"l-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"l-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", i, i, i, big } }'
}

# Whether the broker has handed over, and had settled, every message queue $1
# received: at least $2, and any that inboxctl send sent again after a
# failure (an inbox duplicate, completed as well).
all_settled() {
  jq -e --arg q "$1" --argjson n "$2" '.entities[$q] | .completed + .dead_lettered == .sent and
    .sent >= $n and .active == 0 and .locked == 0' "$W/stats.json" >/dev/null 2>&1
}

routes='[{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
          "params": ["$.id", "$.n", "message_id"], "idempotency_key": "item:{$.id}"}]'
q=0
for mix in $MIXES; do
  IFS=: read -r mib nl ns <<<"$mix"
  mix_file "$mib" "$nl" "$ns" >"$W/msgs.jsonl"
  total=$((nl + ns))
  for run in $BUDGETS $(for b in $NOPOLL_BUDGETS; do echo "$b-nopoll"; done); do
    budget=${run%-nopoll} extra=
    [ "$run" = "$budget" ] || extra='"entity_poll_s": 0'
    extra=${extra}${SB_EXTRA:+${extra:+, }$SB_EXTRA}
    q=$((q + 1))
    "$build/inboxctl" send --connection-string "$SB_CS" --entity "q$q" --file "$W/msgs.jsonl" >/dev/null 2>&1
    psql -d bench -c "TRUNCATE items" -c "DO \$\$ BEGIN IF to_regclass('inboxd_inbox') IS NOT NULL THEN TRUNCATE inboxd_inbox; END IF; END \$\$" >/dev/null
    cat >"$W/q$q.json" <<JSON
{"consumer": "q$q", "servicebus": {"connection_string": "$SB_CS", "entity": "q$q", "max_held_mb": $budget${extra:+, $extra}},
 "db": {"connection_string": "$PG_CS", "dialect": "postgresql"}, "routes": $routes,
 "http": {"listen": ""}, "log": {"level": "warn"}}
JSON
    "$build/inboxd" --config "$W/q$q.json" >"$W/q$q.log" 2>&1 &
    ipid=$!; pids+=($ipid)
    until all_settled "q$q" "$total"; do
      kill -0 $ipid 2>/dev/null || { echo "bench: inboxd died" >&2; tail "$W/q$q.log" >&2; exit 1; }
      sleep 0.2
    done
    peak=$(awk '$1 == "VmHWM:" { printf "%.1f", $2 / 1024 }' "/proc/$ipid/status")
    kill -TERM $ipid; wait $ipid || true
    rows=$(psql -d bench -tAc "SELECT count(*) FROM items")
    [ "$rows" = "$total" ] || { echo "bench: $rows business rows for $total messages" >&2; exit 1; }
    if [ "$nl" = 0 ]; then name="$ns small"; else name="$mib MiB x $nl + $ns small"; fi
    printf '%s, max_held_mb %s%s: peak RSS %s MiB, %s rows\n' "$name" "$budget" "${extra:+ ($extra)}" "$peak" "$rows"
  done
done
