#!/usr/bin/env bash
# Outbox and HTTP routes: an HTTP route that emits. 6 orders are charged
# (2xx) and emit one receipt each in the finishing transaction; 2 are
# refused (HTTP 422: dead-lettered) and 2 time out after the destination
# acted (uncertain: dead-lettered); neither kind emits. The relay polls only
# every 60 s, so receipts that reach the target queue within the scenario
# were published because the finishing commit woke the relay.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":10},
                      {"name":"receipts"}]}'
start_fake pay plain
fake_config "$FAKE_URL" '{"faults":[{"kind":"status","status":422,"match":"bad-"},
                                    {"kind":"delay","match":"late-","delay_ms":3000,"times":1}]}'
{ gen_orders 6 ok; gen_orders 2 bad; gen_orders 2 late; } >"$W/orders.jsonl"
routes=$(charge_route "$FAKE_URL" false | jq '.[0].emit = [{entity: "receipts",
  message_id: "receipt:{$.orderId}", subject: "ChargeCaptured", body: "$",
  properties: {orderId: "$.orderId"}}]')
write_config "$W/inboxd.json" charges "$routes" '{"outbox": {"poll_ms": 60000}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 30 outbox_ready || die "the outbox table was not created"
sleep 1 # the relay's first round (at start) has found nothing: from now on it polls every 60 s
send_file charges "$W/orders.jsonl"
wait_until 60 queue_empty charges || die "charges not drained"
wait_until 20 all_published 6 || die "receipts not published without a poll: $(outbox_count pending) pending"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "charged rows" "$(sql "SELECT count(*) FROM charges")" 6
check "dead-lettered (2 refused, 2 uncertain)" "$(broker_stat charges dead_lettered)" 4
check "outbox rows" "$(sql "SELECT count(*) FROM inboxd_outbox")" 6
check "outbox rows of orders not charged" "$(sql "SELECT count(*) FROM inboxd_outbox WHERE message_id NOT LIKE 'receipt:ok-%'")" 0
check "receipts in the target queue" "$(broker_stat receipts active)" 6
peek_all receipts >"$W/receipts.jsonl" || die "cannot peek receipts"
check "receipt ids" "$(jq -r .message_id "$W/receipts.jsonl" | sort | tr '\n' ' ')" \
  "receipt:ok-1 receipt:ok-2 receipt:ok-3 receipt:ok-4 receipt:ok-5 receipt:ok-6 "
check "receipt correlation ids" "$(jq -r .correlation_id "$W/receipts.jsonl" | sort | tr '\n' ' ')" \
  "ok-1 ok-2 ok-3 ok-4 ok-5 ok-6 "
check "receipt subject" "$(jq -r .subject "$W/receipts.jsonl" | sort -u)" ChargeCaptured
check "receipt orderId property" "$(jq -r '.properties.orderId' "$W/receipts.jsonl" | sort | head -n 1)" ok-1
