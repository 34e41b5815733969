#!/usr/bin/env bash
# A pool larger than the database accepts: inboxd runs with db.pool_size 256
# and 256 messages in flight as a PostgreSQL role limited to 20 connections
# (CONNECTION LIMIT: the server refuses the 21st with SQLSTATE 53300, as it
# does past max_connections). Workers without a connection take no messages,
# so none is stuck: all 300 are applied once, the queue and the DLQ end
# empty, inboxd stops cleanly, and --check-config warns that the pool (256
# + the sweeper + the replicas' heartbeat of db.pool_scope cluster) exceeds the 20 connections the server accepts. A role limit stands in for max_connections so that the
# shared test server keeps its settings; the refusal is the same.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
N=300
ROLE="e2e_lim_$$"
psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -q -c "CREATE ROLE $ROLE LOGIN CONNECTION LIMIT 20" >/dev/null \
  || die "cannot create role"
drop_role() { psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -q -c "DROP DATABASE IF EXISTS \"$E2E_PGDB\" WITH (FORCE)" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true; }
trap 'E2E_FAILED=$?; drop_role; e2e_cleanup' EXIT
sql "ALTER DATABASE \"$E2E_PGDB\" OWNER TO $ROLE" >/dev/null
create_items_table
sql "ALTER TABLE items OWNER TO $ROLE" >/dev/null
DB_CS="Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=$INBOXD_TEST_PG_PORT;Database=$E2E_PGDB;Uid=$ROLE;Pwd=unused"
start_emu '{"queues":[{"name":"big","lock_duration_s":30,"max_delivery_count":10}]}'
gen_items $N b >"$W/msgs.jsonl"
send_file big "$W/msgs.jsonl"
write_config "$W/inboxd.json" big "$(items_route)" \
  '{"db": {"pool_size": 256, "batch_max": 1}, "servicebus": {"max_concurrent_calls": 256, "prefetch": 256}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 120 queue_empty big || die "queue not drained: $(broker_stat big active) active, $(broker_stat big locked) locked"
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" $N
check "completed by the broker" "$(broker_stat big completed)" $N
check "dead-lettered" "$(broker_stat big dead_lettered)" 0
check "connections the role holds" "$(sql "SELECT count(*) <= 20 FROM pg_stat_activity WHERE usename = '$ROLE'")" t
stop_inboxd "$pid" 30; check "inboxd exit status" "$STOP_RC" 0
# --check-config reads the server's limit for this login and names both numbers (its output is the CLI's contract).
"$INBOXD" --check-config --config "$W/inboxd.json" >"$W/check.out" 2>&1; rc=$?
check "check-config exit status (a warning, not a problem)" "$rc" 0
check "check-config names the pool and the server's limit" \
  "$(grep -c '^config: warning: db.pool_size: 256 workers .* need 258 connections, more than the 20 the database accepts' "$W/check.out")" 1
