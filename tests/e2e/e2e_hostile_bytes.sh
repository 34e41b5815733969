#!/usr/bin/env bash
# Hostile bytes: message-ids with a NUL byte, ids and a subject that are not
# UTF-8, binary and ulong ids beside strings of the same characters, a body
# that is broken JSON around a card number. Asserts the rows and the
# dead-letter queue, that every line inboxd writes parses as JSON and as
# UTF-8, that no fragment of a body appears in them or in the DLQ, and that
# inboxctl peek --dlq shows every dead-lettered message.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"hostile","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[
  {match: {subject: "Item"}, sql: $sql, params: ["$.id", "$.n", "prop:kind", "sequence_number", "message_id"],
   idempotency_key: "item:{$.id}"}]')
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
raw() { # raw ID_TYPE ID SUBJECT_HEX PROP_KEY PROP_HEX BODY
  "$E2E_SEND_RAW" "$SB_CS" hostile "$@" 2>>"$W/send.log" || die "send failed: $(tail -n 2 "$W/send.log")"
}
item=$(hex Item) k=$(hex k)
raw string "$(hex a)00$(hex b)" "$item" kind "$k" '{"id":"nul-1","n":1}'
raw string "$(hex a)00$(hex c)" "$item" kind "$k" '{"id":"nul-2","n":1}'
raw string "$(hex id-)ff" "$item" kind "$k" '{"id":"badid","n":1}'
raw string "$(hex subj-1)" "$(hex Bad)fffe" "" "" '{"id":"s1","n":1}'
raw string "$(hex prop-1)" "$item" kind "$(hex ok-)c328" '{"id":"p1","n":1}'
raw string "$(hex card-1)" "$item" kind "$k" '{"id":"c1","card":"4111111111111111" oops}'
# Same characters, different id types: four different messages.
raw string "$(hex deadbeef)" "$item" kind "$k" '{"id":"t1","n":1}'
raw binary deadbeef "$item" kind "$k" '{"id":"t2","n":2}'
raw string "$(hex 42)" "$item" kind "$k" '{"id":"t3","n":3}'
raw ulong 42 "$item" kind "$k" '{"id":"t4","n":4}'
E2E_SENT[hostile]=10
wait_until 30 sent_seen hostile || die "the broker never counted 10 messages"
write_config "$W/inboxd.json" hostile "$routes" '{"servicebus":{"max_concurrent_calls":1}}'
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty hostile || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0

check "typed ids applied as four messages" \
  "$(sql "SELECT message_id FROM items WHERE id LIKE 't%' ORDER BY id" | tr '\n' ' ')" \
  "deadbeef binary:deadbeef 42 ulong:42 "
"$INBOXCTL" peek --connection-string "$SB_CS" --entity hostile --dlq >"$W/dlq.jsonl" \
  || die "peek failed"
check "peek --dlq shows every dead-lettered message" "$(grep -c . "$W/dlq.jsonl")" "$(broker_stat hostile dead_lettered)"
reasons=$(jq -r '.dead_letter_reason' "$W/dlq.jsonl" | sort | tr '\n' ' ')
# The property that is not UTF-8 is bound into a text column: PostgreSQL
# refuses the bytes (a data error, HandlerError), SQLite stores them.
if [ "$DIALECT" = postgresql ]; then
  check "dead-letter reasons" "$reasons" "HandlerError InvalidJson InvalidMessageId InvalidMessageId InvalidMessageId NoRoute "
else
  check "dead-letter reasons" "$reasons" "InvalidJson InvalidMessageId InvalidMessageId InvalidMessageId NoRoute "
fi
check "no row for a NUL or non-UTF-8 id" "$(sql "SELECT count(*) FROM items WHERE id IN ('nul-1','nul-2','badid')")" 0
check "the NUL ids stay apart in the DLQ" \
  "$(jq -r 'select(.dead_letter_reason=="InvalidMessageId") | .message_id' "$W/dlq.jsonl" | sort -u | grep -c x00)" 2
check "the NoRoute description is UTF-8 with the subject replaced" \
  "$(jq -r 'select(.dead_letter_reason=="NoRoute") | .dead_letter_description' "$W/dlq.jsonl")" \
  "no route matches subject 'Bad$(printf '\xef\xbf\xbd\xef\xbf\xbd')'"
check "the JSON error gives kind and position" \
  "$(jq -r 'select(.dead_letter_reason=="InvalidJson") | .dead_letter_description' "$W/dlq.jsonl" | grep -c 'at byte')" 1

# Every line on stdout is JSON and UTF-8; no body fragment anywhere.
lines=$(grep -c . "$W/inboxd.log")
check "every inboxd line parses as JSON" "$(jq -c . "$W/inboxd.log" 2>/dev/null | grep -c .)" "$lines"
check "every inboxd line is UTF-8" "$(iconv -f UTF-8 -t UTF-8 "$W/inboxd.log" >/dev/null 2>&1 && echo yes)" yes
check "no body fragment in the log" "$(grep -c -e 4111 -e oops "$W/inboxd.log")" 0
check "no body fragment in the DLQ descriptions" \
  "$(jq -r '.dead_letter_description' "$W/dlq.jsonl" | grep -c -e 4111 -e oops)" 0
check "every result logged" "$(jq -r 'select(.event=="msg_done") | .result' "$W/inboxd.log" | grep -c .)" 10
