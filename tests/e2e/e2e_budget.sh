#!/usr/bin/env bash
# One retry budget: a handler that fails transiently forever with
# retry.max_deliveries 3 is dead-lettered RetryBudgetExhausted by inboxd on
# the third delivery (before the broker's MaxDeliveryCount of 10), the
# description naming the last error; a message older than retry.max_age_s
# meeting a transient failure is dead-lettered MaxAgeExceeded. Both carry
# inboxd's context properties, and both show in
# inboxd_dead_letters_total{reason,class}. With retry.max_deliveries left at
# -1 the budget comes from the entity's MaxDeliveryCount as read from the
# management endpoint (3 here: dead-lettered by inboxd on the second
# delivery, none by the broker), and --check-config holds the settings
# against that real figure.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"budget","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"aged","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"derived","lock_duration_s":30,"max_delivery_count":3}]}' \
  --http-listen 127.0.0.1:0
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
routes='[{"match":"*","sql":"SELECT 1/0"}]'
extra='{"errors":{"transient_native":["22012"]},"retry":{"attempts":1,"base_ms":10,"max_ms":20,"max_deliveries":3},"http":{"listen":"127.0.0.1:0"}}'
printf '%s\n' '{"message_id":"b-1","subject":"Item","body":{"id":"b1","n":1}}' >"$W/b.jsonl"
send_file budget "$W/b.jsonl"
write_config "$W/budget.json" budget "$routes" "$extra"
start_inboxd "$W/budget.json" budget
pid=$LAST_PID
port=$(http_port budget)
wait_until 60 queue_empty budget || die "not dead-lettered"
check "dead-letter reason" "$(dlq_reasons budget)" "b-1 RetryBudgetExhausted"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity budget --dlq >"$W/b.dlq"
check "description names the last error" "$(jq -r '.dead_letter_description | test("22012") and test("max_deliveries")' "$W/b.dlq")" true
check "dead-lettered on the third delivery" "$(jq -r .delivery_count "$W/b.dlq")" 2
check "abandoned twice before" "$(broker_stat budget abandoned)" 2
check "context properties" \
  "$(jq -c '.properties | [."inboxd-consumer", ."inboxd-error-class", ."inboxd-sqlstate", ."inboxd-attempts", ."inboxd-route", (."inboxd-failed-at" | test("^20[0-9]{2}-"))]' "$W/b.dlq")" \
  '["e2e","transient","22012",2,0,true]'
check "dead letters by reason and class" "$(metric "$port" 'inboxd_dead_letters_total{reason="RetryBudgetExhausted",class="transient"}')" 1
check "its age since enqueue observed once, when it left the entity" "$(metric "$port" inboxd_message_age_seconds_count)" 1
check "nothing unsettled is left" "$(metric "$port" inboxd_oldest_unsettled_enqueued_seconds)" 0.000
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

# Old messages: enqueued more than retry.max_age_s ago when the failure happens.
printf '%s\n' '{"message_id":"a-1","subject":"Item","body":{"id":"a1","n":1}}' >"$W/a.jsonl"
send_file aged "$W/a.jsonl"
sleep 3
write_config "$W/aged.json" aged "$routes" \
  '{"errors":{"transient_native":["22012"]},"retry":{"attempts":5,"base_ms":10,"max_ms":20,"max_age_s":2}}'
start_inboxd "$W/aged.json" aged
wait_until 60 queue_empty aged || die "not dead-lettered"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "dead-letter reason" "$(dlq_reasons aged)" "a-1 MaxAgeExceeded"
check "dead-lettered at the first failure, without abandoning" "$(broker_stat aged abandoned)" 0
check "description names the last error" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity aged --dlq | jq -r '.dead_letter_description | test("22012") and test("max_age_s")')" true
check "no inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" 0

# The derived budget: retry.max_deliveries -1 (the default) and no
# servicebus.max_delivery_count; the poller reads MaxDeliveryCount 3 from
# the broker, so inboxd dead-letters on delivery 2, before the broker would.
printf '%s\n' '{"message_id":"d-1","subject":"Item","body":{"id":"d1","n":1}}' >"$W/d.jsonl"
write_config "$W/derived.json" derived "$routes" "$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" '{
  servicebus: {entity_poll_s: 1, management_endpoint: $ep}, http: {listen: "127.0.0.1:0"},
  errors: {transient_native: ["22012"]}, retry: {attempts: 1, base_ms: 10, max_ms: 20}}')"
# --check-config reads the same description: a stale servicebus.max_delivery_count is named with both values.
jq '.servicebus.max_delivery_count = 10' "$W/derived.json" >"$W/stale.json"
"$INBOXD" --check-config --config "$W/stale.json" >"$W/check.out" 2>&1; rc=$?
check "check-config against the real entity: exit status" "$rc" 0
check "it names the stale setting and the entity's figure" \
  "$(grep -c '^config: warning: servicebus.max_delivery_count: 10, but the entity.s MaxDeliveryCount is 3' "$W/check.out")" 1
start_inboxd "$W/derived.json" derived
port=$(http_port derived)
# Sent once the first poll is in, so that both deliveries meet the derived budget.
wait_until 30 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"inboxd_entity_max_delivery_count\" { print \$2 }')\" = 3 ]" \
  || die "MaxDeliveryCount never read from the broker"
send_file derived "$W/d.jsonl"
wait_until 60 queue_empty derived || die "not dead-lettered"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "dead-lettered by inboxd, budget from the entity" "$(dlq_reasons derived)" "d-1 RetryBudgetExhausted"
check "on the second delivery (abandoned once)" "$(broker_stat derived abandoned)" 1
# sbemu lists a reason once it has dead-lettered for it (inboxd's
# RetryBudgetExhausted is there): an object without MaxDeliveryCountExceeded.
check "none by the broker's MaxDeliveryCount" \
  "$(broker_stat derived dead_lettered_by_reason | jq -c '[type, has("MaxDeliveryCountExceeded")]')" \
  '["object",false]'
check "the description names the derived budget" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity derived --dlq | jq -r '.dead_letter_description | test("retry.max_deliveries 2")')" true
