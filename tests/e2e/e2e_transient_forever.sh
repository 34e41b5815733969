#!/usr/bin/env bash
# 11. A handler that fails transiently forever -> retried, abandoned, and
#     after MaxDeliveryCount the broker dead-letters it
#     (MaxDeliveryCountExceeded). Division by zero (22012) is declared
#     transient through errors.transient_native.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"doomed","lock_duration_s":30,"max_delivery_count":3}]}'
routes='[{"match":"*","sql":"SELECT 1/0"}]'
printf '%s\n' '{"message_id":"doomed-1","subject":"Item","body":{"id":"d1","n":1}}' \
  '{"message_id":"doomed-2","subject":"Item","body":{"id":"d2","n":2}}' >"$W/msgs.jsonl"
send_file doomed "$W/msgs.jsonl"
write_config "$W/inboxd.json" doomed "$routes" \
  '{"errors":{"transient_native":["22012"]},"retry":{"attempts":2,"base_ms":10,"max_ms":50}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty doomed || die "not dead-lettered"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "dead-letter queue" "$(dlq_reasons doomed | tr '\n' ' ')" "doomed-1 MaxDeliveryCountExceeded doomed-2 MaxDeliveryCountExceeded "
# With MaxDeliveryCount 3 each message is delivered three times, and the
# third abandon is the one that dead-letters it.
check "abandoned by inboxd" "$(broker_stat doomed abandoned)" 6
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" 0
