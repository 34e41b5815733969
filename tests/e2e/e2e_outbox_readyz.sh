#!/usr/bin/env bash
# Outbox: a stuck relay does not touch readiness or the inbox. The relay
# publishes 50 application rows; then a session holds an exclusive lock on
# the outbox table, so the relay's claim waits in the database. Meanwhile
# 200 messages (a route that does not emit) are applied, and /readyz,
# /healthz and /metrics answer 200 at every sample. Once the lock is gone
# the relay goes on: 20 more rows are published.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init postgresql
create_items_table
start_emu '{"queues":[{"name":"items","lock_duration_s":30},{"name":"shipments"}]}'
write_config "$W/inboxd.json" items "$(items_route)" \
  '{"http":{"listen":"127.0.0.1:0"},"outbox":{"relay":"true","poll_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
code() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/$1"; }
ready_is() { [ "$(code readyz)" = "$1" ]; }
wait_until 30 ready_is 200 || die "inboxd never became ready"
wait_until 30 outbox_ready || die "the outbox table was not created"
app_rows 50 5 shipments first
wait_until 30 all_published 50 || die "the first 50 rows were not published"

psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d "$E2E_PGDB" -q \
  -c "BEGIN; LOCK TABLE inboxd_outbox IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600); COMMIT;" >"$W/locker.log" 2>&1 &
locker=$!
E2E_PIDS+=("$locker")
relay_waits() {
  [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%inboxd_outbox%' AND query NOT LIKE '%pg_stat_activity%'")" -ge 1 ]
}
wait_until 10 relay_waits || die "the relay's claim is not waiting on the lock: $(cat "$W/locker.log")"
e2e_log "the relay is stuck behind the lock"
gen_items 200 a >"$W/a.jsonl"
send_file items "$W/a.jsonl"
bad=0 samples=0 rounds=0
# Sample for at least 5 s, and until the queue is drained.
while [ "$rounds" -lt 25 ] || ! queue_empty items; do
  rounds=$((rounds + 1))
  for ep in readyz healthz metrics; do
    c=$(code $ep); samples=$((samples + 1))
    [ "$c" = 200 ] || { bad=$((bad + 1)); e2e_log "/$ep answered $c"; }
  done
  [ "$samples" -lt 3000 ] || die "items not drained while the relay was stuck"
  sleep 0.2
done
check "non-200 answers while the relay was stuck (of $samples)" "$bad" 0
check "applied while the relay was stuck" "$(sql "SELECT count(*) FROM items")" 200
relay_waits || die "the relay stopped waiting before the lock was released"
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$locker" 2>/dev/null || true
app_rows 20 5 shipments second
wait_until 60 all_published 70 || die "the relay did not go on after the lock: $(outbox_count pending) pending"
check "/readyz after" "$(code readyz)" 200
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
check "shipments" "$(broker_stat shipments active)" 70
check "dead-lettered" "$(broker_stat items dead_lettered)" 0
