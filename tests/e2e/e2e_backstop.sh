#!/usr/bin/env bash
# The business-key backstop: a producer re-sends the same order under a new
# message id with a different body. With "on_unique_violation": "duplicate"
# (limited to the named constraint) the second copy rolls back and completes
# as a business-key duplicate - one row, nothing dead-lettered - and is
# counted as inboxd_duplicates_total{by="business_key"}. A route without the
# option still dead-letters the violation. The trace context of an incoming
# traceparent / Diagnostic-Id is logged as trace_id in msg_done (the one
# place where a log line is the product).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
case "$DIALECT" in
postgresql)
  sql "CREATE TABLE shipments (id bigserial PRIMARY KEY, order_id text NOT NULL, carrier text, CONSTRAINT ux_shipments_order UNIQUE (order_id))"
  constraint=ux_shipments_order ;;
sqlite)
  sql "CREATE TABLE shipments (id integer PRIMARY KEY, order_id text NOT NULL, carrier text)"
  sql "CREATE UNIQUE INDEX ux_shipments_order ON shipments (order_id)"
  constraint=shipments.order_id ;; # SQLite names the columns, not the index
esac
start_emu '{"queues":[{"name":"ship","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n --arg c "$constraint" '[
  {match: {subject: "Shipped"}, sql: "INSERT INTO shipments (order_id, carrier) VALUES (?, ?)",
   params: ["$.orderId", "$.carrier"], on_unique_violation: "duplicate", constraints: [$c]},
  {match: {subject: "Strict"}, sql: "INSERT INTO shipments (order_id, carrier) VALUES (?, ?)",
   params: ["$.orderId", "$.carrier"]}]')
cat >"$W/msgs.jsonl" <<'JSON'
{"message_id":"s-1","subject":"Shipped","properties":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"body":{"orderId":"o-1","carrier":"dhl"}}
{"message_id":"s-2","subject":"Shipped","properties":{"Diagnostic-Id":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"body":{"orderId":"o-1","carrier":"ups"}}
{"message_id":"s-3","subject":"Strict","body":{"orderId":"o-1","carrier":"fedex"}}
JSON
send_file ship "$W/msgs.jsonl"
write_config "$W/inboxd.json" ship "$routes" '{"servicebus":{"max_concurrent_calls":1},"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
wait_until 60 queue_empty ship || die "queue not drained"
check "one shipment for the order" "$(sql "SELECT count(*), min(carrier) FROM shipments" | tr '|' ' ')" "1 dhl"
check "the re-sent copy was completed, the strict route's dead-lettered" "$(dlq_reasons ship)" "s-3 HandlerError"
check "completed by the broker" "$(broker_stat ship completed)" 2
check "inbox rows (the duplicate rolled back)" "$(sql "SELECT count(*) FROM inboxd_inbox")" 1
check "counted as a business-key duplicate" "$(metric "$port" 'inboxd_duplicates_total{by="business_key"}')" 1
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "msg_done of s-2 says duplicate" "$(jq -r 'select(.event=="msg_done" and .message_id=="s-2") | .result' "$W/inboxd.log")" duplicate
check "trace_id from traceparent" "$(jq -r 'select(.event=="msg_done" and .message_id=="s-1") | .trace_id' "$W/inboxd.log")" 4bf92f3577b34da6a3ce929d0e0e4736
check "trace_id from Diagnostic-Id" "$(jq -r 'select(.event=="msg_done" and .message_id=="s-2") | .trace_id' "$W/inboxd.log")" 0af7651916cd43dd8448eb211c80319c
check "no trace_id without a trace context" "$(jq -r 'select(.event=="msg_done" and .message_id=="s-3") | .trace_id' "$W/inboxd.log")" null
