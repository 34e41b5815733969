#!/usr/bin/env bash
# The broker's idle close of a session link, with a short time: sbemu
# detaches an entity link that moved no message for 1 s
# (amqp:link:detach-forced, --fault-idle-close-link-ms). 4 sessions of 20
# messages; the first message of sess-1 holds its handler 3 s, so its
# session link is idle-closed meanwhile, which ends the session: inboxd
# takes it as an ordinary recycle (logged link_recycle, counted in
# inboxd_link_recycles_total), attaches again at once, and the held message
# comes again and is completed as a duplicate. Every row applied once and
# in order within its session, none dead-lettered or abandoned, every
# message on its first delivery, the queue empty.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=4
PER=20
LINK_MS=1000
create_items_table
start_emu '{"queues":[{"name":"sidle","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}' \
  --fault-idle-close-link-ms $LINK_MS
# n = 0 (sess-1's first) holds its handler 3 s; every other message is applied at once.
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(CASE WHEN CAST(? AS int) = 0 THEN 3 ELSE 0 END)", $sql],
  params: [["$.n"], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
awk -v S=$S -v M=$PER 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
  printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d}}\n", s, i, s, s, i, (s == 1 && i == 1) ? 0 : i }' >"$W/msgs.jsonl"
send_file sidle "$W/msgs.jsonl"
write_config "$W/inboxd.json" sidle "$routes" \
  '{"servicebus":{"sessions":true,"max_concurrent_sessions":4,"session_idle_timeout_s":2},"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
wait_until 45 queue_empty sidle || die "queue not drained: active=$(broker_stat sidle active) locked=$(broker_stat sidle locked)"
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

N=$(( S * PER ))
oc=$(items_order_col)
check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
check "completed by the broker" "$(broker_stat sidle completed)" $N
check "dead-lettered" "$(broker_stat sidle dead_lettered)" 0
check "abandoned" "$(broker_stat sidle abandoned)" 0
check "all on the first delivery" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
closed=$(jq -r '.faults.links_idle_closed' "$STATS")
check "session links the broker idle-closed" "$([ "$closed" -ge 1 ] && echo yes)" yes
recycles=$(metric_in "$METRICS" inboxd_link_recycles_total)
check "inboxd recycled them" "$([ "$recycles" -ge "$closed" ] && echo yes)" yes
echo "session idle close: messages $N in $S sessions, session links idle-closed $closed, link recycles $recycles, dead-lettered $(broker_stat sidle dead_lettered), applied twice $(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))"
