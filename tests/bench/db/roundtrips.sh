#!/usr/bin/env bash
# roundtrips - what inboxd sends PostgreSQL per message, counted rather than
# assumed: the client's send calls (each one a round trip, since every send
# waits for the server's answer) and the statements the server logged
# (log_statement = all), for
#   inbox  one message per transaction (db_inbox_apply)
#   batch  16 messages per transaction (db_inbox_apply_batch)
# with psqlODBC's per-statement savepoints (Protocol=7.4-2, the driver's
# default) and without them (Protocol=7.4-1, what inboxd asks for).
# Each figure is the difference between runs of 400 and 200 messages, so
# connecting and setting up cancel out.
#
#   tests/bench/db/roundtrips.sh            (needs build/, strace, PostgreSQL)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$root/build}
bench=$build/tests/db/bench_db_inbox
[ -x "$bench" ] || { echo "roundtrips: $bench missing; build first"; exit 2; }
command -v strace >/dev/null || { echo "roundtrips: strace missing (apt-get install strace)"; exit 2; }

W=$(mktemp -d /tmp/inboxd-rt.XXXXXX); chmod 755 "$W"
trap '"$root/tests/lib/pg.sh" stop "$W/pg" >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
export INBOXD_TEST_PG_PORT=$("$root/tests/lib/pg.sh" start "$W/pg")
psql() { command psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -X -q "$@"; }
psql -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()" >/dev/null

# sends and logged statements of one run: PHASE N PROTOCOL
measure() {
  local log=$W/pg/log before after
  before=$(grep -c 'LOG:  \(statement\|execute\)' "$log" || true)
  BENCH_PHASES=$1 BENCH_CONNSTR_EXTRA=";Protocol=$3" \
    strace -f -qq -e trace=sendto,send,write -o "$W/st" "$bench" postgresql "$2" 1 >/dev/null
  after=$(grep -c 'LOG:  \(statement\|execute\)' "$log" || true)
  # the client's sends to the server socket (libpq sends with sendto)
  echo "$(grep -c '^[0-9]* *sendto(' "$W/st") $((after - before))"
}

printf '%-8s %-28s %14s %18s\n' phase protocol "sends/message" "statements/message"
for phase in inbox batch; do
  for proto in "7.4-2" "7.4-1"; do
    read -r s1 l1 < <(measure "$phase" 200 "$proto")
    read -r s2 l2 < <(measure "$phase" 400 "$proto")
    label="$proto"; [ "$proto" = "7.4-2" ] && label="7.4-2 (driver default)"
    [ "$proto" = "7.4-1" ] && label="7.4-1 (inboxd)"
    awk -v p="$phase" -v l="$label" -v s=$((s2 - s1)) -v q=$((l2 - l1)) \
      'BEGIN { printf "%-8s %-28s %14.2f %18.2f\n", p, l, s / 200, q / 200 }'
  done
done
echo "one batch of 16 as the server logged it (Protocol=7.4-1):"
grep -o 'LOG:  \(statement\|execute [^:]*\): .*' "$W/pg/log" | grep -v 'DateStyle\|pg_type\|DATABASE' | tail -n 4 | cut -c1-110
