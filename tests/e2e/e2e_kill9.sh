#!/usr/bin/env bash
# 4. kill -9 of inboxd mid-flight during a 5,000-message run (three kills,
#    at about 20, 40 and 60 % of the rows, plus a random delay), restarted
#    each time -> one row per message, nothing left in the queue, nothing
#    dead-lettered. E2E_KILL9_N and E2E_KILL9_CONFIG (extra inboxd settings)
#    make the batch-mode variant: 20,000 messages in batches.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=${E2E_KILL9_N:-5000}
create_items_table
# A short lock so that messages held by a killed process come back quickly.
start_emu '{"queues":[{"name":"crash","lock_duration_s":5,"max_delivery_count":50}]}'
gen_items $N k >"$W/msgs.jsonl"
send_file crash "$W/msgs.jsonl"
extra=${E2E_KILL9_CONFIG:-}
[ -n "$extra" ] || extra='{}'
write_config "$W/inboxd.json" crash "$(items_route)" "$extra"
kills=0
rows_at_least() { [ "$(sql 'SELECT count(*) FROM items')" -ge "$1" ]; }
while [ $kills -lt 3 ] || ! queue_empty crash; do
  start_inboxd "$W/inboxd.json" inboxd
  pid=$LAST_PID
  if [ $kills -lt 3 ]; then
    # Let it get into its stride, then kill it mid-flight.
    wait_until 120 rows_at_least $(( (kills + 1) * N / 5 )) || die "no progress before kill #$((kills + 1))"
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", (r % 300) / 1000 }')"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    kills=$((kills + 1))
    e2e_log "kill -9 #$kills at $(sql 'SELECT count(*) FROM items') rows"
    [ "$(sql 'SELECT count(*) FROM items')" -lt $N ] || die "the run finished before kill #$kills; raise N"
  else
    wait_until 300 queue_empty crash || die "queue not drained after the kills"
    stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
  fi
done
check "kills" $kills 3
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
check "dead-lettered" "$(broker_stat crash dead_lettered)" 0
check "queue active" "$(broker_stat crash active)" 0
