#!/usr/bin/env bash
# 5. Malformed JSON, no route, a missing field, a handler data error and an
#    idempotency conflict -> each in the DLQ with its reason; the good
#    messages around them are applied.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"mixed","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[
  {match: {subject: "Item"}, sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
   idempotency_key: "item:{$.id}"},
  {match: {property: {kind: "audit"}}, action: "deadletter", reason: "AuditNotAccepted"},
  {match: {subject: "Ping"}, action: "complete"}]')
cat >"$W/msgs.jsonl" <<'JSON'
{"message_id":"good-1","subject":"Item","body":{"id":"g1","n":1}}
{"message_id":"bad-json","subject":"Item","body":"{\"id\": \"x\", "}
{"message_id":"good-2","subject":"Item","body":{"id":"g2","n":2}}
{"message_id":"no-route","subject":"Unknown","body":{"id":"u"}}
{"message_id":"missing","subject":"Item","body":{"n":5}}
{"message_id":"data-error","subject":"Item","body":{"id":"neg","n":-1}}
{"message_id":"conflict","subject":"Item","body":{"id":"g1","n":99}}
{"message_id":"audit","subject":"Other","properties":{"kind":"audit"},"body":{}}
{"message_id":"ping","subject":"Ping","body":"{}"}
{"message_id":"good-3","subject":"Item","body":{"id":"g3","n":3}}
JSON
send_file mixed "$W/msgs.jsonl"
write_config "$W/inboxd.json" mixed "$routes" '{"servicebus":{"max_concurrent_calls":1}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty mixed || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "good rows" "$(sql 'SELECT id FROM items ORDER BY id' | tr '\n' ' ')" "g1 g2 g3 "
check "g1 untouched by the conflict" "$(sql "SELECT n FROM items WHERE id = 'g1'")" 1
expected="audit AuditNotAccepted
bad-json InvalidJson
conflict IdempotencyKeyConflict
data-error HandlerError
missing MissingField
no-route NoRoute"
check "dead-letter queue" "$(dlq_reasons mixed)" "$expected"
check "broker dead-letter count" "$(broker_stat mixed dead_lettered)" 6
check "descriptions carry the SQLSTATE" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity mixed --dlq | jq -r 'select(.message_id=="data-error") | .dead_letter_description' | grep -c 'SQLSTATE')" 1
check "missing field names the path" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity mixed --dlq | jq -r 'select(.message_id=="missing") | .dead_letter_description' | grep -c '\$.id')" 1
