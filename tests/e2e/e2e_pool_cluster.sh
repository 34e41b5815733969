#!/usr/bin/env bash
# db.pool_scope: the db workers of several replicas on one database.
#   cluster (the default): two replicas, db.pool_size 2 for the consumer,
#           each replica's heartbeat in inboxd_replicas: one worker of each
#           takes jobs, so the rows of 3,000 messages are written by 2
#           database sessions in all (pg_backend_pid in each row).
#   process: the same with pool_scope "process": each replica uses both of
#           its workers, more than 2 sessions write, and no heartbeat row
#           is written.
#   no table: db.migrate false and no inboxd_replicas table: a replica
#           starts all the same (a warning), with its whole pool.
# Every message applied once, none dead-lettered, each time.
. "$(dirname "$0")/lib.sh"
e2e_init postgresql
N=3000
sql "CREATE TABLE applied (id text PRIMARY KEY, pid int NOT NULL, run text NOT NULL)"
start_emu '{"queues":[{"name":"cluster","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"process","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"notable","lock_duration_s":30,"max_delivery_count":10}]}'
routes='[{"match": "*", "sql": ["SELECT pg_sleep(0.002)", "INSERT INTO applied (id, pid, run) VALUES (?, pg_backend_pid(), ?)"],
          "params": [[], ["$.id", "$.run"]], "idempotency_key": "applied:{$.id}"}]'
replicas() { sql "SELECT count(*) FROM inboxd_replicas WHERE consumer = 'e2e'" 2>/dev/null || echo none; }
two_replicas() { [ "$(replicas)" = 2 ]; }
# counts_two LOGNAME: that replica's heartbeat has read both rows (its "replicas alive" line).
counts_two() { jq -R -r 'fromjson? | select(.event == "replicas" and .replicas == 2) | .event' "$W/$1.log" 2>/dev/null | grep -q .; }
both_ready() { ready "$(http_port "$1-1")" && ready "$(http_port "$1-2")"; }
gen() { awk -v n=$N -v r="$1" 'BEGIN { for (i = 1; i <= n; i++)
  printf "{\"message_id\":\"%s-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"%s-%d\",\"run\":\"%s\"}}\n", r, i, r, i, r }'; }

# run NAME SCOPE: two replicas, then the messages; sets WRITERS and HEARTS.
run() {
  local q=$1 scope=$2 p1 p2
  write_config "$W/$q.json" "$q" "$routes" \
    "$(jq -n --arg s "$scope" '{db: {pool_size: 2, pool_scope: $s}, http: {listen: "127.0.0.1:0"}}')"
  start_inboxd "$W/$q.json" "$q-1"; p1=$LAST_PID
  start_inboxd "$W/$q.json" "$q-2"; p2=$LAST_PID
  wait_until 60 both_ready "$q" || die "$q: the two replicas did not both become ready"
  if [ "$scope" = cluster ]; then
    wait_until 60 two_replicas || die "$q: the two heartbeats did not appear (replicas: $(replicas))"
    wait_until 30 counts_two "$q-1" || die "$q: replica 1 never counted two replicas"
    wait_until 30 counts_two "$q-2" || die "$q: replica 2 never counted two replicas"
  fi
  HEARTS=$(replicas)
  gen "$q" >"$W/$q.jsonl"
  send_file "$q" "$W/$q.jsonl"
  wait_until 120 queue_empty "$q" || die "$q: queue not drained"
  stop_inboxd $p1; check "$q: inboxd 1 exit status" "$STOP_RC" 0
  stop_inboxd $p2; check "$q: inboxd 2 exit status" "$STOP_RC" 0
  check "$q: rows" "$(sql "SELECT count(*) FROM applied WHERE run = '$q'")" $N
  check "$q: dead-lettered" "$(broker_stat "$q" dead_lettered)" 0
  check "$q: completed" "$(broker_stat "$q" completed)" $N
  WRITERS=$(sql "SELECT count(DISTINCT pid) FROM applied WHERE run = '$q'")
}

run cluster cluster
check "cluster: heartbeats while running" "$HEARTS" 2
check "cluster: database sessions that wrote rows (pool_size 2 for both replicas)" "$WRITERS" 2
check "cluster: heartbeat rows after a clean stop" "$(replicas)" 0
cw=$WRITERS

run process process
check "process: heartbeats while running" "$HEARTS" 0
check "process: more than 2 database sessions wrote rows" "$([ "$WRITERS" -gt 2 ] && echo yes || echo "no: $WRITERS")" yes
pw=$WRITERS

# No heartbeat table and db.migrate false: the replica runs with its whole pool.
sql "DROP TABLE inboxd_replicas"
write_config "$W/notable.json" notable "$routes" '{"db": {"pool_size": 2, "migrate": false}}'
start_inboxd "$W/notable.json" notable; p=$LAST_PID
gen notable >"$W/notable.jsonl"
send_file notable "$W/notable.jsonl"
wait_until 120 queue_empty notable || die "notable: queue not drained"
stop_inboxd $p; check "notable: inboxd exit status" "$STOP_RC" 0
check "notable: rows" "$(sql "SELECT count(*) FROM applied WHERE run = 'notable'")" $N
check "notable: dead-lettered" "$(broker_stat notable dead_lettered)" 0
check "applied once" "$(sql "SELECT count(*) FROM applied")" $((3 * N))
echo "pool scope: $N messages a run, writers cluster $cw, process $pw"
