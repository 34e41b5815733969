#!/usr/bin/env bash
# 7. A handler that runs for 3x the entity's lock duration -> completed once,
#    never redelivered: the lock is renewed while it works.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"slow","lock_duration_s":5,"max_delivery_count":10}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(15)", $sql],
  params: [[], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
echo '{"message_id":"slow-1","subject":"Item","body":{"id":"s1","n":1}}' >"$W/msgs.jsonl"
send_file slow "$W/msgs.jsonl"
write_config "$W/inboxd.json" slow "$routes" '{"servicebus":{"max_auto_lock_renewal_s":120}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty slow || die "not completed"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" 1
check "delivered once" "$(broker_stat slow delivered)" 1
check "completed" "$(broker_stat slow completed)" 1
check "abandoned" "$(broker_stat slow abandoned)" 0
check "inbox delivery count" "$(sql 'SELECT delivery_count FROM inboxd_inbox')" 1
