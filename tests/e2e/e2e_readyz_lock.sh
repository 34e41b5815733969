#!/usr/bin/env bash
# /readyz follows the database: while a table lock makes every statement
# time out, /readyz turns 503 (after a few failures in a row, not the
# first); once the lock is gone every message is applied once and /readyz
# is 200 again.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
N=20
create_items_table
start_emu '{"queues":[{"name":"lk","lock_duration_s":30,"max_delivery_count":50}]}'
write_config "$W/inboxd.json" lk "$(items_route)" \
  '{"http":{"listen":"127.0.0.1:0"},"db":{"statement_timeout_s":1},"retry":{"attempts":2,"base_ms":50,"max_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz"; }
ready_is() { [ "$(readyz)" = "$1" ]; }
wait_until 30 ready_is 200 || die "inboxd never became ready"
gen_items $N a >"$W/a.jsonl"
send_file lk "$W/a.jsonl"
wait_until 60 queue_empty lk || die "first batch not drained"

# Hold an exclusive lock on the business table until told to stop.
psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d "$E2E_PGDB" -q \
  -c "BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600); COMMIT;" >"$W/locker.log" 2>&1 &
locker=$!
E2E_PIDS+=("$locker")
locked() { [ "$(sql "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'items' AND l.mode = 'AccessExclusiveLock' AND l.granted")" = 1 ]; }
wait_until 10 locked || die "the lock was not taken: $(cat "$W/locker.log")"
gen_items $N b >"$W/b.jsonl"
send_file lk "$W/b.jsonl"
wait_until 30 ready_is 503 || die "/readyz stayed 200 while every statement timed out"
e2e_log "/readyz is 503 behind the lock"
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$locker" 2>/dev/null || true
wait_until 120 queue_empty lk || die "queue not drained after the lock"
wait_until 30 ready_is 200 || die "/readyz not 200 after the lock"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "all applied" "$(sql "SELECT count(*) FROM items")" $((2 * N))
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $((2 * N))
check "dead-lettered" "$(broker_stat lk dead_lettered)" 0
