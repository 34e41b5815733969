#!/usr/bin/env bash
# Outbox test 3: two relays (two inboxd --relay-only) on one outbox table and
# a target queue without duplicate detection: every row is published, and
# the broker counts exactly one send per row (no row went out twice).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
N=2000
start_emu '{"queues":[{"name":"shipments"}]}'
relay_config "$W/relay.json" '{"outbox": {"batch": 50}}'
start_relay "$W/relay.json" relay1
r1=$LAST_PID
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
start_relay "$W/relay.json" relay2
r2=$LAST_PID
for k in 1 2 3 4; do
  app_rows $((N / 4)) 20 shipments "app$k"
  sleep 0.3
done
wait_until 120 all_published $N || die "only $(outbox_count published) of $N rows published"
# A row is marked published once the broker took its send: a stats file
# rendered after this point counts every send, a late extra one included.
stats_fresh
check "messages sent to shipments" "$(broker_stat shipments sent)" $N
check "rows published" "$(outbox_count published)" $N
check "rows published more than once" "$(sql "SELECT count(*) FROM inboxd_outbox WHERE attempts <> 1")" 0
stop_inboxd "$r1"; check "relay 1 exit status" "$STOP_RC" 0
stop_inboxd "$r2"; check "relay 2 exit status" "$STOP_RC" 0
