#!/usr/bin/env bash
# Replaying failed HTTP-route rows after the route was fixed (inboxctl dlq
# replay, real processes). Version 1 of the routes is broken: its finishing
# SQL reads answer fields that do not exist, and the destination refuses one
# order once. Four messages end failed and dead-lettered:
#   a-1  plain destination, call 201, finishing SQL unbound   MissingField
#   rej-1 plain destination, refused 400                       HttpRejected
#   b-1  plain destination, call 201, finishing SQL unbound   MissingField
#   i-1  idempotent destination, call 201, SQL unbound         MissingField
# Version 2 fixes the routes; `inboxctl dlq replay` re-sends the four:
#   a-1  its fixed SQL reads the remote id the row stores: applied with it,
#        the destination never called again
#   rej-1 refused before, nothing done: called again, applied
#   b-1  its fixed SQL reads an answer field the row does not store, at a
#        destination that is not idempotent: not called, dead-lettered
#        AnswerNotStored, row still failed
#   i-1  same need, idempotent destination: called again with the same key
#        (no second effect there), applied
# One message each is enough for every path; lock 5 s keeps it short.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":10}]}'
start_fake pay plain; PAY=$FAKE_URL
start_fake idem idempotent; IDEM=$FAKE_URL
fake_config "$PAY" '{"faults":[{"kind":"status","status":400,"match":"rej-","times":1}]}'

# routes A_SRC B_SRC I_SRC: the answer field each route's finishing SQL reads.
routes() {
  jq -n --arg pay "$PAY/charges" --arg idem "$IDEM/charges" --arg a "$1" --arg b "$2" --arg i "$3" '
    def route(subj; url; idem; src):
      {match: {subject: subj}, idempotency_key: "charge:{$.orderId}",
       http: {method: "POST", url: url, body: "body",
              headers: {"Content-Type": "application/json",
                        "Authorization": {env: "E2E_PAYMENTS_TOKEN"}},
              idempotency_header: "Idempotency-Key", idempotent: idem,
              timeout_ms: 1000, lease_s: 4, remote_id: "$.id"},
       sql: ["INSERT INTO charges (order_id, charge_id) VALUES (?, ?)"],
       params: [["$.orderId", src]]};
    [route("ChargeRequested"; $pay; false; $a), route("Receipt"; $pay; false; $b),
     route("Refund"; $idem; true; $i)]'
}
{ gen_orders 1 a; gen_orders 1 rej; gen_orders 1 b Receipt; gen_orders 1 i Refund; } >"$W/orders.jsonl"
write_config "$W/v1.json" charges "$(routes 'response:$.charge' 'response:$.charge' 'response:$.charge')"
send_file charges "$W/orders.jsonl"
start_inboxd "$W/v1.json" inboxd; pid=$LAST_PID
wait_until 60 queue_empty charges || die "queue not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "failed rows" "$(inbox_count failed)" 4
check "dead-letter reasons" "$(dlq_reasons charges | tr '\n' ' ')" \
  "a-1 MissingField b-1 MissingField i-1 MissingField rej-1 HttpRejected "
check "recorded answers" "$(sql "SELECT message_id || ' ' || coalesce(remote_status, 0) FROM inboxd_inbox ORDER BY message_id" | tr '\n' ' ')" \
  "a-1 201 b-1 201 i-1 201 rej-1 400 "
check "no charge rows yet" "$(sql "SELECT count(*) FROM charges")" 0

# The fix, then the replay of every dead letter.
write_config "$W/v2.json" charges "$(routes 'response:$.id' 'response:$.key' 'response:$.key')"
start_inboxd "$W/v2.json" inboxd; pid=$LAST_PID
"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity charges --rate 0 >"$W/replay.out" 2>"$W/replay.err" \
  || die "dlq replay failed: $(cat "$W/replay.err")"
check "replayed" "$(jq -r 'select(.event=="summary") | .replayed' "$W/replay.out")" 4
wait_until 60 queue_empty charges || die "replayed messages not consumed"
dead_letters_reach() { [ "$(broker_stat charges dead_lettered)" -ge "$1" ]; }
wait_until 30 dead_letters_reach 5 || die "AnswerNotStored dead letter missing"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

ledger "$PAY" "$W/pay.json"; ledger "$IDEM" "$W/idem.json"
calls() { ledger_calls "$1" "charge:$2"; }
effects() { ledger_effects "$1" "charge:$2"; }
check "a-1: one call, one effect (the replay did not call)" "$(calls "$W/pay.json" a-1) $(effects "$W/pay.json" a-1)" "1 1"
check "a-1: applied once with the stored remote id" \
  "$(sql "SELECT count(*) || ' ' || min(charge_id) FROM charges WHERE order_id = 'a-1'")" \
  "1 $(ledger_q "$W/pay.json" '.effects["charge:a-1"][0].id')"
check "a-1 row" "$(sql "SELECT status || ' ' || remote_status || ' ' || coalesce(error_class, 'none') FROM inboxd_inbox WHERE message_id = 'a-1'")" \
  "processed 201 none"
check "rej-1: refused, then called again after the fix" "$(calls "$W/pay.json" rej-1) $(effects "$W/pay.json" rej-1)" "2 1"
check "rej-1 applied" "$(sql "SELECT count(*) FROM charges WHERE order_id = 'rej-1'") $(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'rej-1'")" \
  "1 processed"
check "b-1: never called again" "$(calls "$W/pay.json" b-1) $(effects "$W/pay.json" b-1)" "1 1"
check "b-1 not applied, row still failed" \
  "$(sql "SELECT count(*) FROM charges WHERE order_id = 'b-1'") $(sql "SELECT status || ' ' || remote_status FROM inboxd_inbox WHERE message_id = 'b-1'")" \
  "0 failed 201"
check "b-1 dead-lettered again, pointing to inbox resolve" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity charges --dlq | jq -r 'select(.message_id == "b-1") | "\(.dead_letter_reason) \(.dead_letter_description | test("inboxctl inbox resolve --message-id b-1"))"')" \
  "AnswerNotStored true"
check "i-1: called again, no second effect" "$(calls "$W/idem.json" i-1) $(effects "$W/idem.json" i-1)" "2 1"
check "i-1 applied with the answer's key" \
  "$(sql "SELECT charge_id FROM charges WHERE order_id = 'i-1'") $(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'i-1'")" \
  "charge:i-1 processed"
# A dead letter that arrived while the replay was stopping may sit locked by
# its closing link until the lock (5 s) expires; then it is back, active.
dlq_active_is() { [ "$(broker_stat 'charges/$DeadLetterQueue' active)" = "$1" ]; }
wait_until 15 dlq_active_is 1 \
  || die "dead letters left: $(broker_stat 'charges/$DeadLetterQueue' active) active, $(broker_stat 'charges/$DeadLetterQueue' locked) locked, expected 1 active"
