#!/usr/bin/env bash
# Outbox tests 1 and 2: a chain. inboxd A consumes `orders` into a table and
# emits one ShipmentRequested per order to `shipments` (message id
# shipment:<orderId>); inboxd B consumes `shipments` into a table with no
# unique key. N orders, 10% of them sent twice; A is killed -9 three times
# and B once mid-run, each restarted.
#
#   e2e_outbox_chain.sh DIALECT on|off [N]
#
# on:  duplicate detection on `shipments`: the queue stores exactly one
#      message per order (it never held two with the same id), B's table has
#      one row per order.
# off: every emitted id reaches `shipments` (B's inbox has each once), any
#      repeated send shares its message id, and B's table still has one row
#      per order because its inbox absorbs the repeats.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
DUPDET=${2:-on}
N=${3:-3000}
window=$([ "$DUPDET" = on ] && echo 600 || echo 0)
sql "CREATE TABLE orders_a (order_id varchar(64) NOT NULL, n integer NOT NULL)" >/dev/null
sql "CREATE TABLE shipments_b (order_id varchar(64), message_id varchar(128))" >/dev/null
start_emu "{\"queues\":[{\"name\":\"orders\",\"lock_duration_s\":5,\"max_delivery_count\":50},
  {\"name\":\"shipments\",\"lock_duration_s\":5,\"max_delivery_count\":50,\"duplicate_detection_window_s\":$window}]}"
routes_a=$(jq -n '[{match: "*", sql: "INSERT INTO orders_a (order_id, n) VALUES (?, ?)",
  params: ["$.orderId", "$.n"], idempotency_key: "order:{$.orderId}",
  emit: [{entity: "shipments", message_id: "shipment:{$.orderId}", subject: "ShipmentRequested",
          body: "$.shipping", properties: {orderId: "$.orderId", source: {const: "orders"}}}]}]')
routes_b=$(jq -n '[{match: {subject: "ShipmentRequested"},
  sql: "INSERT INTO shipments_b (order_id, message_id) VALUES (?, ?)",
  params: ["prop:orderId", "message_id"]}]')
write_config "$W/a.json" orders "$routes_a" '{"consumer": "A", "outbox": {"poll_ms": 200}}'
write_config "$W/b.json" shipments "$routes_b" '{"consumer": "B", "outbox": {"enabled": "false", "relay": "false"}}'
awk -v n="$N" 'BEGIN { for (i = 1; i <= n; i++) {
  line = sprintf("{\"message_id\":\"o-%d\",\"subject\":\"OrderAccepted\",\"body\":{\"orderId\":\"o-%d\",\"n\":%d,\"shipping\":{\"orderId\":\"o-%d\",\"address\":\"Main St %d\"}}}", i, i, i, i, i)
  print line; if (i % 10 == 0) again[++k] = line }
  for (j = 1; j <= k; j++) print again[j] }' >"$W/orders.jsonl"
send_file orders "$W/orders.jsonl"

start_inboxd "$W/b.json" b
b=$LAST_PID
kills_a=0
killed_b=0
while [ $kills_a -lt 3 ]; do
  start_inboxd "$W/a.json" a
  a=$LAST_PID
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.3 + (r % 700) / 1000 }')"
  kill -9 "$a"; wait "$a" 2>/dev/null
  kills_a=$((kills_a + 1))
  e2e_log "A killed -9 #$kills_a at $(sql 'SELECT count(*) FROM orders_a') orders, $(sql 'SELECT count(*) FROM shipments_b') shipments"
  if [ $killed_b = 0 ] && [ $kills_a = 2 ]; then
    kill -9 "$b"; wait "$b" 2>/dev/null; killed_b=1
    e2e_log "B killed -9"
    start_inboxd "$W/b.json" b
    b=$LAST_PID
  fi
done
[ "$(sql 'SELECT count(*) FROM orders_a')" -lt "$N" ] || die "A finished before its third kill; raise N"
start_inboxd "$W/a.json" a
a=$LAST_PID
outbox_done() { [ "$(sql "SELECT count(*) FROM inboxd_outbox WHERE status = 'published'")" = "$N" ]; }
wait_until 600 queue_empty orders || die "orders not drained"
wait_until 300 outbox_done || die "outbox: only $(sql "SELECT count(*) FROM inboxd_outbox WHERE status = 'published'") of $N published"
b_done() { [ "$(sql 'SELECT count(DISTINCT order_id) FROM shipments_b')" = "$N" ] && queue_empty shipments; }
wait_until 300 b_done || die "B has $(sql 'SELECT count(DISTINCT order_id) FROM shipments_b') distinct orders"
stop_inboxd "$a"; check "A exit status" "$STOP_RC" 0
stop_inboxd "$b"; check "B exit status" "$STOP_RC" 0
check "orders applied by A" "$(sql 'SELECT count(*) FROM orders_a')" "$N"
check "outbox rows (one per order)" "$(sql 'SELECT count(*) FROM inboxd_outbox')" "$N"
check "B rows" "$(sql 'SELECT count(*) FROM shipments_b')" "$N"
check "B distinct orders" "$(sql 'SELECT count(DISTINCT order_id) FROM shipments_b')" "$N"
check "B rows with the emitted id" "$(sql "SELECT count(*) FROM shipments_b WHERE message_id = 'shipment:' || order_id")" "$N"
check "B inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE consumer = 'B'")" "$N"
check "dead-lettered" "$(( $(broker_stat orders dead_lettered) + $(broker_stat shipments dead_lettered) ))" 0
sent=$(broker_stat shipments sent)
if [ "$DUPDET" = on ]; then
  check "messages stored in shipments (one per order)" "$sent" "$N"
  e2e_log "duplicates dropped by the broker: $(broker_stat shipments duplicate_detected)"
else
  [ "$sent" -ge "$N" ] || die "shipments got $sent messages, fewer than $N"
  e2e_log "messages sent to shipments: $sent for $N orders (repeats absorbed by B's inbox: $((sent - N)))"
fi
