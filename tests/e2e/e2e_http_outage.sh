#!/usr/bin/env bash
# A destination down while its messages flow: held, not burnt.
#   The destination answers 503 for an outage window while 150 orders flow
#   through a queue at Service Bus's default MaxDeliveryCount of 10, inboxd
#   at its defaults otherwise (retry, the circuit). Asserted: none
#   dead-lettered, none abandoned (one delivery each), one effect and one
#   charges row per order, and few requests during the outage (printed):
#   the circuit opens after a few failures and probes one at a time with
#   backoff. While it is open, /readyz stays 200 (a down destination is no
#   reason to restart inboxd), inboxd_http_circuit_open{destination} is 1 and
#   inboxd_held_messages counts the held orders.
# Scaled down from a 60 s outage on a 60 s lock: a 15 s outage on a 4 s lock,
# so that each held message's lock is renewed several times meanwhile.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
N=150
OUTAGE_MS=15000
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":4,"max_delivery_count":10}]}'
start_fake pay idempotent; PAY=$FAKE_URL
gen_orders $N >"$W/orders.jsonl"
write_config "$W/inboxd.json" charges "$(charge_route "$PAY" true '{"lease_s": 10}')" \
  '{"servicebus": {"max_concurrent_calls": 256, "max_delivery_count": 10},
    "retry": {"attempts": 3, "base_ms": 200, "max_ms": 10000},
    "http": {"listen": "127.0.0.1:0"}}'
fake_config "$PAY" "{\"faults\":[{\"kind\":\"status\",\"status\":503,\"for_ms\":$OUTAGE_MS}]}"
t0=$(date +%s%3N)
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
send_file charges "$W/orders.jsonl"
# Mid-outage: held, ready, the destination's circuit open.
sleep 6
dest="http://127.0.0.1:${PAY##*:}"
ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")
check "readyz while the destination is down" "$ready" 200
check "circuit open for the destination" \
  "$(metric "$port" "inboxd_http_circuit_open{destination=\"$dest\"}")" 1
held=$(metric "$port" inboxd_held_messages)
[ "${held:-0}" -ge 20 ] || die "held messages mid-outage: '$held', expected most of $N"
e2e_log "ok   held mid-outage: $held"
check "broker: nothing abandoned mid-outage" "$(broker_stat charges abandoned)" 0
wait_until 120 queue_empty charges || die "queue not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
ledger "$PAY" "$W/ledger.json"; L="$W/ledger.json"
during=$(ledger_q "$L" "[.requests[] | select(.fault != null)] | length")
total=$(ledger_q "$L" '.requests | length')
e2e_log "requests during the ${OUTAGE_MS} ms outage: $during (of $total in all, for $N orders)"
[ "$during" -le 40 ] || die "the down destination received $during requests during the outage"
check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
check "abandoned" "$(broker_stat charges abandoned)" 0
check "deliveries (one each)" "$(broker_stat charges delivered)" $N
check "orders with one effect" "$(ledger_q "$L" '[.effects[] | select(length == 1)] | length')" $N
check "orders with more effects" "$(ledger_q "$L" '[.effects[] | select(length > 1)] | length')" 0
check "inbox processed rows" "$(inbox_count processed)" $N
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" $N
e2e_log "outage scenario passed in $(( ($(date +%s%3N) - t0) / 1000 )) s"
