#!/usr/bin/env bash
# HTTP scenarios 2 and 3: 5% of the orders time out AFTER the destination
# acted (the fake answers 3 s later, the route gives up after 1 s).
#   idempotent  (2) the destination honours the key: every order has one
#               effect, and the orders that timed out were called again
#               with the same key.
#   plain       (3) the destination ignores keys; inboxd is also killed -9
#               twice: no order receives two requests; every order ends
#               processed, or uncertain and dead-lettered OutcomeUncertain;
#               none is lost.
#   reconcile   (3) as plain, with a reconcile query: the uncertain ones
#               resolve without a second effect, every order processed.
# Usage: e2e_http_ambiguous.sh DIALECT MODE
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
MODE=${2:-idempotent}
N=${E2E_HTTP_N:-600}
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":100}]}'
case "$MODE" in
idempotent) start_fake pay idempotent; route=$(charge_route "$FAKE_URL" true); kills_wanted=0 ;;
plain) start_fake pay plain; route=$(charge_route "$FAKE_URL" false); kills_wanted=2 ;;
reconcile)
  start_fake pay plain
  route=$(charge_route "$FAKE_URL" false \
    "$(jq -n --arg u "$FAKE_URL/charges?key={key}" '{reconcile: {method: "GET", url: $u}}')")
  kills_wanted=2 ;;
*) die "unknown mode $MODE" ;;
esac
fake_config "$FAKE_URL" '{"faults":[{"kind":"delay","pct":5,"times":1,"delay_ms":3000}]}'
gen_orders $N >"$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
write_config "$W/inboxd.json" charges "$route"
kills=0
while :; do
  start_inboxd "$W/inboxd.json" inboxd
  pid=$LAST_PID
  if [ $kills -lt $kills_wanted ]; then
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + (r % 1000) / 1000 }')"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    kills=$((kills + 1))
    e2e_log "kill -9 #$kills at $(sql 'SELECT count(*) FROM inboxd_inbox') inbox rows"
    continue
  fi
  wait_until 300 queue_empty charges || die "queue not drained"
  stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
  break
done
ledger "$FAKE_URL" "$W/ledger.json"
L="$W/ledger.json"
faulted=$(ledger_q "$L" '[.requests[] | select(.fault == "delay") | .key] | unique | length')
[ "$faulted" -ge 1 ] || die "no order met the injected timeout (raise E2E_HTTP_N)"
e2e_log "orders that timed out after the destination acted: $faulted"
e2e_log "claims taken over after a kill: $(sql 'SELECT count(*) FROM inboxd_inbox WHERE attempts > 1')"
processed=$(inbox_count processed)
uncertain=$(inbox_count uncertain)
check "no order lost (processed + uncertain)" $((processed + uncertain)) $N
check "rows in another status" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status NOT IN ('processed', 'uncertain')")" 0
check "requests without the key header" \
  "$(ledger_q "$L" '[.requests[] | select(.method == "POST" and (.key_from_header | not))] | length')" 0
case "$MODE" in
idempotent)
  check "orders with exactly one effect" "$(ledger_q "$L" '[.effects[] | select(length == 1)] | length')" $N
  check "orders with more than one effect" "$(ledger_q "$L" '[.effects[] | select(length > 1)] | length')" 0
  check "timed-out orders called again with the same key" \
    "$(ledger_q "$L" '[.requests[] | select(.fault == "delay") | .key] as $k
                      | [$k[] as $x | [.requests[] | select(.key == $x)] | length | select(. >= 2)] | length')" "$faulted"
  check "uncertain" "$uncertain" 0
  check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
  ;;
plain)
  check "orders with two or more requests" \
    "$(ledger_q "$L" '[.requests[] | select(.method == "POST")] | group_by(.key) | map(select(length > 1)) | length')" 0
  [ "$uncertain" -ge "$faulted" ] || die "uncertain $uncertain < orders that timed out $faulted"
  check "dead-lettered = uncertain" "$(broker_stat charges dead_lettered)" "$uncertain"
  check "dead-letter reasons" "$(dlq_reasons charges | awk '{print $2}' | sort -u | tr '\n' ' ')" "OutcomeUncertain "
  check "processed orders have a charge" "$(sql 'SELECT count(*) FROM charges')" "$processed"
  ;;
reconcile)
  check "uncertain" "$uncertain" 0
  check "orders with exactly one effect" "$(ledger_q "$L" '[.effects[] | select(length == 1)] | length')" $N
  check "orders with more than one effect" "$(ledger_q "$L" '[.effects[] | select(length > 1)] | length')" 0
  [ "$(ledger_q "$L" '[.requests[] | select(.method == "GET")] | length')" -ge "$faulted" ] \
    || die "fewer reconcile queries than timed-out orders"
  check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
  check "charges rows" "$(sql 'SELECT count(*) FROM charges')" $N
  ;;
esac
check "queue active" "$(broker_stat charges active)" 0
