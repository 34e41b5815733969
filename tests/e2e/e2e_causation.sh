#!/usr/bin/env bash
# Causation and envelope. inboxd consumes `orders` and emits one message per
# order to `shipments`; the emitted messages, read back from the broker,
# carry causation-id (the incoming message id) beside the correlation id
# (by default also the incoming message id; a route may template it), and the route's
# created-at and schema-version. An order that arrives with a causation-id of
# its own has it in its msg_done line as causation_id (the one place where a
# log line is the product); one without has none. Two messages: about 3 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
sql "CREATE TABLE orders_c (order_id varchar(64) NOT NULL)"
start_emu '{"queues":[{"name":"orders","lock_duration_s":30,"max_delivery_count":10},{"name":"shipments"}]}'
routes=$(jq -n '[{match: "*", sql: "INSERT INTO orders_c (order_id) VALUES (?)", params: ["$.orderId"],
  idempotency_key: "order:{$.orderId}",
  emit: [{entity: "shipments", message_id: "shipment:{$.orderId}", subject: "ShipmentRequested",
          body: "$.orderId", created_at: true, schema_version: "2"}]}]')
write_config "$W/inboxd.json" orders "$routes" '{"outbox": {"poll_ms": 200}}'
cat >"$W/orders.jsonl" <<'JSON'
{"message_id":"o-1","correlation_id":"checkout-7","subject":"OrderAccepted","properties":{"causation-id":"cart-7"},"body":{"orderId":"o-1"}}
{"message_id":"o-2","subject":"OrderAccepted","body":{"orderId":"o-2"}}
JSON
send_file orders "$W/orders.jsonl"
before=$(date -u +%Y-%m-%dT%H:%M:%S)
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 60 queue_empty orders || die "orders not drained"
wait_until 60 sent_n shipments 2 || die "the shipments were not published"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "orders applied" "$(sql "SELECT count(*) FROM orders_c")" 2
peek_all shipments >"$W/shipments.jsonl" || die "cannot peek shipments"
line() { jq -r --arg id "$1" "select(.message_id == \$id) | $2" "$W/shipments.jsonl"; }
check "o-1's shipment: causation-id" "$(line shipment:o-1 '.properties["causation-id"]')" o-1
check "o-1's shipment: correlation id" "$(line shipment:o-1 .correlation_id)" o-1
check "o-2's shipment: causation-id" "$(line shipment:o-2 '.properties["causation-id"]')" o-2
check "o-2's shipment: correlation id" "$(line shipment:o-2 .correlation_id)" o-2
check "schema-version" "$(jq -r '.properties["schema-version"]' "$W/shipments.jsonl" | sort -u)" 2
created=$(line shipment:o-1 '.properties["created-at"]')
[[ "$created" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$ ]] || die "created-at '$created' is not RFC 3339 UTC"
[[ ! "$created" < "$before" ]] || die "created-at $created is before the run began ($before)"
check "msg_done of o-1 carries its causation id" \
  "$(grep '^{' "$W/inboxd.log" | jq -r 'select(.event=="msg_done" and .message_id=="o-1") | .causation_id')" cart-7
check "msg_done of o-2 has none" \
  "$(grep '^{' "$W/inboxd.log" | jq -r 'select(.event=="msg_done" and .message_id=="o-2") | .causation_id')" null
