#!/usr/bin/env bash
# Replay after a fix: a table that rejects negative amounts dead-letters 50
# orders (HandlerError, with inboxd-error-class=permanent and the SQLSTATE as
# properties); the rule is dropped; `inboxctl dlq replay --reason
# HandlerError --canary 5 --rate 20` with inboxd running -> 50 rows, DLQ
# empty, each applied once. Running the replay again moves nothing and
# applies nothing twice.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_orders_table
start_emu '{"queues":[{"name":"orders","lock_duration_s":30,"max_delivery_count":10}]}'
routes='[{"match":"*","sql":"INSERT INTO orders (id, amount) VALUES (?, ?)","params":["$.id","$.amount"]}]'
awk 'BEGIN { for (i = 1; i <= 50; i++)
  printf "{\"message_id\":\"neg-%d\",\"subject\":\"Refund\",\"correlation_id\":\"c-%d\",\"properties\":{\"tenant\":\"t1\"},\"body\":{\"id\":\"o-%d\",\"amount\":-%d}}\n", i, i, i, i }' >"$W/neg.jsonl"
awk 'BEGIN { for (i = 1; i <= 5; i++)
  printf "{\"message_id\":\"ok-%d\",\"subject\":\"Order\",\"body\":{\"id\":\"k-%d\",\"amount\":%d}}\n", i, i, i }' >"$W/ok.jsonl"
send_file orders "$W/neg.jsonl"
send_file orders "$W/ok.jsonl"
write_config "$W/inboxd.json" orders "$routes"
start_inboxd "$W/inboxd.json" inboxd
INBOXD_PID=$LAST_PID
dlq_active() { broker_stat 'orders/$DeadLetterQueue' active; }
dlq_has() { [ "$(dlq_active)" = "$1" ]; }
wait_until 60 queue_empty orders || die "queue not drained"
wait_until 30 dlq_has 50 || die "expected 50 dead letters, have $(dlq_active)"
check "good orders applied" "$(sql "SELECT count(*) FROM orders")" 5
check "dead-letter reasons" "$(dlq_reasons orders | awk '{print $2}' | sort | uniq -c | awk '{print $1, $2}')" "50 HandlerError"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity orders --dlq >"$W/dlq.jsonl"
case "$DIALECT" in postgresql) sqlstate=23514 ;; sqlite) sqlstate=HY000 ;; esac
check "dead letters carry class and SQLSTATE" \
  "$(jq -r '.properties | "\(."inboxd-error-class") \(."inboxd-sqlstate") \(."inboxd-consumer") \(."inboxd-route")"' "$W/dlq.jsonl" | sort | uniq -c | awk '{print $1, $2, $3, $4, $5}')" \
  "50 permanent $sqlstate e2e 0"

drop_orders_rule
replay() {
  "$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity orders "$@" 2>>"$W/replay.err"
}
replay --reason HandlerError --canary 5 --rate 20 >"$W/replay1.out"
rc=$?
check "replay exit status" "$rc" 0
check "replayed lines" "$(jq -r 'select(.event=="replay" and .result=="replayed") | .message_id' "$W/replay1.out" | sort -u | wc -l)" 50
check "canary passed" "$(jq -r 'select(.event=="canary") | "\(.count) \(.result)"' "$W/replay1.out")" "5 passed"
check "summary" "$(jq -c 'select(.event=="summary") | [.chosen, .replayed, .dlq_copies_kept, .remaining, .stopped]' "$W/replay1.out")" '[50,50,0,0,"done"]'
wait_until 60 queue_empty orders || die "replayed messages not consumed"
check "all 55 orders applied" "$(sql "SELECT count(*) FROM orders")" 55
check "refunds applied with their amounts" "$(sql "SELECT sum(amount) FROM orders WHERE id LIKE 'o-%'")" -1275
check "one inbox row per message" "$(sql "SELECT count(*), count(DISTINCT message_id) FROM inboxd_inbox" | tr '|' ' ')" "55 55"
wait_until 10 dlq_has 0 || die "DLQ not empty: $(dlq_active)"
check "DLQ empty" "$(dlq_active)" 0

# Again: nothing left to move, nothing applied twice.
replay --reason HandlerError --rate 20 >"$W/replay2.out"
check "second replay exit status" "$?" 0
check "second replay moved nothing" "$(jq -c 'select(.event=="summary") | [.chosen, .replayed]' "$W/replay2.out")" '[0,0]'
check "still 55 orders" "$(sql "SELECT count(*) FROM orders")" 55
stop_inboxd "$INBOXD_PID"; check "inboxd exit status" "$STOP_RC" 0
