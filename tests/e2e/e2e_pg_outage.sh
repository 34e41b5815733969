#!/usr/bin/env bash
# 6. PostgreSQL stopped for 10 s mid-run, then restarted -> no loss, no
#    duplicate effect; the retries show in the metrics; held, not burnt:
#    nothing abandoned (an unreachable database is not the message's fault),
#    one delivery each.
#    E2E_OUTAGE_MDC, E2E_OUTAGE_S and E2E_OUTAGE_N change the queue's
#    MaxDeliveryCount (100), the outage (10 s) and the messages (1500):
#    e2e/pg_outage_mdc10 stops the database for 20 s at Service Bus's default
#    MaxDeliveryCount of 10 on a 5 s lock (scaled down from 60 s on a 60 s
#    lock: the locks are renewed several times) with inboxd's defaults:
#    nothing may reach the broker's MaxDeliveryCount.
#    The first 100 messages are sent before the outage and the rest while
#    the database is down, so the outage meets messages in flight however
#    fast inboxd drains a queue.
. "$(dirname "$0")/lib.sh"
[ -n "${INBOXD_TEST_PG_PORT:-}" ] || [ "${INBOXD_TEST_REQUIRE_PG:-0}" = 1 ] || { echo "skip: no PostgreSQL"; exit 77; }
# A private server: this test stops it.
PGDIR=$(mktemp -d /tmp/inboxd-e2e-pg.XXXXXX); chmod 755 "$PGDIR"
INBOXD_TEST_PG_PORT=$("$E2E_SRC/tests/lib/pg.sh" start "$PGDIR") || die "cannot start PostgreSQL"
export INBOXD_TEST_PG_PORT
e2e_init postgresql
trap 'E2E_FAILED=$?; e2e_cleanup; "$E2E_SRC/tests/lib/pg.sh" stop "$PGDIR"; rm -rf "$PGDIR"' EXIT
N=${E2E_OUTAGE_N:-1500}
MDC=${E2E_OUTAGE_MDC:-100}
OUTAGE_S=${E2E_OUTAGE_S:-10}
LOCK_S=10; [ "$MDC" -le 10 ] && LOCK_S=5
create_items_table
start_emu "{\"queues\":[{\"name\":\"outage\",\"lock_duration_s\":$LOCK_S,\"max_delivery_count\":$MDC}]}"
gen_items $N o >"$W/msgs.jsonl"
head -n 100 "$W/msgs.jsonl" >"$W/before.jsonl"
tail -n +101 "$W/msgs.jsonl" >"$W/during.jsonl"
send_file outage "$W/before.jsonl"
write_config "$W/inboxd.json" outage "$(items_route)" \
  "{\"retry\":{\"attempts\":4,\"base_ms\":200,\"max_ms\":2000},\"http\":{\"listen\":\"127.0.0.1:0\"}}"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
wait_until 60 bash -c "[ \$(psql -h 127.0.0.1 -p $INBOXD_TEST_PG_PORT -U postgres -d $E2E_PGDB -tAc 'SELECT count(*) FROM items' 2>/dev/null || echo 0) -ge 100 ]" \
  || die "no progress before the outage"
"$E2E_SRC/tests/lib/pg.sh" stop "$PGDIR"
e2e_log "PostgreSQL stopped"
send_file outage "$W/during.jsonl"
e2e_log "sent $(wc -l <"$W/during.jsonl") messages during the outage"
sleep "$OUTAGE_S"
"$E2E_SRC/tests/lib/pg.sh" start "$PGDIR" >/dev/null || die "cannot restart PostgreSQL"
e2e_log "PostgreSQL restarted"
wait_until 240 queue_empty outage || die "queue not drained after the outage"
metrics=$(metrics_get "$port")
retries=$(echo "$metrics" | awk '/^inboxd_retries_total/ { s += $2 } END { print s + 0 }')
abandons=$(metric_in "$metrics" 'inboxd_messages_total{result="abandoned"}')
e2e_log "retries $retries, abandons ${abandons:-0}"
check "retries visible in the metrics" "$([ "${retries%.*}" -gt 0 ] && echo yes)" yes
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" $N
e2e_log "deliveries $(broker_stat outage delivered) for $N messages (MaxDeliveryCount $MDC, a ${OUTAGE_S} s outage)"
check "dead-lettered" "$(broker_stat outage dead_lettered)" 0
check "abandoned" "$(broker_stat outage abandoned)" 0
