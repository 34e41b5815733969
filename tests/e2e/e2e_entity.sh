#!/usr/bin/env bash
# What Service Bus itself says about the entity (worker/wk_entity.c):
# 30 messages dead-lettered by the broker (MaxDeliveryCount, after inboxd
# abandoned them) and 20 by inboxd (a CHECK violation, permanent) ->
# inboxd_entity_messages{state="dead_letter"} reads 50 within one poll of
# the broker holding them; the active count follows the broker while a slow
# handler holds one message and the rest wait; the oldest waiting age comes
# from a peek; `inboxctl dlq stats` shows the two groups, and `dlq replay
# --group` interrupted part-way then run again moves each message once; the
# management endpoint refusing (401) or unreachable costs a metric and one
# log line each while receiving goes on; a scheduled message moves the
# scheduled count (1, then 0 once due and applied). The scheduled message
# waits 5 s.
# Scaled down: MaxDeliveryCount 3, lock 5 s, poll every second. One message
# at a time (prefetch 0, one call, one db worker, no batches) so that the
# slow handler holds the others back in the broker.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
topo='{"queues":[{"name":"ent","lock_duration_s":5,"max_delivery_count":3}]}'
start_emu "$topo" --http-listen 127.0.0.1:0
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
routes=$(jq -n --arg sql "$(items_insert_sql)" '[
  {match: {subject: "Poison"}, sql: "SELECT 1/0"},
  {match: {subject: "Slow"}, sql: "SELECT pg_sleep(4)"},
  {match: "*", sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
   idempotency_key: "item:{$.id}"}]')
extra=$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" '{
  servicebus: {entity_poll_s: 1, management_endpoint: $ep, prefetch: 0, max_concurrent_calls: 1},
  errors: {transient_native: ["22012"]},
  retry: {attempts: 1, base_ms: 10, max_ms: 20, max_deliveries: 0},
  db: {batch_max: 1, pool_size: 1},
  http: {listen: "127.0.0.1:0"}}')
write_config "$W/ent.json" ent "$routes" "$extra"
dl_metric() { metric "$port" 'inboxd_entity_messages{state="dead_letter"}'; }
active_metric() { metric "$port" 'inboxd_entity_messages{state="active"}'; }

# 30 poison (the broker dead-letters them), 20 bad (inboxd does), 10 good.
{ gen_items 30 p Poison
  awk 'BEGIN { for (i = 1; i <= 20; i++) printf "{\"message_id\":\"b-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"b%d\",\"n\":-1}}\n", i, i }'
  gen_items 10 g Item; } >"$W/mix.jsonl"
send_file ent "$W/mix.jsonl"
start_inboxd "$W/ent.json" ent
pid=$LAST_PID
port=$(http_port ent)
wait_until 120 bash -c "[ \"\$(jq -r '.entities[\"ent/\$DeadLetterQueue\"].active' '$STATS')\" = 50 ]" \
  || die "the broker never held 50 dead letters"
broker_at=$(date +%s.%N)
wait_until 3 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_messages{state=\\\"dead_letter\\\"}\" { print \$2 }')\" = 50 ]" \
  || die "dead_letter metric $(dl_metric) != 50 within one poll"
check "dead letters as the broker counts them" "$(dl_metric)" 50
e2e_log "metric followed the broker in $(awk -v a="$broker_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
check "broker-written dead letters" "$(broker_stat ent dead_lettered_by_reason | jq -r .MaxDeliveryCountExceeded)" 30
check "good items applied" "$(sql "SELECT count(*) FROM items WHERE id LIKE 'g%'")" 10
wait_until 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_messages{state=\\\"active\\\"}\" { print \$2 }')\" = 0 ]" \
  || die "active metric $(active_metric) != 0"
check "MaxDeliveryCount read from the broker" "$(metric "$port" inboxd_entity_max_delivery_count)" 3
check "LockDuration read from the broker" "$(metric "$port" inboxd_entity_lock_duration_seconds)" 5.000
check "empty entity: oldest age 0" "$(metric "$port" inboxd_entity_oldest_enqueued_age_seconds)" 0.000
check "no poll errors" "$(metric "$port" 'inboxd_entity_poll_errors_total{source="management"}')" 0
check "no peek errors" "$(metric "$port" 'inboxd_entity_poll_errors_total{source="peek"}')" 0

# A scheduled message: counted as scheduled while the broker holds it, then
# received and applied once it is due (5 s; inboxctl send's scheduled_in_s).
printf '%s\n' '{"message_id":"sch-1","subject":"Item","body":{"id":"sch1","n":1},"scheduled_in_s":5}' >"$W/sch.jsonl"
send_file ent "$W/sch.jsonl"
sched_metric_is() { [ "$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "inboxd_entity_messages{state=\"scheduled\"}" { print $2 }')" = "$1" ]; }
broker_sched_is() { [ "$(broker_stat ent scheduled)" = "$1" ]; }
sch_applied() { [ "$(sql "SELECT count(*) FROM items WHERE id = 'sch1'")" = 1 ]; }
wait_until 2 broker_sched_is 1 || die "the broker does not hold it scheduled"
wait_until 3 sched_metric_is 1 || die "scheduled metric $(metric "$port" 'inboxd_entity_messages{state="scheduled"}') != 1"
wait_until 30 sch_applied || die "the scheduled message was not applied once due"
wait_until 5 sched_metric_is 0 || die "scheduled metric $(metric "$port" 'inboxd_entity_messages{state="scheduled"}') != 0 after it was due"
wait_until 2 broker_sched_is 0 || die "the broker still holds it scheduled"
wait_until 10 queue_empty ent || die "not drained after the scheduled message"

# One slow message holds the only slot (prefetch 0); six more wait.
{ gen_items 1 s Slow; gen_items 6 w Item; } >"$W/slow.jsonl"
send_file ent "$W/slow.jsonl"
wait_until 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_messages{state=\\\"active\\\"}\" { print \$2 }')\" = 7 ]" \
  || die "active metric $(active_metric) != 7 (broker: $(broker_stat ent active) available, $(broker_stat ent locked) locked)"
check "the broker holds them too" "$(( $(broker_stat ent active) + $(broker_stat ent locked) ))" 7
age=$(metric "$port" inboxd_entity_oldest_enqueued_age_seconds)
check "the oldest waiting message has an age" "$(awk -v a="$age" 'BEGIN { print (a > 0 && a < 60) ? "yes" : a }')" yes
wait_until 30 queue_empty ent || die "not drained"
wait_until 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_messages{state=\\\"active\\\"}\" { print \$2 }')\" = 0 ]" \
  || die "active metric $(active_metric) != 0 after draining"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

# dlq stats: the broker's 30 and inboxd's 20 in a group each.
"$INBOXCTL" dlq stats --connection-string "$SB_CS" --entity ent --json >"$W/stats.json" \
  || die "dlq stats failed"
"$INBOXCTL" dlq stats --connection-string "$SB_CS" --entity ent >&2
check "dlq stats total" "$(jq .total "$W/stats.json")" 50
check "every entry decoded" "$(jq .unreadable "$W/stats.json")" 0
check "dlq stats groups" "$(jq -c '[.groups[] | [.count, .reason, .error_class, .code]]' "$W/stats.json")" \
  '[[30,"MaxDeliveryCountExceeded",null,null],[20,"HandlerError","permanent","23514/1"]]'
check "inboxd's group names its route" "$(jq '.groups[1].route' "$W/stats.json")" 2
group=$(jq -r '.groups[1].group' "$W/stats.json")

# dlq replay --group, interrupted part-way, then run again: only the rest moves.
timeout --preserve-status -s INT "$(secs 2)" "$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity ent \
  --group "$group" --rate 2 >"$W/replay1.jsonl" 2>>"$W/inboxctl.log"
check "first replay interrupted" "$?" 130
moved=$(jq -r 'select(.result == "replayed") | .message_id' "$W/replay1.jsonl" | wc -l)
e2e_log "the interrupted replay moved $moved of 20"
[ "$moved" -lt 20 ] || die "the replay was not interrupted part-way"
"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity ent --group "$group" --rate 0 \
  >"$W/replay2.jsonl" 2>>"$W/inboxctl.log" || die "second replay failed"
check "second replay moved the rest" "$(jq -r 'select(.result == "replayed") | .message_id' "$W/replay2.jsonl" | wc -l)" $((20 - moved))
check "each of the 20 is back in the queue once" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity ent | jq -r .message_id | sort | uniq | grep -c '^b-')" 20
# inboxd is stopped and both replays are gone: once the broker has handled
# their closes, their sends are in its count.
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
check "queue holds exactly them" "$(broker_stat ent active)" 20
check "the broker's group stays" "$("$INBOXCTL" dlq stats --connection-string "$SB_CS" --entity ent --json | jq -c '[.total, [.groups[] | .count]]')" '[30,[30]]'

# The endpoint refuses (401) or is not there: a metric, receiving goes on.
for mode in unauthorized unreachable; do
  if [ $mode = unauthorized ]; then
    kill -TERM "$EMU_PID"; wait "$EMU_PID" 2>/dev/null
    start_emu "$topo" --http-listen 127.0.0.1:0 --fault-http-status 401
    ep="http://127.0.0.1:$(head -n 1 "$W/sbemu.log" | jq -r .http_port)/"
  else
    ep="http://127.0.0.1:1/"
  fi
  write_config "$W/$mode.json" ent "$routes" "$(jq --arg ep "$ep" '.servicebus.management_endpoint = $ep' <<<"$extra")"
  gen_items 5 "$mode" Item >"$W/$mode.jsonl"
  start_inboxd "$W/$mode.json" "$mode"
  pid=$LAST_PID
  port=$(http_port "$mode")
  E2E_SENT[ent]=0
  send_file ent "$W/$mode.jsonl"
  wait_until 30 bash -c "[ \"\$(psql -h 127.0.0.1 -p $INBOXD_TEST_PG_PORT -U postgres -d $E2E_PGDB -XtAq -c \"SELECT count(*) FROM items WHERE id LIKE '$mode%'\")\" = 5 ]" \
    || die "$mode: receiving stalled"
  wait_until 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_poll_errors_total{source=\\\"management\\\"}\" { print (\$2 >= 2) }')\" = 1 ]" \
    || die "$mode: poll errors not counted"
  check "$mode: poll down" "$(metric "$port" inboxd_entity_poll_up)" 0
  check "$mode: no counts shown" "$(metrics_get "$port" | grep -c '^inboxd_entity_messages{')" 0
  stop_inboxd $pid; check "$mode: inboxd exit status" "$STOP_RC" 0
done
