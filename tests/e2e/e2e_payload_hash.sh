#!/usr/bin/env bash
# What the payload hash covers (route setting payload_hash). A producer
# re-sends the same business operation (same key, same order and amount)
# with only a changed timestamp field:
#  - under "params" the conflict check hashes the bound values
#    ($.orderId, $.amount), so the re-send is a duplicate: completed, one row;
#    a re-send that changes the amount is still IdempotencyKeyConflict;
#  - under "body" (the default) the whole body is hashed, so the same re-send
#    is dead-lettered IdempotencyKeyConflict.
# Two phases (the originals applied first) keep which copy wins fixed. Five
# messages: about 3 s.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
sql "CREATE TABLE orders_ph (order_id varchar(64) NOT NULL, amount integer NOT NULL, route varchar(16) NOT NULL)"
start_emu '{"queues":[{"name":"orders","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n '[
  {match: {subject: "ByParams"}, sql: "INSERT INTO orders_ph (order_id, amount, route) VALUES (?, ?, ?)",
   params: ["$.orderId", "$.amount", {const: "params"}], idempotency_key: "order:{$.orderId}",
   payload_hash: "params"},
  {match: {subject: "ByBody"}, sql: "INSERT INTO orders_ph (order_id, amount, route) VALUES (?, ?, ?)",
   params: ["$.orderId", "$.amount", {const: "body"}], idempotency_key: "order:{$.orderId}"}]')
write_config "$W/inboxd.json" orders "$routes"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
cat >"$W/first.jsonl" <<'JSON'
{"message_id":"p-1","subject":"ByParams","body":{"orderId":"o-1","amount":500,"sentAt":"2026-12-03T10:00:00Z"}}
{"message_id":"b-1","subject":"ByBody","body":{"orderId":"o-2","amount":700,"sentAt":"2026-12-03T10:00:00Z"}}
JSON
send_file orders "$W/first.jsonl"
wait_until 60 queue_empty orders || die "first phase not drained"
cat >"$W/second.jsonl" <<'JSON'
{"message_id":"p-2","subject":"ByParams","body":{"orderId":"o-1","amount":500,"sentAt":"2026-12-03T10:05:00Z"}}
{"message_id":"p-3","subject":"ByParams","body":{"orderId":"o-1","amount":900,"sentAt":"2026-12-03T10:06:00Z"}}
{"message_id":"b-2","subject":"ByBody","body":{"orderId":"o-2","amount":700,"sentAt":"2026-12-03T10:05:00Z"}}
JSON
send_file orders "$W/second.jsonl"
wait_until 60 queue_empty orders || die "second phase not drained"
check "one row per order, the first copy's" \
  "$(sql "SELECT order_id || ' ' || amount || ' ' || route FROM orders_ph ORDER BY order_id" | tr '\n' ,)" \
  "o-1 500 params,o-2 700 body,"
check "dead letters: the changed amount and the body route's re-send" "$(dlq_reasons orders | tr '\n' ,)" \
  "b-2 IdempotencyKeyConflict,p-3 IdempotencyKeyConflict,"
check "completed: both originals and the params re-send" "$(broker_stat orders completed)" 3
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" 2
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
