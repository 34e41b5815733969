#!/usr/bin/env bash
# inboxctl send --file while the broker drops every connection every 150 ms
# (sbemu's drop_every_ms): the file's 50,000 messages all arrive, and after a
# drop only the messages the broker had not accepted are sent again. The
# queue detects duplicates, so its own counters tell: one message stored and
# active per id (none lost); the resends the broker had already stored are
# counted as duplicates and printed: each is a message whose accept was lost
# with its connection (at most the chunk under way per drop). No inboxd and
# no database. 50,000 so that the send outlasts a drop even on a fast run
# (20,000 once finished between two drops).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-sqlite}"
N=50000
start_emu '{"queues":[{"name":"drops","lock_duration_s":30,"duplicate_detection_window_s":600}],
            "faults":{"drop_every_ms":150}}'
awk -v n=$N 'BEGIN { for (i = 1; i <= n; i++) printf "{\"message_id\":\"d-%d\",\"body\":\"x\"}\n", i }' \
  >"$W/drops.jsonl"
rc=0
"$INBOXCTL" send --connection-string "$SB_CS" --entity drops --file "$W/drops.jsonl" \
  2>"$W/send.err" || rc=$?
check "inboxctl send exit status" "$rc" 0
drops=$(grep -c "reconnecting and sending the" "$W/send.err" || true)
e2e_log "inboxctl reconnected $drops times: $(grep -m1 reconnecting "$W/send.err")"
[ "$drops" -ge 1 ] || die "no drop met the send: nothing tested ($(tail -n 2 "$W/send.err"))"
stats_fresh
check "one message per id on the queue (none lost)" "$(broker_stat drops active)" $N
check "messages stored, once each" "$(broker_stat drops sent)" $N
dup=$(broker_stat drops duplicate_detected)
e2e_log "$dup sends dropped as duplicates (accepts lost with their connection) over $drops reconnects"
[ "$dup" -le $((drops * 200)) ] || die "$dup resends over $drops reconnects: more than the chunk under way each time"
