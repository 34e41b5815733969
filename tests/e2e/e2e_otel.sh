#!/usr/bin/env bash
# Traces. A test OTLP receiver (tests/otel/receiver.mjs: the official
# opentelemetry-proto definitions) records what inboxd exports.
# 1. 50 messages sent with the official SDK, each with a sender span's
#    traceparent, through an SQL route that emits one message each, traces
#    exported as http/protobuf -> 50 consumer spans in the senders' traces,
#    parented on the senders' spans, each with a settlement child span; the
#    emitted messages, read back from the broker, carry a traceparent naming
#    their publish span: the relay's PRODUCER span "send", a child of the
#    consumer span that wrote the outbox row. That parent comes from the
#    row's trace_context column (read back by SQL: each consumer span's
#    traceparent): the route sets the traceparent property of its emit to
#    another, unrelated context, which the relay must not follow (it still
#    replaces it on the sent message). Three rows an application writes
#    with no trace context get root publish spans, and their messages
#    carry them all the same. The inbox transaction's
#    claim, route statements and commit are CLIENT spans: children of the consumer span when the
#    message ran alone, else children of its batch's "inbox batch" span,
#    which links to every message span it carries (and they back to it).
#    INBOXD_TEST_BATCH_MAX 1: no batch span; > 1: batches did form (the 50
#    messages wait in the queue before inboxd starts). msg_done's span_id
#    names the exported consumer span of its message.
# 2. An HTTP route, traces as http/json -> the destination received a
#    traceparent whose parent is inboxd's CLIENT span of the call, itself a
#    child of the consumer span.
# 3. The receiver stopped mid-run -> every message is still applied, and
#    inboxd_otel_spans_dropped_total rises.
# 4. A collector that accepts connections and never answers -> messages are
#    applied, and SIGTERM exits 0 within the 2 s traces get at shutdown
#    (plus a margin), not after the exporter's 10 s request timeout(s).
# 5. The default sampler (part 1 names parentbased_always_on): 100 messages
#    with a sender's sampled traceparent and 300 with none -> all applied;
#    the 100 have their consumer spans, in the senders' traces; of the 300,
#    about 1 in 100 (OT_DEFAULT_ROOT_RATIO) is the root of a trace, and
#    their emitted messages carry a traceparent only when they are.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init postgresql
OTEL_DIR="$E2E_SRC/tests/otel"
[ -d "$OTEL_DIR/node_modules" ] || die "tests/otel: node_modules is missing; run npm ci in $OTEL_DIR (scripts/test does this)"
create_items_table
create_charges_table
start_emu '{"queues":[{"name":"items","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"out"},
                      {"name":"charges","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"late","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"hung","lock_duration_s":30,"max_delivery_count":10}]}'

# start_receiver NAME: sets RECV_URL and RECV_PID; spans go to $W/NAME.jsonl.
start_receiver() {
  : >"$W/$1.jsonl"
  node "$OTEL_DIR/receiver.mjs" "$W/$1.jsonl" >"$W/$1.port" 2>"$W/$1.log" &
  RECV_PID=$!
  E2E_PIDS+=("$RECV_PID")
  local port=""
  for _ in $(seq 1 100); do
    port=$(jq -r '.port // empty' "$W/$1.port" 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || die "receiver $1 did not start: $(cat "$W/$1.log")"
  RECV_URL="http://127.0.0.1:$port"
}
items_at_least() { [ "$(sql "SELECT count(*) FROM items")" -ge "$1" ]; }
spans_q() { jq -rs "$2" "$W/$1.jsonl"; }

# --- 1. SQL route with an emit, http/protobuf
DECOY_TP=00-11111111111111111111111111111111-2222222222222222-01
start_receiver pb
node "$OTEL_DIR/send.mjs" "$SB_CS" items 50 item >"$W/sent.jsonl" || die "the SDK could not send"
routes=$(jq -n --arg decoy "$DECOY_TP" --arg sql "$(items_insert_sql)" '[{match: "*", sql: $sql,
  params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
  idempotency_key: "item:{$.id}",
  emit: [{entity: "out", message_id: "out:{$.id}", subject: "ItemSeen", body: "$",
          properties: {traceparent: {const: $decoy}}}]}]')
write_config "$W/one.json" items "$routes" \
  "$(jq -n --arg u "$RECV_URL/v1/traces" '{otel: {traces_endpoint: $u, sampler: "parentbased_always_on"},
     outbox: {poll_ms: 200}}')"
start_inboxd "$W/one.json" one; pid=$LAST_PID
wait_until 60 queue_empty items || die "items not drained"
wait_until 30 all_published 50 || die "emitted messages not published"
# Rows an application writes with no trace context at all: their publish
# span starts a trace, and their messages carry it like the others.
sql "INSERT INTO inboxd_outbox (entity, message_id, subject, body) VALUES
     ('out', 'app-1', 'AppEvent', '{}'), ('out', 'app-2', 'AppEvent', '{}'),
     ('out', 'app-3', 'AppEvent', '{}')" >/dev/null
wait_until 30 all_published 53 || die "application rows not published"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" 50
check "receiver errors" "$(spans_q pb '[.[] | select(.error)] | length')" 0
check "protocol" "$(spans_q pb '[.[].protocol] | unique | join(",")')" "http/protobuf"
jq -s '.' "$W/sent.jsonl" >"$W/sent.json"
consumer='[.[] | select(.kind == 5)]'
check "consumer spans" "$(spans_q pb "$consumer | length")" 50
check "consumer spans in the sender's trace, parented on the sender's span" \
  "$(jq -rs --slurpfile s "$W/sent.json" "$consumer"' | map(. as $c | $s[0][] |
      select(.message_id == $c.attributes["messaging.message.id"] and .trace_id == $c.traceId
             and .span_id == $c.parentSpanId)) | length' "$W/pb.jsonl")" 50
check "messaging attributes" "$(spans_q pb "$consumer"' | map(select(.attributes["messaging.system"] == "servicebus"
  and .attributes["messaging.destination.name"] == "items" and .attributes["inboxd.outcome"] == "applied"
  and .attributes["azure.servicebus.disposition_status"] == "complete"
  and .attributes["azure.servicebus.message.delivery_count"] == 1)) | length')" 50
check "settlement child spans" "$(spans_q pb '(map(select(.kind == 5) | .spanId)) as $ids |
  map(select(.name == "complete" and (.parentSpanId as $p | $ids | index($p)))) | length')" 50
check "service.name" "$(spans_q pb '[.[].resource["service.name"]] | unique | join(",")')" inboxd
phases='(map(select(.kind == 3 and (.name == "inbox claim" or .name == "route statement"
                                  or .name == "inbox commit")))) as $ph |
  def phases($s): [$ph[] | select(.parentSpanId == $s.spanId and .traceId == $s.traceId
                                  and .attributes["db.system.name"] == "postgresql") | .name] | unique;
  def all3: . == ["inbox claim", "inbox commit", "route statement"];
  def links($a; $b): any($a.links[]; .traceId == $b.traceId and .spanId == $b.spanId);
  (map(select(.name == "inbox batch"))) as $b | (map(select(.kind == 5))) as $c'
check "claim, statement and commit spans of every message (its own, or its batch's)" \
  "$(spans_q pb "$phases"' | [$c[] | . as $m | select((phases($m) | all3) or
      any($b[]; links(.; $m) and links($m; .) and (phases(.) | all3)))] | length')" 50
check "batch spans link to each message span they carry, and only to those" \
  "$(spans_q pb "$phases"' | [$b[] | . as $x | select((.links | length) == .attributes["inboxd.batch.messages"]
      and all(.links[]; . as $l | any($c[]; .traceId == $l.traceId and .spanId == $l.spanId)))]
      | length == ($b | length)')" true
batches=$(spans_q pb '[.[] | select(.name == "inbox batch")] | length')
# (unset, the scenario's many workers seldom form batches: nothing to expect)
if [ "${INBOXD_TEST_BATCH_MAX:-0}" -gt 1 ]; then
  [ "$batches" -ge 1 ] || die "no batch span with db.batch_max $INBOXD_TEST_BATCH_MAX"
elif [ "${INBOXD_TEST_BATCH_MAX:-0}" -eq 1 ]; then
  check "no batch span with db.batch_max 1" "$batches" 0
fi
e2e_log "ok   batch spans: $batches"
jq -R 'fromjson? | select(.event == "msg_done")' "$W/one.log" | jq -s '.' >"$W/done.json"
check "msg_done's span_id is its message's exported consumer span" \
  "$(jq -rs --slurpfile dn "$W/done.json" 'map(select(.kind == 5)) as $c | [$dn[0][] | . as $d |
      select(any($c[]; .spanId == $d.span_id and .traceId == $d.trace_id
                 and .attributes["messaging.message.id"] == $d.message_id))] | length' "$W/pb.jsonl")" 50
peek_all out >"$W/out.jsonl" || die "cannot peek the emitted messages"
check "emitted and application messages" "$(wc -l <"$W/out.jsonl")" 53
sql "SELECT json_agg(json_build_object('message_id', message_id, 'trace_context', trace_context,
       'traceparent', properties::json->>'traceparent')) FROM inboxd_outbox" >"$W/rows.json"
check "outbox rows: trace_context is the writing consumer span's traceparent, the property the route's" \
  "$(jq -rs --slurpfile r "$W/rows.json" 'map(select(.kind == 5)) as $c | [$r[0][] | . as $o |
      select(.traceparent == "'"$DECOY_TP"'" and any($c[]; $o.trace_context
             == "00-" + .traceId + "-" + .spanId + "-01"
             and "out:" + .attributes["messaging.message.id"] == $o.message_id))] | length' "$W/pb.jsonl")" 50
check "publish spans (PRODUCER), children of the consumer span that wrote the row" \
  "$(spans_q pb '(map(select(.kind == 5))) as $c | map(select(.kind == 4 and .name == "send"
      and .attributes["messaging.destination.name"] == "out"
      and .attributes["messaging.operation.type"] == "send") | . as $p |
      select(any($c[]; .spanId == $p.parentSpanId and .traceId == $p.traceId
                 and ("out:" + .attributes["messaging.message.id"])
                     == $p.attributes["messaging.message.id"]))) | length')" 50
check "published messages, read back, carry their publish span" \
  "$(jq -rs --slurpfile sp <(jq -s 'map(select(.kind == 4))' "$W/pb.jsonl") 'map(. as $m |
      ($m.properties.traceparent | split("-")) as $tp | $sp[0][] |
      select(.attributes["messaging.message.id"] == $m.message_id
             and .traceId == $tp[1] and .spanId == $tp[2]
             and $m.properties["Diagnostic-Id"] == $m.properties.traceparent)) | length' "$W/out.jsonl")" 53
check "application rows: root publish spans" \
  "$(spans_q pb 'map(select(.kind == 4 and (.attributes["messaging.message.id"] | startswith("app-"))
      and (.parentSpanId // "") == "")) | length')" 3

# --- 2. HTTP route, http/json: the destination's parent is inboxd's CLIENT span
start_receiver js
start_fake pay idempotent
gen_orders 5 h >"$W/orders.jsonl"
send_file charges "$W/orders.jsonl"
write_config "$W/two.json" charges "$(charge_route "$FAKE_URL" true)" \
  "$(jq -n --arg u "$RECV_URL" '{otel: {endpoint: $u, protocol: "http/json", service_name: "orders-worker"}}')"
start_inboxd "$W/two.json" two; pid=$LAST_PID
wait_until 60 queue_empty charges || die "charges not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
ledger "$FAKE_URL" "$W/ledger.json"
check "charges applied" "$(sql 'SELECT count(*) FROM charges')" 5
check "protocol" "$(spans_q js '[.[].protocol] | unique | join(",")')" "http/json"
check "service.name" "$(spans_q js '[.[].resource["service.name"]] | unique | join(",")')" orders-worker
# (span flags are checked in JSON: the compiled definitions predate the field)
check "consumer spans: sampled, parent marked remote" "$(spans_q js 'map(select(.kind == 5 and .flags == 769)) | length')" 5
check "CLIENT spans, children of consumer spans" "$(spans_q js '(map(select(.kind == 5) | .spanId)) as $ids |
  map(select(.kind == 3 and .attributes["http.request.method"] == "POST"
             and .attributes["http.response.status_code"] == 201
             and (.parentSpanId as $p | $ids | index($p)))) | length')" 5
check "the destination's traceparent names the CLIENT span" \
  "$(jq -rs --slurpfile l "$W/ledger.json" 'map(select(.kind == 3)) as $c |
      [$l[0].requests[] | (.traceparent | split("-")) as $tp | $c[] |
       select(.traceId == $tp[1] and .spanId == $tp[2])] | length' "$W/js.jsonl")" 5

# --- 3. the collector goes away mid-run: messages flow, drops are counted
start_receiver gone
node "$OTEL_DIR/send.mjs" "$SB_CS" late 200 late >/dev/null || die "the SDK could not send"
write_config "$W/three.json" late "$(items_route)" \
  "$(jq -n --arg u "$RECV_URL/v1/traces" '{otel: {traces_endpoint: $u}, http: {listen: "127.0.0.1:0"},
     servicebus: {max_concurrent_calls: 1}, db: {batch_max: 1}}')"
start_inboxd "$W/three.json" three; pid=$LAST_PID
port=$(http_port three)
wait_until 30 items_at_least 60 || die "too slow before the collector stopped"
kill -9 "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true
wait_until 60 queue_empty late || die "messages stopped flowing without the collector"
# The exporter finds out at its next send (at most a second away), /metrics at the next tick.
spans_dropped() { [ "$(metric "$port" inboxd_otel_spans_dropped_total)" -gt 0 ]; }
wait_until 10 spans_dropped || die "inboxd_otel_spans_dropped_total stayed 0 after the collector stopped"
dropped=$(metric "$port" inboxd_otel_spans_dropped_total)
exported=$(metric "$port" inboxd_otel_spans_exported_total)
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" 250
[ "${dropped:-0}" -gt 0 ] || die "inboxd_otel_spans_dropped_total is '${dropped:-}' after the collector stopped"
e2e_log "ok   spans dropped after the collector stopped ($dropped; exported before: $exported)"

# --- 4. a collector that never answers: shutdown is not held by traces
node -e 'const fs = require("fs"); const s = require("net").createServer(() =>
  fs.appendFileSync(process.argv[1], "conn\n")).listen(0, "127.0.0.1",
  () => console.log(s.address().port))' "$W/hung.conns" >"$W/hung.port" 2>"$W/hung.log" &
E2E_PIDS+=("$!")
wait_until 10 test -s "$W/hung.port" || die "the hung collector did not start: $(cat "$W/hung.log")"
node "$OTEL_DIR/send.mjs" "$SB_CS" hung 20 hung >/dev/null || die "the SDK could not send"
write_config "$W/four.json" hung "$(items_route)" \
  "$(jq -n --arg u "http://127.0.0.1:$(cat "$W/hung.port")/v1/traces" '{otel: {traces_endpoint: $u}}')"
start_inboxd "$W/four.json" four; pid=$LAST_PID
wait_until 60 queue_empty hung || die "messages not applied with a hung collector"
# An export request under way, unanswered: the collector took its connection.
wait_until 20 test -s "$W/hung.conns" || die "inboxd never connected to the hung collector"
t0=$(date +%s%N)
stop_inboxd $pid 30; check "inboxd exit status" "$STOP_RC" 0
took=$(( ($(date +%s%N) - t0) / 1000000 ))
check "business rows" "$(sql 'SELECT count(*) FROM items')" 270
[ "$took" -le $(( $(secs 2) * 1000 + 2000 )) ] || die "SIGTERM with a hung collector: exited after $took ms"
e2e_log "ok   SIGTERM with a hung collector: exited after $took ms"

# --- 5. the default sampler: a sender's decision followed, 1 in 100 roots
start_receiver dflt
sql "TRUNCATE items" >/dev/null
node "$OTEL_DIR/send.mjs" "$SB_CS" items 100 ctx >"$W/ctx.jsonl" || die "the SDK could not send"
gen_items 300 bare >"$W/bare.jsonl"
send_file items "$W/bare.jsonl"
write_config "$W/five.json" items "$(items_route)" \
  "$(jq -n --arg u "$RECV_URL/v1/traces" '{otel: {traces_endpoint: $u}}')"
start_inboxd "$W/five.json" five; pid=$LAST_PID
wait_until 60 queue_empty items || die "items not drained at the default sampler"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "business rows at the default sampler" "$(sql 'SELECT count(*) FROM items')" 400
jq -s '.' "$W/ctx.jsonl" >"$W/ctx.json"
check "consumer spans of the messages with a sampled parent, in their senders' traces" \
  "$(jq -rs --slurpfile s "$W/ctx.json" 'map(select(.kind == 5)) | map(. as $c | $s[0][] |
      select(.message_id == $c.attributes["messaging.message.id"] and .trace_id == $c.traceId
             and .span_id == $c.parentSpanId)) | length' "$W/dflt.jsonl")" 100
roots=$(spans_q dflt 'map(select(.kind == 5 and (.parentSpanId // "") == "")) | length')
# 300 draws at 0.01: 3 expected; 12 or more happens about once in 10^4 runs.
[ "$roots" -le 11 ] || die "default sampler: $roots root consumer spans of 300 messages without trace context (expected about 3)"
check "every root consumer span is a message without trace context" \
  "$(spans_q dflt 'map(select(.kind == 5 and (.parentSpanId // "") == ""
      and ((.attributes["messaging.message.id"] | startswith("bare-")) | not))) | length')" 0
e2e_log "ok   default sampler: 100 parented consumer spans, $roots roots of 300 messages without context"
