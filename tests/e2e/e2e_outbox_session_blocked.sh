#!/usr/bin/env bash
# Outbox session order after a failure: one application transaction inserts
# rows of sessions A, B, C (a session-enabled queue) and rows without a
# session (another queue), interleaved. A2, C2 and E2 have properties the
# relay refuses (a nested object or array: failed, inboxd:invalid-properties).
# A's and C's later rows wait, pending, shown with blocked_by in `inboxctl
# outbox list` and counted by inboxd_outbox_blocked_sessions, while B and the
# rows without a session flow (E3 after the failed E2). The operator fixes
# A2 and retries it: A2..A5 are published in order; skips C2: it stays
# failed and C3, C4 are published. Asserts rows, the metric and the order in
# which the broker received each session's messages.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"shipments","requires_session":true},{"name":"events"}]}'
relay_config "$W/relay.json" '{"http": {"listen": "127.0.0.1:0"}}'
start_relay "$W/relay.json" relay
relay=$LAST_PID
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
port=$(http_port relay)

values=""
row() { # row ID SESSION|null ENTITY PROPERTIES
  local s=$2; [ "$s" = null ] || s="'$s'"
  values+="${values:+, }('$3', '$1', $s, 'Step', '$4', '{\"step\":\"$1\"}')"
}
ok='{"k":"v"}'
for i in 1 2 3 4 5; do
  row "A$i" A shipments "$([ $i = 2 ] && echo '{"k":{"nested":1}}' || echo "$ok")"
  row "B$i" B shipments "$ok"
  [ $i -le 4 ] && row "C$i" C shipments "$([ $i = 2 ] && echo '{"k":[1,2]}' || echo "$ok")"
  [ $i -le 3 ] && row "E$i" null events "$([ $i = 2 ] && echo '{"o":{}}' || echo "$ok")"
done
sql "INSERT INTO inboxd_outbox (entity, message_id, session_id, subject, properties, body) VALUES $values" >/dev/null

failed_n() { [ "$(outbox_count failed)" -ge "$1" ]; }
wait_until 60 all_published 9 || die "only $(outbox_count published) of 9 rows published"
wait_until 30 failed_n 3 || die "only $(outbox_count failed) of 3 rows failed"
sleep "$(secs 2)" # ten relay polls: nothing held back may leave meanwhile
check "published rows" "$(sql "SELECT message_id FROM inboxd_outbox WHERE status = 'published' ORDER BY message_id" | tr '\n' ' ')" "A1 B1 B2 B3 B4 B5 C1 E1 E3 "
check "failed rows, refused properties" "$(sql "SELECT message_id FROM inboxd_outbox WHERE status = 'failed' AND last_error LIKE 'inboxd:invalid-properties%' ORDER BY message_id" | tr '\n' ' ')" "A2 C2 E2 "
check "held rows stay pending" "$(sql "SELECT message_id FROM inboxd_outbox WHERE status = 'pending' ORDER BY id" | tr '\n' ' ')" "A3 C3 A4 C4 A5 "
"$INBOXCTL" outbox list --status pending --config "$W/relay.json" >"$W/pending.jsonl" || die "inboxctl outbox list failed"
a2=$(sql "SELECT id FROM inboxd_outbox WHERE message_id = 'A2'")
c2=$(sql "SELECT id FROM inboxd_outbox WHERE message_id = 'C2'")
check "list shows what holds each row" "$(jq -r '"\(.message_id):\(.blocked_by)"' "$W/pending.jsonl" | tr '\n' ' ')" \
  "A3:$a2 C3:$c2 A4:$a2 C4:$c2 A5:$a2 "
blocked_is() { [ "$(metric "$port" inboxd_outbox_blocked_sessions)" = "$1" ]; }
wait_until 10 blocked_is 2 || die "inboxd_outbox_blocked_sessions is $(metric "$port" inboxd_outbox_blocked_sessions), expected 2"
stats_fresh # published rows were taken by the broker: a fresh file counts them all
check "messages in shipments, events" "$(broker_stat shipments sent) $(broker_stat events sent)" "7 2"

# The operator fixes A2 and retries it; skips C2.
sql "UPDATE inboxd_outbox SET properties = '{\"k\":\"fixed\"}' WHERE message_id = 'A2'" >/dev/null
"$INBOXCTL" outbox retry --id "$a2" --config "$W/relay.json" >>"$W/ctl.log" || die "retry of A2 failed"
"$INBOXCTL" outbox skip --id "$c2" --note "superseded" --config "$W/relay.json" >>"$W/ctl.log" || die "skip of C2 failed"
"$INBOXCTL" outbox skip --id "$c2" --config "$W/relay.json" >>"$W/ctl.log" 2>&1 && die "a second skip of C2 changed something"
wait_until 60 all_published 15 || die "only $(outbox_count published) of 15 rows published after retry and skip"
check "pending rows" "$(outbox_count pending)" 0
check "C2 stays failed, marked skipped" "$(sql "SELECT status, substr(last_error, 1, 40) FROM inboxd_outbox WHERE message_id = 'C2'")" \
  "failed|inboxd:skipped (superseded); was: inboxd"
wait_until 10 blocked_is 0 || die "inboxd_outbox_blocked_sessions is $(metric "$port" inboxd_outbox_blocked_sessions) after retry and skip"
wait_until 10 sent_n shipments 13 || die "shipments received $(broker_stat shipments sent) of 13"
peek_all shipments >"$W/peek.jsonl"
check "each session in order at the broker" \
  "$(jq -s -r 'sort_by(.sequence_number) | group_by(.session_id) | map(.[0].session_id + ":" + (map(.body | fromjson | .step) | join(","))) | join(" ")' "$W/peek.jsonl")" \
  "A:A1,A2,A3,A4,A5 B:B1,B2,B3,B4,B5 C:C1,C3,C4"
stop_inboxd "$relay"; check "relay exit status" "$STOP_RC" 0
