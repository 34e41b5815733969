#!/usr/bin/env bash
# inboxctl status against the real emulator, PostgreSQL and a running
# inboxd, in each state an operator meets:
#   healthy  - 10 items applied, nothing waiting: exit 0;
#   degraded - 2 bad items dead-lettered, orders held behind a destination
#              answering 503 (its circuit open), an uncertain row: exit 3,
#              each condition named with a command that works;
#   stuck    - inboxd stopped while items wait longer than --stuck-after,
#              its /metrics gone, and a database that cannot be reached:
#              exit 4;
#   a config that is missing or not JSON: exit 2 saying which.
# The JSON form (--json) is asserted; the text screen is printed for the log.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
create_charges_table
start_emu '{"queues":[{"name":"work","lock_duration_s":5,"max_delivery_count":10}]}' --http-listen 127.0.0.1:0
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
start_fake pay idempotent; PAY=$FAKE_URL
routes=$(charge_route "$PAY" true '{"lease_s": 10}' | jq --arg sql "$(items_insert_sql)" '
  . + [{match: {subject: "Item"}, sql: $sql,
        params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
        idempotency_key: "item:{$.id}"}]')
write_config "$W/inboxd.json" work "$routes" "$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" '{
  servicebus: {entity_poll_s: 0, management_endpoint: $ep, max_concurrent_calls: 16},
  retry: {attempts: 2, base_ms: 100, max_ms: 500},
  http: {listen: "127.0.0.1:0"}}')"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
METRICS="http://127.0.0.1:$(http_port inboxd)/metrics"

# status_json [ARGS...]: inboxctl status --json; sets ST (the object) and ST_RC.
status_json() {
  ST_RC=0
  ST=$("$INBOXCTL" status --config "$W/inboxd.json" --json "$@" 2>>"$W/inboxctl.log") || ST_RC=$?
  jq -e . >/dev/null <<<"$ST" || fail "inboxctl status printed no JSON (exit $ST_RC): $ST"
}
st() { jq -r "$1" <<<"$ST"; }
conds() { jq -r '[.conditions[].name] | sort | join(" ")' <<<"$ST"; }
screen() {
  e2e_log "inboxctl status $* (text):"
  "$INBOXCTL" status --config "$W/inboxd.json" "$@" >&2 || true # the exit status is asserted through --json
}

# ---- healthy ----
gen_items 10 g Item >"$W/good.jsonl"
send_file work "$W/good.jsonl"
wait_until 30 queue_empty work || die "good items not drained"
status_json --metrics "$METRICS"
check "healthy: exit" "$ST_RC" 0
check "healthy: status" "$(st .status)" healthy
check "healthy: processed in the last hour" "$(st .inbox.processed)" 10
check "healthy: active on the broker" "$(st .broker.active)" 0
check "healthy: conditions" "$(conds)" ""

# ---- degraded ----
fake_config "$PAY" '{"faults":[{"kind":"status","status":503,"for_ms":60000}]}'
{ awk 'BEGIN { for (i = 1; i <= 2; i++) printf "{\"message_id\":\"bad-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"bad%d\",\"n\":-1}}\n", i, i }'
  gen_orders 3 o; } >"$W/degrade.jsonl"
send_file work "$W/degrade.jsonl"
sql "INSERT INTO inboxd_inbox (consumer, message_id, body_sha256, status, received_at, processed_at, error_class, error_detail)
     VALUES ('e2e', 'unsure-1', repeat('0', 64), 'uncertain', now(), now(), 'ambiguous', 'timeout after sending')" >/dev/null
two_dead() { [ "$(broker_stat "work/\$DeadLetterQueue" active)" = 2 ]; }
wait_until 30 two_dead || die "the bad items were not dead-lettered"
held_now() {
  local v
  v=$(curl -s "$METRICS" | awk '$1 == "inboxd_held_messages" { print $2 }')
  [ -n "$v" ] && [ "$v" -ge 1 ]
}
wait_until 30 held_now || die "no order held behind the failing destination"
status_json --metrics "$METRICS"
check "degraded: exit" "$ST_RC" 3
check "degraded: status" "$(st .status)" degraded
check "degraded: conditions" "$(conds)" "circuit_open dead_letters held_messages uncertain_rows"
check "degraded: dead letters on the broker" "$(st .broker.dead_lettered)" 2
check "degraded: uncertain rows" "$(st .inbox.uncertain_all)" 1
check "degraded: open circuits" "$(st .daemon.open_circuits)" 1
# Each condition's command works and shows the thing.
# see NAME: the condition's command, inboxctl spelt as the binary under test.
see() {
  local c
  c=$(jq -r --arg n "$1" '.conditions[] | select(.name == $n) | .see' <<<"$ST")
  [ -n "$c" ] || fail "condition $1 has no command"
  echo "$INBOXCTL${c#inboxctl}"
}
check "the uncertain row's command" "$($(see uncertain_rows) | jq -r .message_id)" unsure-1
check "the dead letters' command" "$($(see dead_letters) --json | jq -r '.groups[0].count')" 2
screen --metrics "$METRICS"

# ---- stuck ----
fake_config "$PAY" '{"faults":[]}'
wait_until 60 queue_empty work || die "held orders not drained after the destination came back"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
gen_items 3 late Item >"$W/late.jsonl"
send_file work "$W/late.jsonl"
# The stopped daemon makes it stuck at once; the waiting items once they are 2 s old.
waited() { status_json --metrics "$METRICS" --stuck-after 2; [[ " $(conds) " == *" oldest_message "* ]]; }
wait_until 20 waited || die "status never named the waiting items (exit $ST_RC): $ST"
check "stuck: exit" "$ST_RC" 4
check "stuck: status" "$(st .status)" stuck
check "stuck: conditions" "$(conds)" "daemon_unreachable dead_letters oldest_message uncertain_rows"
check "stuck: active on the broker" "$(st .broker.active)" 3
screen --metrics "$METRICS" --stuck-after 2
jq --arg cs "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=1;Database=none;Uid=postgres;Pwd=unused" \
  '.db.connection_string = $cs' "$W/inboxd.json" >"$W/nodb.json"
ST_RC=0; ST=$("$INBOXCTL" status --config "$W/nodb.json" --json 2>>"$W/inboxctl.log") || ST_RC=$?
check "no database: exit" "$ST_RC" 4
check "no database: condition" "$(jq -r '[.conditions[].name] | index("database_unreachable") != null' <<<"$ST")" true

# ---- a config it cannot read ----
rc=0; out=$("$INBOXCTL" status --config "$W/absent.json" 2>&1) || rc=$?
check "missing config: exit" "$rc" 2
case "$out" in *"$W/absent.json: cannot load"*) e2e_log "ok   missing config named" ;; *) die "missing config: $out" ;; esac
echo '{"consumer":' >"$W/broken.json"
rc=0; out=$("$INBOXCTL" status --config "$W/broken.json" 2>&1) || rc=$?
check "broken config: exit" "$rc" 2
case "$out" in *"$W/broken.json"*"line 2"*) e2e_log "ok   broken config named" ;; *) die "broken config: $out" ;; esac
