#!/usr/bin/env bash
# The outbox's claim check against Azurite (tests/blob): inboxd A applies
# 5 MiB documents and emits each whole to `docs`; its relay uploads every
# body above outbox.claim_check_over_bytes to a container and publishes the
# message with the reference (blob-url, blob-sha256, blob-size; an empty
# body) instead; inboxd B's claim_check route fetches the blob and applies
# it once.
#  1. Shared Key: the message on `docs` carries the reference and no body;
#     the blob (named after the message id) holds the body; B applies it,
#     its inbox row hashing the blob.
#  2. Storage unreachable (a TCP gate in front of Azurite, closed): the row
#     stays pending with its attempts counted and nothing reaches `docs`;
#     the gate opened again, it is published once and applied once.
#  3. SAS (a container SAS with create+write; a read SAS in the reference
#     for B's `auth: sas` route), the container missing (404): pending,
#     nothing sent; the container created, published once, applied once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
. "$E2E_SRC/tests/blob/azurite.sh"
create_items_table
sql "CREATE TABLE seen_a (id text PRIMARY KEY)" >/dev/null
start_azurite
start_gate
(cd "$BLOB_DIR" && node blob.mjs mk "$AZ_ENDPOINT" outbox) || die "cannot create the container"
# Up to 8 MiB accepted (Premium's large messages) so that A can take a 5 MiB document.
start_emu '{"queues":[{"name":"in","lock_duration_s":30,"max_delivery_count":10},
                      {"name":"docs","lock_duration_s":30,"max_delivery_count":10}]}' \
  --max-message-bytes 8388608
blobs() { (cd "$BLOB_DIR" && node blob.mjs stat "$AZ_ENDPOINT" "$1"); }

# doc ID: one 5 MiB JSON document message for `in`; doc_body ID: its body.
PAD=$(head -c 5242880 /dev/zero | tr '\0' x)
doc_body() { printf '{"id":"%s","n":1,"pad":"%s"}' "$1" "$PAD"; }
doc() {
  printf '{"message_id":"in-%s","subject":"Doc","content_type":"application/json","body":%s}\n' \
    "$1" "$(doc_body "$1")"
}
doc_sha() { doc_body "$1" | sha256sum | cut -c1-64; }

# A: applies the document, emits it whole (subject $2) to docs.
a_config() { # FILE SUBJECT OUTBOX_JSON
  write_config "$1" in "$(jq -n --arg s "$2" '[{match: "*", sql: "INSERT INTO seen_a (id) VALUES (?)",
      params: ["$.id"], idempotency_key: "a:{$.id}",
      emit: [{entity: "docs", message_id: "doc:{$.id}", subject: $s, body: "$"}]}]')" \
    "$(jq -n --argjson o "$3" '{consumer: "A", http: {listen: "127.0.0.1:0"},
        outbox: ({poll_ms: 200, backoff_max_ms: 1000, claim_check_over_bytes: 262144,
                  claim_check_timeout_ms: 5000} + $o)}')"
}
a_config "$W/a_key.json" Doc "$(jq -n --arg u "http://127.0.0.1:$GATE_PORT/devstoreaccount1/outbox" --arg k "$AZ_KEY" \
  '{claim_check_container: $u, claim_check_auth: "shared_key", claim_check_account: "devstoreaccount1",
    claim_check_account_key: $k}')"
a_config "$W/a_sas.json" DocSas "$(jq -n --arg u "$AZ_ENDPOINT/devstoreaccount1/late" \
  --arg w "$(cd "$BLOB_DIR" && node blob.mjs sas "$AZ_ENDPOINT" late cw)" \
  --arg r "$(cd "$BLOB_DIR" && node blob.mjs sas "$AZ_ENDPOINT" late r)" \
  '{claim_check_container: $u, claim_check_auth: "sas", claim_check_sas: $w, claim_check_read_sas: $r}')"

# B: the blob the message names, applied into items.
export E2E_STORAGE_KEY=$AZ_KEY
routes_b=$(jq -n --arg sql "$(items_insert_sql)" --arg h1 "127.0.0.1:$AZ_PORT" --arg h2 "127.0.0.1:$GATE_PORT" '
  {sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
   idempotency_key: "doc:{$.id}"} as $apply |
  {url: "{prop:blob-url}", sha256: "{prop:blob-sha256}", allowed_hosts: [$h1, $h2],
   max_bytes: 8388608} as $ref |
  [{match: {subject: "Doc"}, claim_check: ($ref + {auth: "shared_key", account: "devstoreaccount1",
                                                   account_key: {env: "E2E_STORAGE_KEY"}})} + $apply,
   {match: {subject: "DocSas"}, claim_check: ($ref + {auth: "sas"})} + $apply]')
write_config "$W/b.json" docs "$routes_b" '{"consumer": "B", "outbox": {"enabled": "false", "relay": "false"}}'

# ---- 1. Shared Key: the reference on the queue, the body in the blob ----------
doc big-1 >"$W/d1.jsonl"
send_file in "$W/d1.jsonl"
start_inboxd "$W/a_key.json" a_key; a=$LAST_PID
wait_until 60 sent_n docs 1 || die "A published nothing: $(outbox_count pending) pending"
peek_all docs >"$W/docs1.jsonl"
check "the message: no body, the reference's size" \
  "$(jq -r '(.body | tostring | length | tostring) + " " + (.properties["blob-size"] | tostring)' "$W/docs1.jsonl")" \
  "0 $(doc_body big-1 | wc -c)"
check "the reference: the blob's URL and SHA-256" \
  "$(jq -r '.properties["blob-url"] + " " + .properties["blob-sha256"]' "$W/docs1.jsonl")" \
  "http://127.0.0.1:$GATE_PORT/devstoreaccount1/outbox/doc%3Abig-1 $(doc_sha big-1)"
check "the blob: named after the message id, the body" "$(blobs outbox | jq -r '.name + " " + .sha256 + " " + .content_type')" \
  "doc:big-1 $(doc_sha big-1) application/json"
start_inboxd "$W/b.json" b; b=$LAST_PID
applied() { [ "$(sql "SELECT count(*) FROM items WHERE id = '$1'")" = 1 ]; }
wait_until 60 applied big-1 || die "B did not apply big-1"
check "B's inbox row hashes the blob" \
  "$(sql "SELECT body_sha256 FROM inboxd_inbox WHERE consumer = 'B' AND idempotency_key = 'doc:big-1'")" "$(doc_sha big-1)"

# ---- 2. storage unreachable: pending, then published once --------------------
gate_close
doc big-2 >"$W/d2.jsonl"
send_file in "$W/d2.jsonl"
retried() { [ "$(sql "SELECT attempts FROM inboxd_outbox WHERE message_id = 'doc:big-2'")" -ge 2 ] 2>/dev/null; }
wait_until 60 retried || die "the row of big-2 was not retried: $(sql "SELECT status, attempts, last_error FROM inboxd_outbox")"
check "while storage is down: pending, nothing sent" \
  "$(sql "SELECT status FROM inboxd_outbox WHERE message_id = 'doc:big-2'") $(broker_stat docs sent)" "pending 1"
check "its last error names the upload" \
  "$(sql "SELECT last_error LIKE 'inboxd:claim-check-upload: claim check upload (transient%' FROM inboxd_outbox WHERE message_id = 'doc:big-2'")" t
gate_open
wait_until 60 applied big-2 || die "big-2 was not applied after the storage came back"
METRICS=$(metrics_get "$(http_port a_key)")
check "A's metrics: two rows claim-checked, failed uploads counted" \
  "$(metric_in "$METRICS" inboxd_outbox_claim_checked_total) $([ "$(metric_in "$METRICS" inboxd_outbox_claim_check_upload_failures_total)" -ge 2 ] && echo yes)" "2 yes"
stop_inboxd $a; check "A exit status" "$STOP_RC" 0

# ---- 3. SAS, the container missing: pending, then published once -------------
doc big-3 >"$W/d3.jsonl"
send_file in "$W/d3.jsonl"
start_inboxd "$W/a_sas.json" a_sas; a=$LAST_PID
retried3() { [ "$(sql "SELECT attempts FROM inboxd_outbox WHERE message_id = 'doc:big-3'")" -ge 2 ] 2>/dev/null; }
wait_until 60 retried3 || die "the row of big-3 was not retried: $(sql "SELECT status, attempts, last_error FROM inboxd_outbox")"
check "no container: pending, nothing sent" \
  "$(sql "SELECT status FROM inboxd_outbox WHERE message_id = 'doc:big-3'") $(broker_stat docs sent)" "pending 2"
(cd "$BLOB_DIR" && node blob.mjs mk "$AZ_ENDPOINT" late) || die "cannot create the container late"
wait_until 60 applied big-3 || die "big-3 was not applied after its container was created"
wait_until 30 queue_empty docs || die "docs not drained"
stop_inboxd $a; check "A exit status" "$STOP_RC" 0
stop_inboxd $b; check "B exit status" "$STOP_RC" 0

check "the blob of big-3, in late" "$(blobs late | jq -r '.name + " " + .sha256')" "doc:big-3 $(doc_sha big-3)"
check "blobs in outbox" "$(blobs outbox | jq -r .name | sort | tr '\n' ,)" "doc:big-1,doc:big-2,"
check "A's rows" "$(sql "SELECT count(*) FROM seen_a")" 3
check "outbox: published" "$(outbox_count published)" 3
check "docs: each message sent once" "$(broker_stat docs sent)" 3
check "B: each document applied once" "$(sql "SELECT id FROM items ORDER BY id" | tr '\n' ,)" "big-1,big-2,big-3,"
check "B: nothing dead-lettered" "$(broker_stat docs dead_lettered)" 0
check "B's inbox rows hash their blobs" \
  "$(sql "SELECT count(*) FROM inboxd_inbox WHERE consumer = 'B' AND body_sha256 IN ('$(doc_sha big-1)', '$(doc_sha big-2)', '$(doc_sha big-3)')")" 3
