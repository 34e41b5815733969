#!/usr/bin/env bash
# Outbox test 6: rows for an entity that does not exist become 'failed' with
# the broker's condition (counted in inboxd_outbox_failed_total), rows for an
# existing entity are published regardless; the first row of each of the 4
# sessions fails and holds its session's later rows back (pending); once the
# entity exists, `inboxctl outbox retry --id N` puts each failed row back
# and the relay publishes it and the rows that waited behind it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"shipments"}]}'
relay_config "$W/relay.json" '{"http": {"listen": "127.0.0.1:0"}}'
start_relay "$W/relay.json" relay
relay=$LAST_PID
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
port=$(http_port relay)
app_rows 50 5 shipments ship
app_rows 20 4 invoices inv
failed_n() { [ "$(outbox_count failed)" -ge "$1" ]; }
wait_until 60 all_published 50 || die "only $(outbox_count published) of 50 rows to shipments published"
wait_until 60 failed_n 4 || die "only $(outbox_count failed) of 4 rows to invoices failed"
check "failed rows are each session's first invoice" "$(sql "SELECT message_id FROM inboxd_outbox WHERE status = 'failed' AND entity = 'invoices' AND last_error LIKE 'amqp:not-found%' ORDER BY id" | tr '\n' ' ')" "inv-1 inv-2 inv-3 inv-4 "
check "the later invoices wait, pending" "$(outbox_count pending)" 16
stats_fresh # rows are published once the broker took them: a fresh file counts all
check "messages in shipments" "$(broker_stat shipments sent)" 50
check "failed metric" "$(metric "$port" 'inboxd_outbox_failed_total{condition="amqp:not-found"}')" 4
"$INBOXCTL" outbox list --status failed --config "$W/relay.json" >"$W/failed.jsonl" || die "inboxctl outbox list failed"
check "listed failed rows" "$(jq -s 'map(select(.status == "failed" and .entity == "invoices")) | length' "$W/failed.jsonl")" 4

# The entity appears; an operator retries every failed row.
restart_emu '{"queues":[{"name":"shipments"},{"name":"invoices"}]}'
for id in $(jq -r '.id' "$W/failed.jsonl"); do
  "$INBOXCTL" outbox retry --id "$id" --config "$W/relay.json" >>"$W/retry.log" || die "retry of $id failed"
done
wait_until 60 all_published 70 || die "only $(outbox_count published) of 70 rows published after the retry"
check "failed rows after retry" "$(outbox_count failed)" 0
stats_fresh
check "messages in invoices" "$(broker_stat invoices sent)" 20
# A row that is not failed cannot be retried (exit status 1, nothing changes).
id=$(sql "SELECT min(id) FROM inboxd_outbox")
"$INBOXCTL" outbox retry --id "$id" --config "$W/relay.json" >/dev/null 2>&1 && die "retry of a published row succeeded"
check "published rows" "$(outbox_count published)" 70
stop_inboxd "$relay"; check "relay exit status" "$STOP_RC" 0
