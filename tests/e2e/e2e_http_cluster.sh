#!/usr/bin/env bash
# Limits for the whole cluster (http.limit_scope "cluster"): two inboxd on
# one queue and one database, each writing its heartbeat into
# inboxd_replicas, so that together they keep to the limits a destination
# set rather than each to all of them:
#   Rated  60 orders, rate_per_s 10: over the destination's requests, at
#          most 10/s plus the one second's burst the two share (two
#          processes each at the full rate would make 20/s and more).
#   Conc   24 orders to a destination that takes 300 ms to answer,
#          max_concurrent 2: never more than 2 under way at once there.
# Every order is applied once, nothing dead-lettered, and the replicas'
# rows are gone after both stop cleanly.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
NR=60
NC=24
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":10,"max_delivery_count":10}]}'
start_fake rated idempotent; RATED=$FAKE_URL
start_fake conc idempotent; CONC=$FAKE_URL
fake_config "$CONC" '{"faults":[{"kind":"delay","delay_ms":300}]}'
route() { # route SUBJECT URL EXTRA_HTTP
  charge_route "$2" true "$3" | jq --arg s "$1" '.[0].match.subject = $s | .[0]'
}
routes=$(jq -s . \
  <(route Rated "$RATED" '{"rate_per_s": 10, "limit_scope": "cluster", "lease_s": 30}') \
  <(route Conc "$CONC" '{"max_concurrent": 2, "limit_scope": "cluster", "lease_s": 30}'))
write_config "$W/inboxd.json" charges "$routes" \
  '{"servicebus": {"max_concurrent_calls": 64, "prefetch": 64}}'
start_inboxd "$W/inboxd.json" inboxd1; p1=$LAST_PID
start_inboxd "$W/inboxd.json" inboxd2; p2=$LAST_PID
replicas() { sql "SELECT count(*) FROM inboxd_replicas WHERE consumer = 'e2e'" 2>/dev/null || echo 0; }
two_replicas() { [ "$(replicas)" = 2 ]; }
wait_until 60 two_replicas || die "the two replicas' heartbeats did not both appear"
sleep 3 # a heartbeat (2 s) later, each has counted the other
{ gen_orders $NR rated Rated; gen_orders $NC conc Conc; } | shuf --random-source=<(yes) >"$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
wait_until 300 queue_empty charges || die "queue not drained"
stop_inboxd $p1; check "inboxd 1 exit status" "$STOP_RC" 0
stop_inboxd $p2; check "inboxd 2 exit status" "$STOP_RC" 0
ledger "$RATED" "$W/rated.json"
ledger "$CONC" "$W/conc.json"

total=$((NR + NC))
check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
check "inbox processed rows" "$(inbox_count processed)" "$total"
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" "$total"
check "rated effects" "$(ledger_q "$W/rated.json" '.effects | length')" "$NR"
check "conc effects" "$(ledger_q "$W/conc.json" '.effects | length')" "$NC"
check "replicas' rows after a clean stop" "$(replicas)" 0

inflight=$(ledger_q "$W/conc.json" '.max_in_flight')
e2e_log "conc destination: at most $inflight requests under way"
[ "$inflight" -le 2 ] || die "conc destination had $inflight requests under way at once, max_concurrent 2 for the cluster"
# 60 requests at 10/s after a burst of at most 10 take 5 s or more: 59
# gaps in 5 s is 11.8/s; the limit per process would allow 20/s and more.
rate=$(ledger_q "$W/rated.json" '[.requests[] | .t] | sort | ((length - 1) * 1000 / (.[-1] - .[0]) * 100 | round / 100)')
e2e_log "rated destination: $rate requests/s over $NR requests"
awk -v r="$rate" 'BEGIN { exit !(r <= 12.5) }' || die "rated destination at $rate/s, above 10/s for the cluster"
