#!/usr/bin/env bash
# soak - N messages through inboxd in batch mode while faults fire at
# random: kill -9 of inboxd (restarted at once), PostgreSQL crashed and
# restarted, and sbemu dropping every connection every few seconds. At the
# end the queue must be empty and every message applied exactly once.
#
#   tests/soak/run.sh [N] [SEED]      (defaults 20000, random)
#
# Prints: sent, applied, duplicates suppressed (redeliveries the inbox
# turned away), dead-lettered, lost, applied twice, and the faults fired.
# Exit status 0 when nothing was lost, applied twice or dead-lettered.
# Environment: BUILD (default build/), SOAK_BATCH (db.batch_max),
# SOAK_FAULT_S (mean seconds between faults, default 2), SOAK_FAULTS ("kill",
# "pg" or the default "kill pg": which faults fire), SOAK_RATE (messages sent
# per second, default 2000), SOAK_TIMEOUT_S.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-20000}
SEED=${2:-$RANDOM}
build=${BUILD:-$root/build}
FAULT_S=${SOAK_FAULT_S:-2}
RATE=${SOAK_RATE:-2000} # messages sent per second, so that faults meet traffic
TIMEOUT_S=${SOAK_TIMEOUT_S:-$((600 + N / 50))}
CHUNK=1000
RANDOM=$SEED
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "soak: $build/$b missing; build first"; exit 2; }
done

W=$(mktemp -d /tmp/inboxd-soak.XXXXXX); chmod 755 "$W"
ipid="" spid="" epid=""
cleanup() {
  for p in $ipid $spid $epid; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$root/tests/lib/pg.sh" stop "$W/pg" >/dev/null 2>&1 || true
  [ "${SOAK_KEEP:-0}" = 1 ] && echo "soak: work dir kept: $W" || rm -rf "$W"
}
trap cleanup EXIT
log() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

port=$("$root/tests/lib/pg.sh" start "$W/pg")
psql() { command psql -h 127.0.0.1 -p "$port" -U postgres -X -q -t -A "$@"; }
psql -c "CREATE DATABASE soak" >/dev/null
# No key on id: a message applied twice shows up as two rows.
psql -d soak -c "CREATE TABLE items (id text NOT NULL, n bigint NOT NULL, message_id text NOT NULL)" >/dev/null

# Duplicate detection lets the sender resend a chunk cut off by a dropped
# connection without sending any message twice.
cat >"$W/topo.json" <<'JSON'
{"queues":[{"name":"soak","lock_duration_s":5,"max_delivery_count":100,
            "duplicate_detection_window_s":86400}]}
JSON
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" \
  --fault-drop-every-ms $((FAULT_S * 2500)) >"$W/sbemu.log" 2>&1 &
epid=$!
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=soak;SharedAccessKey=soak;UseDevelopmentEmulator=true"
for _ in $(seq 1 100); do [ -s "$W/stats.json" ] && break; sleep 0.05; done
# broker_stat FIELD: a counter of the soak queue; a missing file or field ends
# the run (from the sender too) rather than reading as 0.
broker_stat() {
  jq -er --arg f "$1" '.entities.soak[$f] // error("no field")' "$W/stats.json" 2>/dev/null \
    || { echo "soak: FAIL: no stats field soak.$1 in $W/stats.json" >&2; kill -TERM $$; exit 1; }
}

# The sender: chunks of CHUNK messages, each resent until it goes through.
sender() {
  for ((first = 1; first <= N; first += CHUNK)); do
    awk -v a="$first" -v b=$((first + CHUNK - 1)) -v n="$N" 'BEGIN {
      for (i = a; i <= b && i <= n; i++)
        printf "{\"message_id\":\"s-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s-%d\",\"n\":%d,\"pad\":\"%0200d\"}}\n", i, i, i, 0 }' >"$W/chunk.jsonl"
    until "$build/inboxctl" send --connection-string "$SB_CS" --entity soak --file "$W/chunk.jsonl" 2>>"$W/send.log"; do
      sleep 0.5
    done
    sleep "$(awk -v c=$CHUNK -v r="$RATE" 'BEGIN { printf "%.3f", c / r }')"
    # Keep the broker's backlog bounded (its memory), as a real producer would be.
    while [ $(( $(broker_stat active) + $(broker_stat locked) )) -gt 50000 ]; do sleep 0.5; done
  done
  touch "$W/sent"
}
sender &
spid=$!

cat >"$W/inboxd.json" <<JSON
{"consumer": "soak", "servicebus": {"connection_string": "$SB_CS", "entity": "soak",
  "prefetch": 64, "max_concurrent_calls": 64, "reconnect_max_ms": 1000},
 "db": {"connection_string": "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=soak;Uid=postgres;Pwd=x",
        "dialect": "postgresql", "pool_size": 4, "statement_timeout_s": 10${SOAK_BATCH:+, \"batch_max\": $SOAK_BATCH}},
 "routes": [{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
             "params": ["\$.id", "\$.n", "message_id"], "idempotency_key": "item:{\$.id}"}],
 "retry": {"attempts": 5, "base_ms": 100, "max_ms": 2000},
 "shutdown": {"drain_timeout_s": 10}, "http": {"listen": ""}, "log": {"level": "info"}}
JSON

dups=0 kills=0 pg_restarts=0 starts=0
# Counts the duplicates an inboxd run turned away, from its msg_done lines, and drops its log.
harvest() {
  [ -f "$W/inboxd.log" ] || return 0
  dups=$((dups + $(grep -c '"result":"duplicate"' "$W/inboxd.log" || true)))
  mv "$W/inboxd.log" "$W/inboxd.$starts.log" # read back when something was lost
}
start_inboxd() {
  harvest
  "$build/inboxd" --config "$W/inboxd.json" >"$W/inboxd.log" 2>&1 &
  ipid=$!
  starts=$((starts + 1))
}
fault() {
  local pick=$((RANDOM % 3))
  case "${SOAK_FAULTS:-kill pg}" in
  kill) pick=0 ;;
  pg) pick=2 ;;
  esac
  case $pick in
  0 | 1)
    kill -9 "$ipid" 2>/dev/null || true
    wait "$ipid" 2>/dev/null || true
    kills=$((kills + 1))
    start_inboxd
    ;;
  2)
    "$root/tests/lib/pg.sh" kill "$W/pg" >/dev/null
    sleep 0.$((RANDOM % 10))
    "$root/tests/lib/pg.sh" start "$W/pg" "$port" >/dev/null
    pg_restarts=$((pg_restarts + 1))
    ;;
  esac
}

t_start=$(date +%s)
start_inboxd
next=$(( $(date +%s) + 1 + RANDOM % (2 * FAULT_S) ))
while :; do
  now=$(date +%s)
  [ $((now - t_start)) -lt "$TIMEOUT_S" ] || { log "timed out after ${TIMEOUT_S}s"; break; }
  if ! kill -0 "$ipid" 2>/dev/null; then
    wait "$ipid" 2>/dev/null || true
    log "inboxd exited on its own; restarting"
    start_inboxd
  fi
  # The stats file is rewritten every second: done once it has seen every
  # message stored and none left.
  if [ -f "$W/sent" ] && [ "$(broker_stat sent)" -ge "$N" ] && [ "$(broker_stat active)" = 0 ] &&
     [ "$(broker_stat locked)" = 0 ]; then
    break
  fi
  if [ "$now" -ge "$next" ]; then
    fault
    next=$(( now + 1 + RANDOM % (2 * FAULT_S) ))
  fi
  sleep 0.2
done
kill -TERM "$ipid" 2>/dev/null || true
wait "$ipid" 2>/dev/null || true
harvest
elapsed=$(( $(date +%s) - t_start ))

applied=$(psql -d soak -c "SELECT count(DISTINCT id) FROM items")
twice=$(psql -d soak -c "SELECT count(*) - count(DISTINCT id) FROM items")
dead=$(broker_stat dead_lettered)
sent=$(( $(broker_stat sent) ))
lost=$((N - applied - dead))
forced=$(jq -er '.connections.forced_closed' "$W/stats.json") \
  || { echo "soak: FAIL: no connections.forced_closed in $W/stats.json" >&2; exit 1; }
cat <<EOF
soak: seed $SEED, ${elapsed}s, batch_max ${SOAK_BATCH:-default}
sent:                  $sent (of $N)
applied:               $applied
duplicates suppressed: $dups
dead-lettered:         $dead
lost:                  $lost
applied twice:         $twice
faults:                $kills kill -9 of inboxd, $pg_restarts PostgreSQL crash+restart, $forced connections dropped by sbemu
EOF
# What became of a few of the messages not applied: their inbox row, and
# what every inboxd run logged of them.
if [ "$lost" != 0 ]; then
  psql -d soak -c "SELECT i FROM generate_series(1, $N) i WHERE NOT EXISTS
                     (SELECT 1 FROM items WHERE id = 's-' || i) ORDER BY i LIMIT 5" |
  while read -r i; do
    echo "--- s-$i: inbox row: $(psql -d soak -c "SELECT status || ' ' || coalesce(error_class, '-') FROM inboxd_inbox WHERE message_id = 's-$i'")"
    grep -h "\"message_id\":\"s-$i\"" "$W"/inboxd.*.log | cut -c1-600 || true
  done
fi
[ "$sent" = "$N" ] && [ "$lost" = 0 ] && [ "$twice" = 0 ] && [ "$dead" = 0 ]
