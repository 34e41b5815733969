#!/usr/bin/env bash
# 19. A batch holding a duplicate, an idempotency conflict, a permanent
#     failure and a transient one among good messages: the same messages run
#     once with db.batch_max 1 and once with batches of up to 64 (one db
#     worker, so they share transactions), and every message ends the same
#     way in both - rows, dead-letter reasons, nothing left in the queue -
#     while the batch run did fall back at least once.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
start_emu '{"queues":[{"name":"alone","lock_duration_s":30,"max_delivery_count":2},
                      {"name":"batch","lock_duration_s":30,"max_delivery_count":2}]}'
[ "$DIALECT" = postgresql ] && missing_table='["42P01"]' || missing_table='[1]'

# routes MODE: items go to items_MODE; subject Later goes to a table that does
# not exist, which errors.transient_native makes a transient failure.
routes() {
  jq -n --arg sql "$(items_insert_sql | sed "s/INTO items /INTO items_$1 /")" '[
    {match: {subject: "Item"}, sql: $sql, idempotency_key: "item:{$.id}",
     params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"]},
    {match: {subject: "Later"}, sql: "INSERT INTO later_items (id) VALUES (?)", params: ["$.id"]}]'
}

# run MODE BATCH_MAX: pre-applies two messages, then sends the mix and drains it.
run() {
  local mode=$1 b=$2 cfg
  sql "CREATE TABLE items_$mode (id text PRIMARY KEY, n bigint NOT NULL CHECK (n >= 0), session text, seq bigint, message_id text)"
  cfg=$(jq -n --argjson b "$b" --argjson t "$missing_table" \
    '{consumer: "c-\($b)", db: {batch_max: $b, pool_size: 1},
      servicebus: {max_concurrent_calls: 64, prefetch: 64},
      errors: {transient_native: $t}, retry: {attempts: 2, base_ms: 20, max_ms: 50},
      http: {listen: "127.0.0.1:0"}}')
  write_config "$W/$mode.json" "$mode" "$(routes "$mode")" "$cfg"
  printf '%s\n' '{"message_id":"pre","subject":"Item","body":{"id":"pre","n":1}}' \
    '{"message_id":"key-1","subject":"Item","body":{"id":"k","n":1}}' >"$W/pre.jsonl"
  send_file "$mode" "$W/pre.jsonl"
  start_inboxd "$W/$mode.json" "$mode"
  wait_until 60 queue_empty "$mode" || die "$mode: pre-applied messages not drained"
  # The mix, good messages first so that the bad ones land among them.
  {
    for i in $(seq 1 20); do printf '{"message_id":"good-%d","subject":"Item","body":{"id":"g%d","n":%d}}\n' "$i" "$i" "$i"; done
    echo '{"message_id":"pre","subject":"Item","body":{"id":"pre","n":1}}'
    echo '{"message_id":"key-2","subject":"Item","body":{"id":"k","n":2}}'
    echo '{"message_id":"negative","subject":"Item","body":{"id":"neg","n":-1}}'
    echo '{"message_id":"later","subject":"Later","body":{"id":"l1"}}'
    for i in $(seq 21 30); do printf '{"message_id":"good-%d","subject":"Item","body":{"id":"g%d","n":%d}}\n' "$i" "$i" "$i"; done
  } >"$W/mix.jsonl"
  send_file "$mode" "$W/mix.jsonl"
  wait_until 120 queue_empty "$mode" || die "$mode: mix not drained"
  FALLBACKS=$(metric "$(http_port "$mode")" inboxd_batch_fallbacks_total)
  stop_inboxd $LAST_PID; check "$mode: inboxd exit status" "$STOP_RC" 0
}

run alone 1
run batch 64
for mode in alone batch; do
  check "$mode: rows" "$(sql "SELECT id || ':' || n FROM items_$mode ORDER BY id" | tr '\n' ' ')" \
    "g1:1 g10:10 g11:11 g12:12 g13:13 g14:14 g15:15 g16:16 g17:17 g18:18 g19:19 g2:2 g20:20 g21:21 g22:22 g23:23 g24:24 g25:25 g26:26 g27:27 g28:28 g29:29 g3:3 g30:30 g4:4 g5:5 g6:6 g7:7 g8:8 g9:9 k:1 pre:1 "
  check "$mode: dead-letter queue" "$(dlq_reasons "$mode" | tr '\n' ' ')" \
    "key-2 IdempotencyKeyConflict later MaxDeliveryCountExceeded negative HandlerError "
  check "$mode: queue active" "$(broker_stat "$mode" active)" 0
  check "$mode: completed" "$(broker_stat "$mode" completed)" 33
done
check "inbox rows alike" "$(sql "SELECT count(*) FROM inboxd_inbox WHERE consumer = 'c-1'")" \
  "$(sql "SELECT count(*) FROM inboxd_inbox WHERE consumer = 'c-64'")"
[ "${FALLBACKS:-0}" -ge 1 ] || die "the batch run never fell back (${FALLBACKS:-none}): the bad messages were not batched"
e2e_log "ok   batch fallbacks ($FALLBACKS)"
