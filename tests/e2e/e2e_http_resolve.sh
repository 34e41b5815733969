#!/usr/bin/env bash
# HTTP scenario 6. A destination that ignores keys times out after acting on
# two orders: both are recorded uncertain and dead-lettered. An operator
# lists them, resolves one as processed (with the remote id found by hand)
# and one as retry; a replayed delivery of each then calls the destination
# again exactly once for the retry and never for the processed one.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":10}]}'
start_fake pay plain
fake_config "$FAKE_URL" '{"faults":[{"kind":"delay","match":"late-","delay_ms":3000,"times":1}]}'
{ gen_orders 2 late; gen_orders 2 ok; } >"$W/orders.jsonl"
write_config "$W/inboxd.json" charges "$(charge_route "$FAKE_URL" false)"
send_file charges "$W/orders.jsonl"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 60 queue_empty charges || die "queue not drained"
check "uncertain rows" "$(inbox_count uncertain)" 2
check "dead-lettered" "$(broker_stat charges dead_lettered)" 2
check "dead-letter reasons" "$(dlq_reasons charges | tr '\n' ' ')" "late-1 OutcomeUncertain late-2 OutcomeUncertain "
"$INBOXCTL" inbox list --config "$W/inboxd.json" --status uncertain --consumer e2e >"$W/list.jsonl" \
  || die "inbox list failed"
check "listed uncertain" "$(jq -r .message_id "$W/list.jsonl" | sort | tr '\n' ' ')" "late-1 late-2 "
check "listed error class" "$(jq -r .error_class "$W/list.jsonl" | sort -u)" ambiguous
# Usage errors exit 2 and name what is missing.
"$INBOXCTL" inbox resolve --config "$W/inboxd.json" --consumer e2e --message-id late-1 --as maybe --note x 2>"$W/usage.txt"
check "bad --as exit status" $? 2
"$INBOXCTL" inbox resolve --config "$W/inboxd.json" --consumer e2e --message-id late-1 --as processed \
  --remote-id fx-by-hand --note "found in the payments console" || die "resolve processed failed"
"$INBOXCTL" inbox resolve --config "$W/inboxd.json" --consumer e2e --message-id late-2 --as retry \
  --note "not charged: call again" || die "resolve retry failed"
"$INBOXCTL" inbox resolve --config "$W/inboxd.json" --consumer e2e --message-id late-2 --as retry --note again 2>/dev/null
check "resolving twice exit status" $? 1
check "late-1 row" "$(sql "SELECT status || ' ' || remote_id || ' ' || resolution FROM inboxd_inbox WHERE message_id = 'late-1'")" \
  "processed fx-by-hand processed"
# The replay: both dead letters delivered again with their message ids.
jq -c 'select(.message_id | startswith("late-"))' "$W/orders.jsonl" >"$W/replay.jsonl"
send_file charges "$W/replay.jsonl"
wait_until 60 queue_empty charges || die "queue not drained after the replay"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
ledger "$FAKE_URL" "$W/ledger.json"
L="$W/ledger.json"
check "late-2 requests (once, then exactly once more)" "$(ledger_q "$L" '[.requests[] | select(.key == "charge:late-2")] | length')" 2
check "late-1 requests (resolved processed: never again)" "$(ledger_q "$L" '[.requests[] | select(.key == "charge:late-1")] | length')" 1
check "late-2 row" "$(sql "SELECT status || ' ' || resolution || ' ' || resolution_note FROM inboxd_inbox WHERE message_id = 'late-2'")" \
  "processed retry not charged: call again"
check "late-2 charge row" "$(sql "SELECT count(*) FROM charges WHERE order_id = 'late-2'")" 1
check "ok rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'ok-%' AND status = 'processed'")" 2
check "uncertain rows left" "$(inbox_count uncertain)" 0
check "queue active" "$(broker_stat charges active)" 0
