#!/usr/bin/env bash
# HTTP routes in batches (worker/wk_effect.c, wk_effect_process_batch): the
# claims of the messages already waiting in one transaction, their calls made
# at once, their finishes committed together. db.batch_max 32 and
# max_concurrent_calls 32 are this scenario's own, whatever
# INBOXD_TEST_BATCH_MAX says.
#  part 1, a plain destination (keys not honoured, no reconcile), one db
#   worker lingering 1 s for company so the messages form one batch; twenty
#   orders answered at once go first, so that the destination has earned a
#   window wider than the batch (wk_dest: a batch sends at most 3 calls at
#   once to a destination plus one per answer in a row). Then in one batch:
#     six good orders answered after 400 ms -> processed, one effect each, and
#       their requests reached the destination within one answer's time of
#       each other (made at once, not one after the other: 5 x 400 ms)
#     a copy of one order (same message id) -> completed as a duplicate, one
#       request, one effect
#     a 400 -> failed 400, dead-lettered HttpRejected, no effect
#     a 503 once -> held, called again, processed, one effect
#     an order performed and answered after the 1 s timeout -> uncertain,
#       dead-lettered OutcomeUncertain, one effect, never called again
#  part 2, a plain destination with a reconcile query, 120 orders answered
#   after 300 ms, two db workers: inboxd killed -9 while a batch's calls are
#   in flight (claimed rows in the inbox), restarted -> every order processed
#   with exactly one effect, none lost, nothing dead-lettered.
#  part 3, each answer acted on as it comes: after twenty quick orders (to
#   widen the destination's window), one batch of a slow order answered after
#   15 s and seven quick ones -> the seven are processed and completed on the
#   broker while the slow call is still under way (its row claimed, its
#   message the only one locked); then the slow one is processed, one effect.
# Leases are 4 s and the broker's lock 5 s so that taken-over claims come back
# within seconds.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":10},
                      {"name":"charges2","lock_duration_s":5,"max_delivery_count":100},
                      {"name":"charges3","lock_duration_s":5,"max_delivery_count":10}]}'
own='{"servicebus":{"max_concurrent_calls":32,"prefetch":32},
      "db":{"batch_max":32,"pool_size":1,"batch_linger_ms":1000}}'

# ---- part 1: one batch, each message ending as it would alone -------------
start_fake pay plain; PAY=$FAKE_URL
fake_config "$PAY" '{"faults":[
  {"kind":"status","match":"bad-","status":400},
  {"kind":"status","match":"flaky-","status":503,"times":1},
  {"kind":"delay","match":"amb-","delay_ms":3000},
  {"kind":"delay","match":"ok-","delay_ms":400}]}'
gen_orders 20 warm >"$W/warm.jsonl"
{
  gen_orders 6 ok; gen_orders 1 dup; gen_orders 1 dup; gen_orders 1 bad
  gen_orders 1 flaky; gen_orders 1 amb
} >"$W/orders.jsonl"
send_file charges "$W/warm.jsonl"
write_config "$W/inboxd.json" charges "$(charge_route "$PAY" false)" "$own"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 120 queue_empty charges || die "queue not drained of the warm-up orders"
check "warm-up: processed rows" "$(inbox_count processed)" 20
send_file charges "$W/orders.jsonl"
wait_until 120 queue_empty charges || die "queue not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
ledger "$PAY" "$W/pay.json"
L="$W/pay.json"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity charges --dlq >"$W/dlq.jsonl" \
  || die "inboxctl peek of the DLQ failed"
# dl ID: the dead-letter reason of ID ("" when it is not in the DLQ); fails
# for an id never sent and for a dead letter without a reason.
dl() {
  grep -q -F "\"message_id\":\"$1\"" "$W/orders.jsonl" || fail "dl: $1 was never sent"
  jq -r --arg m "$1" 'select(.message_id == $m) | .dead_letter_reason // error("no dead_letter_reason")' \
    "$W/dlq.jsonl" || fail "dl: cannot read the dead letter of $1 from $W/dlq.jsonl"
}
reqs() { ledger_calls "$L" "charge:$1"; }
effects() { ledger_effects "$L" "charge:$1"; }
row() { sql "SELECT status || ' ' || COALESCE(CAST(remote_status AS varchar(8)), '-') FROM inboxd_inbox WHERE message_id = '$1'"; }

for i in 1 2 3 4 5 6; do
  check "ok-$i: inbox row" "$(row ok-$i)" "processed 201"
  check "ok-$i: effects" "$(effects ok-$i)" 1
done
check "good orders: business rows" "$(sql "SELECT count(*) FROM charges WHERE order_id LIKE 'ok-%'")" 6
span=$(ledger_q "$L" '[.requests[] | select(.key | startswith("charge:ok-")) | .t] | max - min')
[ "$span" -lt 1200 ] || die "the six good calls spread over $span ms: not made at once"
e2e_log "ok   six good calls reached the destination within $span ms"
check "duplicate: inbox row" "$(row dup-1)" "processed 201"
check "duplicate: requests" "$(reqs dup-1)" 1
check "duplicate: effects" "$(effects dup-1)" 1
check "duplicate: dead letters" "$(dl dup-1)" ""
check "400: inbox row" "$(row bad-1)" "failed 400"
check "400: effects" "$(effects bad-1)" 0
check "400: dead letter" "$(dl bad-1)" HttpRejected
check "503: inbox row" "$(row flaky-1)" "processed 201"
check "503: requests" "$(reqs flaky-1)" 2
check "503: effects" "$(effects flaky-1)" 1
check "timeout: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'amb-1'")" uncertain
check "timeout: requests" "$(reqs amb-1)" 1
check "timeout: effects" "$(effects amb-1)" 1
check "timeout: dead letter" "$(dl amb-1)" OutcomeUncertain
check "part 1: dead-lettered" "$(broker_stat charges dead_lettered)" 2
check "part 1: inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox")" 30

# ---- part 2: kill -9 while a batch's calls are in flight ------------------
N=120
start_fake pay2 plain; PAY2=$FAKE_URL
fake_config "$PAY2" '{"faults":[{"kind":"delay","delay_ms":1000}]}'
gen_orders $N k >"$W/orders2.jsonl"
send_file charges2 "$W/orders2.jsonl"
route2=$(charge_route "$PAY2" false \
  "$(jq -n --arg u "$PAY2/charges?key={key}" '{reconcile: {method: "GET", url: $u}}')")
own2='{"servicebus":{"max_concurrent_calls":64,"prefetch":64},"db":{"batch_max":32,"pool_size":2}}'
write_config "$W/inboxd2.json" charges2 "$route2" "$own2"
requests_at_least() { ledger "$PAY2" "$W/pay2.json"; [ "$(ledger_q "$W/pay2.json" '.requests | length')" -ge "$1" ]; }
# The kill must land while a batch's calls are under way (a claimed row),
# not between two batches: the claimed rows are read last, a moment before it.
in_flight_after() { requests_at_least "$1" && [ "$(inbox_count claimed)" -ge 1 ]; }
start_inboxd "$W/inboxd2.json" inboxd2; pid=$LAST_PID
wait_until 120 in_flight_after 40 || die "no batch under way after 40 calls within 120 s"
kill -9 "$pid"; wait "$pid" 2>/dev/null
claimed=$(inbox_count claimed)
e2e_log "kill -9 with $claimed claimed rows and $(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'k-%' AND status = 'processed'") processed"
[ "$claimed" -ge 1 ] || die "the kill landed between batches (no claimed row): nothing tested"
start_inboxd "$W/inboxd2.json" inboxd2; pid=$LAST_PID
wait_until 180 queue_empty charges2 || die "queue charges2 not drained after the restart"
stop_inboxd $pid; check "inboxd exit status (restart)" "$STOP_RC" 0
ledger "$PAY2" "$W/pay2.json"
check "kill: orders with an effect" "$(ledger_q "$W/pay2.json" '.effects | length')" $N
check "kill: orders with more than one effect" \
  "$(ledger_q "$W/pay2.json" '[.effects[] | select(length != 1)] | length')" 0
check "kill: processed rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'k-%' AND status = 'processed'")" $N
check "kill: business rows" "$(sql "SELECT count(*) FROM charges WHERE order_id LIKE 'k-%'")" $N
check "kill: dead-lettered" "$(broker_stat charges2 dead_lettered)" 0
e2e_log "claims taken over after the kill: $(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'k-%' AND attempts > 1")"

# ---- part 3: a slow call holds only its own message ------------------------
start_fake pay3 plain; PAY3=$FAKE_URL
fake_config "$PAY3" '{"faults":[{"kind":"delay","match":"slow-","delay_ms":15000}]}'
gen_orders 20 w3 >"$W/warm3.jsonl"
{ gen_orders 1 slow; gen_orders 7 quick; } >"$W/orders3.jsonl"
write_config "$W/inboxd3.json" charges3 \
  "$(charge_route "$PAY3" false '{"timeout_ms":30000,"lease_s":40}')" "$own"
send_file charges3 "$W/warm3.jsonl"
start_inboxd "$W/inboxd3.json" inboxd3; pid=$LAST_PID
wait_until 120 queue_empty charges3 || die "queue charges3 not drained of the warm-up orders"
send_file charges3 "$W/orders3.jsonl"
quick_done_slow_pending() {
  [ "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'quick-%' AND status = 'processed'")" = 7 ] &&
    [ "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'slow-1'")" = claimed ] &&
    [ "$(broker_stat charges3 locked)" = 1 ] && [ "$(broker_stat charges3 active)" = 0 ]
}
wait_until 60 quick_done_slow_pending ||
  die "the quick orders were not processed and completed while the slow call was under way" \
    "(quick processed: $(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'quick-%' AND status = 'processed'")," \
    "slow: $(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'slow-1'"), locked: $(broker_stat charges3 locked))"
e2e_log "ok   seven quick orders processed and completed while the slow call was under way"
wait_until 120 queue_empty charges3 || die "queue charges3 not drained"
stop_inboxd $pid; check "inboxd exit status (part 3)" "$STOP_RC" 0
ledger "$PAY3" "$W/pay3.json"
check "slow: inbox row" "$(row slow-1)" "processed 201"
check "slow and quick: orders with one effect" \
  "$(ledger_q "$W/pay3.json" '[.effects | to_entries[] | select(.key | test("charge:(slow|quick)-")) | select(.value | length == 1)] | length')" 8
check "part 3: dead-lettered" "$(broker_stat charges3 dead_lettered)" 0
