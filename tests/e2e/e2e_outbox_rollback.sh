#!/usr/bin/env bash
# Outbox test 7: only committed inbox transactions emit. Of 130 messages, 100
# are good, 10 fail permanently (a CHECK constraint: dead-lettered) and 20
# are second copies (duplicates): the outbox holds exactly one row per good
# message, carrying the incoming message id as correlation id and the
# incoming traceparent; nothing for the failed ones or the copies.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-sqlite}"
create_items_table
start_emu '{"queues":[{"name":"orders","max_delivery_count":5},{"name":"shipments"}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*", sql: $sql,
  params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
  emit: [{entity: "shipments", message_id: "ship:{$.id}", body: "$", subject: "Shipped"}]}]')
write_config "$W/inboxd.json" orders "$routes" '{"outbox": {"relay": "false"}}'
{
  gen_items 100 good
  awk 'BEGIN { for (i = 1; i <= 10; i++) printf "{\"message_id\":\"bad-%d\",\"body\":{\"id\":\"bad-%d\",\"n\":-1}}\n", i, i }'
  gen_items 20 good
} | jq -c 'if (.message_id | startswith("good-")) then (.message_id | ltrimstr("good-")) as $n |
      .properties = {traceparent: ("00-a" + (("0" * 31) + $n)[-31:] + "-b" + (("0" * 15) + $n)[-15:] + "-01")}
    else . end' >"$W/msgs.jsonl"
send_file orders "$W/msgs.jsonl"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 120 queue_empty orders || die "orders not drained"
stop_inboxd "$pid"; check "inboxd exit status" "$STOP_RC" 0
check "items" "$(sql 'SELECT count(*) FROM items')" 100
check "dead-lettered" "$(broker_stat orders dead_lettered)" 10
check "outbox rows" "$(sql 'SELECT count(*) FROM inboxd_outbox')" 100
check "distinct outbox ids" "$(sql 'SELECT count(DISTINCT message_id) FROM inboxd_outbox')" 100
check "rows for failed messages" "$(sql "SELECT count(*) FROM inboxd_outbox WHERE message_id LIKE 'ship:bad-%'")" 0
check "correlation id = incoming message id" "$(sql "SELECT count(*) FROM inboxd_outbox WHERE correlation_id = substr(message_id, 6)")" 100
check "traceparent carried" "$(sql "SELECT count(*) FROM inboxd_outbox WHERE properties LIKE '%\"traceparent\":\"00-a%-b%-01\"%'")" 100
check "pending (no relay here)" "$(outbox_count pending)" 100
