#!/usr/bin/env bash
# HTTP scenario 1. An idempotent destination; 2,000 orders, each message
# sent twice; inboxd killed -9 three times mid-run and restarted -> the
# destination's ledger holds exactly one effect per order, the inbox 2,000
# processed rows, the business table 2,000 rows with their remote ids, the
# queue is empty and nothing is dead-lettered.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
e2e_init "${1:-postgresql}"
N=${E2E_HTTP_N:-2000}
create_charges_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":100}]}'
start_fake pay idempotent
gen_orders $N >"$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
write_config "$W/inboxd.json" charges "$(charge_route "$FAKE_URL" true)"
charges_at_least() { [ "$(sql "SELECT count(*) FROM charges")" -ge "$1" ]; }
kills=0
while [ $kills -lt 3 ] || ! queue_empty charges; do
  start_inboxd "$W/inboxd.json" inboxd
  pid=$LAST_PID
  if [ $kills -lt 3 ]; then
    # Killed at a quarter, a half and three quarters of the run (by rows
    # committed), so the kills land mid-run however fast the machine is.
    at=$(( N * (kills + 1) / 4 ))
    wait_until 300 charges_at_least "$at" || die "fewer than $at charges after 300 s"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    kills=$((kills + 1))
    done_rows=$(sql "SELECT count(*) FROM charges")
    e2e_log "kill -9 #$kills at $done_rows charges"
    [ "$done_rows" -lt $N ] || die "the run finished before kill #$kills"
  else
    wait_until 300 queue_empty charges || die "queue not drained after the kills"
    stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
  fi
done
ledger "$FAKE_URL" "$W/ledger.json"
check "kills" $kills 3
check "orders with an effect" "$(ledger_q "$W/ledger.json" '.effects | length')" $N
check "orders with more than one effect" \
  "$(ledger_q "$W/ledger.json" '[.effects[] | select(length != 1)] | length')" 0
check "requests without the key header" \
  "$(ledger_q "$W/ledger.json" '[.requests[] | select(.key_from_header | not)] | length')" 0
check "inbox processed rows" "$(inbox_count processed)" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "charges rows" "$(sql 'SELECT count(*) FROM charges')" $N
check "charges with the remote id" \
  "$(sql "SELECT count(*) FROM charges c JOIN inboxd_inbox i ON i.message_id = c.order_id AND i.remote_id = c.charge_id AND i.remote_status IN (200, 201)")" $N
check "dead-lettered" "$(broker_stat charges dead_lettered)" 0
check "queue active" "$(broker_stat charges active)" 0
