#!/usr/bin/env bash
# 3. Two inboxd processes on the same queue, every message sent twice ->
#    exactly one row each: the inbox key decides between concurrent copies.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:?dialect}"
N=500
create_items_table
start_emu '{"queues":[{"name":"pair","lock_duration_s":30,"max_delivery_count":10}]}'
gen_items $N p >"$W/one.jsonl"
# Copies adjacent, so the two workers tend to receive them at the same time.
awk '{print; print}' "$W/one.jsonl" >"$W/msgs.jsonl"
write_config "$W/inboxd.json" pair "$(items_route)" '{"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" a; a=$LAST_PID
start_inboxd "$W/inboxd.json" b; b=$LAST_PID
# Both receive before anything is sent (/readyz: connected, links attached).
pa=$(http_port a) pb=$(http_port b)
wait_until 30 ready "$pa" || die "worker a not ready"
wait_until 30 ready "$pb" || die "worker b not ready"
send_file pair "$W/msgs.jsonl"
wait_until 120 queue_empty pair || die "queue not drained"
stop_inboxd $a; check "worker a exit status" "$STOP_RC" 0
stop_inboxd $b; check "worker b exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "completed by the broker" "$(broker_stat pair completed)" $((2 * N))
check "dead-lettered" "$(broker_stat pair dead_lettered)" 0
