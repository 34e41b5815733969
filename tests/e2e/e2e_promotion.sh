#!/usr/bin/env bash
# A Geo-Replication promotion: the namespace read-only for a window, then
# its name on another address. inboxd reaches sbemu by a name
# (sbns.test), resolved through a private /etc/hosts: inboxd runs in its own
# mount namespace (unshare -m) with a file of this test bind-mounted over
# /etc/hosts, so nothing outside the test changes.
#   1. 100 messages applied and 50 outbox rows published on the old primary
#      (127.0.0.1), the last 20 of them after time T.
#   2. Read-only (sbemu SIGUSR1): links detached and refused
#      com.microsoft:server-busy; 30 more outbox rows wait, pending.
#   3. Forced promotion: the old primary is gone; a new sbemu on 127.0.0.2,
#      same port, and the name re-pointed. It lost the 20 rows published
#      after T and delivers again the last 40 messages completed before the
#      promotion (resent with the same message ids), with 20 new ones.
# inboxd reconnects to the new address and applies only the new 20; the
# relay publishes the 30 waiting rows; `inboxctl outbox republish --since T`
# sends the lost 20 again with their message ids (and the window's 30, whose
# copies are duplicates for the receivers).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
unshare -m true 2>/dev/null || { echo "skip: unshare -m needs root (CAP_SYS_ADMIN) here"; exit 77; }
e2e_init "${1:-postgresql}"
create_items_table
TOPO='{"queues":[{"name":"tok","lock_duration_s":30,"max_delivery_count":10},{"name":"fwd"}]}'
start_emu "$TOPO"
NAME_CS="Endpoint=sb://sbns.test:$EMU_PORT/;SharedAccessKeyName=e2e;SharedAccessKey=$EMU_KEY;UseDevelopmentEmulator=true"
point_name() { { cat /etc/hosts; echo "$1 sbns.test"; } >"$W/hosts.new"; cat "$W/hosts.new" >"$W/hosts"; }
point_name 127.0.0.1
gen_items 100 p >"$W/msgs.jsonl"
send_file tok "$W/msgs.jsonl"
SB_CS_IP=$SB_CS
SB_CS=$NAME_CS write_config "$W/inboxd.json" tok "$(items_route)" \
  '{"outbox":{"relay":"true","poll_ms":200}}'
# The file is rewritten in place (same inode), so the bind mount sees each version.
unshare -m bash -c 'mount --bind "$1" /etc/hosts && exec "$2" --config "$3"' _ \
  "$W/hosts" "$INBOXD" "$W/inboxd.json" >>"$W/inboxd.log" 2>&1 &
pid=$!
E2E_PIDS+=("$pid")
wait_until 30 queue_empty tok || die "tok not drained on the old primary"
check "applied on the old primary" "$(sql 'SELECT count(*) FROM items')" 100
wait_until 30 outbox_ready || die "inboxd did not create the outbox table"
app_rows 30 3 fwd o
wait_until 30 all_published 30 || die "the first 30 rows were not published"
sleep 1.1 # T falls between the two batches' published_at, whole seconds apart
T=$(date -u +%Y-%m-%dT%H:%M:%SZ)
sleep 1.1
app_rows 20 2 fwd r
wait_until 30 all_published 50 || die "the next 20 rows were not published"

# 2. The promotion window: read-only.
kill -USR1 "$EMU_PID"
app_rows 30 3 fwd w
ro_links() { [ "$(broker_conn links_read_only)" -ge "$1" ]; }
wait_until 20 ro_links 4 || die "inboxd's links were not refused during the window"
stats_fresh
check "rows sent during the window" "$(broker_stat fwd sent)" 50
check "rows waiting during the window" "$(outbox_count pending)" 30

# 3. Forced promotion: the new primary on 127.0.0.2, the name re-pointed.
kill -TERM "$EMU_PID"; wait "$EMU_PID" 2>/dev/null
rm -f "$STATS"
echo "$TOPO" >"$W/topology.json"
"$SBEMU" --listen "127.0.0.2:$EMU_PORT" --topology "$W/topology.json" --key-name e2e --key "$EMU_KEY" \
  --stats-file "$STATS" --stats-every-ms 200 >"$W/sbemu2.log" 2>&1 &
EMU_PID=$!
E2E_PIDS+=("$EMU_PID")
wait_until 10 test -s "$STATS" || die "the new primary did not start: $(cat "$W/sbemu2.log")"
t0=$(date +%s%N)
point_name 127.0.0.2
SB_CS=${SB_CS_IP/127.0.0.1/127.0.0.2}
E2E_SENT=()
{ tail -n 40 "$W/msgs.jsonl"; gen_items 20 n; } >"$W/again.jsonl"
send_file tok "$W/again.jsonl"
wait_until 60 queue_empty tok || die "tok not drained on the new primary"
wait_until 30 all_published 80 || die "the rows of the window were not published on the new primary"
e2e_log "recovered $(( ($(date +%s%N) - t0) / 1000000 )) ms after the new primary started"
check "window rows sent to the new primary" "$(broker_stat fwd sent)" 30
"$INBOXCTL" outbox republish --since "$T" --config "$W/inboxd.json" >"$W/republish.out" 2>>"$W/inboxctl.log" \
  || die "outbox republish failed: $(tail -n 3 "$W/inboxctl.log")"
# Published since T: the 20 the old primary lost and the window's 30 (their
# copies are duplicates the receivers' inboxes drop).
check "rows republished" "$(awk '{print $1}' "$W/republish.out")" 50
wait_until 30 sent_n fwd 80 || die "the republished rows did not reach the new primary"
wait_until 30 all_published 80 || die "the republished rows were not published again"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
stats_fresh
check "business rows" "$(sql 'SELECT count(*) FROM items')" 120
check "rows of the 100 messages completed before, 40 of them delivered again by the new primary (none applied twice)" "$(sql "SELECT count(*) FROM items WHERE id LIKE 'p-%'")" 100
check "delivered by the new primary" "$(broker_stat tok delivered)" 60
check "completed by the new primary" "$(broker_stat tok completed)" 60
check "abandoned" "$(broker_stat tok abandoned)" 0
check "dead-lettered" "$(dlq_reasons tok | grep -c .)" 0
check "failed outbox rows" "$(outbox_count failed)" 0
peek_all fwd | jq -r .message_id | sort >"$W/fwd.ids"
{ for i in $(seq 1 20); do echo "r-$i"; done; for i in $(seq 1 30); do echo "w-$i"; echo "w-$i"; done; } | sort >"$W/want.ids"
check "the new primary's fwd: each lost row once, each of the window's twice" \
  "$(diff "$W/want.ids" "$W/fwd.ids" >/dev/null && echo same)" same
