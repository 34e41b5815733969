#!/usr/bin/env bash
# Rejection events for a spent retry budget: a statement that fails
# transiently forever (division by zero, declared transient through
# errors.transient_native) outlasts retry.max_deliveries 1 and is
# dead-lettered RetryBudgetExhausted; a message already older than
# retry.max_age_s when it first fails is dead-lettered MaxAgeExceeded at
# once. On the route with emit_on_failure the inbox row is 'failed' with
# error_class transient and one rejection event naming the reason and class
# reaches the rejections queue; the route without it leaves no row and
# emits nothing, as before. PostgreSQL only: SQLite has no error code to
# declare transient here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"doomed","lock_duration_s":30,"max_delivery_count":5},{"name":"rejections"}]}'
routes='[{"match":{"subject":"Doomed"},"sql":"SELECT 1/0",
          "emit_on_failure":[{"entity":"rejections","message_id":"{message_id}:rejected",
                              "properties":{"reason":"reason","error_class":"error_class"}}]},
         {"match":{"subject":"Legacy"},"sql":"SELECT 1/0"}]'
printf '%s\n' '{"message_id":"old-1","subject":"Doomed","body":{"id":"o1"}}' >"$W/old.jsonl"
printf '%s\n' '{"message_id":"t-1","subject":"Doomed","body":{"id":"t1"}}' \
  '{"message_id":"leg-1","subject":"Legacy","body":{"id":"l1"}}' >"$W/msgs.jsonl"
write_config "$W/inboxd.json" doomed "$routes" \
  '{"errors":{"transient_native":["22012"]},"retry":{"attempts":1,"base_ms":10,"max_ms":50,"max_deliveries":1,"max_age_s":3}}'
# old-1 is past retry.max_age_s before inboxd first sees it; t-1 and leg-1
# are sent once it is dead-lettered, to an inboxd already running.
send_file doomed "$W/old.jsonl"
sleep 4
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty doomed || die "old-1 not dead-lettered"
send_file doomed "$W/msgs.jsonl"
wait_until 60 queue_empty doomed || die "not dead-lettered"
wait_until 30 all_published 2 || die "the rejections were not published: $(outbox_count pending) pending"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "dead letters" "$(dlq_reasons doomed | tr '\n' ',')" \
  "leg-1 RetryBudgetExhausted,old-1 MaxAgeExceeded,t-1 RetryBudgetExhausted,"
check "each dead-lettered at its first failure, none abandoned" "$(broker_stat doomed abandoned)" 0
check "inbox rows" "$(sql "SELECT message_id, status, error_class FROM inboxd_inbox ORDER BY message_id" | tr '|\n' ' ,')" \
  "old-1 failed transient,t-1 failed transient,"
check "outbox rows" "$(sql "SELECT message_id FROM inboxd_outbox ORDER BY message_id" | tr '\n' ',')" "old-1:rejected,t-1:rejected,"
check "the rejections in the queue" \
  "$(peek_all rejections | jq -r '"\(.message_id) \(.properties.reason) \(.properties.error_class) \(.body | fromjson | .error | test("22012"))"' | sort | tr '\n' ',')" \
  "old-1:rejected MaxAgeExceeded transient true,t-1:rejected RetryBudgetExhausted transient true,"
