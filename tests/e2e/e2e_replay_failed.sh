#!/usr/bin/env bash
# Replaying a recorded failure: with on_permanent "record" a rejected order
# leaves a 'failed' inbox row and is completed. After the fix, a replayed
# delivery (carrying inboxd-replay-count) of that message is processed
# again - the row becomes 'processed' in the same transaction - and is
# applied once, even when replayed twice; a plain redelivery of another
# failed message still completes as a duplicate without running.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
create_orders_table
start_emu '{"queues":[{"name":"orders","lock_duration_s":30,"max_delivery_count":10}]}'
routes='[{"match":"*","sql":"INSERT INTO orders (id, amount) VALUES (?, ?)","params":["$.id","$.amount"],"on_permanent":"record"}]'
write_config "$W/inboxd.json" orders "$routes"
start_inboxd "$W/inboxd.json" inboxd
printf '%s\n' '{"message_id":"f-1","subject":"Refund","body":{"id":"o-1","amount":-7}}' \
  '{"message_id":"f-2","subject":"Refund","body":{"id":"o-2","amount":-8}}' >"$W/first.jsonl"
send_file orders "$W/first.jsonl"
wait_until 60 queue_empty orders || die "queue not drained"
check "two failed rows" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE status = 'failed'")" 2
check "completed, not dead-lettered" "$(broker_stat orders completed) $(broker_stat orders dead_lettered)" "2 0"
drop_orders_rule
# f-1 replayed (twice: a crash between re-send and DLQ completion re-sends it); f-2 redelivered plainly.
printf '%s\n' '{"message_id":"f-1","subject":"Refund","properties":{"inboxd-replay-count":1},"body":{"id":"o-1","amount":-7}}' \
  '{"message_id":"f-1","subject":"Refund","properties":{"inboxd-replay-count":1},"body":{"id":"o-1","amount":-7}}' \
  '{"message_id":"f-2","subject":"Refund","body":{"id":"o-2","amount":-8}}' >"$W/again.jsonl"
send_file orders "$W/again.jsonl"
wait_until 60 queue_empty orders || die "queue not drained"
stop_inboxd $LAST_PID; check "inboxd exit status" "$STOP_RC" 0
check "the replay applied once" "$(sql "SELECT count(*), sum(amount) FROM orders WHERE id = 'o-1'" | tr '|' ' ')" "1 -7"
check "its row is processed, error cleared" "$(sql "SELECT status, coalesce(error_class, 'none') FROM inboxd_inbox WHERE message_id = 'f-1'" | tr '|' ' ')" "processed none"
check "the plain redelivery did not run" "$(sql "SELECT count(*) FROM orders WHERE id = 'o-2'")" 0
check "its row is still failed" "$(sql "SELECT status FROM inboxd_inbox WHERE message_id = 'f-2'")" failed
check "nothing dead-lettered" "$(broker_stat orders dead_lettered)" 0
check "every delivery completed" "$(broker_stat orders completed) $(broker_stat orders abandoned)" "5 0"
