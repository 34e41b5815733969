#!/usr/bin/env bash
# 10. The broker drops every connection every 2 s under load -> every message
#     applied exactly once, nothing left, nothing dead-lettered.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=2000
create_items_table
start_emu '{"queues":[{"name":"flaky","lock_duration_s":5,"max_delivery_count":100}]}' --fault-drop-every-ms 2000
gen_items $N f >"$W/msgs.jsonl"
send_file flaky "$W/msgs.jsonl"
write_config "$W/inboxd.json" flaky "$(items_route)"
start_inboxd "$W/inboxd.json" inboxd
wait_until 240 queue_empty flaky || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "dead-lettered" "$(broker_stat flaky dead_lettered)" 0
