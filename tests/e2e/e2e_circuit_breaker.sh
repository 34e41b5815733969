#!/usr/bin/env bash
# The circuit breaker. inboxd connects as a role without superuser rights;
# mid-run, first its privileges on the inbox table are revoked, later the
# business table is renamed away. Each time: nothing is dead-lettered,
# /readyz turns 503 and inboxd_circuit_open 1 while the database refuses,
# and once the grant (or the name) is back every message is applied once.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
N=200
ROLE="app_$$"
create_items_table
sql "CREATE ROLE $ROLE LOGIN; GRANT CREATE ON SCHEMA public TO $ROLE; GRANT ALL ON items TO $ROLE;
     GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO $ROLE" >/dev/null
trap 'E2E_FAILED=$?; e2e_cleanup; psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -q -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1' EXIT
DB_CS=${DB_CS/Uid=postgres/Uid=$ROLE}
start_emu '{"queues":[{"name":"cb","lock_duration_s":10,"max_delivery_count":5}]}'
write_config "$W/inboxd.json" cb "$(items_route)" \
  '{"http":{"listen":"127.0.0.1:0"},"retry":{"attempts":2,"base_ms":50,"max_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz"; }
circuit_is() { [ "$(metric "$port" inboxd_circuit_open)" = "$1" ]; }
ready_is() { [ "$(readyz)" = "$1" ]; }
wait_until 30 ready_is 200 || die "inboxd never became ready"

# phase WHAT BREAK MEND PREFIX: N messages sent while the database refuses.
phase() {
  local what=$1 break_sql=$2 mend_sql=$3 prefix=$4
  sql "$break_sql" >/dev/null
  e2e_log "$what: broken"
  gen_items $N "$prefix" >"$W/$prefix.jsonl"
  send_file cb "$W/$prefix.jsonl"
  wait_until 60 circuit_is 1 || die "$what: the circuit never opened"
  check "$what: /readyz while open" "$(readyz)" 503
  sleep 3 # let the held messages meet the broken database a while longer
  check "$what: still open" "$(metric "$port" inboxd_circuit_open)" 1
  check "$what: nothing dead-lettered" "$(broker_stat cb dead_lettered)" 0
  check "$what: nothing applied" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE '$prefix-%'")" 0
  sql "$mend_sql" >/dev/null
  e2e_log "$what: mended"
  wait_until 120 queue_empty cb || die "$what: queue not drained after the mend"
  wait_until 30 circuit_is 0 || die "$what: the circuit never closed"
  wait_until 30 ready_is 200 || die "$what: /readyz not 200 after the mend"
  check "$what: all applied" "$(sql "SELECT count(*) FROM items WHERE id LIKE '$prefix-%'")" $N
  check "$what: applied once" "$(sql "SELECT count(DISTINCT id) FROM items WHERE id LIKE '$prefix-%'")" $N
  check "$what: inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE '$prefix-%'")" $N
  check "$what: nothing dead-lettered" "$(broker_stat cb dead_lettered)" 0
  # Held under renewed locks or released: no failed delivery was counted.
  check "$what: every message on its first delivery" \
    "$(sql "SELECT max(delivery_count) FROM inboxd_inbox WHERE message_id LIKE '$prefix-%'")" 1
}
phase "inbox privileges revoked" "REVOKE ALL ON inboxd_inbox FROM $ROLE" "GRANT ALL ON inboxd_inbox TO $ROLE" rv
phase "business table renamed" "ALTER TABLE items RENAME TO items_away" "ALTER TABLE items_away RENAME TO items" rn
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "a clear error line named the table" \
  "$(jq -r 'select(.event=="circuit_open") | .error' "$W/inboxd.log" | grep -c -e inboxd_inbox -e items)" 2
