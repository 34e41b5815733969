#!/usr/bin/env bash
# A first put-token refused: sbemu answers the first 3 put-tokens of every
# connection 401 (--fault-refuse-first-put-token), before any token was
# accepted on it. Each client (inboxctl sending the messages, inboxd
# receiving and relaying on one connection) puts a new token after a
# jittered wait while its links wait to attach, and attaches once one is
# accepted. 200
# messages, each emitting one outbox message to `out`: every row applied
# once, nothing dead-lettered or abandoned, every message on its first
# delivery, every outbox message sent once, and the broker refused 3
# put-tokens on every connection it accepted.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
N=200
K=3
create_items_table
start_emu '{"queues":[{"name":"first","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"out","lock_duration_s":30}]}' --fault-refuse-first-put-token $K
gen_items $N f >"$W/msgs.jsonl"
send_file first "$W/msgs.jsonl"
routes=$(items_route | jq '.[0].emit = [{entity: "out", message_id: "out:{$.id}", subject: "ItemSeen", body: "$"}]')
write_config "$W/inboxd.json" first "$routes" '{"outbox":{"poll_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
wait_until 60 queue_empty first || die "queue not drained: active=$(broker_stat first active) locked=$(broker_stat first locked)"
wait_until 60 all_published $N || die "outbox: $(outbox_count published) of $N published"
wait_until 30 sent_n out $N || die "out: $(broker_stat out sent) of $N sent"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
wait_until 10 broker_idle || die "the broker still has $(broker_conn open) connections open"
stats_fresh

check "rows" "$(sql "SELECT count(*) FROM items")" $N
check "applied once" "$(sql "SELECT count(DISTINCT id) FROM items")" $N
check "completed by the broker" "$(broker_stat first completed)" $N
check "dead-lettered" "$(broker_stat first dead_lettered)" 0
check "abandoned" "$(broker_stat first abandoned)" 0
check "all on the first delivery" "$(sql "SELECT max(delivery_count) FROM inboxd_inbox")" 1
check "outbox rows failed" "$(outbox_count failed)" 0
check "outbox messages sent once each" "$(broker_stat out sent)" $N
conns=$(broker_conn accepted)
check "connections (inboxctl and inboxd at least)" "$([ "$conns" -ge 2 ] && echo yes)" yes
check "put-tokens refused: $K on each connection" "$(broker_conn tokens_refused)" $(( K * conns ))
twice=$(( $(sql "SELECT count(*) FROM items") - $(sql "SELECT count(DISTINCT id) FROM items") ))
echo "first put-token refused: messages $N, connections $conns, put-tokens refused $(broker_conn tokens_refused), dead-lettered $(broker_stat first dead_lettered), applied twice $twice"
