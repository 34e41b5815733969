#!/usr/bin/env bash
# relay - what the outbox's claim check costs the relay: one application
# outbox row per size, its body uploaded to Azurite (tests/blob, loopback,
# Shared Key) by inboxd --relay-only and published to sbemu with its
# reference; the relay process's peak RSS (VmHWM) and the seconds per MiB
# from the row's commit to its `published` mark (seen every 50 ms).
#
#   INBOXD_TEST_PG_PORT=$(tests/lib/pg.sh start /tmp/pg) tests/bench/claim/relay.sh
#   SIZES="5 50" tests/bench/claim/relay.sh
#   OVER=0 SIZES=50 tests/bench/claim/relay.sh   the same rows sent as bodies (no
#                                                claim check), for comparison
#
# Per size S (MiB; "0" is a 100-byte body, below the threshold: the
# baseline, sent as a body): a fresh relay (outbox.batch 1,
# claim_check_over_bytes 65536) publishes one row; prints S, the peak RSS,
# the seconds per MiB ("-" for the baseline), the upload's requests (Put
# Blob, or Put Block per 4 MiB + Put Block List). Not a test: nothing here
# asserts a figure.
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$root/build}
export INBOXD=$build/inboxd SBEMU=$build/sbemu INBOXCTL=$build/inboxctl
SIZES=${SIZES:-0 5 50}
. "$root/tests/e2e/lib.sh"
. "$root/tests/e2e/outbox_lib.sh"
e2e_init postgresql
. "$root/tests/blob/azurite.sh"
start_azurite
(cd "$BLOB_DIR" && node blob.mjs mk "$AZ_ENDPOINT" bench) || die "cannot create the container"
OVER=${OVER:-65536}
start_emu '{"queues":[{"name":"out","lock_duration_s":60}]}' --max-message-bytes 104857600
hwm() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
published() { [ "$(sql "SELECT count(*) FROM inboxd_outbox WHERE message_id = '$1' AND status = 'published'")" = 1 ]; }
printf '%-8s %-10s %-10s %s\n' "body_MiB" "rss_MiB" "s_per_MiB" "blocks"
for s in $SIZES; do
  relay_config "$W/relay$s.json" "$(jq -n --arg u "$AZ_ENDPOINT/devstoreaccount1/bench" --arg k "$AZ_KEY" --argjson o "$OVER" \
    '{outbox: {poll_ms: 50, batch: 1, claim_check_over_bytes: $o, claim_check_container: $u,
      claim_check_auth: "shared_key", claim_check_account: "devstoreaccount1", claim_check_account_key: $k}}')"
  start_relay "$W/relay$s.json" "relay$s"; pid=$LAST_PID
  wait_until 30 outbox_ready || die "the relay made no table"
  sleep 1
  n=$(( s == 0 ? 100 : s * 1048576 ))
  t0=$(date +%s.%N)
  sql "INSERT INTO inboxd_outbox (entity, message_id, content_type, body) VALUES ('out', 'b-$s', 'text/plain', repeat('x', $n))" >/dev/null
  while ! published "b-$s"; do sleep 0.05; done
  t1=$(date +%s.%N)
  per=$(awk -v a="$t0" -v b="$t1" -v s="$s" 'BEGIN { if (s == 0) print "-"; else printf "%.4f", (b - a) / s }')
  blocks=$(awk -v s="$s" -v o="$OVER" 'BEGIN { if (s == 0 || o == 0) print "-"; else if (s <= 4) print "Put Blob"; else printf "%d + list", (s + 3) / 4 }')
  printf '%-8s %-10s %-10s %s\n' "$s" "$(hwm "$pid")" "$per" "$blocks"
  stop_inboxd "$pid"
done
