# lib.sh - the end-to-end harness: real sbemu, real database, real inboxd
# processes on loopback ports chosen at run time. Each scenario sources this
# file, calls e2e_init DIALECT, and asserts final database rows and broker
# state (stats file, dead-letter queue read back over AMQP), never log lines.
#
# Environment: INBOXD, SBEMU, INBOXCTL (binaries, set by ctest),
# INBOXD_TEST_PG_PORT (a running PostgreSQL; scenarios skip without it unless
# INBOXD_TEST_REQUIRE_PG=1), INBOXD_TEST_TIMEOUT_MULTIPLIER.

set -u
E2E_PIDS=()
E2E_FAILED=0
E2E_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMUL=${INBOXD_TEST_TIMEOUT_MULTIPLIER:-1}

e2e_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { e2e_log "FAIL: $*"; e2e_dump; exit 1; }

# fail MESSAGE: die, also from inside $(...): the subshell hands the message
# to the scenario's shell (signal USR1, trapped in e2e_init), which dies with
# it, so a reader that cannot read what a check needs ends the scenario
# instead of printing a value a check could take for an answer.
fail() {
  if [ "$BASHPID" != "$$" ]; then
    printf '%s\n' "$*" >>"$W/.fail"
    kill -USR1 $$
    exit 1
  fi
  die "$*"
}

# Scaled seconds (integer).
secs() { awk -v s="$1" -v m="$TMUL" 'BEGIN { printf "%d", s * m + 0.999 }'; }

e2e_cleanup() {
  local p
  for p in "${E2E_PIDS[@]+"${E2E_PIDS[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${E2E_PGDB:-}" ]; then
    psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -q -c "DROP DATABASE IF EXISTS \"$E2E_PGDB\" WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  if [ "$E2E_FAILED" = 0 ] && [ -z "${E2E_KEEP:-}" ]; then rm -rf "$W"; else e2e_log "work dir kept: $W"; fi
}

# e2e_init DIALECT: a work dir, a database, connection strings.
e2e_init() {
  DIALECT=$1
  W=$(mktemp -d /tmp/inboxd-e2e.XXXXXX)
  chmod 755 "$W"
  trap 'E2E_FAILED=$?; e2e_cleanup' EXIT
  trap 'die "$(head -n 1 "$W/.fail" 2>/dev/null)"' USR1
  case "$DIALECT" in
  postgresql)
    if [ -z "${INBOXD_TEST_PG_PORT:-}" ]; then
      if [ "${INBOXD_TEST_REQUIRE_PG:-0}" = 1 ]; then die "INBOXD_TEST_PG_PORT is not set"; fi
      echo "skip: no PostgreSQL (INBOXD_TEST_PG_PORT unset)"; exit 77
    fi
    E2E_PGDB="e2e_$(basename "$W" | tr -c 'a-zA-Z0-9\n' _)_$$"
    psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -q -c "CREATE DATABASE \"$E2E_PGDB\"" >/dev/null \
      || die "cannot create database"
    DB_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$INBOXD_TEST_PG_PORT;Database=$E2E_PGDB;Uid=postgres;Pwd=unused"
    ;;
  sqlite)
    DB_FILE="$W/e2e.db"
    DB_CS="Driver={SQLite3};Database=$DB_FILE;Timeout=10000"
    ;;
  *) die "unknown dialect $DIALECT" ;;
  esac
}

# sql "STATEMENT": runs it, prints rows as text (|-separated).
sql() {
  case "$DIALECT" in
  postgresql) psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d "$E2E_PGDB" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1" ;;
  sqlite) sqlite3 -cmd ".timeout 10000" "$DB_FILE" "$1" ;;
  esac
}

# The business table every scenario writes: one row per applied message.
create_items_table() {
  case "$DIALECT" in
  postgresql) sql "CREATE TABLE items (id text PRIMARY KEY, n bigint NOT NULL CHECK (n >= 0), session text, seq bigint, message_id text, serial bigserial)" ;;
  sqlite) sql "CREATE TABLE items (id text PRIMARY KEY, n integer NOT NULL CHECK (n >= 0), session text, seq integer, message_id text)" ;;
  esac
}

# The column that orders items by insertion (commit order).
items_order_col() { [ "$DIALECT" = postgresql ] && echo serial || echo rowid; }

# The statement a route uses to insert one item.
items_insert_sql() {
  case "$DIALECT" in
  postgresql) echo "INSERT INTO items (id, n, session, seq, message_id) VALUES (?, ?, ?, ?, ?)" ;;
  sqlite) echo "INSERT INTO items (id, n, session, seq, message_id) VALUES (?, ?, ?, ?, ?)" ;;
  esac
}

# start_emu TOPOLOGY_JSON [extra sbemu flags...]: sets EMU_PORT, EMU_PID, SB_CS, STATS.
start_emu() {
  local topo=$1; shift
  echo "$topo" >"$W/topology.json"
  EMU_KEY=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
  STATS="$W/broker.json"
  # Stats every 200 ms (a scenario's own --stats-every-ms, later, wins):
  # stats_fresh waits two rewrites.
  "$SBEMU" --listen 127.0.0.1:0 --topology "$W/topology.json" --key-name e2e --key "$EMU_KEY" \
    --stats-file "$STATS" --stats-every-ms 200 ${E2E_WEBSOCKETS:+--ws-listen 127.0.0.1:0} "$@" \
    >"$W/sbemu.log" 2>&1 &
  EMU_PID=$!
  E2E_PIDS+=("$EMU_PID")
  EMU_PORT=""
  for _ in $(seq 1 200); do
    EMU_PORT=$(head -n 1 "$W/sbemu.log" 2>/dev/null | jq -r 'select(.event=="listening") | .port' 2>/dev/null || true)
    [ -n "$EMU_PORT" ] && break
    kill -0 "$EMU_PID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$EMU_PORT" ] || die "sbemu did not start: $(cat "$W/sbemu.log")"
  # Plumbing: from here on an absent stats file is a failure (broker_stat).
  for _ in $(seq 1 100); do [ -s "$STATS" ] && break; sleep 0.05; done
  [ -s "$STATS" ] || die "sbemu wrote no stats file $STATS"
  SB_CS="Endpoint=sb://127.0.0.1:$EMU_PORT/;SharedAccessKeyName=e2e;SharedAccessKey=$EMU_KEY;UseDevelopmentEmulator=true"
  # E2E_WEBSOCKETS=1 (a ctest variant): every client (inboxctl, inboxd, its
  # relay) reaches sbemu over AMQP over WebSockets, by the connection string;
  # E2E_WEBSOCKETS=proxy: the same through tinyproxy with Basic auth (the
  # proxy by INBOXD_SERVICEBUS_PROXY, which every client reads).
  if [ "${E2E_WEBSOCKETS:-0}" != 0 ]; then
    EMU_WS_PORT=$(head -n 1 "$W/sbemu.log" | jq -r '.ws_port')
    [ "$EMU_WS_PORT" -gt 0 ] || die "E2E_WEBSOCKETS: sbemu reported no ws_port"
    SB_CS="Endpoint=sb://127.0.0.1:$EMU_WS_PORT/;SharedAccessKeyName=e2e;SharedAccessKey=$EMU_KEY;UseDevelopmentEmulator=true;TransportType=AmqpWebSockets"
  fi
  if [ "${E2E_WEBSOCKETS:-0}" = proxy ]; then
    start_proxy
    export INBOXD_SERVICEBUS_PROXY="http://e2e:$PROXY_PW@127.0.0.1:$PROXY_PORT"
  fi
}

# start_proxy: tinyproxy (CONNECT with Basic auth: user e2e, password
# PROXY_PW) on 127.0.0.1:PROXY_PORT, both chosen the first time and kept
# across restarts; sets PROXY_PID.
start_proxy() {
  command -v tinyproxy >/dev/null || die "tinyproxy is not installed (scripts/install-deps)"
  PROXY_PW=${PROXY_PW:-pw-$(head -c 9 /dev/urandom | base64 | tr -d '/+=')}
  local p
  for _ in $(seq 1 200); do
    [ -n "${PROXY_PORT:-}" ] && break
    p=$((20000 + RANDOM % 12000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || PROXY_PORT=$p
  done
  [ -n "${PROXY_PORT:-}" ] || die "no free port for the proxy"
  printf '%s\n' "User nobody" "Group nogroup" "Port $PROXY_PORT" "Listen 127.0.0.1" "Timeout 600" \
    "MaxClients 100" "Allow 127.0.0.1" "BasicAuth e2e $PROXY_PW" >"$W/tinyproxy.conf"
  tinyproxy -d -c "$W/tinyproxy.conf" >>"$W/tinyproxy.log" 2>&1 &
  PROXY_PID=$!
  E2E_PIDS+=("$PROXY_PID")
  wait_until 10 proxy_up || die "tinyproxy did not listen on $PROXY_PORT"
}
proxy_up() { (exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT") 2>/dev/null; }

# write_config FILE ENTITY ROUTES_JSON [EXTRA_JSON_OBJECT]: an inboxd config.
# The entity poller is off (servicebus.entity_poll_s 0: its peek connection
# would show in the broker's connection counts); e2e_entity turns it on.
# INBOXD_TEST_BATCH_MAX=N (scripts/test sets it) runs every scenario with
# db.batch_max N and, when N > 1, half as many db workers as messages in
# flight, so that batches really form; a scenario's own settings still win.
write_config() {
  local file=$1 entity=$2 routes=$3 extra=${4:-'{}'} batch='{}'
  if [ -n "${INBOXD_TEST_BATCH_MAX:-}" ]; then
    batch=$(jq -n --argjson b "$INBOXD_TEST_BATCH_MAX" \
      '{db: ({batch_max: $b} + (if $b > 1 then {pool_size: 2} else {} end))}')
  fi
  jq -n --arg sb "$SB_CS" --arg db "$DB_CS" --arg e "$entity" --arg d "$DIALECT" \
    --argjson routes "$routes" --argjson extra "$extra" --argjson batch "$batch" '
    {consumer: "e2e",
     servicebus: {connection_string: $sb, entity: $e, prefetch: 20, max_concurrent_calls: 4,
                  reconnect_max_ms: 2000, entity_poll_s: 0},
     db: {connection_string: $db, dialect: $d, migrate: true, statement_timeout_s: 30},
     routes: $routes,
     retry: {attempts: 3, base_ms: 50, max_ms: 500},
     shutdown: {drain_timeout_s: 10},
     http: {listen: ""},
     log: {level: "info"}} * $batch * $extra' >"$file"
}

# start_inboxd CONFIG NAME: starts inboxd in the background; sets LAST_PID.
start_inboxd() {
  "$INBOXD" --config "$1" >>"$W/$2.log" 2>&1 &
  LAST_PID=$!
  E2E_PIDS+=("$LAST_PID")
}

# http_port LOGNAME: the port inboxd bound for http.listen "127.0.0.1:0"
# (plumbing only: read from its http_listen line, waited for).
http_port() {
  local p=""
  for _ in $(seq 1 100); do
    p=$(jq -R -r 'fromjson? | select(.event=="http_listen") | .port' "$W/$1.log" 2>/dev/null | head -n 1)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  die "inboxd did not report its http port"
}

# send_file ENTITY FILE.jsonl: sends, then waits until the broker's stats
# file has counted every message sent so far to ENTITY (it is rewritten
# every second, so a fresh "empty" must not be read as "drained").
declare -A E2E_SENT
send_file() {
  local n
  "$INBOXCTL" send --connection-string "$SB_CS" --entity "$1" --file "$2" 2>>"$W/inboxctl.log" \
    || die "inboxctl send failed: $(tail -n 3 "$W/inboxctl.log")"
  n=$(grep -c . "$2")
  E2E_SENT[$1]=$(( ${E2E_SENT[$1]:-0} + n ))
  wait_until 30 sent_seen "$1" || die "the broker stats never showed ${E2E_SENT[$1]} messages sent to $1"
}
sent_seen() { [ "$(broker_stat "$1" sent)" -ge "${E2E_SENT[$1]}" ]; }

# gen_items N [PREFIX] [SUBJECT]: JSON lines of N item messages.
gen_items() {
  local n=$1 prefix=${2:-m} subject=${3:-Item}
  awk -v n="$n" -v p="$prefix" -v s="$subject" 'BEGIN {
    pad = sprintf("%0900d", 0)
    for (i = 1; i <= n; i++)
      printf "{\"message_id\":\"%s-%d\",\"subject\":\"%s\",\"body\":{\"id\":\"%s-%d\",\"n\":%d,\"pad\":\"%s\"}}\n", p, i, s, p, i, i, pad
  }'
}

# The standard item route (params: id, n, session, seq, message_id).
items_route() {
  jq -n --arg sql "$(items_insert_sql)" '[{match: "*", sql: $sql,
     params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
     idempotency_key: "item:{$.id}"}]'
}

# broker_stat ENTITY FIELD: a counter from the emulator's stats file. Fails
# the scenario (fail) when the file, the entity or the field is absent, so
# a misspelt name never reads as 0. The file is rewritten by rename, so a
# read never sees half of it.
broker_stat() {
  local v
  [ -s "${STATS:-}" ] || fail "broker_stat $1 $2: no stats file ${STATS:-(STATS unset)}"
  v=$(jq -r --arg e "$1" --arg f "$2" '
        if .entities | has($e) | not then "no entity"
        elif .entities[$e] | has($f) | not then "no field"
        else .entities[$e][$f] end' "$STATS" 2>/dev/null) \
    || fail "broker_stat $1 $2: $STATS is not JSON"
  case "$v" in
  "no entity") fail "broker_stat: no entity '$1' in $STATS (has: $(jq -r '.entities | keys | join(", ")' "$STATS"))" ;;
  "no field") fail "broker_stat: entity '$1' has no field '$2' in $STATS" ;;
  esac
  echo "$v"
}

# broker_conn FIELD: a connection counter of the stats file (accepted,
# open, forced_closed); fails like broker_stat when it is absent.
broker_conn() {
  local v
  [ -s "${STATS:-}" ] || fail "broker_conn $1: no stats file ${STATS:-(STATS unset)}"
  v=$(jq -r --arg f "$1" 'if .connections | has($f) then .connections[$f] else "absent" end' \
    "$STATS" 2>/dev/null) || fail "broker_conn $1: $STATS is not JSON"
  [ "$v" != absent ] || fail "broker_conn: no connection counter '$1' in $STATS"
  echo "$v"
}

# broker_idle: the broker has handled the close of every connection (a
# stopped inboxd's, an exited inboxctl's): what they sent and settled is
# counted, and the locks they held are released, in the same file.
broker_idle() { [ "$(broker_conn open)" = 0 ]; }

# stats_seq: the sequence number of the stats file now (sbemu counts every
# rewrite); fails when the file or its seq is absent.
stats_seq() {
  local v
  [ -s "${STATS:-}" ] || fail "stats_seq: no stats file ${STATS:-(STATS unset)}"
  v=$(jq -r 'if has("seq") then .seq else "absent" end' "$STATS" 2>/dev/null) \
    || fail "stats_seq: $STATS is not JSON"
  [ "$v" != absent ] || fail "stats_seq: no seq in $STATS (an sbemu too old?)"
  echo "$v"
}

# stats_fresh [SEQ]: waits for a stats file rendered wholly after the read
# of SEQ (default: now), i.e. seq SEQ + 2 (seq SEQ + 1 may have been
# rendered before the read and renamed into place after it); dies after 10 s
# (scaled). For a fact that is an absence ("nothing more was sent"): once
# what could have caused it has been seen to end, a fresh file shows it.
stats_fresh() {
  local from=${1:-$(stats_seq)}
  wait_until 10 stats_seq_reached $((from + 2)) \
    || die "stats_fresh: no stats file rendered after seq $from (now $(stats_seq))"
}
stats_seq_reached() { [ "$(stats_seq)" -ge "$1" ]; }

# sanitizer_check: ends the scenario at once when a process it started
# reported a sanitizer error (its log says where), rather than waiting out
# a condition that process will never bring about.
sanitizer_check() {
  local f
  f=$(grep -l -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$W"/*.log 2>/dev/null | head -n 1)
  [ -z "$f" ] || die "sanitizer error in $(basename "$f"): $(grep -m 1 -E "ERROR: |runtime error:" "$f")"
}

# wait_until SECONDS COMMAND...: polls until COMMAND succeeds.
wait_until() {
  local limit=$(( $(date +%s) + $(secs "$1") )) n=0; shift
  while ! "$@"; do
    [ "$(date +%s)" -ge "$limit" ] && return 1
    n=$((n + 1)); [ $((n % 5)) -ne 0 ] || sanitizer_check
    sleep 0.2
  done
}

queue_empty() { # queue_empty ENTITY
  [ "$(broker_stat "$1" active)" = 0 ] && [ "$(broker_stat "$1" locked)" = 0 ] && [ "$(broker_stat "$1" deferred)" = 0 ]
}

# dlq_reasons ENTITY: "message_id reason" lines read back from the broker.
dlq_reasons() {
  "$INBOXCTL" peek --connection-string "$SB_CS" --entity "$1" --dlq \
    | jq -r '"\(.message_id) \(.dead_letter_reason)"' | sort
}

# check NAME ACTUAL EXPECTED
check() {
  if [ "$2" = "$3" ]; then e2e_log "ok   $1 ($2)"; else die "$1: got '$2', expected '$3'"; fi
}

e2e_dump() {
  [ -n "${W:-}" ] || return 0
  for f in "$W"/*.log; do [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 15 "$f"; }; done >&2
  [ -f "${STATS:-/nonexistent}" ] && { echo "--- broker stats"; cat "$STATS"; } >&2
  return 0
}

# stop_inboxd PID [TIMEOUT_S]: SIGTERM and wait; sets STOP_RC to the exit
# status ("timeout" when it had to be killed). Not for $(...): only this
# shell can wait for its children.
stop_inboxd() {
  local pid=$1 t=${2:-20}
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $(( $(secs "$t") * 10 ))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    STOP_RC=timeout
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    return 0
  fi
  wait "$pid"
  STOP_RC=$?
}

# The orders table of the replay scenarios: a rule rejects negative amounts
# until drop_orders_rule removes it (the "fix" before a replay). SQLite cannot
# drop a CHECK, so there the rule is a trigger.
create_orders_table() {
  case "$DIALECT" in
  postgresql)
    sql "CREATE TABLE orders (id text PRIMARY KEY, amount bigint NOT NULL CONSTRAINT amount_not_negative CHECK (amount >= 0))" ;;
  sqlite)
    sql "CREATE TABLE orders (id text PRIMARY KEY, amount integer NOT NULL)"
    sql "CREATE TRIGGER amount_not_negative BEFORE INSERT ON orders WHEN NEW.amount < 0 BEGIN SELECT RAISE(ABORT, 'negative amount'); END" ;;
  esac
}
drop_orders_rule() {
  case "$DIALECT" in
  postgresql) sql "ALTER TABLE orders DROP CONSTRAINT amount_not_negative" ;;
  sqlite) sql "DROP TRIGGER amount_not_negative" ;;
  esac
}

# ready PORT: inboxd's /readyz answers 200 (connected, links attached,
# database reachable, not draining).
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ]; }

# metric PORT SERIES: the value of one exact series (name with its labels,
# as printed) on inboxd's /metrics. Fails the scenario when curl is missing,
# /metrics does not answer, or the series is absent.
metric() { metric_in "$(metrics_get "$1")" "$2"; }

# metrics_get PORT: the whole /metrics text; fails without curl or an answer.
metrics_get() {
  local text
  command -v curl >/dev/null || fail "metrics_get: curl is not installed"
  text=$(curl -fsS "http://127.0.0.1:$1/metrics" 2>&1) || fail "metrics_get: GET /metrics on port $1: $text"
  printf '%s\n' "$text"
}

# metric_in TEXT SERIES: the same, read from a /metrics text kept earlier.
metric_in() {
  local v
  v=$(printf '%s\n' "$1" | awk -v k="$2" '$1 == k { print $2; exit }')
  [ -n "$v" ] || fail "metric: no series $2 on /metrics"
  echo "$v"
}
