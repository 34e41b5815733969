#!/usr/bin/env bash
# Short tokens on a session entity: sbemu grants a put-token for at most
# 20 s and detaches the links (session receivers, $management) whose token
# expired; inboxd signs 20 s SAS tokens (servicebus.sas_token_lifetime_s).
# Over 45 s, five rounds of 4 sessions x 20 messages arrive while one
# session's message is held 25 s by its handler (its session lock, 10 s
# long, renewed over $management across token refreshes). Nothing fails:
# every row applied once, each message delivered once, nothing abandoned or
# dead-lettered, no link ever detached for an expired token.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"stok","lock_duration_s":10,"max_delivery_count":10,"requires_session":true}]}' \
  --token-lifetime-s 20
# n = 0 holds its handler 25 s; every other message is applied at once.
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(CASE WHEN CAST(? AS int) = 0 THEN 25 ELSE 0 END)", $sql],
  params: [["$.n"], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
echo '{"message_id":"slow","session_id":"slow","subject":"Item","body":{"id":"slow","n":0}}' >"$W/slow.jsonl"
send_file stok "$W/slow.jsonl"
write_config "$W/inboxd.json" stok "$routes" \
  '{"servicebus":{"sessions":true,"max_concurrent_sessions":4,"sas_token_lifetime_s":20,"max_auto_lock_renewal_s":120}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
for r in 1 2 3 4 5; do
  for s in 1 2 3 4; do
    for i in $(seq 1 20); do
      printf '{"message_id":"r%d-s%d-%d","session_id":"r%d-s%d","subject":"Item","body":{"id":"r%d-s%d-%d","n":%d}}\n' \
        "$r" "$s" "$i" "$r" "$s" "$r" "$s" "$i" "$i"
    done
  done >"$W/r$r.jsonl"
  send_file stok "$W/r$r.jsonl"
  [ $r = 5 ] || sleep 10
done
wait_until 60 queue_empty stok || die "queue not drained: active=$(broker_stat stok active) locked=$(broker_stat stok locked)"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
stats_fresh

N=401
check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "the slow message applied" "$(sql "SELECT count(*) FROM items WHERE id = 'slow'")" 1
check "delivered once each" "$(broker_stat stok delivered)" $N
check "completed" "$(broker_stat stok completed)" $N
check "abandoned" "$(broker_stat stok abandoned)" 0
check "dead-lettered" "$(broker_stat stok dead_lettered)" 0
check "inbox rows delivered twice" "$(sql 'SELECT count(*) FROM inboxd_inbox WHERE delivery_count > 1')" 0
check "links detached for an expired token" "$(broker_conn links_expired)" 0
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "session tokens: messages $N over 45 s with 20 s tokens, links expired $(broker_conn links_expired), dead-lettered $(broker_stat stok dead_lettered), applied twice $twice"
