#!/usr/bin/env bash
# The broker throttles a session entity: from its 40th delivery sbemu
# answers every receive (session links with credit detached, accept-session
# attaches refused), settlement and $management request with
# com.microsoft:server-busy for 3 s. 20 sessions of 10 messages, sent
# interleaved before inboxd starts. inboxd holds (no attach, no drain, no
# settlement) and goes on when the broker accepts again; a session whose
# link was detached or whose settlement was refused is given back and comes
# again. Every row applied once and in order within its session, nothing
# dead-lettered or abandoned, every message on its first delivery (no
# attempt counted for the throttling), the time throttled > 0.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
S=20
PER=10
AFTER=40
BUSY_MS=3000
create_items_table
start_emu '{"queues":[{"name":"sbusy","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}' \
  --fault-server-busy-for-ms $BUSY_MS --fault-server-busy-after $AFTER --log-level info
awk -v S=$S -v M=$PER 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
  printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d}}\n", s, i, s, s, i, i }' >"$W/msgs.jsonl"
send_file sbusy "$W/msgs.jsonl"
write_config "$W/inboxd.json" sbusy "$(items_route)" \
  '{"servicebus":{"sessions":true,"max_concurrent_sessions":6,"session_idle_timeout_s":2},"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)
busy_seen() { [ "$(jq -r '.faults.server_busy' "$STATS")" -gt 0 ]; }
wait_until 30 busy_seen || die "the broker never answered server-busy"
wait_until 45 queue_empty sbusy || die "queue not drained: active=$(broker_stat sbusy active) locked=$(broker_stat sbusy locked)"
t_done=$(date +%s%3N)
METRICS=$(metrics_get "$port")
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

N=$(( S * PER ))
oc=$(items_order_col)
check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "sessions" "$(sql "SELECT count(DISTINCT session) FROM items")" $S
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
check "completed by the broker" "$(broker_stat sbusy completed)" $N
check "dead-lettered" "$(broker_stat sbusy dead_lettered)" 0
check "abandoned" "$(broker_stat sbusy abandoned)" 0
check "no attempt counted" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
busy=$(jq -r '.faults.server_busy' "$STATS")
throttled=$(metric_in "$METRICS" inboxd_throttled_seconds_total)
check "inboxd saw server-busy" "$([ "$(metric_in "$METRICS" inboxd_server_busy_total)" -gt 0 ] && echo yes)" yes
check "time throttled > 0" "$(awk -v t="$throttled" 'BEGIN { print (t > 0) ? "yes" : "no" }')" yes
# Recovery: the queue empty (seen at most 200 ms late) within seconds of the
# window's end by sbemu's clock, not after a session lock's 30 s.
ts_ms() { date -d "$1" +%s%3N; }
began=$(jq -R -r 'fromjson? | select(.msg == "server-busy window begins") | .ts' "$W/sbemu.log" | head -n 1)
[ -n "$began" ] || die "sbemu logged no server-busy window"
empty_ms=$(( t_done - $(ts_ms "$began") - BUSY_MS ))
check "back to full speed within seconds" "$([ $empty_ms -lt $(( $(secs 10) * 1000 )) ] && echo yes)" yes
echo "session server-busy: queue empty ${empty_ms} ms after the window, messages $N in $S sessions, busy answers $busy, throttled ${throttled} s, dead-lettered $(broker_stat sbusy dead_lettered), applied twice $(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))"
