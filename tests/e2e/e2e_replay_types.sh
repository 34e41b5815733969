#!/usr/bin/env bash
# Replay keeps every application property's AMQP type: the official SDK
# (tests/conformance/tools/typed-props.mjs) sends 3 messages whose
# properties hold every type the .NET, Java and JavaScript SDKs send
# (integers of each width, ulong past 2^63, float, decimal128, char,
# timestamp, uuid, binary, symbol, null, list, map, array, the described
# TimeSpan / DateTimeOffset / Uri of .NET), inboxctl sends one without
# properties; the SDK dead-letters all 4; `inboxctl dlq replay` re-sends
# them; the SDK reads them back: each property with the type and value it
# was sent with, plus inboxd-replay-count (long 1) and inboxd-replayed-at,
# without DeadLetterReason; the DLQ is empty. No inboxd and no database are
# involved: the replay alone is under test (a few seconds).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-sqlite}"
TOOL="$E2E_SRC/tests/conformance/tools/typed-props.mjs"
command -v node >/dev/null || { echo "skip: node is not installed"; exit 77; }
[ -d "$E2E_SRC/tests/conformance/node_modules/@azure/service-bus" ] \
  || die "tests/conformance/node_modules is missing: run 'npm ci' in tests/conformance (scripts/test does)"
start_emu '{"queues":[{"name":"typed","lock_duration_s":30,"max_delivery_count":10}]}'
sdk() { node "$TOOL" "$1" "$SB_CS" typed "$2" 2>>"$W/sdk.log"; }

sdk send 3 >"$W/sent.jsonl" || die "the SDK could not send: $(tail -n 5 "$W/sdk.log")"
echo '{"message_id":"plain-1","body":{"i":0}}' >"$W/plain.jsonl"
send_file typed "$W/plain.jsonl"
sdk deadletter 4 || die "the SDK could not dead-letter: $(tail -n 5 "$W/sdk.log")"
dlq_has() { [ "$(broker_stat 'typed/$DeadLetterQueue' active)" = "$1" ]; }
wait_until 10 dlq_has 4 || die "expected 4 dead letters, have $(broker_stat 'typed/$DeadLetterQueue' active)"

"$INBOXCTL" dlq replay --connection-string "$SB_CS" --entity typed >"$W/replay.out" 2>>"$W/replay.log"
check "replay exit status" "$?" 0
check "summary" "$(jq -c 'select(.event=="summary") | [.chosen, .replayed, .remaining]' "$W/replay.out")" '[4,4,0]'
sdk receive 4 >"$W/back.jsonl" || die "the SDK could not read the replayed messages: $(tail -n 5 "$W/sdk.log")"
wait_until 10 dlq_has 0 || die "DLQ not empty: $(broker_stat 'typed/$DeadLetterQueue' active)"

# Each replayed message: the sent properties exactly, plus the replay's two.
back_without_replay='.props | del(."inboxd-replay-count", ."inboxd-replayed-at")'
for i in 1 2 3; do
  sent=$(jq -cS --arg id "typed-$i" 'select(.message_id == $id) | .props' "$W/sent.jsonl")
  back=$(jq -cS --arg id "typed-$i" "select(.message_id == \$id) | $back_without_replay" "$W/back.jsonl")
  [ -n "$sent" ] || die "typed-$i was not sent"
  check "typed-$i: every property with its type and value" "$back" "$sent"
done
check "plain-1: only the replay's properties" \
  "$(jq -c 'select(.message_id == "plain-1") | .props | keys' "$W/back.jsonl")" '["inboxd-replay-count","inboxd-replayed-at"]'
check "replay count typed long" \
  "$(jq -r '.props."inboxd-replay-count" | "\(.t) \(.v)"' "$W/back.jsonl" | sort -u)" "long 1"
# Spot checks on the types themselves, so the comparison above is not of
# two empty sets or of types the sender never wrote.
check "types read back" "$(jq -r 'select(.message_id == "typed-2") | .props |
  [."p-ubyte".t, ."p-char".t, ."p-uuid".t, ."p-ulong".v, ."p-timestamp".t, ."p-binary".t, ."p-list".t,
   ."p-list".v[3].v[0].t, ."p-map".t, ."p-array".t, ."p-decimal128".t, ."p-timespan".d.v, ."p-timespan".t,
   ."p-datetimeoffset".d.v, ."p-uri".d.v, ."p-uri".v, ."p-described-ulong".d.t] | join(" ")' "$W/back.jsonl")" \
  "ubyte char uuid fedcba9876543210 timestamp binary list ubyte map array decimal128 com.microsoft:timespan long com.microsoft:datetime-offset com.microsoft:uri https://example.com/orders/2?q=1 ulong"
