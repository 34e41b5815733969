#!/usr/bin/env bash
# servicebus.transport auto with nothing on the AMQP port: inboxctl send and
# inboxd fall back to WebSockets (sbemu's --ws-listen, named by
# servicebus.websocket_port); every message applied once, nothing left,
# nothing dead-lettered.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:?dialect}"
N=300
create_items_table
start_emu '{"queues":[{"name":"autoq","lock_duration_s":10,"max_delivery_count":10}]}' --ws-listen 127.0.0.1:0
WS_PORT=$(head -n 1 "$W/sbemu.log" | jq -r '.ws_port')
[ "$WS_PORT" -gt 0 ] || die "sbemu reported no ws_port"
DEAD_PORT=""
for _ in $(seq 1 200); do
  p=$((20000 + RANDOM % 12000))
  (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { DEAD_PORT=$p; break; }
done
[ -n "$DEAD_PORT" ] || die "no free port"
# The AMQP port has nothing on it; only the WebSocket endpoint answers.
SB_CS=${SB_CS/:$EMU_PORT\//:$DEAD_PORT\/}
export INBOXD_SERVICEBUS_TRANSPORT=auto INBOXD_SERVICEBUS_WEBSOCKET_PORT=$WS_PORT
gen_items $N a >"$W/msgs.jsonl"
send_file autoq "$W/msgs.jsonl"
write_config "$W/inboxd.json" autoq "$(items_route)" \
  "$(jq -n --argjson p "$WS_PORT" '{servicebus: {transport: "auto", websocket_port: $p}}')"
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 queue_empty autoq || die "queue not drained over the fallback"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "dead-lettered" "$(broker_stat autoq dead_lettered)" 0
