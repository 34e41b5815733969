#!/usr/bin/env bash
# 8. Sessions: 20 sessions x 50 messages, interleaved -> every session's rows
#    were committed in send order.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=20; M=50
create_items_table
start_emu '{"queues":[{"name":"sess","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
awk -v S=$S -v M=$M 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
  printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d}}\n", s, i, s, s, i, i }' >"$W/msgs.jsonl"
send_file sess "$W/msgs.jsonl"
write_config "$W/inboxd.json" sess "$(items_route)" \
  '{"servicebus":{"sessions":true,"max_concurrent_sessions":6,"session_idle_timeout_s":2}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 180 queue_empty sess || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "rows" "$(sql 'SELECT count(*) FROM items')" $((S * M))
check "sessions" "$(sql 'SELECT count(DISTINCT session) FROM items')" $S
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
