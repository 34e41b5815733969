#!/usr/bin/env bash
# The inboxctl command line: a --config file that cannot be read (missing,
# not valid JSON) is named as inboxd names it, exit 2, for every command
# that reads one; a readable file without the key a command needs says so.
# No broker or database: each case ends before connecting.
set -u
inboxctl=${1:?usage: test_inboxctl.sh INBOXCTL}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi
}

printf '{"consumer":\n' >"$tmp/cut.json"
printf '{"consumer": "c1"}\n' >"$tmp/nodb.json"
for cmd in "outbox list" "inbox list --status uncertain" "peek --entity q"; do
  # shellcheck disable=SC2086 # the command's words
  env -u INBOXD_CONFIG -u INBOXD_DB_CONNECTION_STRING -u INBOXD_SERVICEBUS_CONNECTION_STRING \
    "$inboxctl" $cmd --config "$tmp/missing.json" >/dev/null 2>"$tmp/err"
  rc=$?
  check "$cmd, missing file: exit 2" test "$rc" = 2
  check "$cmd, missing file: named as missing" \
    grep -q "^config: $tmp/missing.json: cannot load: unable to open .*No such file or directory" "$tmp/err"
  # shellcheck disable=SC2086
  env -u INBOXD_CONFIG -u INBOXD_DB_CONNECTION_STRING -u INBOXD_SERVICEBUS_CONNECTION_STRING \
    "$inboxctl" $cmd --config "$tmp/cut.json" >/dev/null 2>"$tmp/err"
  rc=$?
  check "$cmd, not JSON: exit 2" test "$rc" = 2
  check "$cmd, not JSON: named as not JSON, where" \
    grep -q "^config: $tmp/cut.json: cannot load: unexpected end of input at byte 13 (line 2" "$tmp/err"
  check "$cmd: never the missing-key message for an unread file" \
    bash -c "! grep -q -e 'names no' -e 'no db.connection_string' -e 'no connection string' '$tmp/err'"
done

env -u INBOXD_CONFIG -u INBOXD_DB_CONNECTION_STRING "$inboxctl" outbox list --config "$tmp/nodb.json" \
  >/dev/null 2>"$tmp/err"
check "a readable file without db.connection_string: exit 2" test $? = 2
check "and says so" grep -q 'the config names no db.connection_string' "$tmp/err"
exit $fail
