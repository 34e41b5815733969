#!/usr/bin/env bash
# 38. A session's park survives kill -9 at each step of it. Two replicas,
#     servicebus.session_on_dead_letter "park"; session P's first message is
#     poison, Q's are not. Replica A alone takes both sessions; the test
#     kills A with -9 at one step of parking P, replica B already running:
#       record  - A's set-session-state of the parked record is unanswered
#                 (sbemu stall_set_state): no record, no dead letter yet;
#       retries - A's record was refused (503, refuse_set_state) and is
#                 being sent again: no record, no dead letter yet;
#       unsettled - the record is written, A's dead letter lost on its way
#                 (ignore_dead_letter) or not sent yet: P parked, its
#                 poison still first;
#       settled - the record is written and the poison dead-lettered.
#     Each time the kill comes in a known window, read from the broker's
#     counters (session_state_sets, dead_lettered), not from timing. B then
#     finishes Q and parks P (or finds it parked): P's later messages are
#     not applied and stay in the queue, the poison is dead-lettered once
#     (unsettled: not at all, it stays first in P behind the record).
#     Last, unpark lets P's later messages apply, in order. The dead letter
#     waits for the record (amqp/sb_settle.c, park_first): a crash before
#     the record leaves the poison first in its session, redelivered.
#     PostgreSQL only (the parking is the broker's and the client's).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
msg() { # msg SESSION N VALUE
  printf '{"message_id":"%s-%d","session_id":"%s","subject":"Item","body":{"id":"%s-%d","n":%d}}\n' \
    "$1" "$2" "$1" "$1" "$2" "$3"
}
rows_of() { sql "SELECT count(*) FROM items WHERE session = '$1'"; }
sets_at_least() { [ "$(broker_stat park session_state_sets)" -ge "$1" ]; }
dead_letters_are() { [ "$(broker_stat park dead_lettered)" = "$1" ]; }
parked_seen() { [ "$(metric "$1" inboxd_sessions_parked)" = 1 ]; }

# round STEP FAULTS: one broker, sessions P and Q (poison first in P), A killed at STEP.
round() {
  local step=$1 faults=$2 a b port_b p=P-$1 q=Q-$1 dl=1 active=3
  [ "$step" = unsettled ] && { dl=0; active=4; }
  start_emu "{\"queues\":[{\"name\":\"park\",\"lock_duration_s\":4,\"max_delivery_count\":10,
              \"requires_session\":true}],\"faults\":$faults}" --stats-every-ms 100
  { msg "$p" 1 -1; msg "$q" 1 1; msg "$p" 2 2; msg "$q" 2 2; msg "$p" 3 3; msg "$q" 3 3; msg "$p" 4 4; } \
    >"$W/msgs-$step.jsonl"
  E2E_SENT[park]=0 # a new broker: send_file counts from its first message
  send_file park "$W/msgs-$step.jsonl"
  for who in a b; do
    write_config "$W/$who-$step.json" park "$(items_route)" \
      '{"servicebus":{"sessions":true,"max_concurrent_sessions":2,"session_idle_timeout_s":2,
        "session_on_dead_letter":"park"},"http":{"listen":"127.0.0.1:0"}}'
  done
  start_inboxd "$W/a-$step.json" "a-$step"; a=$LAST_PID
  case "$step" in
  record | unsettled) wait_until 30 sets_at_least 1 || die "$step: A never wrote P's state" ;;
  retries) wait_until 30 sets_at_least 2 || die "$step: A never wrote P's state twice" ;;
  settled) wait_until 30 dead_letters_are 1 || die "$step: A never dead-lettered P's poison" ;;
  esac
  check "$step: dead letters when A is killed" "$(broker_stat park dead_lettered)" \
    "$([ "$step" = settled ] && echo 1 || echo 0)"
  start_inboxd "$W/b-$step.json" "b-$step"; b=$LAST_PID
  kill -9 "$a"; wait "$a" 2>/dev/null
  port_b=$(http_port "b-$step")
  q_done() { [ "$(rows_of "$q")" = 3 ]; }
  wait_until 60 q_done || die "$step: B applied $(rows_of "$q") of Q's 3 messages"
  wait_until 60 dead_letters_are "$dl" || die "$step: $(broker_stat park dead_lettered) dead-lettered"
  wait_until 60 parked_seen "$port_b" || die "$step: B never saw P parked"
  check "$step: P's messages applied while parked" "$(rows_of "$p")" 0
  check "$step: P's messages still in the queue" "$(broker_stat park active)" "$active"
  check "$step: the dead letter" "$(dlq_reasons park | cut -d' ' -f1)" "$([ "$dl" = 1 ] && echo "$p-1")"
  ROUND_PID=$b ROUND_P=$p
}

# next_round: B stopped, the broker too (it writes its stats file once more on exit).
next_round() {
  stop_inboxd "$ROUND_PID"; check "B's exit status" "$STOP_RC" 0
  kill -TERM "$EMU_PID"; wait "$EMU_PID"
}
round record '{"stall_set_state":1}'
next_round
# Four refusals: A is killed after two of them, B's tries (four) meet the rest.
round retries '{"refuse_set_state":4}'
next_round
round unsettled '{"ignore_dead_letter":1}'
next_round
round settled '{}'
rc=0; "$INBOXCTL" session unpark --connection-string "$SB_CS" --entity park --session "$ROUND_P" \
  >"$W/unpark.json" 2>>"$W/inboxctl.log" || rc=$?
check "unpark exit status" "$rc" 0
p_applied() { [ "$(rows_of "$ROUND_P")" = 3 ]; }
wait_until 60 p_applied || die "P has $(rows_of "$ROUND_P") rows after unpark"
stop_inboxd "$ROUND_PID"; check "B's exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "P in order after unpark" \
  "$(sql "SELECT string_agg(n::text, ',' ORDER BY $oc) FROM items WHERE session = '$ROUND_P'")" "2,3,4"
check "rows of every round" "$(sql 'SELECT count(*) FROM items')" 15
