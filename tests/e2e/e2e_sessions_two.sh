#!/usr/bin/env bash
# 21. Two inboxd on one session queue (default settings): no session is held
#     by both (within a backlog wave each session's messages are applied by
#     one of them), order is kept within every session, also for sessions
#     that come back in a second wave after being given back.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=300; M=2
case "$DIALECT" in
postgresql) sql "CREATE TABLE items (id text PRIMARY KEY, n bigint NOT NULL, session text, wave int, worker text, serial bigserial)" ;;
sqlite) sql "CREATE TABLE items (id text PRIMARY KEY, n integer NOT NULL, session text, wave integer, worker text)" ;;
esac
start_emu '{"queues":[{"name":"shared","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
wave() { # wave W FIRST_N: M messages per session, interleaved across sessions
  awk -v S=$S -v M=$M -v w="$1" -v f="$2" 'BEGIN { for (i = 0; i < M; i++) for (s = 1; s <= S; s++)
    printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d,\"w\":%d}}\n", s, f + i, s, s, f + i, f + i, w }'
}
for who in a b; do
  routes=$(jq -n --arg sql "INSERT INTO items (id, n, session, wave, worker) VALUES (?, ?, ?, ?, '$who')" \
    '[{match: "*", sql: $sql, params: ["$.id", "$.n", "session_id", "$.w"], idempotency_key: "item:{$.id}"}]')
  write_config "$W/base-$who.json" shared "$routes" '{"servicebus":{"sessions":true}}'
  jq 'del(.servicebus.prefetch, .servicebus.max_concurrent_calls)' "$W/base-$who.json" >"$W/$who.json"
done
wave 1 1 >"$W/wave1.jsonl"
send_file shared "$W/wave1.jsonl"
start_inboxd "$W/a.json" a; a=$LAST_PID
start_inboxd "$W/b.json" b; b=$LAST_PID
wait_until 120 queue_empty shared || die "wave 1 not drained"
held_none() { [ "$(broker_stat shared sessions_held)" = 0 ]; }
wait_until 10 held_none || die "sessions still held after wave 1: $(broker_stat shared sessions_held)"
# Wave 2 arrives while both run: every session comes back after being given back.
wave 2 $((M + 1)) >"$W/wave2.jsonl"
send_file shared "$W/wave2.jsonl"
wait_until 120 queue_empty shared || die "wave 2 not drained"
stop_inboxd $a; check "worker a exit status" "$STOP_RC" 0
stop_inboxd $b; check "worker b exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "rows" "$(sql 'SELECT count(*) FROM items')" $((2 * S * M))
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $((2 * S * M))
check "completed by the broker" "$(broker_stat shared completed)" $((2 * S * M))
check "dead-lettered" "$(broker_stat shared dead_lettered)" 0
check "both workers applied messages" "$(sql 'SELECT count(DISTINCT worker) FROM items')" 2
check "wave-1 sessions applied by two workers" \
  "$(sql 'SELECT count(*) FROM (SELECT session FROM items WHERE wave = 1 GROUP BY session HAVING count(DISTINCT worker) > 1) x')" 0
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
