#!/usr/bin/env bash
# A silent stall on a session link: sbemu gives the first session receiver
# inboxd attaches a session and then neither a transfer nor an answer to
# its drain (--fault-stall-link 1), while the entity poller counts the
# messages waiting. After servicebus.stall_timeout_ms inboxd recycles that
# link, which gives the session back, and another receiver takes it: 4
# sessions of 50 messages, every row applied once, nothing dead-lettered or
# abandoned, every message on its first delivery, the queue empty.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=4
PER=50
STALL_MS=2000
create_items_table
start_emu '{"queues":[{"name":"sstall","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}' \
  --http-listen 127.0.0.1:0 --fault-stall-link 1
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
for s in $(seq 1 $S); do
  for i in $(seq 1 $PER); do
    printf '{"message_id":"s%d-%d","session_id":"s%d","subject":"Item","body":{"id":"s%d-%d","n":%d}}\n' \
      "$s" "$i" "$s" "$s" "$i" "$i"
  done
done >"$W/msgs.jsonl"
send_file sstall "$W/msgs.jsonl"
write_config "$W/inboxd.json" sstall "$(items_route)" "$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" \
  --argjson st $STALL_MS '{servicebus: {sessions: true, max_concurrent_sessions: 2, entity_poll_s: 1,
                           management_endpoint: $ep, stall_timeout_ms: $st},
                           http: {listen: "127.0.0.1:0"}}')"
t0=$(date +%s%3N)
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
wait_until 90 queue_empty sstall || die "queue not drained: active=$(broker_stat sstall active) locked=$(broker_stat sstall locked)"
t_done=$(date +%s%3N)
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

N=$(( S * PER ))
check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "completed by the broker" "$(broker_stat sstall completed)" $N
check "dead-lettered" "$(broker_stat sstall dead_lettered)" 0
check "abandoned" "$(broker_stat sstall abandoned)" 0
check "all on the first delivery" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
check "session links the broker stalled" "$(jq -r '.faults.links_stalled' "$STATS")" 1
check "stalls found" "$(metric_in "$METRICS" inboxd_receive_stalls_total)" 1
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "session stall: messages $N in $S sessions, one session link stalled (${STALL_MS} ms), drained $(( t_done - t0 )) ms after start, dead-lettered $(broker_stat sstall dead_lettered), applied twice $twice"
