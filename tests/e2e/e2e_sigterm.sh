#!/usr/bin/env bash
# 9. SIGTERM under load -> exit 0 within the drain timeout; processed plus
#    still queued equals sent; nothing dead-lettered by the shutdown.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=3000
create_items_table
start_emu '{"queues":[{"name":"term","lock_duration_s":30,"max_delivery_count":10}]}'
gen_items $N t >"$W/msgs.jsonl"
send_file term "$W/msgs.jsonl"
write_config "$W/inboxd.json" term "$(items_route)" '{"shutdown":{"drain_timeout_s":10}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
completed_at_least() { [ "$(broker_stat term completed)" -ge "$1" ]; }
wait_until 60 completed_at_least 200 || die "no progress: $(broker_stat term completed) completed"
t0=$(date +%s)
stop_inboxd $pid 12; rc=$STOP_RC
t1=$(date +%s)
check "exit status" "$rc" 0
check "exited within the drain timeout" "$([ $((t1 - t0)) -le $(secs 11) ] && echo yes)" yes
wait_until 10 broker_idle || die "the broker still counts $(broker_conn open) open connections"
done_rows=$(sql 'SELECT count(*) FROM items')
queued=$(( $(broker_stat term active) + $(broker_stat term locked) ))
e2e_log "applied $done_rows, still queued $queued"
check "processed + queued = sent" $((done_rows + queued)) $N
check "locked after exit" "$(broker_stat term locked)" 0
check "inbox rows = business rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" "$done_rows"
check "completed = applied" "$(broker_stat term completed)" "$done_rows"
check "dead-lettered" "$(broker_stat term dead_lettered)" 0
