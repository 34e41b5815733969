#!/usr/bin/env bash
# A message larger than the whole byte budget is taken alone: with
# servicebus.max_held_mb 1, a 1.5 MiB message between small ones waits until
# the small ones before it are settled, and the small ones after it wait
# until it is (its SQL sleeps 2 s, time enough for them to overtake it were
# they read). Nothing is lost. Memory itself is measured by
# tests/bench/memory/run.sh.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"alone","lock_duration_s":30,"max_delivery_count":10}]}' \
  --max-message-bytes 2097152
routes=$(jq -n --arg sql "$(items_insert_sql)" '[
  {match: {subject: "Big"}, sql: ["SELECT pg_sleep(2)", $sql],
   params: [[], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]},
  {match: "*", sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"]}]')
{
  for i in 1 2 3 4; do echo "{\"message_id\":\"before-$i\",\"subject\":\"Item\",\"body\":{\"id\":\"b$i\",\"n\":$i}}"; done
  awk 'BEGIN { pad = "0"; while (length(pad) < 1536 * 1024) pad = pad pad
    printf "{\"message_id\":\"big\",\"subject\":\"Big\",\"body\":{\"id\":\"big\",\"n\":0,\"pad\":\"%s\"}}\n", substr(pad, 1, 1536 * 1024) }'
  for i in 1 2 3 4; do echo "{\"message_id\":\"after-$i\",\"subject\":\"Item\",\"body\":{\"id\":\"a$i\",\"n\":$i}}"; done
} >"$W/msgs.jsonl"
send_file alone "$W/msgs.jsonl"
write_config "$W/inboxd.json" alone "$routes" '{"servicebus":{"max_held_mb":1}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty alone || die "not completed"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" 9
check "small ones after it committed after it" \
  "$(sql "SELECT count(*) FROM inboxd_inbox a, inboxd_inbox b WHERE b.message_id = 'big' AND a.message_id LIKE 'after-%' AND a.processed_at > b.processed_at")" 4
check "small ones before it committed before it" \
  "$(sql "SELECT count(*) FROM inboxd_inbox a, inboxd_inbox b WHERE b.message_id = 'big' AND a.message_id LIKE 'before-%' AND a.processed_at < b.processed_at")" 4
check "delivered once each" "$(broker_stat alone delivered)" 9
check "completed" "$(broker_stat alone completed)" 9
