#!/usr/bin/env bash
# A session taken again while jobs of its lock before are still in flight.
# 3 sessions x 30 messages; message 3 of each fails once (a trigger raises
# 40001) with retry.attempts 0, so it is abandoned and the later ones of its
# session go back after it. sbemu answers settlements only after 1.5 s and
# detaches a link that moved nothing for 0.5 s, so the session's link is
# gone before those answers come: its jobs stay in flight while the broker
# offers the session again. The new lock's deliveries must not be sent back
# behind the old lock's jobs (a loop of deliveries while any of those stays
# in flight): every row once and in order, the failures did happen, nothing
# dead-lettered, the queue empty, and few deliveries per message.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
S=3; M=30
start_emu '{"queues":[{"name":"relock","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}' \
  --fault-settle-delay-ms 1500 --fault-idle-close-link-ms 500
create_items_table
for s in $(seq 1 $S); do sql "CREATE SEQUENCE fail_s$s"; done
sql "CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NEW.n = 3 AND nextval(('fail_' || split_part(NEW.id, '-', 1))::regclass) <= 2 THEN
    RAISE EXCEPTION 'first try of %', NEW.id USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END \$\$"
sql "CREATE TRIGGER items_fail_once BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION fail_once()"
awk -v S=$S -v M=$M 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
  printf "{\"message_id\":\"s%d-%d\",\"session_id\":\"sess-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"s%d-%d\",\"n\":%d}}\n", s, i, s, s, i, i }' >"$W/msgs.jsonl"
send_file relock "$W/msgs.jsonl"
write_config "$W/inboxd.json" relock "$(items_route)" \
  '{"db":{"batch_max":32,"pool_size":2},"retry":{"attempts":0},"servicebus":{"sessions":true,"session_idle_timeout_s":2}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
all_completed() { [ "$(broker_stat relock completed)" -ge $((S * M)) ] && queue_empty relock; }
wait_until 120 all_completed || die "queue not drained: active=$(broker_stat relock active) locked=$(broker_stat relock locked) delivered=$(broker_stat relock delivered)"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0

N=$((S * M))
oc=$(items_order_col)
check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "out-of-order pairs within a session" \
  "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc")" 0
check "failed first tries" "$(sql "SELECT count(*) FROM pg_sequences WHERE sequencename LIKE 'fail_%' AND last_value >= 3")" $S
check "dead-lettered" "$(broker_stat relock dead_lettered)" 0
check "completed by the broker" "$(broker_stat relock completed)" $N
delivered=$(broker_stat relock delivered)
check "deliveries within 10 per message" "$([ "$delivered" -le $((10 * N)) ] && echo yes || echo "no: $delivered")" yes
echo "session relock: messages $N in $S sessions, deliveries $delivered, abandoned $(broker_stat relock abandoned), released $(broker_stat relock released), links idle-closed $(jq -r '.faults.links_idle_closed' "$STATS")"
