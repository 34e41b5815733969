#!/usr/bin/env bash
# Many one-message sessions among a few longer ones, with DEFAULT settings:
#     1,500 sessions x 1 message and 40 sessions x 6 messages, interleaved ->
#     every message applied once, per-session order in the database is send
#     order, the queue ends empty with no redelivery, and no session is still
#     held. A one-message session's slot is taken by the next session while
#     its message is applied (its drain came back short), and it is given
#     back as its message settles.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S1=1500; SL=40; ML=6
N=$((S1 + SL * ML))
create_items_table
start_emu '{"queues":[{"name":"short","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
awk -v S1=$S1 -v SL=$SL -v ML=$ML 'BEGIN {
  for (s = 1; s <= S1; s++) {
    printf "{\"message_id\":\"one-%d\",\"session_id\":\"one-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"one-%d\",\"n\":1}}\n", s, s, s
    if (s % 37 == 0) {
      i = s / 37
      if (i <= SL * ML) {
        k = (i - 1) % SL + 1; n = int((i - 1) / SL) + 1
        printf "{\"message_id\":\"long-%d-%d\",\"session_id\":\"long-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"long-%d-%d\",\"n\":%d}}\n", k, n, k, k, n, n
      }
    }
  }
  for (i = int(S1 / 37) + 1; i <= SL * ML; i++) {
    k = (i - 1) % SL + 1; n = int((i - 1) / SL) + 1
    printf "{\"message_id\":\"long-%d-%d\",\"session_id\":\"long-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"long-%d-%d\",\"n\":%d}}\n", k, n, k, k, n, n
  }
}' >"$W/msgs.jsonl"
check "messages generated" "$(wc -l <"$W/msgs.jsonl")" $N
send_file short "$W/msgs.jsonl"
write_config "$W/base.json" short "$(items_route)" '{"servicebus":{"sessions":true}}'
jq 'del(.servicebus.prefetch, .servicebus.max_concurrent_calls)' "$W/base.json" >"$W/inboxd.json"
start_inboxd "$W/inboxd.json" inboxd
wait_until 240 queue_empty short || die "queue not drained: $(broker_stat short completed) of $N completed"
held() { [ "$(broker_stat short sessions_held)" = 0 ]; }
wait_until 10 held || die "sessions still held after the queue was empty: $(broker_stat short sessions_held)"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "rows" "$(sql 'SELECT count(*) FROM items')" $N
check "distinct rows" "$(sql 'SELECT count(DISTINCT id) FROM items')" $N
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" $N
check "sessions" "$(sql 'SELECT count(DISTINCT session) FROM items')" $((S1 + SL))
check "completed by the broker" "$(broker_stat short completed)" $N
check "delivered by the broker (no redelivery)" "$(broker_stat short delivered)" $N
check "dead-lettered" "$(broker_stat short dead_lettered)" 0
check "messages left (active, locked)" "$(broker_stat short active) $(broker_stat short locked)" "0 0"
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
