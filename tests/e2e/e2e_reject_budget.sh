#!/usr/bin/env bash
# Rejection events for a spent retry budget: a statement that fails
# transiently forever (division by zero, declared transient through
# errors.transient_native) outlasts retry.max_deliveries 1 and is
# dead-lettered RetryBudgetExhausted. On the route with emit_on_failure the
# inbox row is 'failed' with error_class transient and one rejection event
# naming the reason and class reaches the rejections queue; the route
# without it leaves no row and emits nothing, as before. PostgreSQL only:
# SQLite has no error code to declare transient here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"doomed","lock_duration_s":30,"max_delivery_count":5},{"name":"rejections"}]}'
routes='[{"match":{"subject":"Doomed"},"sql":"SELECT 1/0",
          "emit_on_failure":[{"entity":"rejections","message_id":"{message_id}:rejected",
                              "properties":{"reason":"reason","error_class":"error_class"}}]},
         {"match":{"subject":"Legacy"},"sql":"SELECT 1/0"}]'
printf '%s\n' '{"message_id":"t-1","subject":"Doomed","body":{"id":"t1"}}' \
  '{"message_id":"leg-1","subject":"Legacy","body":{"id":"l1"}}' >"$W/msgs.jsonl"
write_config "$W/inboxd.json" doomed "$routes" \
  '{"errors":{"transient_native":["22012"]},"retry":{"attempts":1,"base_ms":10,"max_ms":50,"max_deliveries":1}}'
start_inboxd "$W/inboxd.json" inboxd
send_file doomed "$W/msgs.jsonl"
wait_until 60 queue_empty doomed || die "not dead-lettered"
wait_until 30 all_published 1 || die "the rejection was not published: $(outbox_count pending) pending"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "dead letters" "$(dlq_reasons doomed | tr '\n' ',')" "leg-1 RetryBudgetExhausted,t-1 RetryBudgetExhausted,"
check "inbox rows" "$(sql "SELECT message_id, status, error_class FROM inboxd_inbox" | tr '|\n' ' ,')" "t-1 failed transient,"
check "outbox rows" "$(sql "SELECT message_id FROM inboxd_outbox")" "t-1:rejected"
check "the rejection in the queue" "$(peek_all rejections | jq -r '"\(.message_id) \(.properties.reason) \(.properties.error_class) \(.body | fromjson | .error | test("22012"))"')" \
  "t-1:rejected RetryBudgetExhausted transient true"
