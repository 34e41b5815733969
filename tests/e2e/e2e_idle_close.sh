#!/usr/bin/env bash
# The broker's idle close, with short times: sbemu detaches an entity link
# that moved no message for 1 s (amqp:link:detach-forced,
# --fault-idle-close-link-ms) and closes a connection that moved nothing for
# 6 s (amqp:connection:forced, --fault-idle-close-conn-ms), as Service Bus
# does after minutes. 200 messages are sent, one of them held 3 s by its
# handler: its link is idle-closed meanwhile, it keeps its lock and
# completes through $management. inboxd then sits idle until the broker has
# closed its connection, reconnects, and 200 more are sent. Every row
# applied once, none dead-lettered or abandoned, every message on its first
# delivery, the queue empty.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=200
LINK_MS=1000
CONN_MS=6000
create_items_table
start_emu '{"queues":[{"name":"idle","lock_duration_s":30,"max_delivery_count":10}]}' \
  --fault-idle-close-link-ms $LINK_MS --fault-idle-close-conn-ms $CONN_MS
# n = 0 holds its handler 3 s; every other message is applied at once.
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(CASE WHEN CAST(? AS int) = 0 THEN 3 ELSE 0 END)", $sql],
  params: [["$.n"], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
echo '{"message_id":"idle-slow","subject":"Item","body":{"id":"idle-slow","n":0}}' >"$W/slow.jsonl"
send_file idle "$W/slow.jsonl"
gen_items $N a >"$W/a.jsonl"
send_file idle "$W/a.jsonl"
write_config "$W/inboxd.json" idle "$routes" '{"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
wait_until 60 queue_empty idle || die "first batch not drained: active=$(broker_stat idle active) locked=$(broker_stat idle locked)"
fault_n() { jq -r ".faults.$1" "$STATS"; }
conn_closed() { [ "$(fault_n conns_idle_closed)" -ge 1 ]; }
wait_until 60 conn_closed || die "the broker never closed an idle connection"
reconnected() { ready "$port"; }
wait_until 60 reconnected || die "inboxd did not come back after the idle close"
t0=$(date +%s%3N)
gen_items $N b >"$W/b.jsonl"
send_file idle "$W/b.jsonl"
wait_until 60 queue_empty idle || die "second batch not drained: active=$(broker_stat idle active) locked=$(broker_stat idle locked)"
t_done=$(date +%s%3N)
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

total=$(( 2 * N + 1 ))
check "rows" "$(sql "SELECT count(*) FROM items")" $total
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $total
check "completed by the broker" "$(broker_stat idle completed)" $total
check "dead-lettered" "$(broker_stat idle dead_lettered)" 0
check "abandoned" "$(broker_stat idle abandoned)" 0
check "all on the first delivery" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
check "links the broker idle-closed" "$([ "$(fault_n links_idle_closed)" -ge 2 ] && echo yes)" yes
check "inboxd recycled links" "$([ "$(metric_in "$METRICS" inboxd_link_recycles_total)" -ge 2 ] && echo yes)" yes
check "inboxd reconnected" "$([ "$(metric_in "$METRICS" inboxd_reconnects_total)" -ge 1 ] && echo yes)" yes
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "idle close: messages $total, links idle-closed $(fault_n links_idle_closed), connections idle-closed $(fault_n conns_idle_closed), second batch drained $(( t_done - t0 )) ms after its send began, dead-lettered $(broker_stat idle dead_lettered), applied twice $twice"
