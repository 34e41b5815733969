#!/usr/bin/env bash
# throughput - inboxd against PostgreSQL's own rate for the same transaction
# and against a peer built on the official Azure SDK, all in ONE run on the
# same sbemu and the same PostgreSQL server.
#
#   tests/bench/throughput/run.sh [N] [CONCURRENCY]      (defaults 20000, 8)
#
# Phases (each on an empty inbox and business table, N messages of 1 KiB
# JSON preloaded into a queue of their own before the clock starts):
# CONCURRENCY is the number of database connections of each contender.
#   pgbench     the identical transaction (inbox insert + business insert +
#               commit), CONCURRENCY clients, N transactions: the database's
#               own one-transaction-per-message rate
#   per-message inboxd, db.batch_max 1
#   batch       inboxd, db.batch_max BATCH (env; default: inboxd's default),
#               CALLS messages in flight (env; default 32 x CONCURRENCY)
#   sdk peer    @azure/service-bus subscribe + node-postgres, same transaction
#               (tests/bench/throughput/peer; installed here with npm ci)
#   sessions    inboxd batch mode, SESSIONS x PER_SESSION messages on a
#               session queue (env; default 100 x 200)
#   sqlite      inboxd batch mode on a SQLite file
#   defaults    inboxd with nothing set but the connection strings and the
#               route: the speed a user gets without tuning
#   ws          as defaults, with servicebus.transport websockets: AMQP through
#               the WebSocket bridge to sbemu's --ws-listen (plain ws://, so
#               the ratio to defaults is the bridge's cost without TLS)
#   large       inboxd at its defaults on LARGE_N messages of LARGE_KIB KiB
#               (env; default 200 x 1024): peak RSS against the byte budget
#   latency     inboxd at its defaults, one message every 100 ms for 20 s:
#               enqueued -> committed p50 / p99 (the inbox row's enqueued_at
#               and processed_at)
#   traced      as defaults, with every message traced (sampler always_on)
#               to tests/otel/receiver.mjs --count (it counts the spans and
#               records nothing): CPU per 1,000 beside defaults, and the
#               spans the collector received per message
#   traced_default  as traced at the default sampler (parentbased_traceidratio
#               at 0.01) with messages that carry no trace context: 1 in 100
#               the root of a trace of its own, the others not traced
#   slow        four messages whose SQL sleeps 3 s, four db workers, batches
#               on, against one transaction per message: the time of each
#   http        an HTTP route at inboxd's defaults to a local destination
#               answering 201 at once (tests/fakehttp/fakehttp.js, idempotent:
#               its ledger counts one effect per key), the finishing SQL the
#               business insert; against the SDK peer of an HTTP route
#               (peer/peer-http.mjs: claim -> POST with the key -> finish ->
#               complete, maxConcurrentCalls CONCURRENCY), same messages,
#               same database, same destination
# Prints rates, the ratios, inboxd's CPU ms per 1,000 messages and its peak
# RSS. A rate is timed from the first completed message to the last (inboxd:
# the broker's stats file, rewritten every 50 ms; the peer: its own), as
# pgbench's leaves out its connections; CPU and RSS cover the whole process. Not a test: nothing here asserts a speed. SKIP_PEER=1 skips the peer;
# PHASES="pm pgbench batch" (env) runs only the phases named (default: all).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/tests/bench/throughput
N=${1:-20000}
C=${2:-8}
BATCH=${BATCH:-}
CALLS=${CALLS:-$((C * 32))} # messages in flight in batch mode
SESSIONS=${SESSIONS:-100}
PER_SESSION=${PER_SESSION:-200}
build=${BUILD:-$root/build}
PHASES=${PHASES:-pm pgbench batch defaults ws traced traced_default peer sessions sqlite large latency slow http}
LARGE_N=${LARGE_N:-200}
LARGE_KIB=${LARGE_KIB:-1024}
[ "${SKIP_PEER:-0}" = 1 ] && PHASES=${PHASES//peer/}
want() { [[ " $PHASES " == *" $1 "* ]]; }
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "bench: $build/$b missing; build first (cmake -S . -B build && cmake --build build)"; exit 2; }
done
command -v pgbench >/dev/null || { echo "bench: pgbench missing (apt-get install postgresql-contrib)"; exit 2; }
command -v jq >/dev/null || { echo "bench: jq missing"; exit 2; }

# The peer's npm packages: scripts/test installs only tests/*/, so install here.
if { want peer || { want http && [ "${SKIP_PEER:-0}" != 1 ]; }; } && { [ ! -f "$here/peer/node_modules/.package-lock.json" ] ||
     [ "$here/peer/package-lock.json" -nt "$here/peer/node_modules/.package-lock.json" ]; }; then
  echo "bench: npm ci in tests/bench/throughput/peer" >&2
  (cd "$here/peer" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

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

cat >"$W/topo.json" <<'JSON'
{"queues":[{"name":"pm","lock_duration_s":60,"max_delivery_count":10},
           {"name":"batch","lock_duration_s":60,"max_delivery_count":10},
           {"name":"peer","lock_duration_s":60,"max_delivery_count":10},
           {"name":"sess","lock_duration_s":60,"max_delivery_count":10,"requires_session":true},
           {"name":"lite","lock_duration_s":60,"max_delivery_count":10},
           {"name":"dflt","lock_duration_s":60,"max_delivery_count":10},
           {"name":"dfws","lock_duration_s":60,"max_delivery_count":10},
           {"name":"traced","lock_duration_s":60,"max_delivery_count":10},
           {"name":"traced_default","lock_duration_s":60,"max_delivery_count":10},
           {"name":"large","lock_duration_s":60,"max_delivery_count":10},
           {"name":"lat","lock_duration_s":60,"max_delivery_count":10},
           {"name":"slow1","lock_duration_s":60,"max_delivery_count":10},
           {"name":"slowb","lock_duration_s":60,"max_delivery_count":10},
           {"name":"http","lock_duration_s":60,"max_delivery_count":10},
           {"name":"httppeer","lock_duration_s":60,"max_delivery_count":10}]}
JSON
# Completion is timed by the stats file: rewritten every 50 ms, not every second.
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" \
  --stats-every-ms 50 --max-message-bytes 104857600 --ws-listen 127.0.0.1:0 >"$W/sbemu.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"
ws_port=$(head -n 1 "$W/sbemu.log" | jq -r '.ws_port')
SB_WS_CS=${SB_CS/:$emu_port\//:$ws_port\/}
PG_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x"

# preload QUEUE COUNT [SESSIONS]: 1 KiB JSON bodies (round-robin sessions when given)
preload() {
  awk -v n="$2" -v q="$1" -v s="${3:-0}" 'BEGIN { pad = sprintf("%0960d", 0)
    for (i = 1; i <= n; i++) {
      sess = s > 0 ? sprintf("\"session_id\":\"s%d\",", i % s) : ""
      printf "{\"message_id\":\"%s-%d\",%s\"subject\":\"Item\",\"body\":{\"id\":\"%s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", q, i, sess, q, i, i, pad } }' >"$W/msgs.jsonl"
  "$build/inboxctl" send --connection-string "$SB_CS" --entity "$1" --file "$W/msgs.jsonl" 2>/dev/null
}

# Empty tables and a checkpoint, so that every phase starts alike.
reset_db() {
  psql -d bench -c "TRUNCATE items" -c "DO \$\$ BEGIN IF to_regclass('inboxd_inbox') IS NOT NULL THEN TRUNCATE inboxd_inbox; END IF; END \$\$" -c "CHECKPOINT" >/dev/null
}

# The broker's count of completed messages of entity $1, read with bash
# builtins only: the poll runs 20 times a second beside the contender being
# measured, and a jq per poll cost some 6 % of the machine's CPU.
# Sets n_completed (a command substitution would fork).
completed() {
  local stats="" re="\"$1\":\\{[^}]*\"completed\":([0-9]+)"
  read -r -d '' stats <"$W/stats.json" 2>/dev/null || true
  n_completed=0
  [[ $stats =~ $re ]] && n_completed=${BASH_REMATCH[1]}
  return 0
}
exec {tick_fd}<> <(:) # read -t on it is a sleep without a process

# The bench database's committed transactions so far (its backends report
# theirs when they exit, so read it after inboxd has stopped).
commits() { psql -d bench -tAc "SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'"; }

# run_inboxd NAME QUEUE COUNT CALLS DB_JSON SB_EXTRA_JSON -> "rate cpu_ms_per_1000 peak_mib"
# (and $W/NAME.txns: its PostgreSQL transactions per 1,000 messages, which
# the CPU per message follows: batches form from what is in flight)
# (C database connections; CALLS messages in flight, as many again prefetched)
# (the route: ROUTES when set, otherwise the SQL route of the items)
sql_routes='[{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
             "params": ["$.id", "$.n", "message_id"], "idempotency_key": "item:{$.id}"}]'
run_inboxd() {
  local routes=${ROUTES:-$sql_routes}
  local name=$1 q=$2 count=$3 calls=$4 db=$5 sbx=$6 top=${7:-} ipid start="" end peak=0 done0 first k v
  local tuning=', "prefetch": '$calls', "max_concurrent_calls": '$calls
  [ "$calls" = default ] && tuning=""
  cat >"$W/$name.json" <<JSON
{"consumer": "$name", "servicebus": {"connection_string": "$SB_CS", "entity": "$q"
  $tuning $sbx},
 "db": $db,
 "routes": $routes,
 "http": {"listen": ""}, "log": {"level": "warn"} $top}
JSON
  completed "$q"; done0=$n_completed
  local x0; x0=$(commits)
  "$build/inboxd" --config "$W/$name.json" >"$W/$name.log" 2>&1 &
  ipid=$!
  pids+=($ipid)
  # The clock starts at the first completion the broker counts, as
  # pgbench's rate leaves out its connections: inboxd's start, connects and
  # migration are not part of its rate (its CPU figure keeps them).
  while :; do
    # The broker's stats file says when all are completed; polling the
    # database instead would load the server being measured.
    completed "$q"
    if [ -z "$start" ] && [ "$n_completed" -gt "$done0" ]; then
      start=$(date +%s.%N); first=$n_completed
    fi
    [ "$n_completed" -ge $((done0 + count)) ] && break
    kill -0 $ipid 2>/dev/null || { echo "bench: inboxd ($name) died" >&2; tail "$W/$name.log" >&2; exit 1; }
    read -r -t 0.05 -u "$tick_fd" _ || true
  done
  end=$(date +%s.%N)
  # VmHWM is the peak resident set size of the process's whole life.
  while read -r k v _; do [ "$k" = VmHWM: ] && peak=$v; done <"/proc/$ipid/status"
  local cpu
  # CPU in nanoseconds, the sum over the process's threads (all alive until
  # it exits): the 10 ms ticks of /proc/PID/stat would be ±0.5 ms per 1,000
  # at 20,000 messages.
  cpu=$(cat /proc/$ipid/task/*/schedstat | awk '{ s += $1 } END { printf "%.6f", s / 1e9 }')
  kill -TERM $ipid; wait $ipid || true
  sleep 0.5 # the backends' exits
  echo "$(( $(commits) - x0 )) $count" | awk '{ printf "%.0f\n", $1 / $2 * 1000 }' >"$W/$name.txns"
  awk -v n="$count" -v timed=$((done0 + count - first)) -v s="$start" -v e="$end" -v cpu="$cpu" \
    -v rss="$peak" 'BEGIN { printf "%.0f %.1f %.1f\n", (e > s ? timed / (e - s) : 0), cpu / n * 1e6, rss / 1024 }'
}

check_rows() {
  local want=$1 got
  got=$(psql -d bench -tAc "SELECT count(*) FROM items")
  [ "$got" = "$want" ] || { echo "bench: $got business rows for $want messages" >&2; exit 1; }
}

pg_db='{"connection_string": "'"$PG_CS"'", "dialect": "postgresql", "pool_size": '$C', "batch_max": 1}'
batch_db='{"connection_string": "'"$PG_CS"'", "dialect": "postgresql", "pool_size": '$C${BATCH:+', "batch_max": '$BATCH}'}'

pgb=0 pm_rate=0 pm_cpu=0 pm_rss=0 b_rate=0 b_cpu=0 b_rss=0
s_rate=0 s_cpu=0 s_rss=0 l_rate=0 l_cpu=0 l_rss=0
# inboxd creates the inbox table; pgbench writes the same table, so without
# the per-message phase the table comes from the dialect's schema script.
want pm || sed 's/\binbox\b/inboxd_inbox/g' "$root/db/schema/postgresql.sql" | psql -d bench >/dev/null
if want pm; then
  echo "bench: per-message" >&2
  preload pm "$N"
  reset_db
  read -r pm_rate pm_cpu pm_rss < <(run_inboxd pm pm "$N" "$C" "$pg_db" "")
  check_rows "$N"
  echo "bench:   $pm_rate msg/s, $pm_cpu CPU ms/1000, $pm_rss MiB" >&2
fi

if want pgbench; then
  echo "bench: pgbench" >&2
  reset_db
  cat >"$W/txn.sql" <<'SQL'
\set r random(1, 1000000000000)
BEGIN;
INSERT INTO inboxd_inbox (consumer, message_id, idempotency_key, body_sha256, status, entity, sequence_number, delivery_count, enqueued_at, received_at, processed_at)
  VALUES ('pgbench', 'p-' || CAST(:client_id AS text) || '-' || CAST(:r AS text), 'item:p-' || CAST(:client_id AS text) || '-' || CAST(:r AS text), '0000000000000000000000000000000000000000000000000000000000000000', 'processed', 'bench', CAST(:r AS bigint), 1, now(), now(), clock_timestamp());
INSERT INTO items (id, n, message_id) VALUES ('p-' || CAST(:client_id AS text) || '-' || CAST(:r AS text), CAST(:r AS bigint), 'p-' || CAST(:r AS text));
END;
SQL
  pgb=$(command pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c "$C" -j "$C" \
    -t $((N / C)) -f "$W/txn.sql" bench 2>&1 | awk '/^tps/ { print $3; exit }')
  echo "bench:   $pgb tx/s" >&2
fi

if want batch; then
  echo "bench: batch" >&2
  preload batch "$N"
  reset_db
  read -r b_rate b_cpu b_rss < <(run_inboxd batch batch "$N" "$CALLS" "$batch_db" "")
  check_rows "$N"
  echo "bench:   $b_rate msg/s, $b_cpu CPU ms/1000, $b_rss MiB" >&2
fi

peer_rate=0
if want peer; then
  echo "bench: sdk peer" >&2
  preload peer "$N"
  reset_db
  peer_rate=$(cd "$here/peer" && SB_CS="$SB_CS" ENTITY=peer N="$N" C="$C" PGPORT="$port" \
    PGDATABASE=bench node peer.mjs | jq -r .rate)
  check_rows "$N"
  echo "bench:   $peer_rate msg/s" >&2
fi

if want sessions; then
  echo "bench: sessions" >&2
  SN=$((SESSIONS * PER_SESSION))
  preload sess "$SN" "$SESSIONS"
  reset_db
  read -r s_rate s_cpu s_rss < <(run_inboxd sess sess "$SN" "$CALLS" "$batch_db" \
    ', "sessions": true, "max_concurrent_sessions": 32')
  check_rows "$SN"
  echo "bench:   $s_rate msg/s, $s_cpu CPU ms/1000, $s_rss MiB" >&2
fi

if want sqlite; then
  echo "bench: sqlite" >&2
  preload lite "$N"
  sqlite_db='{"connection_string": "Driver={SQLite3};Database='"$W"'/lite.db;Timeout=10000", "dialect": "sqlite"'${BATCH:+', "batch_max": '$BATCH}'}'
  sqlite3 "$W/lite.db" "CREATE TABLE items (id text PRIMARY KEY, n integer NOT NULL, message_id text NOT NULL);" >/dev/null
  read -r l_rate l_cpu l_rss < <(run_inboxd lite lite "$N" "$CALLS" "$sqlite_db" "")
  [ "$(sqlite3 "$W/lite.db" 'SELECT count(*) FROM items')" = "$N" ] || { echo "bench: sqlite rows" >&2; exit 1; }
fi

d_rate=0 d_cpu=0 d_rss=0 d_txns=0
if want defaults; then
  echo "bench: defaults" >&2
  preload dflt "$N"
  reset_db
  read -r d_rate d_cpu d_rss < <(run_inboxd dflt dflt "$N" default \
    '{"connection_string": "'"$PG_CS"'", "dialect": "postgresql"}' "")
  check_rows "$N"
  d_txns=$(cat "$W/dflt.txns")
  echo "bench:   $d_rate msg/s, $d_cpu CPU ms/1000, $d_rss MiB, $d_txns transactions/1000" >&2
fi

w_rate=0 w_cpu=0 w_rss=0
if want ws; then
  echo "bench: websockets (defaults through the WebSocket bridge)" >&2
  preload dfws "$N"
  reset_db
  read -r w_rate w_cpu w_rss < <(SB_CS="$SB_WS_CS" run_inboxd dfws dfws "$N" default \
    '{"connection_string": "'"$PG_CS"'", "dialect": "postgresql"}' ', "transport": "websockets"')
  check_rows "$N"
  echo "bench:   $w_rate msg/s, $w_cpu CPU ms/1000, $w_rss MiB" >&2
fi

# traced_run QUEUE SAMPLER_JSON: inboxd at its defaults exporting every span
# it records to tests/otel/receiver.mjs --count (a collector that counts the
# spans of each request and records nothing, so that it takes little of the
# CPU it shares); echoes "rate cpu_ms_per_1000 peak_mib spans_per_message transactions_per_1000".
traced_run() {
  local rport="" tally
  [ -d "$root/tests/otel/node_modules" ] || (cd "$root/tests/otel" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  node "$root/tests/otel/receiver.mjs" --count >"$W/recv.port" 2>"$W/recv.log" &
  local rpid=$!
  pids+=("$rpid")
  for _ in $(seq 1 100); do rport=$(jq -r '.port // empty' "$W/recv.port" 2>/dev/null || true); [ -n "$rport" ] && break; sleep 0.05; done
  preload "$1" "$N"
  reset_db
  read -r tr_rate tr_cpu tr_rss < <(run_inboxd "$1" "$1" "$N" default \
    '{"connection_string": "'"$PG_CS"'", "dialect": "postgresql"}' "" \
    ', "otel": {"traces_endpoint": "http://127.0.0.1:'"$rport"'/v1/traces"'"$2"'}')
  check_rows "$N"
  kill -TERM "$rpid"; wait "$rpid" || true
  tally=$(jq -r 'select(.spans != null) | .spans' "$W/recv.log" | tail -n 1)
  echo "$tr_rate $tr_cpu $tr_rss $(awk -v s="${tally:-0}" -v n="$N" 'BEGIN { printf "%.2f", s / n }') $(cat "$W/$1.txns")"
}

t_rate=0 t_cpu=0 t_rss=0 t_spans=0 t_txns=0
if want traced; then
  echo "bench: traced (defaults, sampler always_on: every message traced)" >&2
  read -r t_rate t_cpu t_rss t_spans t_txns < <(traced_run traced ', "sampler": "always_on"')
  echo "bench:   $t_rate msg/s, $t_cpu CPU ms/1000, $t_rss MiB, $t_spans spans per message, $t_txns transactions/1000" >&2
fi

td_rate=0 td_cpu=0 td_rss=0 td_spans=0 td_txns=0
if want traced_default; then
  echo "bench: traced_default (defaults, the default sampler; no message carries a trace context)" >&2
  read -r td_rate td_cpu td_rss td_spans td_txns < <(traced_run traced_default "")
  echo "bench:   $td_rate msg/s, $td_cpu CPU ms/1000, $td_rss MiB, $td_spans spans per message, $td_txns transactions/1000" >&2
fi

g_rate=0 g_cpu=0 g_rss=0
if want large; then
  echo "bench: large ($LARGE_N x $LARGE_KIB KiB at the defaults)" >&2
  awk -v n="$LARGE_N" -v k="$LARGE_KIB" 'BEGIN { pad = "0"
    while (length(pad) < k * 1024 - 64) pad = pad pad
    pad = substr(pad, 1, k * 1024 - 64)
    for (i = 1; i <= n; i++)
      printf "{\"message_id\":\"large-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"large-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", i, i, i, pad }' >"$W/msgs.jsonl"
  "$build/inboxctl" send --connection-string "$SB_CS" --entity large --file "$W/msgs.jsonl" 2>/dev/null
  reset_db
  read -r g_rate g_cpu g_rss < <(run_inboxd large large "$LARGE_N" default \
    '{"connection_string": "'"$PG_CS"'", "dialect": "postgresql"}' "")
  check_rows "$LARGE_N"
  echo "bench:   $g_rate msg/s, peak RSS $g_rss MiB" >&2
fi

lat_p50="-" lat_p99="-"
if want latency; then
  echo "bench: latency (one message every 100 ms for 20 s, defaults)" >&2
  reset_db
  cat >"$W/lat.json" <<JSON
{"consumer": "lat", "servicebus": {"connection_string": "$SB_CS", "entity": "lat"},
 "db": {"connection_string": "$PG_CS", "dialect": "postgresql"},
 "routes": [{"match": "*", "sql": "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)",
             "params": ["\$.id", "\$.n", "message_id"], "idempotency_key": "item:{\$.id}"}],
 "http": {"listen": ""}, "log": {"level": "warn"}}
JSON
  "$build/inboxd" --config "$W/lat.json" >"$W/lat.log" 2>&1 &
  lpid=$!; pids+=($lpid)
  sleep 1
  for i in $(seq 1 200); do
    echo "{\"message_id\":\"lat-$i\",\"subject\":\"Item\",\"body\":{\"id\":\"lat-$i\",\"n\":$i}}" >"$W/one.jsonl"
    "$build/inboxctl" send --connection-string "$SB_CS" --entity lat --file "$W/one.jsonl" 2>/dev/null &
    read -r -t 0.1 -u "$tick_fd" _ || true
  done
  wait_rows() { for _ in $(seq 1 100); do [ "$(psql -d bench -tAc "SELECT count(*) FROM items")" = "$1" ] && return 0; sleep 0.1; done; return 1; }
  wait_rows 200 || { echo "bench: latency phase did not apply 200 messages" >&2; exit 1; }
  kill -TERM $lpid; wait $lpid || true
  read -r lat_p50 lat_p99 < <(psql -d bench -tAc "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) FROM (SELECT extract(epoch FROM processed_at - enqueued_at) * 1000 AS ms FROM inboxd_inbox WHERE consumer = 'lat') t" | tr '|' ' ')
  echo "bench:   enqueued -> committed p50 $lat_p50 ms, p99 $lat_p99 ms" >&2
fi

slow1=0 slowb=0
if want slow; then
  echo "bench: slow handler (4 x 3 s)" >&2
  for mode in slow1 slowb; do
    reset_db
    for i in 1 2 3 4; do echo "{\"message_id\":\"$mode-$i\",\"subject\":\"Item\",\"body\":{\"id\":\"$mode-$i\",\"n\":$i}}"; done >"$W/msgs.jsonl"
    "$build/inboxctl" send --connection-string "$SB_CS" --entity $mode --file "$W/msgs.jsonl" 2>/dev/null
    bm=32; [ $mode = slow1 ] && bm=1
    cat >"$W/$mode.json" <<JSON
{"consumer": "$mode", "servicebus": {"connection_string": "$SB_CS", "entity": "$mode", "max_concurrent_calls": 4},
 "db": {"connection_string": "$PG_CS", "dialect": "postgresql", "pool_size": 4, "batch_max": $bm},
 "routes": [{"match": "*", "sql": ["SELECT pg_sleep(3)", "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)"],
             "params": [[], ["\$.id", "\$.n", "message_id"]]}],
 "http": {"listen": ""}, "log": {"level": "warn"}}
JSON
    t0=$(date +%s.%N)
    "$build/inboxd" --config "$W/$mode.json" >"$W/$mode.log" 2>&1 &
    spid=$!; pids+=($spid)
    for _ in $(seq 1 600); do [ "$(psql -d bench -tAc "SELECT count(*) FROM items")" = 4 ] && break; sleep 0.05; done
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    kill -TERM $spid; wait $spid || true
    check_rows 4
    eval "$mode=$t"
  done
  echo "bench:   one per transaction $slow1 s, batches $slowb s" >&2
fi

h_rate=0 h_cpu=0 h_rss=0 hp_rate=0 hp_cpu=0 hp_rss=0
if want http; then
  echo "bench: http (defaults; destination answering 201 at once)" >&2
  node "$root/tests/fakehttp/fakehttp.js" --mode idempotent --detach >"$W/dest.port" 2>"$W/dest.log" &
  pids+=($!)
  for _ in $(seq 1 100); do dport=$(head -n 1 "$W/dest.port" 2>/dev/null || true); [ -n "$dport" ] && break; sleep 0.05; done
  [ -n "$dport" ] || { echo "bench: the destination did not start" >&2; exit 1; }
  DEST="http://127.0.0.1:$dport"
  dest_effects() { curl -sf "$DEST/_ledger" | jq '.effects | length'; }
  preload http "$N"
  reset_db
  http_routes=$(jq -n --arg url "$DEST/charges" '[{match: "*", idempotency_key: "item:{$.id}",
    http: {method: "POST", url: $url, body: "body", headers: {"Content-Type": "application/json"},
           idempotency_header: "Idempotency-Key", idempotent: true, remote_id: "$.id"},
    sql: ["INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)"],
    params: [["$.id", "$.n", "message_id"]]}]')
  read -r h_rate h_cpu h_rss < <(ROUTES=$http_routes run_inboxd http http "$N" default \
    '{"connection_string": "'"$PG_CS"'", "dialect": "postgresql"}' "")
  check_rows "$N"
  [ "$(dest_effects)" = "$N" ] || { echo "bench: $(dest_effects) effects at the destination for $N messages" >&2; exit 1; }
  echo "bench:   $h_rate msg/s, $h_cpu CPU ms/1000, $h_rss MiB" >&2
  if [ "${SKIP_PEER:-0}" != 1 ]; then
    curl -sf -X POST "$DEST/_reset" >/dev/null
    preload httppeer "$N"
    reset_db
    read -r hp_rate hp_cpu hp_rss < <(cd "$here/peer" && SB_CS="$SB_CS" ENTITY=httppeer N="$N" \
      C="$C" PGPORT="$port" PGDATABASE=bench DEST="$DEST" node peer-http.mjs \
      | jq -r '"\(.rate) \(.cpu_ms_per_1000) \(.peak_rss_mib)"')
    check_rows "$N"
    [ "$(dest_effects)" = "$N" ] || { echo "bench: the peer left $(dest_effects) effects for $N messages" >&2; exit 1; }
    echo "bench:   sdk peer $hp_rate msg/s, $hp_cpu CPU ms/1000, $hp_rss MiB" >&2
  fi
fi

awk -v n="$N" -v c="$C" -v pgb="$pgb" -v pm="$pm_rate" -v pmc="$pm_cpu" -v pmr="$pm_rss" \
    -v b="$b_rate" -v bc="$b_cpu" -v br="$b_rss" -v peer="$peer_rate" -v batch="${BATCH:-default}" \
    -v s="$s_rate" -v sc="$s_cpu" -v sr="$s_rss" -v sn="$SESSIONS x $PER_SESSION" \
    -v l="$l_rate" -v lc="$l_cpu" -v lr="$l_rss" -v d="$d_rate" -v dc="$d_cpu" -v dr="$d_rss" \
    -v g="$g_rate" -v gr="$g_rss" -v gn="$LARGE_N x $LARGE_KIB KiB" -v p50="$lat_p50" -v p99="$lat_p99" \
    -v s1="$slow1" -v sb="$slowb" -v t="$t_rate" -v tc="$t_cpu" -v tr="$t_rss" -v ts="$t_spans" \
    -v td="$td_rate" -v tdc="$td_cpu" -v tdr="$td_rss" -v tds="$td_spans" \
    -v dx="$d_txns" -v tx="$t_txns" -v tdx="$td_txns" \
    -v w="$w_rate" -v wc="$w_cpu" -v wr="$w_rss" \
    -v h="$h_rate" -v hc="$h_cpu" -v hr="$h_rss" -v hp="$hp_rate" -v hpc="$hp_cpu" -v hpr="$hp_rss" 'function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
BEGIN {
  printf "messages %d (1 KiB JSON), concurrency %d, PostgreSQL fsync on, batch_max %s\n", n, c, batch
  printf "%-26s %10s %10s %10s %14s %10s\n", "", "msg/s", "/pgbench", "/sdk peer", "CPU ms/1000", "peak RSS"
  printf "%-26s %10.0f %10s %10s %14s %10s\n", "pgbench (same txn)", pgb, "1.00", "", "", ""
  printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "inboxd per-message", pm, ratio(pm, pgb), ratio(pm, peer), pmc, pmr
  printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "inboxd batch", b, ratio(b, pgb), ratio(b, peer), bc, br
  if (peer > 0) printf "%-26s %10.0f %10s %10s\n", "sdk peer (node, pg pool)", peer, ratio(peer, pgb), "1.00"
  printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "inboxd sessions " sn, s, "", "", sc, sr
  printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "inboxd sqlite batch", l, "", "", lc, lr
  printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB  (%s transactions/1000)\n", "inboxd at its defaults", d, ratio(d, pgb), ratio(d, peer), dc, dr, dx
  if (w > 0) printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB  (%s x TCP at defaults)\n", "defaults over WebSockets", w, ratio(w, pgb), ratio(w, peer), wc, wr, ratio(w, d)
  if (t > 0) printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB  (CPU %s x defaults; %s)\n", "defaults, traced (1.0)", t, ratio(t, pgb), ratio(t, peer), tc, tr, ratio(tc, dc), ts " spans/msg, " tx " transactions/1000"
  if (td > 0) printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB  (CPU %s x defaults; %s)\n", "traced, default sampler", td, ratio(td, pgb), ratio(td, peer), tdc, tdr, ratio(tdc, dc), tds " spans/msg, " tdx " transactions/1000"
  printf "%-26s %10.0f %10s %10s %14s %7.1f MiB\n", "defaults, " gn, g, "", "", "", gr
  printf "low load (10 msg/s, defaults): enqueued -> committed p50 %s ms, p99 %s ms\n", p50, p99
  if (s1 > 0) printf "slow handler 4 x 3 s: one per transaction %.2f s, batches %.2f s (%s x)\n", s1, sb, ratio(sb, s1)
  if (h > 0) {
    printf "%-26s %10s %10s %10s %14s %10s\n", "HTTP route (201 at once)", "msg/s", "", "/sdk peer", "CPU ms/1000", "peak RSS"
    printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "inboxd at its defaults", h, "", ratio(h, hp), hc, hr
    if (hp > 0) printf "%-26s %10.0f %10s %10s %14.1f %7.1f MiB\n", "sdk peer (fetch, pg pool)", hp, "", "1.00", hpc, hpr
  }
}'
