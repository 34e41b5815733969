#!/usr/bin/env bash
# A second SIGTERM during the drain exits at once (status 128+15), and the
# message whose handler was still running is neither completed nor applied:
# its transaction dies with the process and the broker delivers it again.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"stubborn","lock_duration_s":30,"max_delivery_count":10}]}'
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: [$sql, "SELECT pg_sleep(30)"],
  params: [["$.id", "$.n", "session_id", "sequence_number", "message_id"], []]}]')
echo '{"message_id":"slow-1","subject":"Item","body":{"id":"s1","n":1}}' >"$W/msgs.jsonl"
send_file stubborn "$W/msgs.jsonl"
write_config "$W/inboxd.json" stubborn "$routes" '{"shutdown":{"drain_timeout_s":60}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
locked_is() { [ "$(broker_stat stubborn locked)" = "$1" ]; }
wait_until 30 locked_is 1 || die "not received: $(broker_stat stubborn locked) locked"
# The handler is inside its transaction: the database runs its pg_sleep.
sleeping() {
  [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
             AND state = 'active' AND query LIKE 'SELECT pg_sleep(30)%'")" = 1 ]
}
wait_until 30 sleeping || die "the handler never reached its second statement"
kill -TERM "$pid"
sleep 1 # an absence: the first signal must not end it within this second
check "still draining after the first signal" "$(kill -0 "$pid" 2>/dev/null && echo running)" running
t0=$(date +%s)
kill -TERM "$pid"
wait "$pid"; rc=$?
check "exit status after the second signal" "$rc" 143
check "exited at once" "$([ $(( $(date +%s) - t0 )) -le 2 ] && echo yes)" yes
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
check "nothing applied" "$(sql 'SELECT count(*) FROM items')" 0
check "no inbox row" "$(sql 'SELECT count(*) FROM inboxd_inbox')" 0
check "not completed" "$(broker_stat stubborn completed)" 0
check "still on the broker" "$(( $(broker_stat stubborn active) + $(broker_stat stubborn locked) ))" 1
