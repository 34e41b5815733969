#!/usr/bin/env bash
# 1. 2,000 messages -> 2,000 business rows, 2,000 inbox rows, queue empty;
#    and /metrics agrees with what was sent.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:?dialect}"
N=2000
create_items_table
start_emu '{"queues":[{"name":"bulk","lock_duration_s":30,"max_delivery_count":10}]}'
gen_items $N b >"$W/msgs.jsonl"
send_file bulk "$W/msgs.jsonl"
write_config "$W/inboxd.json" bulk "$(items_route)" "{\"http\":{\"listen\":\"127.0.0.1:0\"}}"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
wait_until 180 queue_empty bulk || die "queue not drained: active=$(broker_stat bulk active) locked=$(broker_stat bulk locked)"
wait_until 10 bash -c "curl -sf http://127.0.0.1:$port/metrics | grep -q '^inboxd_messages_total{result=\"applied\"} $N\$'" \
  || die "metrics: $(curl -s http://127.0.0.1:$port/metrics | grep inboxd_messages_total)"
check "readyz while running" "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/readyz)" 200
stop_inboxd $pid; check "inboxd exit status after SIGTERM" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "distinct business rows" "$(sql 'SELECT count(DISTINCT id) FROM items')" $N
check "inbox rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'processed'")" $N
check "completed by the broker" "$(broker_stat bulk completed)" $N
check "dead-lettered" "$(broker_stat bulk dead_lettered)" 0
check "queue active" "$(broker_stat bulk active)" 0
