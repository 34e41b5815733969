#!/usr/bin/env bash
# Outbox test 5: an application transaction inserts 1,000 outbox rows
# directly (10 session ids); inboxd --relay-only publishes every one, and the
# rows of each session id reach the (session-enabled) queue in id order.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
N=1000
start_emu '{"queues":[{"name":"shipments","requires_session":true}]}'
relay_config "$W/relay.json"
start_relay "$W/relay.json" relay
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
app_rows $N 10 shipments
wait_until 120 all_published $N || die "only $(outbox_count published) of $N rows published"
check "pending rows" "$(outbox_count pending)" 0
check "failed rows" "$(outbox_count failed)" 0
stats_fresh # rows are published once the broker took them: a fresh file counts all
check "messages in shipments" "$(broker_stat shipments sent)" $N
peek_all shipments >"$W/peek.jsonl"
check "messages peeked" "$(grep -c . "$W/peek.jsonl")" $N
# Within each session, body seq (the row order) rises with the broker's sequence number.
bad=$(jq -s 'group_by(.session_id) | map(sort_by(.sequence_number) | map(.body | fromjson | .seq)
             | select(. != sort)) | length' "$W/peek.jsonl")
check "sessions out of order" "$bad" 0
check "properties kept" "$(jq -s 'map(select(.properties.source == "app" and .subject == "AppEvent")) | length' "$W/peek.jsonl")" $N
stop_inboxd "$LAST_PID"; check "relay exit status" "$STOP_RC" 0
