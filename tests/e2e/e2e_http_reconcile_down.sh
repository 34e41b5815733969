#!/usr/bin/env bash
# When reconcile itself fails: paced, counted, ended with context.
#   A destination that is not idempotent acts on the first POST and never
#   answers it in time (timeout_ms 700: ambiguous), and its reconcile
#   endpoint answers 500 ("fail") or never ("hang"). Lock 5 s,
#   MaxDeliveryCount 4, retry.max_deliveries 3, retry.attempts 3, a lock
#   renewal of 5 s (each delivery's hold ends within it). Asserted on final
#   state: the destination's circuit opens on the failing lookups (its
#   metric shows it); a SIGTERM while the messages are on their last
#   delivery changes nothing; every message is dead-lettered
#   OutcomeUncertain by inboxd with its context (the reconcile
#   destination, the lookups, class ambiguous), none
#   MaxDeliveryCountExceeded by the broker; every row `uncertain`, none
#   left `claimed`; one POST per order, and at most (retry.attempts + 1) x
#   retry.max_deliveries = 12 lookups per order (printed).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
# Usage: e2e_http_reconcile_down.sh DIALECT fail|hang
lookup=${2:-fail}
case "$lookup" in fail | hang) ;; *) echo "unknown lookup mode $lookup" >&2; exit 2 ;; esac
e2e_init "${1:-postgresql}"
N=3
MAX_LOOKUPS=12
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":4}]}'
start_fake pay plain; PAY=$FAKE_URL
dest="http://127.0.0.1:${PAY##*:}"
gen_orders $N >"$W/orders.jsonl"
route=$(charge_route "$PAY" false "$(jq -n --arg rec "$PAY/charges?key={key}" \
  '{timeout_ms: 700, lease_s: 3, reconcile: {method: "GET", url: $rec}}')")
write_config "$W/inboxd.json" charges "$route" \
  '{"servicebus": {"max_delivery_count": 4, "max_auto_lock_renewal_s": 5},
    "retry": {"attempts": 3, "base_ms": 100, "max_ms": 400, "max_deliveries": 3},
    "http": {"listen": "127.0.0.1:0"}}'
fake_config "$PAY" "{\"lookup\":\"$lookup\",\"faults\":[{\"kind\":\"delay\",\"delay_ms\":5000}]}"
t0=$(date +%s%3N)
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
send_file charges "$W/orders.jsonl"

circuit_open() { [ "$(metric "$port" "inboxd_http_circuit_open{destination=\"$dest\"}" 2>/dev/null)" = 1 ]; }
wait_until 30 circuit_open || die "the destination's circuit never opened on its failing lookups"
e2e_log "ok   circuit open for $dest"
# Deliveries 1 and 2 given back (abandoned) by every order: all on their last delivery now.
last_delivery() { [ "$(broker_stat charges abandoned)" -ge $((2 * N)) ]; }
wait_until 60 last_delivery || die "the orders never reached their last delivery"
stop_inboxd $pid; check "inboxd exit status (SIGTERM on the last delivery)" "$STOP_RC" 0
check "broker: nothing dead-lettered before the restart" "$(broker_stat charges dead_lettered)" 0

start_inboxd "$W/inboxd.json" inboxd2; pid=$LAST_PID
all_dead() { [ "$(broker_stat charges dead_lettered)" -ge $N ]; }
wait_until 60 all_dead || die "the orders were not all dead-lettered"
wait_until 10 queue_empty charges || die "the queue holds more than the dead-lettered orders"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

check "dead-letter reasons" "$(dlq_reasons charges | awk '{print $2}' | sort | uniq -c | awk '{print $1, $2}')" \
  "$N OutcomeUncertain"
check "none by the broker's MaxDeliveryCount" \
  "$(broker_stat charges dead_lettered_by_reason | jq -c '[type, has("MaxDeliveryCountExceeded")]')" \
  '["object",false]'
"$INBOXCTL" peek --connection-string "$SB_CS" --entity charges --dlq >"$W/dlq.jsonl"
check "descriptions name the reconcile destination, the lookups and the last error" \
  "$(jq -r --arg d "$dest" '.dead_letter_description | contains("reconcile at " + $d) and test("[0-9]+ lookups") and (test("last error: none") | not)' "$W/dlq.jsonl" | sort -u)" true
check "context properties: class ambiguous, attempts counted" \
  "$(jq -c '[.properties."inboxd-error-class", (.properties."inboxd-attempts" >= 1)]' "$W/dlq.jsonl" | sort -u)" \
  '["ambiguous",true]'
check "inbox rows uncertain" "$(inbox_count uncertain)" $N
check "inbox rows left claimed" "$(inbox_count claimed)" 0
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" 0

ledger "$PAY" "$W/ledger.json"; L="$W/ledger.json"
check "one POST per order (never called again blindly)" \
  "$(ledger_q "$L" '[.requests[] | select(.method == "POST")] | group_by(.key) | map(length) | unique | tostring')" '[1]'
per=$(ledger_q "$L" '[.requests[] | select(.reconcile)] | group_by(.key) | map(length) | tostring')
most=$(ledger_q "$L" '[.requests[] | select(.reconcile)] | group_by(.key) | map(length) | max')
e2e_log "lookups per order ($lookup): $per (at most $MAX_LOOKUPS)"
[ "$most" -ge 1 ] && [ "$most" -le $MAX_LOOKUPS ] || die "lookups per order: $per, expected 1 to $MAX_LOOKUPS"
e2e_log "reconcile $lookup scenario passed in $(( ($(date +%s%3N) - t0) / 1000 )) s"
