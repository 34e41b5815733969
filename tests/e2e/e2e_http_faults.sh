#!/usr/bin/env bash
# HTTP scenario 5, one message per row of the decision table that is about
# the answer itself:
#   400                  -> recorded failed, dead-lettered HttpRejected with
#                           the status (and never the credential, even when
#                           the destination echoes it back)
#   503 + Retry-After: 1 -> waited at least a second, then applied
#   500 three times      -> retried with the same key, then applied (201)
#   TLS, throwaway CA    -> applied through https with http.ca_file
#   TLS, wrong CA        -> a clear log line, nothing sent, the message not
#                           lost: held under its renewed lock (one probe at a
#                           time), then, its renewal spent on its last allowed
#                           delivery, dead-lettered RetryBudgetExhausted by inboxd
#   connection refused   -> transient, held likewise, not lost
# The lock renewal is 12 s (and the calls shorter) so that a hold ends soon;
# servicebus.max_delivery_count 2 makes delivery 1 the last inboxd allows.
#   a 7 s call on a 5 s broker lock -> the lock renewed throughout: one
#                           delivery, applied
#   503 + Retry-After: 86400 (another destination, answering 201 from its
#                           next request on; two more orders sent after the
#                           503) -> held 5 s, not a day: one probe then,
#                           whose 201 ends the hold; all three applied, none
#                           dead-lettered
#   503 + Retry-After: an HTTP date in year 9999, http.max_retry_after_s 2
#                        -> held 2 s, then applied; both counted in
#                           inboxd_http_retry_after_capped_total
#   a host chosen by the message (http.allowed_hosts ["127.0.0.1:<port>"],
#   url http://{$.host}/charges) -> "127.0.0.1:<port>" applied (its colon
#                           not percent-encoded); another port, or a value
#                           that is no host, dead-lettered BindError
# The credential never appears in inboxd's output, --print-config or the DLQ.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
create_charges_table
"$E2E_SRC/tests/fakehttp/mkca.sh" "$W" || die "mkca failed"
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":2}]}'
start_fake pay idempotent; PAY=$FAKE_URL
start_fake tls idempotent --tls "$W/srv.crt" "$W/srv.key"; TLS=$FAKE_URL
start_fake day idempotent; DAY=$FAKE_URL
start_fake date idempotent; DATE=$FAKE_URL
fake_config "$DAY" '{"faults":[{"kind":"status","match":"day-1","status":503,"retry_after":86400,"times":1}]}'
fake_config "$DATE" '{"faults":[{"kind":"status","match":"date-1","status":503,
  "retry_after":"Fri, 31 Dec 9999 23:59:59 GMT","times":1}]}'
fake_config "$PAY" '{"faults":[
  {"kind":"status","match":"bad-","status":400,"echo_auth":true},
  {"kind":"status","match":"wait-","status":503,"retry_after":1,"times":1},
  {"kind":"status","match":"flaky-","status":500,"times":3},
  {"kind":"delay","match":"slow-","delay_ms":7000}]}'
# A port nothing listens on.
refused=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
route() { # route SUBJECT URL [EXTRA_HTTP]
  local extra=${3:-}
  [ -n "$extra" ] || extra='{}'
  charge_route "$2" true "$extra" | jq --arg s "$1" '.[0].match.subject = $s | .[0]'
}
routes=$(jq -s . <(route ChargeRequested "$PAY") \
  <(route TlsGood "$TLS" "$(jq -n --arg ca "$W/ca.crt" '{ca_file: $ca}')") \
  <(route TlsBad "$TLS" "$(jq -n --arg ca "$W/other-ca.crt" '{ca_file: $ca}')") \
  <(route Refused "http://127.0.0.1:$refused") \
  <(route Slow "$PAY" '{"timeout_ms": 9000, "lease_s": 10}') \
  <(route Day "$DAY") <(route Date "$DATE" '{"max_retry_after_s": 2}') \
  <(route Host "http://{\$.host}" "$(jq -n --arg h "${PAY#http://}" '{allowed_hosts: [$h]}')"))
host_order() { # host_order ID HOST
  gen_orders 1 "$1" Host | jq -c --arg h "$2" '.message_id = $ARGS.positional[0] | .body.orderId = .message_id
    | .body.host = $h' --args "$1"
}
{
  gen_orders 1 bad; gen_orders 1 wait; gen_orders 1 flaky; gen_orders 1 ok
  gen_orders 1 tgood TlsGood; gen_orders 1 tbad TlsBad; gen_orders 1 refused Refused
  gen_orders 1 slow Slow; gen_orders 1 day Day; gen_orders 1 date Date
  host_order host-ok "${PAY#http://}"; host_order host-port "127.0.0.1:$refused"
  host_order host-bad "${PAY#http://}@evil.example"
} >"$W/orders.jsonl"
# Five retries inside one delivery: enough for three 500s and a Retry-After.
write_config "$W/inboxd.json" charges "$routes" '{"retry":{"attempts":5,"base_ms":50,"max_ms":300},
  "servicebus":{"max_auto_lock_renewal_s":12,"max_delivery_count":2}, "http":{"listen":"127.0.0.1:0"}}'
"$INBOXD" --config "$W/inboxd.json" --print-config >"$W/print-config.json" 2>&1 \
  || die "--print-config failed: $(cat "$W/print-config.json")"
send_file charges "$W/orders.jsonl"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
# Two more orders for the destination that said "Retry-After: 86400", once it said so.
day_503() { [ "$(curl -sf "$DAY/_ledger" | jq '[.requests[] | select(.fault != null)] | length')" = 1 ]; }
wait_until 30 day_503 || die "the destination never answered its 503"
gen_orders 3 day Day | tail -n 2 >"$W/day.jsonl"
send_file charges "$W/day.jsonl"
wait_until 120 queue_empty charges || die "queue not drained"
capped=$(metric "$port" inboxd_http_retry_after_capped_total)
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
ledger "$PAY" "$W/pay.json"; ledger "$TLS" "$W/tls.json"
ledger "$DAY" "$W/day.json"; ledger "$DATE" "$W/date.json"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity charges --dlq >"$W/dlq.jsonl"
dl() { jq -r --arg m "$1" 'select(.message_id == $m) | '"$2" "$W/dlq.jsonl"; }

# 400: failed row with the status, HttpRejected naming it.
check "400: reason" "$(dl bad-1 .dead_letter_reason)" HttpRejected
case "$(dl bad-1 .dead_letter_description)" in *"HTTP 400"*) e2e_log "ok   400: description names the status" ;;
  *) die "400: description '$(dl bad-1 .dead_letter_description)'" ;; esac
check "400: inbox row" "$(sql "SELECT status || ' ' || remote_status FROM inboxd_inbox WHERE message_id = 'bad-1'")" "failed 400"
check "400: requests" "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:bad-1")] | length')" 1
# 503 + Retry-After: 1, then applied; the second request a second later or more.
check "503: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'wait-1'")" processed
check "503: requests" "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:wait-1")] | length')" 2
gap=$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:wait-1") | .t] | .[1] - .[0]')
[ "$gap" -ge 1000 ] || die "503: Retry-After not honoured (second request after $gap ms)"
e2e_log "ok   503: second request after $gap ms"
# 500 x3 then 201, with one key.
check "500x3: inbox row" "$(sql "SELECT status || ' ' || remote_status FROM inboxd_inbox WHERE message_id = 'flaky-1'")" "processed 201"
check "500x3: requests" "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:flaky-1")] | length')" 4
check "500x3: effects" "$(ledger_q "$W/pay.json" '.effects["charge:flaky-1"] | length')" 1
check "plain: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'ok-1'")" processed
# TLS with the throwaway CA.
check "tls: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'tgood-1'")" processed
check "tls: effects" "$(ledger_q "$W/tls.json" '.effects["charge:tgood-1"] | length')" 1
check "tls: charge row" "$(sql "SELECT count(*) FROM charges WHERE order_id = 'tgood-1'")" 1
# TLS with the wrong CA: nothing sent, not lost, no inbox row left behind.
check "wrong CA: requests" "$(ledger_q "$W/tls.json" '[.requests[] | select(.key == "charge:tbad-1")] | length')" 0
check "wrong CA: dead-lettered by inboxd after its hold" "$(dl tbad-1 .dead_letter_reason)" RetryBudgetExhausted
case "$(dl tbad-1 .dead_letter_description)" in *"held "*certificate*) e2e_log "ok   wrong CA: the description says held, and why" ;;
  *) die "wrong CA: description '$(dl tbad-1 .dead_letter_description)'" ;; esac
check "wrong CA: inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id = 'tbad-1'")" 0
grep -q '"event":"http_tls".*certificate' "$W/inboxd.log" || die "no clear log line for the TLS failure"
e2e_log "ok   wrong CA: logged as http_tls naming the certificate"
check "refused: dead-lettered by inboxd after its hold" "$(dl refused-1 .dead_letter_reason)" RetryBudgetExhausted
check "refused: inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id = 'refused-1'")" 0
# The credential went to the destinations and nowhere else.
check "requests carrying the credential" "$(ledger_q "$W/pay.json" '[.requests[] | select(.authorization)] | length')" \
  "$(ledger_q "$W/pay.json" '.requests | length')"
for f in "$W/inboxd.log" "$W/print-config.json" "$W/dlq.jsonl"; do
  if grep -qF "$E2E_PAYMENTS_TOKEN" "$f"; then die "the credential appears in $(basename "$f")"; fi
done
e2e_log "ok   the credential is in no log line, --print-config or dead letter"
# A call longer than the broker's lock: renewed throughout, so one delivery.
check "slow call: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'slow-1'")" processed
check "slow call: requests" "$(ledger_q "$W/pay.json" '[.requests[] | select(.key == "charge:slow-1")] | length')" 1
# Retry-After: 86400 from a destination that answers from then on: held
# 5 s (a probe), not a day, nor until the held messages' renewal ran out.
check "a day's Retry-After: orders applied" \
  "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id LIKE 'day-%' AND status = 'processed'")" 3
check "a day's Retry-After: effects" "$(ledger_q "$W/day.json" '[.effects[] | select(length == 1)] | length')" 3
t503=$(ledger_q "$W/day.json" '[.requests[] | select(.fault != null) | .t] | .[0]')
after=$(ledger_q "$W/day.json" "[.requests[] | select(.t > $t503) | .t] | sort | .[0] - $t503")
[ "$after" -ge 5000 ] || die "a day's Retry-After: a request $after ms after the 503, before its probe was due"
e2e_log "ok   a day's Retry-After: the probe $after ms after the 503 ended the hold"
# An HTTP date in year 9999, capped by http.max_retry_after_s 2.
check "a date's Retry-After: inbox row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'date-1'")" processed
gap=$(ledger_q "$W/date.json" '[.requests[] | .t] | .[1] - .[0]')
[ "$gap" -ge 2000 ] || die "a date's Retry-After: second request after $gap ms, before the 2 s cap"
e2e_log "ok   a date's Retry-After: second request after $gap ms"
check "inboxd_http_retry_after_capped_total" "$capped" 2
# A host the message chooses: listed with its port, bound unencoded; others refused.
check "chosen host: row" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'host-ok'")" processed
check "chosen host: effects" "$(ledger_q "$W/pay.json" '.effects["charge:host-ok"] | length')" 1
check "refused hosts: reasons" "$(dl host-port .dead_letter_reason) $(dl host-bad .dead_letter_reason)" "BindError BindError"
check "refused hosts: rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE message_id IN ('host-port', 'host-bad')")" 0
# Deliveries: one each, the held ones included (never abandoned to the
# broker's redelivery); a lost lock on the slow call would add one.
check "deliveries" "$(broker_stat charges delivered)" 15
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" 10
