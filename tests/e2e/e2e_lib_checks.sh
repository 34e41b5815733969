#!/usr/bin/env bash
# The test library's own test: a check that reads a broker counter or a
# metric that is not there must fail its scenario, not read 0. Each case runs
# a scenario fragment in a child shell (its own work dir and sbemu, no
# database, no inboxd) and asserts that the child failed and named what was
# missing; a correctly spelt read is the control and must pass. About 2 s.
. "$(dirname "$0")/lib.sh"
e2e_init sqlite
LIB="$(dirname "$0")/lib.sh"

# fragment NAME BODY: runs BODY after a standard setup; prints the child's
# status and stderr into $W/NAME.status and $W/NAME.err.
fragment() {
  bash -c ". '$LIB'; e2e_init sqlite
    start_emu '{\"queues\":[{\"name\":\"orders\",\"lock_duration_s\":30}]}'
    $2
    echo REACHED" >"$W/$1.out" 2>"$W/$1.err"
  echo $? >"$W/$1.status"
}

# must_fail NAME BODY WORDS: the fragment fails before its end, saying WORDS.
must_fail() {
  fragment "$1" "$2"
  check "$1: the scenario failed" "$([ "$(cat "$W/$1.status")" != 0 ] && echo yes)" yes
  check "$1: nothing after the bad read ran" "$(grep -c REACHED "$W/$1.out")" 0
  check "$1: the failure names what was missing" "$(grep -c -F -- "$3" "$W/$1.err")" 1
}

fragment control 'check "dead-lettered" "$(broker_stat orders dead_lettered)" 0
                  check "dlq" "$(broker_stat "orders/\$DeadLetterQueue" active)" 0
                  check "series" "$(metric_in "$(printf "a 1\nb{x=\"y\"} 0\n")" "b{x=\"y\"}")" 0
                  check "open connections" "$(broker_conn open)" 0
                  s=$(stats_seq); stats_fresh "$s"
                  check "a fresh file is two rewrites on" "$([ "$(stats_seq)" -ge $((s + 2)) ] && echo yes)" yes'
check "control: correct names read their counters" "$(cat "$W/control.status"):$(grep -c REACHED "$W/control.out")" 0:1

must_fail entity 'check "dead-lettered" "$(broker_stat ordres dead_lettered)" 0' "no entity 'ordres'"
must_fail field 'check "dead-lettered" "$(broker_stat orders dead_letterd)" 0' "has no field 'dead_letterd'"
must_fail in_wait 'wait_until 5 queue_empty ordres || die "not drained"' "no entity 'ordres'"
must_fail no_file 'kill -9 "$EMU_PID"; wait "$EMU_PID" 2>/dev/null; rm -f "$STATS"
                   check "dead-lettered" "$(broker_stat orders dead_lettered)" 0' "no stats file"
must_fail series 'check "x" "$(metric_in "$(printf "a 1\n")" inboxd_nope_total)" 0' "no series inboxd_nope_total"
must_fail conn 'check "open" "$(broker_conn opne)" 0' "no connection counter 'opne'"
must_fail no_seq 'kill -9 "$EMU_PID"; wait "$EMU_PID" 2>/dev/null; echo "{\"entities\":{}}" >"$STATS"
                  stats_fresh' "no seq in"
must_fail no_server 'check "x" "$(metric 1 inboxd_messages_total)" 0' "GET /metrics on port 1"
