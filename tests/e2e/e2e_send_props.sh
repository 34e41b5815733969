#!/usr/bin/env bash
# inboxctl send --file takes application properties by the one rule the
# outbox relay also follows (sb_out_props_from_json): strings, numbers,
# booleans and null keep their type; an array or an object is refused,
# naming the line and the key, exit 2, and nothing of that file is sent.
# The queue's own counters say so: after the refusals a good file is sent
# and counted, and it is the only message the queue ever saw. No inboxd and
# no database (a few seconds).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-sqlite}"
start_emu '{"queues":[{"name":"props","lock_duration_s":30}]}'

send_refused() { # send_refused NAME FILE KEY KIND
  "$INBOXCTL" send --connection-string "$SB_CS" --entity props --file "$2" 2>"$W/$1.err"
  check "$1: exit status" "$?" 2
  check "$1: line and key named" \
    "$(grep -c -F "$2:2: properties.$3 is a JSON $4" "$W/$1.err")" 1
}
{ echo '{"message_id":"a-1","body":"x","properties":{"k":"v"}}'
  echo '{"message_id":"a-2","body":"x","properties":{"n":1,"tags":["red","blue"]}}'
} >"$W/array.jsonl"
send_refused array "$W/array.jsonl" tags array
{ echo '{"message_id":"o-1","body":"x"}'
  echo '{"message_id":"o-2","body":"x","properties":{"who":{"id":7}}}'
} >"$W/object.jsonl"
send_refused object "$W/object.jsonl" who object

# The control: every type the rule keeps, counted by the broker once sent.
echo '{"message_id":"good-1","body":"x","properties":{"s":"v","i":42,"d":1.5,"b":true,"z":null}}' \
  >"$W/good.jsonl"
send_file props "$W/good.jsonl"
check "the broker saw only the control" "$(broker_stat props sent)" 1
check "one message waits" "$(broker_stat props active)" 1
"$INBOXCTL" peek --connection-string "$SB_CS" --entity props >"$W/peek.out" 2>>"$W/inboxctl.log" \
  || die "inboxctl peek failed: $(tail -n 3 "$W/inboxctl.log")"
check "it is the control" "$(jq -r '.message_id' "$W/peek.out")" good-1
check "its properties, typed" "$(jq -cS '.properties' "$W/peek.out")" \
  '{"b":true,"d":1.5,"i":42,"s":"v","z":null}'
