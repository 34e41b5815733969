#!/usr/bin/env bash
# 37. servicebus.session_on_dead_letter "park": session A's first message is
#     poison (a CHECK violation: permanent, dead-lettered by inboxd). A is
#     parked: its later messages stay in the queue, untouched, while sessions
#     B and C complete. inboxctl session show reports the parked record;
#     inboxctl session unpark clears it (exit 0; again: 4, not parked) and
#     A's later messages then apply, in order. The dead letter is not
#     replayed here: it stays in the DLQ (README: "Parked sessions").
#     The broker refuses the first two set-session-state requests (503
#     server-busy): inboxd sends the parked record again, holding the session
#     meanwhile, so A is parked all the same.
#     Scaled down: lock duration 4 s (a parked session is held about 3 s
#     per look), 3 messages per session; PostgreSQL only (the parking is
#     the broker's and the client's, the same for every dialect).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"park","lock_duration_s":4,"max_delivery_count":10,"requires_session":true}],
           "faults":{"refuse_set_state":2}}'
msg() { # msg SESSION N VALUE
  printf '{"message_id":"%s-%d","session_id":"%s","subject":"Item","body":{"id":"%s-%d","n":%d}}\n' "$1" "$2" "$1" "$1" "$2" "$3"
}
{ msg A 1 -1; msg B 1 1; msg C 1 1; msg A 2 2; msg B 2 2; msg C 2 2; msg A 3 3; msg B 3 3; msg C 3 3; } >"$W/msgs.jsonl"
send_file park "$W/msgs.jsonl"
write_config "$W/inboxd.json" park "$(items_route)" \
  '{"servicebus":{"sessions":true,"max_concurrent_sessions":2,"session_idle_timeout_s":2,"session_on_dead_letter":"park"},"http":{"listen":"127.0.0.1:0"}}'
start_inboxd "$W/inboxd.json" inboxd
PID=$LAST_PID
PORT=$(http_port inboxd)
rows_of() { sql "SELECT count(*) FROM items WHERE session = '$1'"; }
others_done() { [ "$(rows_of B)" = 3 ] && [ "$(rows_of C)" = 3 ] && [ "$(broker_stat park dead_lettered)" = 1 ]; }
wait_until 60 others_done || die "B has $(rows_of B) rows, C $(rows_of C), $(broker_stat park dead_lettered) dead-lettered"
# More than a lock duration (and a cool-off): A is accepted again, seen
# parked and left alone meanwhile. Not scaled: a longer wait only proves more.
sleep 6
check "rows of A while parked" "$(rows_of A)" 0
check "A's later messages still active in the queue" "$(broker_stat park active)" 2
check "completed by the broker" "$(broker_stat park completed)" 6
check "dead letter" "$(dlq_reasons park | cut -d' ' -f1)" "A-1"
check "inboxd_sessions_parked" "$(metric "$PORT" inboxd_sessions_parked)" 1
show=$("$INBOXCTL" session show --connection-string "$SB_CS" --entity park --session A 2>>"$W/inboxctl.log") \
  || die "session show failed: $(tail -n 3 "$W/inboxctl.log")"
check "show: parked" "$(jq -r .parked <<<"$show")" true
check "show: the poison message" "$(jq -r .state.message_id <<<"$show")" A-1
check "show: its sequence number" "$(jq -r '.state.sequence_number > 0' <<<"$show")" true
check "show: reason recorded" "$(jq -r '.state.reason | length > 0' <<<"$show")" true
rc=0; "$INBOXCTL" session unpark --connection-string "$SB_CS" --entity park --session A \
  >"$W/unpark.json" 2>>"$W/inboxctl.log" || rc=$?
check "unpark exit status" "$rc" 0
check "unpark: was parked" "$(jq -r .was_parked "$W/unpark.json")" true
rc=0; "$INBOXCTL" session unpark --connection-string "$SB_CS" --entity park --session A \
  >/dev/null 2>>"$W/inboxctl.log" || rc=$?
check "second unpark exit status (not parked)" "$rc" 4
wait_until 60 queue_empty park || die "A not drained after unpark: $(rows_of A) rows"
a_applied() { [ "$(rows_of A)" = 2 ]; }
wait_until 10 a_applied || die "A has $(rows_of A) rows"
parked_zero() { [ "$(metric "$PORT" inboxd_sessions_parked)" = 0 ]; }
wait_until 10 parked_zero || die "inboxd_sessions_parked stays $(metric "$PORT" inboxd_sessions_parked)"
stop_inboxd $PID; check "inboxd exit status" "$STOP_RC" 0
oc=$(items_order_col)
case "$DIALECT" in
postgresql) order=$(sql "SELECT string_agg(n::text, ',' ORDER BY $oc) FROM items WHERE session = 'A'") ;;
sqlite) order=$(sql "SELECT group_concat(n, ',') FROM (SELECT n FROM items WHERE session = 'A' ORDER BY $oc)") ;;
esac
check "A in order after unpark" "$order" "2,3"
check "completed by the broker" "$(broker_stat park completed)" 8
check "dead-lettered" "$(broker_stat park dead_lettered)" 1
