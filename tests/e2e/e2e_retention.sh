#!/usr/bin/env bash
# db.inbox_retention_days: the daemon's sweeper deletes inbox rows older than
# the retention and keeps the rest.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-sqlite}"
create_items_table
start_emu '{"queues":[{"name":"keep","lock_duration_s":30,"max_delivery_count":10}]}'
gen_items 5 r >"$W/msgs.jsonl"
send_file keep "$W/msgs.jsonl"
write_config "$W/inboxd.json" keep "$(items_route)" '{"db":{"inbox_retention_days":7}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 30 queue_empty keep || die "queue not drained"
# Age two of the five rows past the retention.
case "$DIALECT" in
sqlite) sql "UPDATE inboxd_inbox SET processed_at = '2020-01-01 00:00:00.000' WHERE message_id IN ('r-1', 'r-2')" ;;
postgresql) sql "UPDATE inboxd_inbox SET processed_at = now() - interval '30 days' WHERE message_id IN ('r-1', 'r-2')" ;;
esac
wait_until 30 bash -c "[ \"\$(sqlite3 -cmd '.timeout 5000' '${DB_FILE:-}' 'SELECT count(*) FROM inboxd_inbox' 2>/dev/null)\" = 3 ] || [ '$DIALECT' != sqlite ]" \
  || die "old rows not swept"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "rows kept" "$(sql 'SELECT message_id FROM inboxd_inbox ORDER BY message_id' | tr '\n' ' ')" "r-3 r-4 r-5 "
check "business rows untouched" "$(sql 'SELECT count(*) FROM items')" 5
