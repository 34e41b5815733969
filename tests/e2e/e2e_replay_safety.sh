#!/usr/bin/env bash
# Replay safety: a canary that comes back to the DLQ stops the replay with
# exit 3; --dry-run moves nothing; --max 10 moves ten, keeping message id,
# subject, correlation id and properties and adding inboxd-replay-count and
# inboxd-replayed-at; SIGINT mid-replay loses nothing (every message is in
# the entity or the DLQ, none in both), exits 130 with a summary naming what
# it left untouched (and no line for each), and a rerun moves only that; a
# subscription's DLQ needs --to.
# Finally, with the fix, everything is applied exactly once.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_orders_table
start_emu '{"queues":[{"name":"orders","lock_duration_s":30,"max_delivery_count":10},
  {"name":"sq","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}],
  "topics":[{"name":"events","subscriptions":[{"name":"billing","lock_duration_s":30}]}]}'
routes='[{"match":"*","sql":"INSERT INTO orders (id, amount) VALUES (?, ?)","params":["$.id","$.amount"]}]'
N=30
awk -v n=$N 'BEGIN { for (i = 1; i <= n; i++)
  printf "{\"message_id\":\"neg-%d\",\"subject\":\"Refund\",\"correlation_id\":\"c-%d\",\"properties\":{\"tenant\":\"t1\",\"attempt\":7},\"body\":{\"id\":\"o-%d\",\"amount\":-%d}}\n", i, i, i, i }' >"$W/neg.jsonl"
send_file orders "$W/neg.jsonl"
write_config "$W/inboxd.json" orders "$routes"
start_inboxd "$W/inboxd.json" inboxd
dlq_active() { broker_stat 'orders/$DeadLetterQueue' active; }
dlq_has() { [ "$(dlq_active)" = "$1" ]; }
wait_until 60 queue_empty orders || die "queue not drained"
wait_until 30 dlq_has $N || die "expected $N dead letters, have $(dlq_active)"
replay() {
  "$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity orders "$@" 2>>"$W/replay.err"
}
# ids ENTITY: the message ids in ENTITY, sorted, read back from the broker.
ids() { "$INBOXCTL" peek --connection-string "$SB_CS" --entity "$@" | jq -r .message_id | sort; }

# The rule is still there: the canaries come back and the replay stops.
replay --reason HandlerError --canary 3 --rate 0 --canary-wait 30 >"$W/canary.out"
check "canary failure exit status" "$?" 3
check "canary result" "$(jq -r 'select(.event=="canary") | "\(.count) \(.back_in_dlq) \(.result)"' "$W/canary.out")" "3 3 failed"
check "only the canaries were moved" "$(jq -r 'select(.event=="replay") | .result' "$W/canary.out" | sort | uniq -c | awk '{print $1, $2}')" "3 replayed"
wait_until 10 dlq_has $N || die "DLQ should hold $N again, has $(dlq_active)"
check "nothing applied" "$(sql "SELECT count(*) FROM orders")" 0
check "the canaries carry their replay count" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity orders --dlq | jq -r 'select(.properties["inboxd-replay-count"]==1) | .message_id' | wc -l)" 3
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0

# --dry-run lists, moves nothing.
replay --dry-run >"$W/dry.out"
check "dry-run exit status" "$?" 0
check "dry-run lists every dead letter" "$(jq -r 'select(.event=="replay" and .result=="would_replay") | .message_id' "$W/dry.out" | sort -u | wc -l)" $N
# inboxd is stopped and the dry run gone: once the broker has handled their
# closes, anything the dry run had moved is in the stats file.
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
check "dry-run left the DLQ alone" "$(dlq_active)" $N
check "dry-run sent nothing" "$(broker_stat orders active)" 0

# --max 10 moves ten (the first ten by sequence number), copies intact.
replay --max 10 --rate 0 >"$W/max.out"
check "max exit status" "$?" 0
check "max summary" "$(jq -c 'select(.event=="summary") | [.chosen, .replayed, .stopped]' "$W/max.out")" '[10,10,"max"]'
wait_until 10 dlq_has $((N - 10)) || die "DLQ should hold $((N - 10)), has $(dlq_active)"
check "ten in the entity" "$(ids orders | wc -l)" 10
# neg-1..3 went back to the DLQ as canaries (new sequence numbers): neg-4 leads.
"$INBOXCTL" peek --connection-string "$SB_CS" --entity orders --max 1 >"$W/copy.json"
check "copy keeps id, subject, correlation id, properties" \
  "$(jq -c '[.message_id, .subject, .correlation_id, .properties.tenant, .properties.attempt, .properties["inboxd-replay-count"]]' "$W/copy.json")" \
  '["neg-4","Refund","c-4","t1",7,1]'
check "copy has inboxd-replayed-at and no DeadLetterReason" \
  "$(jq -r '[(.properties["inboxd-replayed-at"] | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T")), (.properties | has("DeadLetterReason"))] | @tsv' "$W/copy.json")" "true	false"
check "copy keeps the body" "$(jq -r .body "$W/copy.json" | jq -c .)" '{"id":"o-4","amount":-4}'

# SIGINT mid-replay: it stops after the current message; nothing is lost or doubled.
"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity orders --rate 2 >"$W/int.out" 2>>"$W/replay.err" &
rpid=$!
two_moved() { [ "$(grep -c '"result":"replayed"' "$W/int.out")" -ge 2 ]; }
wait_until 30 two_moved || die "the replay did not start"
kill -INT "$rpid"
wait "$rpid"
check "interrupted exit status" "$?" 130
check "interrupted summary" "$(jq -r 'select(.event=="summary") | .stopped' "$W/int.out")" interrupted
moved=$(jq -r 'select(.event=="replay" and .result=="replayed") | .message_id' "$W/int.out" | wc -l)
[ "$moved" -gt 0 ] && [ "$moved" -lt $((N - 10)) ] || die "SIGINT should stop part way, moved $moved"
# The interrupted run's last settlements are handled before its close.
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
ids orders >"$W/in_entity"
ids orders --dlq >"$W/in_dlq"
check "no message both in the entity and the DLQ" "$(comm -12 "$W/in_entity" "$W/in_dlq" | wc -l)" 0
check "every message in the entity or the DLQ" "$(sort -u "$W/in_entity" "$W/in_dlq" | wc -l)" $N
check "entity holds the ten and the interrupted run's" "$(wc -l <"$W/in_entity")" $((10 + moved))
left=$(jq -r 'select(.event=="summary") | .remaining' "$W/int.out")
check "summary: remaining = chosen - replayed" "$left" \
  "$(jq -r 'select(.event=="summary") | .chosen - .replayed' "$W/int.out")"
check "the DLQ holds exactly the remaining" "$(wc -l <"$W/in_dlq")" "$left"
check "the summary says what was left untouched" \
  "$(jq -r 'select(.event=="summary") | .left | test("^'"$left"' chosen dead letters not replayed: left untouched")' "$W/int.out")" true
check "no line but the replayed messages and the summary" \
  "$(jq -r 'select(.event != "replay" and .event != "summary") | .event' "$W/int.out" | wc -l)" 0

# A subscription's DLQ: --to is required.
"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity events/Subscriptions/billing --dry-run >/dev/null 2>"$W/sub.err"
check "subscription without --to exits 2" "$?" 2
grep -q -- '--to is required' "$W/sub.err" || die "the error should name --to: $(cat "$W/sub.err")"

# A session queue's dead letters go back with their session ids.
printf '%s\n' '{"message_id":"s-1","session_id":"cart-1","subject":"X","body":"{}"}' \
  '{"message_id":"s-2","session_id":"cart-2","subject":"X","body":"{}"}' >"$W/sess.jsonl"
send_file sq "$W/sess.jsonl"
write_config "$W/sq.json" sq '[{"match":"*","action":"deadletter","reason":"Parked"}]' '{"servicebus":{"sessions":true}}'
start_inboxd "$W/sq.json" sq
sq_dlq() { [ "$(broker_stat 'sq/$DeadLetterQueue' active)" = 2 ]; }
wait_until 30 sq_dlq || die "session messages not dead-lettered"
stop_inboxd $LAST_PID; check "inboxd (sessions) exit status" "$STOP_RC" 0
"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity sq --reason Parked --rate 0 >"$W/sq.out" 2>>"$W/replay.err"
check "session replay exit status" "$?" 0
check "session ids kept" "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity sq | jq -r '"\(.message_id)=\(.session_id)"' | sort | tr '\n' ' ')" "s-1=cart-1 s-2=cart-2 "

# The fix: everything applies once.
drop_orders_rule
start_inboxd "$W/inboxd.json" inboxd2
replay --rate 0 >"$W/rest.out"
check "rest exit status" "$?" 0
check "the rerun moves only what the interrupted run left" \
  "$(jq -r 'select(.event=="summary") | .replayed' "$W/rest.out")" "$left"
wait_until 60 queue_empty orders || die "queue not drained"
wait_until 10 dlq_has 0 || die "DLQ not empty: $(dlq_active)"
check "every order applied once" "$(sql "SELECT count(*), count(DISTINCT id), sum(amount) FROM orders" | tr '|' ' ')" "$N $N -465"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
