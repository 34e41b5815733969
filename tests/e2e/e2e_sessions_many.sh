#!/usr/bin/env bash
# 19. Many short sessions with DEFAULT settings: 2,000 sessions x 2 messages,
#     interleaved -> every message applied once, per-session order in the
#     database is send order, and every session is given back once done
#     (not held until session_idle_timeout_s).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=2000; M=2
create_items_table
start_emu '{"queues":[{"name":"many","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
awk -v S=$S -v M=$M 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
  printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d}}\n", s, i, s, s, i, i }' >"$W/msgs.jsonl"
send_file many "$W/msgs.jsonl"
# Defaults for everything that shapes receiving: drop the harness's prefetch
# and concurrency, say only sessions: true.
write_config "$W/base.json" many "$(items_route)" '{"servicebus":{"sessions":true}}'
jq 'del(.servicebus.prefetch, .servicebus.max_concurrent_calls)' "$W/base.json" >"$W/inboxd.json"
start_inboxd "$W/inboxd.json" inboxd
wait_until 240 queue_empty many || die "queue not drained: $(broker_stat many completed) of $((S * M)) completed"
held() { [ "$(broker_stat many sessions_held)" = 0 ]; }
# The stats file is rewritten every second; the default idle timeout is 60 s.
wait_until 10 held || die "sessions still held after the queue was empty: $(broker_stat many sessions_held)"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "rows" "$(sql 'SELECT count(*) FROM items')" $((S * M))
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" $((S * M))
check "sessions" "$(sql 'SELECT count(DISTINCT session) FROM items')" $S
check "completed by the broker" "$(broker_stat many completed)" $((S * M))
check "delivered by the broker (no redelivery)" "$(broker_stat many delivered)" $((S * M))
check "dead-lettered" "$(broker_stat many dead_lettered)" 0
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
