#!/usr/bin/env bash
# Destinations paced and answers that mean "already done", one inboxd, one
# queue at MaxDeliveryCount 10, five routes to four fake destinations:
#   Paced  200 orders, http.rate_per_s 20: the destination's measured rate
#          is within 10 % of 20/s, while
#   Down   40 orders to another destination that answers 503 for the first
#          12 s: held meanwhile (the paced route keeps its rate), then each
#          applied once; nothing dead-lettered.
#   Thr    429 with Retry-After: 5: held (one delivery), the call repeated
#          5 s later or more, one effect.
#   Conc   20 orders to a destination that takes 300 ms to answer,
#          http.max_concurrent 2: it never has more than 2 requests under
#          way at once (and does have 2), each order applied once.
#   Dup    the first request acts but its answer is lost; the idempotent
#          retry gets 409 (the destination refuses a second charge), which
#          http.applied_statuses [409] maps to applied.
#   Look   a non-idempotent destination whose lookup answers as a search:
#          200 [] after a request that did not act is "not found"
#          (reconcile.found "$[0].id"): called again, one effect; after one
#          that acted, 200 [{"id"}] is "applied", no second request. (Its
#          finishing SQL reads the lookup's answer, a list: the route keeps
#          the order id only.)
# Scaled down: a 12 s outage, 10 s of paced calls, a 4 s lock.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
NP=200
ND=40
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":4,"max_delivery_count":10}]}'
start_fake paced idempotent; PACED=$FAKE_URL
start_fake down idempotent; DOWN=$FAKE_URL
start_fake thr idempotent; THR=$FAKE_URL
start_fake look plain; LOOK=$FAKE_URL
start_fake conc idempotent; CONC=$FAKE_URL
NC=20
route() { # route SUBJECT URL IDEMPOTENT EXTRA_HTTP
  charge_route "$2" "$3" "$4" | jq --arg s "$1" '.[0].match.subject = $s | .[0]'
}
routes=$(jq -s . <(route Paced "$PACED" true '{"rate_per_s": 20, "lease_s": 10}') \
  <(route Down "$DOWN" true '{"lease_s": 10}') \
  <(route Thr "$THR" true '{"lease_s": 10}') \
  <(route Conc "$CONC" true '{"lease_s": 10, "max_concurrent": 2}') \
  <(route Dup "$THR" true '{"lease_s": 10, "applied_statuses": [409]}') \
  <(route Look "$LOOK" false "$(jq -n --arg u "$LOOK/charges?key={key}" \
      '{lease_s: 10, reconcile: {method: "GET", url: $u, found: "$[0].id"}}')" \
    | jq '.params = [["$.orderId", "$.orderId"]]'))
fake_config "$THR" '{"conflict_on_repeat": true, "faults":[
  {"kind":"status","match":"thr-","status":429,"retry_after":5,"times":1},
  {"kind":"reset","match":"dup-","effect":true,"times":1}]}'
fake_config "$CONC" '{"faults":[{"kind":"delay","delay_ms":300}]}'
fake_config "$LOOK" '{"lookup": "list", "faults":[
  {"kind":"reset","match":"miss-","effect":false,"times":1},
  {"kind":"reset","match":"hit-","effect":true,"times":1}]}'
{
  gen_orders $NP paced Paced; gen_orders $ND down Down; gen_orders 1 thr Thr; gen_orders $NC conc Conc
  gen_orders 1 dup Dup; gen_orders 1 miss Look; gen_orders 1 hit Look
} | shuf --random-source=<(yes) >"$W/orders.jsonl"
total=$(grep -c . "$W/orders.jsonl")
write_config "$W/inboxd.json" charges "$routes" \
  '{"servicebus": {"max_concurrent_calls": 256, "max_delivery_count": 10}}'
send_file charges "$W/orders.jsonl"
# The outage's 12 s start now, not before the (slow, under a sanitizer) send.
fake_config "$DOWN" '{"faults":[{"kind":"status","status":503,"for_ms":12000}]}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 120 queue_empty charges || die "queue not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
for f in paced down thr look conc; do eval "ledger \"\$$(echo $f | tr a-z A-Z)\" \"\$W/$f.json\""; done

# Broker: every message once, none dead-lettered or abandoned.
check "deliveries (one each)" "$(broker_stat charges delivered)" "$total"
check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
check "abandoned" "$(broker_stat charges abandoned)" 0
check "inbox processed rows" "$(inbox_count processed)" "$total"
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" "$total"

# Paced: 20/s within 10 %, measured over its requests, while Down was down.
rate=$(ledger_q "$W/paced.json" '[.requests[] | .t] | sort | ((length - 1) * 1000 / (.[-1] - .[0]) * 100 | round / 100)')
e2e_log "paced destination: $rate requests/s over $NP requests"
awk -v r="$rate" 'BEGIN { exit !(r >= 18 && r <= 22) }' || die "paced rate $rate/s, not within 10 % of 20/s"
check "paced: one request per order" "$(ledger_q "$W/paced.json" '.requests | length')" $NP
# While the other destination was down (until its first call that got through:
# its last refused one may be a probe seconds before the outage ended), the
# paced one kept its 20/s.
down_end=$(ledger_q "$W/down.json" '[.requests[] | select(.fault == null) | .t] | min')
read -r paced_in rate_in <<<"$(ledger_q "$W/paced.json" "[.requests[] | .t | select(. <= $down_end)] | sort
  | \"\(length) \(if length > 1 then ((length - 1) * 1000 / (.[-1] - .[0]) * 100 | round / 100) else 0 end)\"")"
e2e_log "paced while the other destination was down: $paced_in requests, $rate_in/s"
[ "$paced_in" -ge 30 ] || die "too few paced requests overlapped the outage to tell ($paced_in)"
awk -v r="$rate_in" 'BEGIN { exit !(r >= 18 && r <= 22) }' || die "the paced route ran at $rate_in/s while the other destination was down"

# Down: few requests in its outage, then each order once.
during=$(ledger_q "$W/down.json" '[.requests[] | select(.fault != null)] | length')
e2e_log "requests to the down destination during its 12 s outage: $during (for $ND orders)"
[ "$during" -le 30 ] || die "the down destination received $during requests during its outage"
check "down: orders with one effect" "$(ledger_q "$W/down.json" '[.effects[] | select(length == 1)] | length')" $ND

# 429 + Retry-After: 5: the second request 5 s after the first, or later.
check "429: requests" "$(ledger_q "$W/thr.json" '[.requests[] | select(.key == "charge:thr-1")] | length')" 2
gap=$(ledger_q "$W/thr.json" '[.requests[] | select(.key == "charge:thr-1") | .t] | .[1] - .[0]')
[ "$gap" -ge 5000 ] || die "429: Retry-After not honoured (second request after $gap ms)"
e2e_log "ok   429: second request after $gap ms"
check "429: effects" "$(ledger_q "$W/thr.json" '.effects["charge:thr-1"] | length')" 1

# max_concurrent 2: never more than 2 requests under way at the destination, and 2 at times.
check "max_concurrent: most requests under way at once" "$(ledger_q "$W/conc.json" '.max_in_flight')" 2
check "max_concurrent: orders with one effect" "$(ledger_q "$W/conc.json" '[.effects[] | select(length == 1)] | length')" $NC

# 409 after a lost answer: applied, with the first effect's id.
check "409: requests" "$(ledger_q "$W/thr.json" '[.requests[] | select(.key == "charge:dup-1")] | length')" 2
check "409: effects" "$(ledger_q "$W/thr.json" '.effects["charge:dup-1"] | length')" 1
check "409: inbox row" "$(sql "SELECT status || ' ' || remote_status || ' ' || remote_id FROM inboxd_inbox WHERE message_id = 'dup-1'")" \
  "processed 409 $(ledger_q "$W/thr.json" '.effects["charge:dup-1"][0].id')"

# Lookup 200 []: not applied, called again; 200 [{id}]: applied.
check "200 []: effects" "$(ledger_q "$W/look.json" '.effects["charge:miss-1"] | length')" 1
check "200 []: calls" "$(ledger_q "$W/look.json" '[.requests[] | select(.key == "charge:miss-1" and (.reconcile | not))] | length')" 2
check "200 []: row" "$(sql "SELECT status || ' ' || remote_id FROM inboxd_inbox WHERE message_id = 'miss-1'")" \
  "processed $(ledger_q "$W/look.json" '.effects["charge:miss-1"][0].id')"
check "200 [{id}]: effects" "$(ledger_q "$W/look.json" '.effects["charge:hit-1"] | length')" 1
check "200 [{id}]: calls" "$(ledger_q "$W/look.json" '[.requests[] | select(.key == "charge:hit-1" and (.reconcile | not))] | length')" 1
check "200 [{id}]: row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'hit-1'")" processed
