#!/usr/bin/env bash
# Batching never makes a slow handler slower than one transaction per message:
# four messages whose SQL sleeps 4 s, four db workers, batch_max 32. While a
# worker is idle a batch does not take the job meant for it, so the four are
# applied in four transactions at once (each inbox row's xmin differs), all
# once, none redelivered. The time taken is printed, not asserted.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
create_items_table
start_emu '{"queues":[{"name":"slowb","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(4)", $sql],
  params: [[], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
for i in 1 2 3 4; do
  echo "{\"message_id\":\"slow-$i\",\"subject\":\"Item\",\"body\":{\"id\":\"s$i\",\"n\":$i}}"
done >"$W/msgs.jsonl"
send_file slowb "$W/msgs.jsonl"
write_config "$W/inboxd.json" slowb "$routes" \
  '{"servicebus":{"max_concurrent_calls":4},"db":{"batch_max":32,"pool_size":4}}'
t0=$(date +%s.%N)
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty slowb || die "not completed"
t1=$(date +%s.%N)
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
echo "slow_batch: 4 messages of 4 s each applied in $(echo "$t1 - $t0" | bc) s (one per transaction: 4 s)"
check "business rows" "$(sql 'SELECT count(*) FROM items')" 4
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" 4
check "transactions" "$(sql 'SELECT count(DISTINCT xmin::text) FROM inboxd_inbox')" 4
check "delivered once each" "$(broker_stat slowb delivered)" 4
check "completed" "$(broker_stat slowb completed)" 4
check "abandoned" "$(broker_stat slowb abandoned)" 0
