#!/usr/bin/env bash
# Outbox test 4: the broker stops answering for 10 s (SIGSTOP) while an
# application keeps inserting rows: the pending count grows, then drains to
# zero once the broker is back (SIGCONT); every row is published and, with
# duplicate detection on the queue, the queue holds exactly one message per
# row (re-sends after timeouts are absorbed), nothing is lost.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"shipments","duplicate_detection_window_s":600}]}'
relay_config "$W/relay.json" '{"outbox": {"backoff_max_ms": 2000}}'
start_relay "$W/relay.json" relay
relay=$LAST_PID
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
app_rows 200 5 shipments before
wait_until 60 all_published 200 || die "only $(outbox_count published) of 200 rows published before the stop"
kill -STOP "$EMU_PID"
e2e_log "broker stopped"
for k in 1 2 3 4 5; do app_rows 100 5 shipments "during$k"; sleep 1; done
pending=$(outbox_count pending)
[ "$pending" -gt 0 ] || die "no pending rows while the broker was stopped"
e2e_log "pending while stopped: $pending"
sleep 5
kill -CONT "$EMU_PID"
e2e_log "broker back"
app_rows 100 5 shipments after
wait_until 180 all_published 800 || die "only $(outbox_count published) of 800 rows published after the broker came back"
check "pending rows" "$(outbox_count pending)" 0
check "failed rows" "$(outbox_count failed)" 0
stats_fresh # rows are published once the broker took them: a fresh file counts all
check "messages in shipments (one per row)" "$(broker_stat shipments sent)" 800
stop_inboxd "$relay"; check "relay exit status" "$STOP_RC" 0
