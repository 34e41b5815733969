# outbox_lib.sh - helpers of the outbox scenarios, sourced after lib.sh.

# app_rows N SESSIONS ENTITY [PREFIX]: one application transaction inserting
# N outbox rows (message ids PREFIX-1..N, session ids s0..s(SESSIONS-1) in
# turn, body {"seq":i}), as an application that is not inboxd would.
app_rows() {
  local n=$1 sessions=$2 entity=$3 prefix=${4:-app}
  local sel="SELECT '$entity', '$prefix-' || i, 's' || (i % $sessions), 'AppEvent', 'application/json',
             '{\"source\":\"app\",\"seq\":' || i || '}', '{\"seq\":' || i || '}' FROM s"
  local ins="INSERT INTO inboxd_outbox (entity, message_id, session_id, subject, content_type, properties, body)"
  case "$DIALECT" in
  postgresql) sql "BEGIN; WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $n) $ins $sel; COMMIT" >/dev/null ;;
  sqlite) sql "BEGIN; WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $n) $ins $sel; COMMIT;" >/dev/null ;;
  esac
}

# outbox_count STATUS: rows with that status.
outbox_count() { sql "SELECT count(*) FROM inboxd_outbox WHERE status = '$1'"; }
all_published() { [ "$(outbox_count published)" = "$1" ]; }

# relay_config FILE [EXTRA_JSON]: a config for inboxd --relay-only.
relay_config() {
  write_config "$1" "" '[]' "$(jq -n --argjson x "${2:-{\}}" '{outbox: {relay: "true", poll_ms: 200}} * $x')"
}

# start_relay CONFIG NAME: inboxd --relay-only in the background; sets LAST_PID.
start_relay() {
  "$INBOXD" --relay-only --config "$1" >>"$W/$2.log" 2>&1 &
  LAST_PID=$!
  E2E_PIDS+=("$LAST_PID")
}

# outbox_ready: the relay created its table.
outbox_ready() { sql "SELECT count(*) FROM inboxd_outbox" >/dev/null 2>&1; }

# peek_all ENTITY: every message in ENTITY as JSON lines (sequence order).
peek_all() { "$INBOXCTL" peek --connection-string "$SB_CS" --entity "$1"; }

sent_n() { [ "$(broker_stat "$1" sent)" -ge "$2" ]; }

# restart_emu TOPOLOGY_JSON: stops sbemu (its messages are gone) and starts a
# new one on the same port with the same key and a new topology. The old
# stats file goes with it (the new one counts seq from 1 again), so every
# read after this is of the new broker.
restart_emu() {
  kill -TERM "$EMU_PID" 2>/dev/null; wait "$EMU_PID" 2>/dev/null
  rm -f "$STATS"
  echo "$1" >"$W/topology.json"
  : >"$W/sbemu2.log"
  "$SBEMU" --listen "127.0.0.1:$EMU_PORT" --topology "$W/topology.json" --key-name e2e --key "$EMU_KEY" \
    --stats-file "$STATS" --stats-every-ms 200 >"$W/sbemu2.log" 2>&1 &
  EMU_PID=$!
  E2E_PIDS+=("$EMU_PID")
  for _ in $(seq 1 200); do
    head -n 1 "$W/sbemu2.log" 2>/dev/null | grep -q listening && break
    kill -0 "$EMU_PID" 2>/dev/null || die "sbemu did not restart on port $EMU_PORT: $(cat "$W/sbemu2.log")"
    sleep 0.05
  done
  head -n 1 "$W/sbemu2.log" | grep -q listening || die "sbemu did not restart on port $EMU_PORT: $(cat "$W/sbemu2.log")"
  wait_until 5 test -s "$STATS" || die "the restarted sbemu wrote no stats file $STATS"
}

