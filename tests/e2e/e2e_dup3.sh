#!/usr/bin/env bash
# 2. Each message sent three times as distinct deliveries (duplicate
#    detection off) -> one row each; the extra copies complete as duplicates.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:?dialect}"
N=300
create_items_table
start_emu '{"queues":[{"name":"dup","lock_duration_s":30,"max_delivery_count":10,"duplicate_detection_window_s":0}]}'
gen_items $N d >"$W/one.jsonl"
cat "$W/one.jsonl" "$W/one.jsonl" "$W/one.jsonl" >"$W/msgs.jsonl"
send_file dup "$W/msgs.jsonl"
write_config "$W/inboxd.json" dup "$(items_route)"
start_inboxd "$W/inboxd.json" inboxd
wait_until 120 queue_empty dup || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "completed by the broker (every copy)" "$(broker_stat dup completed)" $((3 * N))
check "dead-lettered" "$(broker_stat dup dead_lettered)" 0
