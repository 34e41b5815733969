#!/usr/bin/env bash
# Sessions in batches, with failures mid-session: 12 sessions x 25 messages,
# interleaved; messages 3 and 14 of every session fail transiently once
# (a trigger raises 40001 the first time each is inserted). Run twice: with
# in-process retries (the later ones of the session wait in the batch) and
# with retry.attempts 0 (the failed one is abandoned and its session goes
# back with everything after it). Each time every session's rows commit in
# send order, none twice, none dead-lettered, and the failures did happen.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
S=12; M=25
start_emu '{"queues":[{"name":"inproc","lock_duration_s":30,"max_delivery_count":10,"requires_session":true},
                      {"name":"abandon","lock_duration_s":30,"max_delivery_count":10,"requires_session":true}]}'
create_items_table
# A sequence is not rolled back with the failed transaction: it remembers the first try.
for s in $(seq 1 $S); do sql "CREATE SEQUENCE fail_s${s}_3; CREATE SEQUENCE fail_s${s}_14"; done
sql "CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NEW.n IN (3, 14) AND nextval(('fail_' || split_part(NEW.id, '-', 2) || '_' || NEW.n)::regclass) = 1 THEN
    RAISE EXCEPTION 'first try of %', NEW.id USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END \$\$"
sql "CREATE TRIGGER items_fail_once BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION fail_once()"

# run ENTITY RETRY_ATTEMPTS: ids are ENTITY-sN-i so each run has its own sequences' first tries.
run() {
  local e=$1 attempts=$2 oc
  for s in $(seq 1 $S); do sql "ALTER SEQUENCE fail_s${s}_3 RESTART; ALTER SEQUENCE fail_s${s}_14 RESTART"; done
  awk -v S=$S -v M=$M -v E="$e" 'BEGIN { for (i = 1; i <= M; i++) for (s = 1; s <= S; s++)
    printf "{\"message_id\":\"%s-s%d-%d\",\"session_id\":\"%s-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"%s-s%d-%d\",\"n\":%d}}\n", E, s, i, E, s, E, s, i, i }' >"$W/$e.jsonl"
  send_file "$e" "$W/$e.jsonl"
  write_config "$W/$e.json" "$e" "$(items_route)" "$(jq -n --argjson a "$attempts" \
    '{db: {batch_max: 32, pool_size: 2}, retry: {attempts: $a, base_ms: 10, max_ms: 20},
      servicebus: {sessions: true, session_idle_timeout_s: 2}}')"
  start_inboxd "$W/$e.json" "$e"
  wait_until 50 queue_empty "$e" || die "$e: queue not drained"
  stop_inboxd $LAST_PID; check "$e: inboxd exit status" "$STOP_RC" 0
  oc=$(items_order_col)
  check "$e: rows" "$(sql "SELECT count(*) FROM items WHERE id LIKE '$e-%'")" $((S * M))
  check "$e: out-of-order pairs within a session" \
    "$(sql "SELECT count(*) FROM items a JOIN items b ON a.session = b.session AND a.n < b.n AND a.$oc > b.$oc WHERE a.id LIKE '$e-%'")" 0
  check "$e: failed first tries" \
    "$(sql "SELECT count(*) FROM pg_sequences WHERE sequencename LIKE 'fail_%' AND last_value >= 2")" $((2 * S))
  check "$e: dead-lettered" "$(broker_stat "$e" dead_lettered)" 0
  check "$e: completed by the broker" "$(broker_stat "$e" completed)" $((S * M))
}
run inproc 3
run abandon 0
