#!/usr/bin/env bash
# Silent stalls: sbemu gives the first two receive links inboxd attaches
# credit and never a transfer (--fault-stall-link 1 --fault-stall-links 2),
# while the entity poller counts 600 messages waiting. inboxd recycles the
# first link after servicebus.stall_timeout_ms, the second stall recycles
# the connection, and the third link receives: every row applied once,
# nothing dead-lettered or abandoned, every message on its first delivery,
# inboxd_receive_stalls_total 2.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=600
STALL_MS=2000
create_items_table
start_emu '{"queues":[{"name":"stall","lock_duration_s":30,"max_delivery_count":10}]}' \
  --http-listen 127.0.0.1:0 --fault-stall-link 1 --fault-stall-links 2
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
gen_items $N s >"$W/msgs.jsonl"
send_file stall "$W/msgs.jsonl"
write_config "$W/inboxd.json" stall "$(items_route)" "$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" \
  --argjson st $STALL_MS '{servicebus: {entity_poll_s: 1, management_endpoint: $ep, stall_timeout_ms: $st},
                           http: {listen: "127.0.0.1:0"}}')"
t0=$(date +%s%3N)
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
wait_until 120 queue_empty stall || die "queue not drained: active=$(broker_stat stall active) locked=$(broker_stat stall locked)"
t_done=$(date +%s%3N)
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "completed by the broker" "$(broker_stat stall completed)" $N
check "dead-lettered" "$(broker_stat stall dead_lettered)" 0
check "abandoned" "$(broker_stat stall abandoned)" 0
check "all on the first delivery" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
check "links the broker stalled" "$(jq -r '.faults.links_stalled' "$STATS")" 2
check "stalls found" "$(metric_in "$METRICS" inboxd_receive_stalls_total)" 2
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "stall: messages $N, two stalled links of ${STALL_MS} ms each, drained $(( t_done - t0 )) ms after start, dead-lettered $(broker_stat stall dead_lettered), applied twice $twice"
