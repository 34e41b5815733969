#!/usr/bin/env bash
# wss:// through a proxy: sbemu serves AMQP over WebSockets with TLS (a
# throw-away certificate for IP 127.0.0.1), tinyproxy with Basic auth
# tunnels it, and inboxd at servicebus.transport websockets with
# servicebus.ca_file applies every message once. The certificate is checked
# against the namespace's name, never the proxy's: the same server named
# "localhost" (not in the certificate) is refused with a TLS error, though
# the proxy at 127.0.0.1 is the same.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh" # sent_n
e2e_init "${1:-postgresql}"
N=50
create_items_table
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=inboxd-e2e \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$W/key.pem" -out "$W/cert.pem" >/dev/null 2>&1 \
  || die "openssl could not make a certificate"
start_emu '{"queues":[{"name":"tlsq","lock_duration_s":10,"max_delivery_count":10}]}' \
  --ws-listen 127.0.0.1:0 --tls-cert "$W/cert.pem" --tls-key "$W/key.pem"
WS_PORT=$(head -n 1 "$W/sbemu.log" | jq -r '.ws_port')
[ "$WS_PORT" -gt 0 ] || die "sbemu reported no ws_port"
start_proxy # lib.sh: tinyproxy with Basic auth
export INBOXD_SERVICEBUS_PROXY="http://e2e:$PROXY_PW@127.0.0.1:$PROXY_PORT"

# config NAME HOST: inboxd's config reaching sbemu as HOST over wss:// through the proxy.
config() {
  local cs="Endpoint=sb://$2:$WS_PORT/;SharedAccessKeyName=e2e;SharedAccessKey=$EMU_KEY;TransportType=AmqpWebSockets"
  write_config "$W/$1.json" tlsq "$(items_route)" "$(jq -n --arg cs "$cs" --arg ca "$W/cert.pem" \
    '{servicebus: {connection_string: $cs, ca_file: $ca, transport: "websockets"}}')"
}
config good 127.0.0.1
config wrongname localhost

rc=0; "$INBOXCTL" peek --config "$W/wrongname.json" >/dev/null 2>"$W/wrongname.err" || rc=$?
check "a certificate without the namespace's name: refused" "$rc" 1
grep -q -i -E "certificate|ssl|tls" "$W/wrongname.err" || die "the refusal does not say TLS: $(cat "$W/wrongname.err")"
e2e_log "ok   refused as: $(head -c 200 "$W/wrongname.err")"

gen_items $N t >"$W/msgs.jsonl"
"$INBOXCTL" send --config "$W/good.json" --file "$W/msgs.jsonl" 2>>"$W/inboxctl.log" \
  || die "inboxctl send over wss:// failed: $(tail -n 3 "$W/inboxctl.log")"
wait_until 30 sent_n tlsq $N || die "the broker never counted $N messages sent"
start_inboxd "$W/good.json" inboxd
wait_until 60 queue_empty tlsq || die "queue not drained over wss://"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "dead-lettered" "$(broker_stat tlsq dead_lettered)" 0
check "the proxy password is in no log" "$(cat "$W"/*.log | grep -c -- "$PROXY_PW")" 0
