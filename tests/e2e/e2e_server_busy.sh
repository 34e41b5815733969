#!/usr/bin/env bash
# The broker throttles: from its 300th delivery sbemu answers every receive
# (link attach and credit), settlement, send and $management request with
# com.microsoft:server-busy for 3 s (--fault-server-busy-for-ms). 1,500
# messages sent before inboxd starts, each applied and emitting one outbox
# message that the relay sends to `out` during the window too. inboxd holds
# credit, settlements and sends while busy and goes on when the broker
# accepts again: every row applied once, nothing dead-lettered or
# abandoned, every message on its first delivery (no attempt counted for
# the throttling), every outbox row published with no attempt counted (a
# busy answer to a relay send leaves its row as it was), the throttled
# time > 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
N=1500
AFTER=300
BUSY_MS=3000
create_items_table
start_emu '{"queues":[{"name":"busy","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"out","lock_duration_s":30}]}' \
  --fault-server-busy-for-ms $BUSY_MS --fault-server-busy-after $AFTER --log-level info
gen_items $N b >"$W/msgs.jsonl"
send_file busy "$W/msgs.jsonl"
routes=$(items_route | jq '.[0].emit = [{entity: "out", message_id: "out:{$.id}", subject: "ItemSeen", body: "$"}]')
write_config "$W/inboxd.json" busy "$routes" '{"http":{"listen":"127.0.0.1:0"},"outbox":{"poll_ms":200}}'
t0=$(date +%s%3N)
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
busy_seen() { [ "$(jq -r '.faults.server_busy' "$STATS")" -gt 0 ]; }
wait_until 60 busy_seen || die "the broker never answered server-busy"
wait_until 120 queue_empty busy || die "queue not drained: active=$(broker_stat busy active) locked=$(broker_stat busy locked)"
t_done=$(date +%s%3N)
wait_until 60 all_published $N || die "outbox: $(outbox_count published) of $N published"
wait_until 30 sent_n out $N || die "out: $(broker_stat out sent) of $N sent"
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "completed by the broker" "$(broker_stat busy completed)" $N
check "dead-lettered" "$(broker_stat busy dead_lettered)" 0
check "abandoned" "$(broker_stat busy abandoned)" 0
check "no attempt counted" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
check "outbox rows failed" "$(outbox_count failed)" 0
check "outbox: no attempt counted for a busy send (publishing is the one)" "$(sql "SELECT max(attempts) FROM inboxd_outbox")" 1
busy=$(jq -r '.faults.server_busy' "$STATS")
throttled=$(metric_in "$METRICS" inboxd_throttled_seconds_total)
check "inboxd saw server-busy" "$([ "$(metric_in "$METRICS" inboxd_server_busy_total)" -gt 0 ] && echo yes)" yes
check "time throttled > 0" "$(awk -v t="$throttled" 'BEGIN { print (t > 0) ? "yes" : "no" }')" yes
# Figures: the window's end by sbemu's clock, the first message inboxd
# finished after it (its log), the queue empty (seen at most 200 ms late).
ts_ms() { date -d "$1" +%s%3N; }
began=$(jq -R -r 'fromjson? | select(.msg == "server-busy window begins") | .ts' "$W/sbemu.log" | head -n 1)
[ -n "$began" ] || die "sbemu logged no server-busy window"
win_end=$(( $(ts_ms "$began") + BUSY_MS ))
end_ts=$(date -u -d "@$(( win_end / 1000 )).$(printf %03d $(( win_end % 1000 )))" +%FT%T.%3NZ)
resumed=$(jq -R -r --arg e "$end_ts" 'fromjson? | select(.event == "msg_done" and .ts > $e) | .ts' \
  "$W/inboxd.log" | head -n 1)
resume_ms=$([ -n "$resumed" ] && echo $(( $(ts_ms "$resumed") - win_end )) || echo none)
empty_ms=$(( t_done - win_end ))
check "back to full speed within seconds" "$([ $empty_ms -lt $(( $(secs 10) * 1000 )) ] && echo yes)" yes
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "server-busy: messages $N, busy answers $busy, throttled ${throttled} s, first message done ${resume_ms} ms after the window, queue empty ${empty_ms} ms after it (total $(( t_done - t0 )) ms), dead-lettered $(broker_stat busy dead_lettered), applied twice $twice"
