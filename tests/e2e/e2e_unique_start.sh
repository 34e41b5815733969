#!/usr/bin/env bash
# Unique keys checked at start. With db.migrate false, inboxd refuses to
# start (exit status 2, the key named) when the inbox table lacks its unique
# index on (consumer, idempotency_key), or when a route's "constraints" names
# a unique key that does not exist; the message waits in the queue untouched
# and nothing is written. Once both exist it starts and applies the message.
# One message, three starts: about 3 s.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
# The shipped schema as a DBA would run it, then the idempotency-key index dropped.
case "$DIALECT" in
postgresql) psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d "$E2E_PGDB" -X -q \
              -v ON_ERROR_STOP=1 -f "$E2E_SRC/db/schema/postgresql.sql" >/dev/null || die "schema" ;;
sqlite) sqlite3 "$DB_FILE" <"$E2E_SRC/db/schema/sqlite.sql" || die "schema" ;;
esac
sql "DROP INDEX inbox_idem"
sql "CREATE TABLE shipments (order_id varchar(64) NOT NULL)"
sql "CREATE UNIQUE INDEX ux_shipments_order ON shipments (order_id)"
present=$([ "$DIALECT" = sqlite ] && echo shipments.order_id || echo ux_shipments_order)
start_emu '{"queues":[{"name":"ship","lock_duration_s":30,"max_delivery_count":10}]}'
echo '{"message_id":"s-1","subject":"Shipped","body":{"orderId":"o-1"}}' >"$W/msgs.jsonl"
send_file ship "$W/msgs.jsonl"
config() { # config CONSTRAINT
  write_config "$W/inboxd.json" ship "$(jq -n --arg c "$1" '[{match: "*",
    sql: "INSERT INTO shipments (order_id) VALUES (?)", params: ["$.orderId"],
    idempotency_key: "ship:{$.orderId}", on_unique_violation: "duplicate", constraints: [$c]}]')" \
    '{"db": {"migrate": false, "inbox_table": "inbox"}}'
}
run_once() { # run_once LOG: inboxd in the foreground, its exit status
  timeout "$(secs 60)" "$INBOXD" --config "$W/inboxd.json" >>"$W/$1.log" 2>&1
  echo $?
}
untouched() {
  check "$1: the message is still in the queue" "$(broker_stat ship active)" 1
  check "$1: never delivered" "$(broker_stat ship delivered)" 0
  check "$1: no business row" "$(sql "SELECT count(*) FROM shipments")" 0
  check "$1: no inbox row" "$(sql "SELECT count(*) FROM inbox")" 0
}

config "$present"
check "without the idempotency-key index: exit status" "$(run_once noidem)" 2
grep -q "no unique index on (consumer, idempotency_key)" "$W/noidem.log" || die "the index is not named"
untouched "no index"

sql "CREATE UNIQUE INDEX inbox_idem ON inbox (consumer, idempotency_key) WHERE idempotency_key IS NOT NULL"
missing=$([ "$DIALECT" = sqlite ] && echo shipments.carrier || echo ux_shipments_carrier)
config "$missing"
check "a route's missing constraint: exit status" "$(run_once noconstraint)" 2
grep -q "routes\[0\].constraints\[0\]: unique key '$missing' does not exist" "$W/noconstraint.log" \
  || die "the constraint is not named"
untouched "no constraint"

config "$present"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 60 queue_empty ship || die "not drained once both keys exist"
check "applied once both keys exist" "$(sql "SELECT order_id FROM shipments")" o-1
check "completed" "$(broker_stat ship completed)" 1
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
