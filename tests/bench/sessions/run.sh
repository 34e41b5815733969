#!/usr/bin/env bash
# sessions - many short sessions against the same messages on a plain queue,
# measured side by side in one run, with inboxd's DEFAULT settings.
#
#   tests/bench/sessions/run.sh [LIMIT_S]      (default 300: cap per phase)
#   SHAPES="100x200 10000x1 200x3" tests/bench/sessions/run.sh
#   SESSION_SB='{"max_concurrent_sessions":64}' ...  (servicebus settings for
#                                                    the session phases only)
#   KEEP=/some/dir ...   (keeps each phase's inboxd log and /metrics there)
#
# For each shape SxM (default "100x200 10000x1"), two phases, each a fresh
# queue, a fresh inboxd and a preloaded backlog:
#   plainN      S*M messages on a plain queue
#   sessSxM     S sessions x M messages (interleaved) on a session queue
# Rate = messages / time between the first and the last business row commit
# (clock_timestamp() in the row), so inboxd's start-up is not counted on
# either side. A phase that hits LIMIT_S reports what it applied so far,
# over the time from its first commit to the cap.
# Switch latency (a session's last message settled -> its slot holding the
# next session) is read from inboxd's own inboxd_session_switch_seconds
# histogram at the end of each session phase (p50/p99 interpolated within
# buckets, as Prometheus' histogram_quantile does).
# Not a test: nothing here asserts a speed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
LIMIT=${1:-300}
build=${BUILD:-$root/build}
for b in inboxd inboxctl sbemu; do
  [ -x "$build/$b" ] || { echo "bench: $build/$b missing; build first (cmake -S . -B build && cmake --build build)"; exit 2; }
done
command -v curl >/dev/null || { echo "bench: curl missing"; exit 2; }

W=$(mktemp -d /tmp/inboxd-bench-sessions.XXXXXX); chmod 755 "$W"
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
psql -d bench -c "CREATE TABLE items (id text PRIMARY KEY, phase text NOT NULL, session text,
  n bigint NOT NULL, ts timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null

SHAPES=${SHAPES:-100x200 10000x1}
for shape in $SHAPES; do
  [[ $shape =~ ^[0-9]+x[0-9]+$ ]] || { echo "bench: shape '$shape' is not SESSIONSxMESSAGES"; exit 2; }
done
for shape in $SHAPES; do
  printf '{"name":"plain%s","lock_duration_s":60}\n{"name":"sess%s","lock_duration_s":60,"requires_session":true}\n' \
    "$shape" "$shape"
done | jq -s '{queues: .}' >"$W/topo.json"
"$build/sbemu" --listen 127.0.0.1:0 --topology "$W/topo.json" --stats-file "$W/stats.json" >"$W/sbemu.log" 2>&1 &
pids+=($!)
disown $! # killed by cleanup; no job notice
emu_port=""
for _ in $(seq 1 100); do emu_port=$(head -n 1 "$W/sbemu.log" | jq -r '.port // empty' 2>/dev/null || true); [ -n "$emu_port" ] && break; sleep 0.05; done
[ -n "$emu_port" ] || { echo "bench: sbemu did not start"; exit 1; }
for _ in $(seq 1 100); do [ -s "$W/stats.json" ] && break; sleep 0.05; done
[ -s "$W/stats.json" ] || { echo "bench: sbemu wrote no stats file"; exit 1; }
SB_CS="Endpoint=sb://127.0.0.1:$emu_port/;SharedAccessKeyName=bench;SharedAccessKey=bench;UseDevelopmentEmulator=true"
DB_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$port;Database=bench;Uid=postgres;Pwd=x"

# gen PHASE SESSIONS PER_SESSION PLAIN(0|1): JSON lines, round-robin over the sessions.
gen() {
  awk -v p="$1" -v S="$2" -v M="$3" -v plain="$4" 'BEGIN {
    for (i = 1; i <= M; i++) for (s = 1; s <= S; s++) {
      sid = plain ? "" : sprintf(",\"session_id\":\"%s-s%d\"", p, s)
      printf "{\"message_id\":\"%s-%d-%d\"%s,\"subject\":\"Item\",\"body\":{\"id\":\"%s-%d-%d\",\"s\":\"s%d\",\"n\":%d}}\n", p, s, i, sid, p, s, i, s, i }
  }'
}

# quantile Q METRICS_FILE NAME: histogram_quantile over NAME_bucket lines, in ms.
quantile() {
  awk -v q="$1" -v name="$3_bucket" '
    index($0, name "{") == 1 {
      le = $0; sub(/.*le="/, "", le); sub(/".*/, "", le)
      n++; bound[n] = (le == "+Inf") ? -1 : le + 0; cum[n] = $NF + 0 }
    END {
      if (n == 0) { print "n/a"; exit }
      total = cum[n]; if (total == 0) { print "n/a"; exit }
      rank = q * total; lo = 0; prev = 0
      for (i = 1; i <= n; i++) {
        if (cum[i] >= rank) {
          if (bound[i] < 0) { printf ">%.1f", lo * 1000; exit }
          in_b = cum[i] - prev
          v = (in_b > 0) ? lo + (bound[i] - lo) * (rank - prev) / in_b : bound[i]
          printf "%.2f", v * 1000; exit }
        lo = bound[i]; prev = cum[i] }
    }' "$2"
}

declare -A RATE APPLIED P50 P99 SWITCHES ORDER
# phase NAME ENTITY SESSIONS PER_SESSION PLAIN
phase() {
  local name=$1 entity=$2 S=$3 M=$4 plain=$5 n=$(( $3 * $4 ))
  gen "$name" "$S" "$M" "$plain" >"$W/$name.jsonl"
  "$build/inboxctl" send --connection-string "$SB_CS" --entity "$entity" --file "$W/$name.jsonl" 2>/dev/null
  local sessions=false; [ "$plain" = 1 ] || sessions=true
  # Defaults for everything that shapes receiving: only what must be said is said.
  jq -n --arg sb "$SB_CS" --arg db "$DB_CS" --arg e "$entity" --arg c "bench-$name" --argjson s $sessions \
     --arg p "$name" --argjson x "${SESSION_SB:-{\}}" '
    {consumer: $c,
     servicebus: {connection_string: $sb, entity: $e, sessions: $s},
     db: {connection_string: $db, dialect: "postgresql"},
     routes: [{match: "*", sql: ("INSERT INTO items (id, phase, session, n) VALUES (?, '\''" + $p + "'\'', ?, ?)"),
               params: ["$.id", "$.s", "$.n"], idempotency_key: "item:{$.id}"}],
     http: {listen: "127.0.0.1:0"}}
    | if $s then .servicebus += $x else . end' >"$W/$name.json"
  "$build/inboxd" --config "$W/$name.json" >"$W/$name.log" 2>&1 &
  local ipid=$!
  pids+=($ipid)
  local start=$SECONDS completed=0
  while :; do
    completed=$(jq -er --arg e "$entity" '.entities[$e].completed' "$W/stats.json") \
      || { echo "bench: no counter $entity.completed in $W/stats.json"; exit 1; }
    [ "$completed" -ge "$n" ] && break
    [ $(( SECONDS - start )) -ge "$LIMIT" ] && break
    kill -0 $ipid 2>/dev/null || { echo "bench: inboxd died in phase $name"; tail "$W/$name.log"; exit 1; }
    sleep 0.2
  done
  # Applied so far, the commit span, and (for a capped phase) first commit -> now.
  local row
  row=$(psql -d bench -tA -F ' ' -c "SELECT count(*), coalesce(extract(epoch FROM max(ts) - min(ts)), 0),
    coalesce(extract(epoch FROM clock_timestamp() - min(ts)), 0) FROM items WHERE phase = '$name'")
  local hport
  hport=$(jq -r 'select(.event=="http_listen") | .port' "$W/$name.log" 2>/dev/null | head -n 1)
  curl -fsS "http://127.0.0.1:$hport/metrics" >"$W/$name.metrics" 2>/dev/null || : >"$W/$name.metrics"
  kill -TERM $ipid; wait $ipid || true
  [ -z "${KEEP:-}" ] || cp "$W/$name.metrics" "$W/$name.log" "$KEEP/"
  read -r applied span upto <<<"$row"
  APPLIED[$name]=$applied
  # Complete: (n - 1) intervals over the span. Capped: the dead time up to the cap counts.
  RATE[$name]=$(awk -v c="$applied" -v n="$n" -v s="$span" -v u="$upto" 'BEGIN {
    if (c >= n) printf "%.1f", (c > 1 && s > 0) ? (c - 1) / s : 0
    else printf "%.1f", (u > 0) ? c / u : 0 }')
  P50[$name]=$(quantile 0.5 "$W/$name.metrics" inboxd_session_switch_seconds)
  P99[$name]=$(quantile 0.99 "$W/$name.metrics" inboxd_session_switch_seconds)
  SWITCHES[$name]=$(awk '$1 == "inboxd_session_switches_total" { print $2 }' "$W/$name.metrics")
  # Order within a session: a row committed after a later message of its session.
  ORDER[$name]=-
  [ "$plain" = 1 ] || ORDER[$name]=$(psql -d bench -tA -c "SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY session
    ORDER BY ts, n) AS prev FROM items WHERE phase = '$name') x WHERE prev > n")
  printf "%-18s %6d of %6d applied   %9.1f msg/s   %s out of session order\n" "$name" "${APPLIED[$name]}" "$n" "${RATE[$name]}" "${ORDER[$name]}"
}

echo "inboxd sessions benchmark (default settings, PostgreSQL, sbemu on loopback; cap ${LIMIT}s per phase)"
for shape in $SHAPES; do
  S=${shape%x*} M=${shape#*x}
  phase "plain$shape" "plain$shape" $(( S * M )) 1 1
  phase "sess$shape" "sess$shape" "$S" "$M" 0
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
echo
for shape in $SHAPES; do
  printf "%-12s sessions %9.1f msg/s   plain %9.1f msg/s   ratio %s   switch p50 %s ms  p99 %s ms  (%s switches)\n" \
    "$shape" "${RATE[sess$shape]}" "${RATE[plain$shape]}" "$(ratio "${RATE[sess$shape]}" "${RATE[plain$shape]}")" \
    "${P50[sess$shape]}" "${P99[sess$shape]}" "${SWITCHES[sess$shape]:-n/a}"
done
