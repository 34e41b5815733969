#!/usr/bin/env bash
# Rejection events (a route's emit_on_failure). One inboxd, three routes:
# Order (SQL, emit_on_failure), Legacy (SQL, none) and ChargeRequested (an
# HTTP route, emit_on_failure) against the fake destination, which refuses
# cbad-* with 422. Two orders with a negative amount fail permanently (a
# CHECK / trigger): each is dead-lettered, its inbox row is 'failed' and
# exactly one rejection (id "<message id>:rejected", reason and class in its
# properties and JSON body) reaches the rejections queue through the
# outbox; the Legacy failure is dead-lettered as before, with no row and no
# event; the refused charge publishes one rejection too. Then a plain
# redelivery of a failed order, a replay of the other and a replay of the
# refused charge (each failing again) publish nothing more; nor does the
# refused charge resolved `retry` (inboxctl) and refused once more, while a
# charge recorded uncertain (its call timed out), resolved `retry` and then
# refused publishes its one rejection. Small counts, short locks: the
# property holds for one message as for many.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
create_orders_table
create_charges_table
start_emu '{"queues":[{"name":"orders","lock_duration_s":5,"max_delivery_count":10},
                      {"name":"rejections"}]}'
start_fake pay plain
fake_config "$FAKE_URL" '{"faults":[{"kind":"status","status":422,"match":"cbad-"},
  {"kind":"delay","match":"cunc-","delay_ms":3000,"times":1},
  {"kind":"status","status":422,"match":"cunc-"}]}'
reject='[{entity: "rejections", message_id: "{message_id}:rejected", subject: "Rejected.{reason}",
          properties: {reason: "reason", error_class: "error_class", orderId: "$.orderId"}}]'
routes=$(jq -n --argjson charge "$(charge_route "$FAKE_URL" false)" "
  [{match: {subject: \"Order\"}, sql: \"INSERT INTO orders (id, amount) VALUES (?, ?)\",
    params: [\"\$.orderId\", \"\$.amount\"], emit_on_failure: $reject},
   {match: {subject: \"Legacy\"}, sql: \"INSERT INTO orders (id, amount) VALUES (?, ?)\",
    params: [\"\$.orderId\", \"\$.amount\"]},
   (\$charge[0] + {emit_on_failure: $reject})]")
write_config "$W/inboxd.json" orders "$routes"
"$INBOXD" --check-config --config "$W/inboxd.json" >"$W/check.log" 2>&1 || die "check-config: $(cat "$W/check.log")"
order() { printf '{"message_id":"%s","subject":"%s",%s"body":{"orderId":"%s","amount":%d}}\n' "$1" "$2" "${4:-}" "$1" "$3"; }
{
  order ok-1 Order 5; order ok-2 Order 6; order bad-1 Order -1; order bad-2 Order -2
  order leg-1 Legacy -3
  gen_orders 1 cok; gen_orders 1 cbad
} >"$W/first.jsonl"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
send_file orders "$W/first.jsonl"
wait_until 60 queue_empty orders || die "orders not drained"
wait_until 30 all_published 3 || die "rejections not published: $(outbox_count pending) pending"
check "applied" "$(sql "SELECT count(*) FROM orders") $(sql "SELECT count(*) FROM charges")" "2 1"
check "dead letters" "$(dlq_reasons orders | tr '\n' ',')" \
  "bad-1 HandlerError,bad-2 HandlerError,cbad-1 HttpRejected,leg-1 HandlerError,"
check "failed inbox rows" "$(sql "SELECT message_id FROM inboxd_inbox WHERE status = 'failed' ORDER BY message_id" | tr '\n' ' ')" \
  "bad-1 bad-2 cbad-1 "
check "no row for the route without emit_on_failure" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id = 'leg-1'")" 0
check "outbox rows" "$(sql "SELECT message_id FROM inboxd_outbox ORDER BY message_id" | tr '\n' ' ')" \
  "bad-1:rejected bad-2:rejected cbad-1:rejected "
peek_all rejections >"$W/rej.jsonl" || die "cannot peek rejections"
check "rejections in the queue" "$(jq -r .message_id "$W/rej.jsonl" | sort | tr '\n' ' ')" \
  "bad-1:rejected bad-2:rejected cbad-1:rejected "
check "their subjects" "$(jq -r '"\(.message_id) \(.subject)"' "$W/rej.jsonl" | sort | tr '\n' ',')" \
  "bad-1:rejected Rejected.HandlerError,bad-2:rejected Rejected.HandlerError,cbad-1:rejected Rejected.HttpRejected,"
check "their properties" "$(jq -r '"\(.properties.reason) \(.properties.error_class) \(.properties.orderId) \(.properties["causation-id"])"' "$W/rej.jsonl" | sort | tr '\n' ',')" \
  "HandlerError permanent bad-1 bad-1,HandlerError permanent bad-2 bad-2,HttpRejected permanent cbad-1 cbad-1,"
check "their bodies" "$(jq -r '.body | fromjson | "\(.message_id) \(.reason) \(.error_class) \(.error | length > 0)"' "$W/rej.jsonl" | sort | tr '\n' ',')" \
  "bad-1 HandlerError permanent true,bad-2 HandlerError permanent true,cbad-1 HttpRejected permanent true,"
check "the refusal's description" "$(jq -r 'select(.message_id == "cbad-1:rejected") | .body | fromjson | .error' "$W/rej.jsonl" | cut -c1-8)" "HTTP 422"
# A plain redelivery of bad-1, replays of bad-2 and cbad-1: each fails again, none publishes.
{
  order bad-1 Order -1
  order bad-2 Order -2 '"properties":{"inboxd-replay-count":1},'
  gen_orders 1 cbad | jq -c '.properties["inboxd-replay-count"] = 1'
} >"$W/again.jsonl"
send_file orders "$W/again.jsonl"
wait_until 60 queue_empty orders || die "orders not drained after the second round"
check "the plain redelivery completed as a duplicate" "$(broker_stat orders completed)" 4
check "the replays dead-lettered again" "$(dlq_reasons orders | tr '\n' ',')" \
  "bad-1 HandlerError,bad-2 HandlerError,bad-2 HandlerError,cbad-1 HttpRejected,cbad-1 HttpRejected,leg-1 HandlerError,"
check "outbox rows after the second round" "$(sql "SELECT count(*) FROM inboxd_outbox")" 3
check "rejections in the queue after the second round" "$(peek_all rejections | jq -r .message_id | sort | tr '\n' ' ')" \
  "bad-1:rejected bad-2:rejected cbad-1:rejected "
# Resolved retry: the refused charge refused again publishes nothing more; a
# charge recorded uncertain, then refused, publishes its first rejection.
gen_orders 1 cunc >"$W/unc.jsonl"
send_file orders "$W/unc.jsonl"
wait_until 60 queue_empty orders || die "the uncertain charge not drained"
check "the timed-out charge: row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'cunc-1'")" uncertain
for m in cbad-1 cunc-1; do
  "$INBOXCTL" inbox resolve --config "$W/inboxd.json" --consumer e2e --message-id $m --as retry \
    --note "call again" || die "resolve retry $m failed"
done
gen_orders 1 cbad >>"$W/unc.jsonl"
send_file orders "$W/unc.jsonl"
wait_until 60 queue_empty orders || die "orders not drained after the retries"
wait_until 30 all_published 4 || die "the uncertain charge's rejection not published"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "rows after the retries" "$(sql "SELECT message_id || ' ' || status || ' ' || remote_status FROM inboxd_inbox
  WHERE message_id IN ('cbad-1', 'cunc-1') ORDER BY message_id" | tr '\n' ',')" "cbad-1 failed 422,cunc-1 failed 422,"
check "outbox rows after the retries" "$(sql "SELECT message_id FROM inboxd_outbox ORDER BY message_id" | tr '\n' ' ')" \
  "bad-1:rejected bad-2:rejected cbad-1:rejected cunc-1:rejected "
check "rejections in the queue after the retries" "$(peek_all rejections | jq -r .message_id | sort | tr '\n' ' ')" \
  "bad-1:rejected bad-2:rejected cbad-1:rejected cunc-1:rejected "
ledger "$FAKE_URL" "$W/pay.json"
check "the refused charge was called three times (first delivery, replay, retry)" \
  "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:cbad-1")] | length')" 3
check "the timed-out charge was called twice (first delivery, retry)" \
  "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:cunc-1")] | length')" 2
