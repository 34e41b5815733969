#!/usr/bin/env bash
# Outbox: the relay publishes a backlog in large pipelined rounds (500 rows a
# claim, up to 256 messages in flight, the published rows marked together)
# while the broker drops every connection every 100 ms. Every row ends
# published, none failed, and the queue, with duplicate detection on, holds
# each message id once: a round cut by a drop is sent again with the same
# ids, and the copies the broker had already stored are counted as its
# duplicates (printed). The backlog is in the table before the relay starts,
# so the drops meet the relay at work whatever its speed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
N=20000
start_emu '{"queues":[{"name":"shipments","duplicate_detection_window_s":600}],
            "faults":{"drop_every_ms":100}}'
relay_config "$W/relay.json" '{"outbox": {"batch": 500, "backoff_max_ms": 1000}}'
start_relay "$W/relay.json" relay
relay=$LAST_PID
wait_until 30 outbox_ready || die "the relay did not create the outbox table"
sql "INSERT INTO inboxd_outbox (entity, message_id, body) SELECT 'shipments', 'drop-' || i,
     '{\"seq\":' || i || '}' FROM generate_series(1, $N) i" >/dev/null
wait_until 180 all_published $N || die "only $(outbox_count published) of $N rows published"
stats_fresh
check "pending rows" "$(outbox_count pending)" 0
check "failed rows" "$(outbox_count failed)" 0
check "messages stored, one per row" "$(broker_stat shipments sent)" $N
check "messages on the queue, one per id" "$(broker_stat shipments active)" $N
drops=$(broker_conn forced_closed)
[ "$drops" -ge 1 ] || die "no connection was dropped while the relay worked: nothing tested"
e2e_log "$drops connections dropped; $(broker_stat shipments duplicate_detected) resends absorbed as duplicates; $(grep -c '"outbox_retry"' "$W/relay.log" || true) rows retried"
stop_inboxd "$relay"; check "relay exit status" "$STOP_RC" 0
