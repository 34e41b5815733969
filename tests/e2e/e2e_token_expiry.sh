#!/usr/bin/env bash
# Tokens that last 6 s: sbemu grants a put-token for at most 6 s and detaches
# the links (receive, $management, send) whose token expired; inboxd signs
# 6 s SAS tokens (servicebus.sas_token_lifetime_s) and puts new ones before
# they expire, while one handler holds its message for 18 s (its lock, 4 s
# long, renewed over $management across three token lifetimes), messages
# keep arriving and the outbox relay keeps sending. Two refreshes are
# refused 401 on the way (--fault-refuse-put-token) and tried again before
# the old token ends. Nothing is delivered twice, abandoned or dead-lettered.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"tok","lock_duration_s":4,"max_delivery_count":10},{"name":"fwd"}]}' \
  --token-lifetime-s 6 --fault-refuse-put-token 2
# n = 0 holds its worker 18 s; every other message is applied at once.
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(CASE WHEN CAST(? AS int) = 0 THEN 18 ELSE 0 END)", $sql],
  params: [["$.n"], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
echo '{"message_id":"slow-1","subject":"Item","body":{"id":"slow","n":0}}' >"$W/slow.jsonl"
send_file tok "$W/slow.jsonl"
write_config "$W/inboxd.json" tok "$routes" \
  '{"servicebus":{"sas_token_lifetime_s":6,"max_auto_lock_renewal_s":120},"outbox":{"relay":"true","poll_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 30 outbox_ready || die "inboxd did not create the outbox table"
t0=$(date +%s)
# Messages and outbox rows spread over 16 s, while the slow one holds its
# lock for 18 s: three token lifetimes.
for i in 1 2 3 4 5; do
  gen_items 50 "b$i-" >"$W/msgs$i.jsonl"
  send_file tok "$W/msgs$i.jsonl"
  app_rows 20 2 fwd "r$i"
  [ $i = 5 ] || sleep 4
done
wait_until 60 queue_empty tok || die "tok not drained"
wait_until 30 all_published 100 || die "only $(outbox_count published) of 100 outbox rows published"
e2e_log "drained $(( $(date +%s) - t0 )) s after the first batch"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
stats_fresh
check "business rows" "$(sql 'SELECT count(*) FROM items')" 251
check "the slow message applied" "$(sql "SELECT count(*) FROM items WHERE id = 'slow'")" 1
check "delivered once each" "$(broker_stat tok delivered)" 251
check "completed" "$(broker_stat tok completed)" 251
check "abandoned" "$(broker_stat tok abandoned)" 0
check "dead-lettered" "$(dlq_reasons tok | grep -c .)" 0
check "inbox rows delivered twice" "$(sql 'SELECT count(*) FROM inboxd_inbox WHERE delivery_count > 1')" 0
check "outbox rows sent once each" "$(broker_stat fwd sent)" 100
check "failed outbox rows" "$(outbox_count failed)" 0
check "renewals refused 401" "$(broker_conn tokens_refused)" 2
check "links detached for an expired token" "$(broker_conn links_expired)" 0
