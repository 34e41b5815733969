#!/usr/bin/env bash
# 20. A session given back empty and then sent a new message is accepted and
#     processed again, in order, several times over; default settings.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_items_table
start_emu '{"queues":[{"name":"back","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
write_config "$W/base.json" back "$(items_route)" '{"servicebus":{"sessions":true}}'
jq 'del(.servicebus.prefetch, .servicebus.max_concurrent_calls)' "$W/base.json" >"$W/inboxd.json"
start_inboxd "$W/inboxd.json" inboxd
msg() { # msg SESSION N
  printf '{"message_id":"%s-%d","session_id":"%s","subject":"Item","body":{"id":"%s-%d","n":%d}}\n' "$1" "$2" "$1" "$1" "$2" "$2"
}
rows_of() { sql "SELECT count(*) FROM items WHERE session = '$1'"; }
has_rows() { [ "$(rows_of "$1")" = "$2" ]; }
held_none() { [ "$(broker_stat back sessions_held)" = 0 ] && [ "$(broker_stat back completed)" -ge "$1" ]; }
total=0
for round in 1 2 3 4; do
  # Each round: two more messages for "late" (and one for a bystander session).
  { msg late $((2 * round - 1)); msg "other-$round" 1; msg late $((2 * round)); } >"$W/round$round.jsonl"
  send_file back "$W/round$round.jsonl"
  total=$((total + 3))
  wait_until 30 has_rows late $((2 * round)) || die "round $round: late has $(rows_of late) rows"
  # Given back once empty: the default idle timeout (60 s) is far longer than this wait.
  wait_until 10 held_none $total || die "round $round: $(broker_stat back sessions_held) sessions still held"
  e2e_log "round $round: late processed and given back"
done
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
oc=$(items_order_col)
check "rows of late" "$(rows_of late)" 8
case "$DIALECT" in
postgresql) order=$(sql "SELECT string_agg(n::text, ',' ORDER BY $oc) FROM items WHERE session = 'late'") ;;
sqlite) order=$(sql "SELECT group_concat(n, ',') FROM (SELECT n FROM items WHERE session = 'late' ORDER BY $oc)") ;;
esac
check "late in commit order" "$order" "1,2,3,4,5,6,7,8"
check "completed by the broker" "$(broker_stat back completed)" 12
check "dead-lettered" "$(broker_stat back dead_lettered)" 0
