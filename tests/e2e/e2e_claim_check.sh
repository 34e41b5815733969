#!/usr/bin/env bash
# Claim check against Azurite (Microsoft's storage emulator, blob service,
# telemetry off, loopback), blobs written by the official SDK
# (tests/blob/blob.mjs). Routes take their body from the blob a message
# names: an Event Grid Microsoft.Storage.BlobCreated event (data.url,
# data.eTag, Shared Key auth with Azurite's well-known account key), or a
# SAS URL in an application property.
#  1. A 5 MB JSON document, its event sent twice (two message ids): the
#     first copy's inbox transaction is blocked on a lock on items, inboxd is
#     killed -9 with the blob fetched and the insert under way, then started
#     again: one row, the inbox row's body_sha256 the blob's SHA-256
#     (payload_hash covers the blob), the second copy a duplicate.
#  2. Each failure on final state: 404 ClaimCheckMissing, ETag differs and
#     SHA-256 differs ClaimCheckChanged, above max_bytes ClaimCheckTooLarge,
#     a SAS with a wrong signature (403) ClaimCheckRefused, a host not in
#     allowed_hosts BindError; a good SHA-256 and a good SAS applied.
#  inboxctl blob show / fetch: a dead letter's reference (no SAS shown), a
#     changed blob refused, a parked message's blob fetched whole.
#  3. Storage outage: the event's URL goes through a TCP gate to Azurite
#     (tests/blob/gate.mjs), closed (connections refused): held
#     (inboxd_held_messages 1, no row, no dead letter); the gate opened again:
#     applied, and nothing was abandoned (no delivery counted for the hold).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
. "$E2E_SRC/tests/blob/azurite.sh"
[ "$DIALECT" = postgresql ] || die "this scenario blocks a PostgreSQL transaction on purpose"
create_items_table
start_azurite
start_gate
start_emu '{"queues":[{"name":"blobs","lock_duration_s":5,"max_delivery_count":10},{"name":"parked","lock_duration_s":30,"max_delivery_count":10}]}'

# The blobs (the 5 MB document first).
blob_put "$(jq -n '[
  {container: "docs", name: "big.json", doc: {id: "big-1", n: 5}, pad: 5242880},
  {container: "docs", name: "small.json", doc: {id: "small-1", n: 1}},
  {container: "docs", name: "etag.json", doc: {id: "etag-1", n: 2}},
  {container: "docs", name: "sha.json", doc: {id: "sha-1", n: 3}},
  {container: "docs", name: "large.json", doc: {id: "large-1", n: 4}, pad: 200000},
  {container: "docs", name: "sas.json", doc: {id: "sas-1", n: 6}},
  {container: "docs", name: "outage.json", doc: {id: "outage-1", n: 7}}]')" >"$W/blobs.jsonl"
b() { jq -r --arg n "$1" "select(.name == \$n) | .$2" "$W/blobs.jsonl"; }
[ "$(b big.json bytes)" -gt 5000000 ] || die "big.json is not 5 MB"

export E2E_STORAGE_KEY=$AZ_KEY
routes=$(jq -n --arg sql "$(items_insert_sql)" --arg host "127.0.0.1:$AZ_PORT" --arg gate "127.0.0.1:$GATE_PORT" '
  {sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
   idempotency_key: "doc:{$.id}"} as $apply |
  {allowed_hosts: [$host, $gate], auth: "shared_key", account: "devstoreaccount1",
   account_key: {env: "E2E_STORAGE_KEY"}, timeout_ms: 5000} as $key |
  [{match: {subject: "BlobCreated"},
    claim_check: ($key + {url: "{$.data.url}", etag: "{$.data.eTag}", sha256: "{prop:blob-sha256}",
                          max_bytes: 8388608})} + $apply,
   {match: {subject: "Small"}, claim_check: ($key + {url: "{$.data.url}", max_bytes: 100000})} + $apply,
   {match: {subject: "Sas"},
    claim_check: {url: "{prop:blob-url}", allowed_hosts: [$host], auth: "sas"}} + $apply]')
write_config "$W/inboxd.json" blobs "$routes" '{"http": {"listen": "127.0.0.1:0"}}'

# event ID SUBJECT URL [ETAG] [PROPERTIES]: a BlobCreated-style message.
event() {
  jq -c -n --arg id "$1" --arg s "$2" --arg u "$3" --arg e "${4:-}" --argjson p "${5:-{\}}" '
    {message_id: $id, subject: $s, properties: $p, content_type: "application/json",
     body: {topic: "/subscriptions/x/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/devstoreaccount1",
            subject: ("/blobServices/default/containers/docs/blobs/" + ($u | split("/") | last)),
            eventType: "Microsoft.Storage.BlobCreated", id: $id, dataVersion: "", metadataVersion: "1",
            data: ({api: "PutBlob", contentType: "application/json", blobType: "BlockBlob", url: $u}
                   + (if $e == "" then {} else {eTag: $e} end))}}'
}

# ---- 1. the 5 MB document through kill -9 -----------------------------------
# A transaction holding items locked: the route's insert waits behind it.
PGAPPNAME=e2e_blocker psql -h 127.0.0.1 -p "$INBOXD_TEST_PG_PORT" -U postgres -d "$E2E_PGDB" -q \
  -c "BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);" >/dev/null 2>&1 &
E2E_PIDS+=("$!")
blocker_holds() { [ "$(sql "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'e2e_blocker' AND l.granted AND l.mode = 'AccessExclusiveLock' AND l.relation = 'items'::regclass")" -ge 1 ]; }
wait_until 10 blocker_holds || die "the blocking transaction did not take its lock"
{ event ev-big-1 BlobCreated "$(b big.json url)" "$(b big.json etag)" "$(jq -n --arg h "$(b big.json sha256)" '{"blob-sha256": $h}')"
  event ev-big-2 BlobCreated "$(b big.json url)" "$(b big.json etag)"; } >"$W/big.jsonl"
start_inboxd "$W/inboxd.json" inboxd1
pid=$LAST_PID
send_file blobs "$W/big.jsonl"
insert_waits() { [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name <> 'e2e_blocker' AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO items%'")" -ge 1 ]; }
wait_until 30 insert_waits || die "the route's insert never reached the database"
kill -9 "$pid"; wait "$pid" 2>/dev/null
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'e2e_blocker'" >/dev/null
check "rows while inboxd is down" "$(sql 'SELECT count(*) FROM items')" 0
start_inboxd "$W/inboxd.json" inboxd2
pid=$LAST_PID
# Settled: both copies completed (the locks the killed process held run out first).
settled() { [ "$(broker_stat blobs completed)" -ge "$1" ] && [ "$(broker_stat blobs dead_lettered)" -ge "$2" ]; }
wait_until 60 settled 2 0 || die "the 5 MB document's copies were not settled after the restart"
check "the document's row, once" "$(sql "SELECT id || ' ' || n FROM items")" "big-1 5"
check "its inbox row hashes the blob" \
  "$(sql "SELECT body_sha256 FROM inboxd_inbox WHERE idempotency_key = 'doc:big-1'")" "$(b big.json sha256)"
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" 1
check "dead-lettered" "$(broker_stat blobs dead_lettered)" 0

# ---- 2. each failure, on final state ------------------------------------------
zeros=$(printf '0%.0s' $(seq 1 64))
{ event ev-small BlobCreated "$(b small.json url)" "$(b small.json etag)" "$(jq -n --arg h "$(b small.json sha256)" '{"blob-sha256": $h}')"
  event ev-missing BlobCreated "$AZ_ENDPOINT/devstoreaccount1/docs/nope.json"
  event ev-etag BlobCreated "$(b etag.json url)" "0x8DEADBEEF00000"
  event ev-sha BlobCreated "$(b sha.json url)" "" "$(jq -n --arg h "$zeros" '{"blob-sha256": $h}')"
  event ev-large Small "$(b large.json url)"
  event ev-403 Sas "" "" "$(jq -n --arg u "$(b sas.json bad_sas_url)" '{"blob-url": $u}')"
  event ev-sas Sas "" "" "$(jq -n --arg u "$(b sas.json sas_url)" '{"blob-url": $u}')"
  event ev-host BlobCreated "http://127.0.0.2:$AZ_PORT/devstoreaccount1/docs/small.json"; } >"$W/fail.jsonl"
send_file blobs "$W/fail.jsonl"
wait_until 60 settled 4 6 || die "the failures were not all settled"
check "rows: the good SHA-256 and the good SAS" "$(sql "SELECT id FROM items WHERE id <> 'big-1' ORDER BY id" | tr '\n' ,)" "sas-1,small-1,"
check "dead letters and their reasons" "$(dlq_reasons blobs | tr '\n' ,)" \
  "ev-403 ClaimCheckRefused,ev-etag ClaimCheckChanged,ev-host BindError,ev-large ClaimCheckTooLarge,ev-missing ClaimCheckMissing,ev-sha ClaimCheckChanged,"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity blobs --dlq >"$W/dlq.jsonl"
desc() { jq -r --arg id "$1" 'select(.message_id == $id) | .dead_letter_description' "$W/dlq.jsonl"; }
case "$(desc ev-large)" in *"above claim_check.max_bytes 100000"*) e2e_log "ok   too large names the bound" ;; *) die "ev-large: $(desc ev-large)" ;; esac
case "$(desc ev-403)" in *"(403)"*) e2e_log "ok   refused names the 403" ;; *) die "ev-403: $(desc ev-403)" ;; esac
case "$(desc ev-403)" in *sig=*) die "the dead letter shows the SAS: $(desc ev-403)" ;; esac

# ---- inboxctl blob show|fetch: a dead letter's reference, a parked message's blob
blobctl() { "$INBOXCTL" blob "$@" --config "$W/inboxd.json" 2>>"$W/inboxctl.log"; }
shown=$(blobctl show --dlq --message-id ev-403) || die "blob show failed: $(tail -n 2 "$W/inboxctl.log")"
check "blob show: the URL without its SAS" "$(jq -r '.url + " " + .auth' <<<"$shown")" \
  "$AZ_ENDPOINT/devstoreaccount1/docs/sas.json sas"
shown=$(blobctl show --dlq --message-id ev-etag)
check "blob show: the ETag the message carries" "$(jq -r .etag <<<"$shown")" "0x8DEADBEEF00000"
rc=0; shown=$(blobctl fetch --dlq --message-id ev-etag --out "$W/etag.out") || rc=$?
check "blob fetch of a changed blob: exit 1, result changed" "$rc $(jq -r .result <<<"$shown")" "1 changed"
rc=0; blobctl show --dlq --message-id ev-none >/dev/null || rc=$?
check "blob show of a message that is not there" "$rc" 3
event ev-parked BlobCreated "$(b small.json url)" "$(b small.json etag)" >"$W/parked.jsonl"
send_file parked "$W/parked.jsonl"
shown=$(blobctl fetch --entity parked --message-id ev-parked --out "$W/small.out") \
  || die "blob fetch failed: $(tail -n 2 "$W/inboxctl.log")"
check "blob fetch: the blob's bytes" "$(sha256sum <"$W/small.out" | cut -c1-64) $(jq -r '.result + " " + .blob_sha256' <<<"$shown")" \
  "$(b small.json sha256) ok $(b small.json sha256)"

# ---- 3. a storage outage holds the message --------------------------------------
port=$(http_port inboxd2)
gate_close
event ev-outage BlobCreated "$(b outage.json url | sed "s/:$AZ_PORT\//:$GATE_PORT\//")" "$(b outage.json etag)" >"$W/outage.jsonl"
grep -q ":$GATE_PORT/" "$W/outage.jsonl" || die "the outage event does not go through the gate"
send_file blobs "$W/outage.jsonl"
held() { [ "$(metric "$port" inboxd_held_messages)" -ge 1 ]; }
wait_until 30 held || die "the message was not held while the storage was down"
check "rows while the storage is down" "$(sql "SELECT count(*) FROM items WHERE id = 'outage-1'")" 0
gate_open
wait_until 60 settled 5 6 || die "the held message was not applied after the storage came back"
check "the held document's row" "$(sql "SELECT count(*) FROM items WHERE id = 'outage-1'")" 1
check "no delivery counted: nothing abandoned in the whole run" "$(broker_stat blobs abandoned)" 0
check "dead letters: only the six above" "$(broker_stat blobs dead_lettered)" 6
check "queue empty" "$(queue_empty blobs && echo yes)" yes
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
