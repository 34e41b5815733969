#!/usr/bin/env bash
# claim - what a claim-checked message costs: inboxd's peak RSS (VmHWM) with
# one blob of each size in flight, and the time per MiB from the events'
# send to their rows, blobs in Azurite (tests/blob, loopback) fetched with
# Shared Key.
#
#   INBOXD_TEST_PG_PORT=$(tests/lib/pg.sh start /tmp/pg) tests/bench/claim/run.sh
#   SIZES="5 50" COUNT=4 tests/bench/claim/run.sh
#
# Per size S (MiB; "0" is a 100-byte blob, the baseline): a fresh inboxd
# (servicebus.max_held_mb 64, claim_check.max_bytes 64 MiB) takes one event,
# then COUNT more at once; prints S, the peak RSS after the first and after
# all, and the seconds per MiB over the COUNT (send to the last row, so the
# fetch, the JSON check of the blob and the commit; "-" for the baseline),
# and, for comparison, curl's own seconds per MiB fetching one of the blobs
# (its SAS URL) from the same Azurite. Not a test: nothing here asserts a
# figure.
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$root/build}
export INBOXD=$build/inboxd SBEMU=$build/sbemu INBOXCTL=$build/inboxctl
SIZES=${SIZES:-0 5 50}
COUNT=${COUNT:-4}
. "$root/tests/e2e/lib.sh"
e2e_init postgresql
. "$root/tests/blob/azurite.sh"
create_items_table
start_azurite
queues=$(for s in $SIZES; do printf '{"name":"q%s","lock_duration_s":60,"max_delivery_count":10},' "$s"; done)
start_emu "{\"queues\":[${queues%,}]}"
export BENCH_KEY=$AZ_KEY
hwm() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
rows() { [ "$(sql "SELECT count(*) FROM items WHERE id LIKE '$1-%'")" -ge "$2" ]; }
printf '%-8s %-10s %-12s %-10s %s\n' "blob_MiB" "rss_1_MiB" "rss_all_MiB" "s_per_MiB" "curl_s_per_MiB"
for s in $SIZES; do
  pad=$(( s == 0 ? 100 : s * 1048576 ))
  specs=$(jq -n --arg s "$s" --argjson p "$pad" --argjson c "$COUNT" \
    '[range(0; $c + 1) | {container: "bench", name: "b\($s)-\(.).json", doc: {id: "s\($s)-\(.)", n: 1}, pad: $p}]')
  blob_put "$specs" >"$W/blobs$s.jsonl"
  routes=$(jq -n --arg sql "$(items_insert_sql)" --arg host "127.0.0.1:$AZ_PORT" '
    [{match: "*", sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
      claim_check: {url: "{$.data.url}", allowed_hosts: [$host], auth: "shared_key",
                    account: "devstoreaccount1", account_key: {env: "BENCH_KEY"}, max_bytes: 67108864}}]')
  write_config "$W/inboxd$s.json" "q$s" "$routes" '{"servicebus": {"max_held_mb": 64}}'
  jq -c '{message_id: ("ev-" + .name), subject: "BlobCreated", body: {eventType: "Microsoft.Storage.BlobCreated", data: {url: .url}}}' \
    "$W/blobs$s.jsonl" >"$W/events$s.jsonl"
  start_inboxd "$W/inboxd$s.json" "inboxd$s"
  pid=$LAST_PID
  head -n 1 "$W/events$s.jsonl" >"$W/first$s.jsonl"
  tail -n +2 "$W/events$s.jsonl" >"$W/rest$s.jsonl"
  send_file "q$s" "$W/first$s.jsonl"
  wait_until 120 rows "s$s" 1 || die "size $s: the first blob was not applied"
  rss1=$(hwm "$pid")
  t0=$(date +%s.%N)
  send_file "q$s" "$W/rest$s.jsonl"
  wait_until 300 rows "s$s" $((COUNT + 1)) || die "size $s: the blobs were not applied"
  t1=$(date +%s.%N)
  rssn=$(hwm "$pid")
  mib=$(awk -v s="$s" -v c="$COUNT" 'BEGIN { print (s == 0 ? 100 / 1048576 : s) * c }')
  per=$(awk -v a="$t0" -v b="$t1" -v m="$mib" -v s="$s" 'BEGIN { if (s == 0) print "-"; else printf "%.4f", (b - a) / m }')
  ct=$(curl -s -o /dev/null -w '%{time_total}' "$(head -n 1 "$W/blobs$s.jsonl" | jq -r .sas_url)")
  cper=$(awk -v t="$ct" -v s="$s" 'BEGIN { if (s == 0) print "-"; else printf "%.4f", t / s }')
  printf '%-8s %-10s %-12s %-10s %s\n' "$s" "$rss1" "$rssn" "$per" "$cper"
  stop_inboxd "$pid"
done
