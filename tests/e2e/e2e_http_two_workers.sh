#!/usr/bin/env bash
# HTTP scenario 4. Two inboxd on the same queue, every message sent twice,
# a destination that ignores idempotency keys: the claim in the inbox (not
# luck) keeps each order to exactly one request, and every order ends
# processed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
N=${E2E_HTTP_N:-500}
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":100}]}'
start_fake pay plain
gen_orders $N >"$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
# A long lease: a slow machine must not turn a claim in progress into a takeover.
write_config "$W/inboxd.json" charges "$(charge_route "$FAKE_URL" false '{"lease_s": 30}')"
start_inboxd "$W/inboxd.json" inboxd1; p1=$LAST_PID
start_inboxd "$W/inboxd.json" inboxd2; p2=$LAST_PID
wait_until 300 queue_empty charges || die "queue not drained"
stop_inboxd $p1; check "inboxd 1 exit status" "$STOP_RC" 0
stop_inboxd $p2; check "inboxd 2 exit status" "$STOP_RC" 0
ledger "$FAKE_URL" "$W/ledger.json"
L="$W/ledger.json"
check "orders requested" "$(ledger_q "$L" '[.requests[] | .key] | unique | length')" $N
check "orders requested more than once" \
  "$(ledger_q "$L" '[.requests[]] | group_by(.key) | map(select(length > 1)) | length')" 0
check "requests" "$(ledger_q "$L" '.requests | length')" $N
check "inbox processed rows" "$(inbox_count processed)" $N
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" $N
check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
check "queue active" "$(broker_stat charges active)" 0
