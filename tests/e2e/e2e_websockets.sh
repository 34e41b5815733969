#!/usr/bin/env bash
# AMQP over WebSockets through a real HTTP proxy (tinyproxy, CONNECT with
# Basic auth) to sbemu's --ws-listen: inboxctl sends over it, inboxd with
# servicebus.transport websockets applies every message once while the proxy
# is killed and restarted mid-run (nothing lost, nothing applied twice); a
# wrong proxy password is refused with the proxy named and no secret shown.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:?dialect}"
command -v tinyproxy >/dev/null || { echo "skip: no tinyproxy (scripts/install-deps)"; exit 77; }
N=1500

rows() { sql 'SELECT count(*) FROM items'; }
some_rows() { [ "$(rows)" -ge $((N / 4)) ]; }

create_items_table
start_emu '{"queues":[{"name":"wsq","lock_duration_s":10,"max_delivery_count":100}]}' --ws-listen 127.0.0.1:0
WS_PORT=$(head -n 1 "$W/sbemu.log" | jq -r '.ws_port')
[ "$WS_PORT" -gt 0 ] || die "sbemu reported no ws_port"
# The Endpoint's port is the WebSocket port when the transport is websockets.
SB_CS=${SB_CS/:$EMU_PORT\//:$WS_PORT\/}
start_proxy # lib.sh: tinyproxy with Basic auth, PROXY_PORT and PROXY_PW chosen
export INBOXD_SERVICEBUS_TRANSPORT=websockets
export INBOXD_SERVICEBUS_PROXY="http://e2e:$PROXY_PW@127.0.0.1:$PROXY_PORT"

# No credentials: the proxy's 407 is named. A wrong password: its refusal
# is named, the password never shown.
INBOXD_SERVICEBUS_PROXY="http://127.0.0.1:$PROXY_PORT" \
  "$INBOXCTL" peek --connection-string "$SB_CS" --entity wsq >"$W/peek.out" 2>"$W/peek407.err"
check "inboxctl through a proxy without credentials fails" "$?" 1
check "the error names the proxy and its 407" \
  "$(grep -c "proxy http://127.0.0.1:$PROXY_PORT refused the tunnel: 407" "$W/peek407.err")" 1
INBOXD_SERVICEBUS_PROXY="http://e2e:wrong-$PROXY_PW@127.0.0.1:$PROXY_PORT" \
  "$INBOXCTL" peek --connection-string "$SB_CS" --entity wsq >"$W/peek.out" 2>"$W/peek401.err"
check "inboxctl with a wrong proxy password fails" "$?" 1
check "the error names the proxy" \
  "$(grep -c "proxy http://127.0.0.1:$PROXY_PORT refused the tunnel" "$W/peek401.err")" 1
check "the error holds no password" "$(grep -c -- "$PROXY_PW" "$W/peek401.err")" 0

gen_items $N w >"$W/msgs.jsonl"
send_file wsq "$W/msgs.jsonl"
write_config "$W/inboxd.json" wsq "$(items_route)" \
  "$(jq -n --arg p "$INBOXD_SERVICEBUS_PROXY" '{servicebus: {transport: "websockets", proxy: $p}}')"
conns_before=$(jq '.connections.accepted' "$STATS")
start_inboxd "$W/inboxd.json" inboxd
wait_until 60 some_rows || die "no rows through the proxy"
e2e_log "proxy killed with $(rows) of $N rows applied"
kill -9 "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null
start_proxy
wait_until 120 queue_empty wsq || die "queue not drained after the proxy came back"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(rows)" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "dead-lettered" "$(broker_stat wsq dead_lettered)" 0
check "inboxd reconnected through the restarted proxy" \
  "$(( $(jq '.connections.accepted' "$STATS") - conns_before >= 2 ))" 1
check "the password is in no log" "$(cat "$W"/*.log | grep -c -- "$PROXY_PW")" 0
