#!/usr/bin/env bash
# Claim check with workload identity against Azurite's OAuth mode (HTTPS
# with a throwaway CA, --oauth basic): inboxd exchanges the pod's federated
# token at a stand-in of the Azure AD token endpoint (tests/blob/token.mjs)
# for a token for https://storage.azure.com/ and fetches the blob with it as
# a bearer. The blob's document is applied (its row); the endpoint was asked
# for the storage scope with the federated token as the client assertion. A
# route with auth "sas" on a URL without a SAS is refused by the same
# Azurite (ClaimCheckRefused): the bearer is what let the first one in.
# The relay's side: an application outbox row above
# outbox.claim_check_over_bytes is uploaded with the relay's own bearer
# (claim_check_auth workload_identity) and published with its reference.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
. "$E2E_SRC/tests/blob/azurite.sh"
create_items_table
(cd "$W" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
   -subj /CN=inboxd-test-ca -keyout ca.key -out ca.crt &&
 openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
   -keyout srv.key -out srv.csr &&
 printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >srv.ext &&
 openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
   -extfile srv.ext -out srv.crt) >"$W/openssl.log" 2>&1 || die "openssl: $(cat "$W/openssl.log")"
start_azurite --cert "$W/srv.crt" --key "$W/srv.key" --oauth basic
case "$AZ_ENDPOINT" in https://*) ;; *) die "azurite is not on https: $AZ_ENDPOINT" ;; esac
start_token
start_emu '{"queues":[{"name":"wi","lock_duration_s":30,"max_delivery_count":10},{"name":"out"}]}'
NODE_EXTRA_CA_CERTS="$W/ca.crt" blob_put '[{"container": "docs", "name": "wi.json", "doc": {"id": "wi-1", "n": 8}}]' >"$W/blobs.jsonl"
url=$(jq -r .url "$W/blobs.jsonl")

echo "federated-token-from-the-kubelet" >"$W/federated.jwt"
export AZURE_CLIENT_ID=inboxd-client AZURE_TENANT_ID=tenant-0 \
  AZURE_AUTHORITY_HOST="http://127.0.0.1:$TOKEN_PORT/" AZURE_FEDERATED_TOKEN_FILE="$W/federated.jwt"
routes=$(jq -n --arg sql "$(items_insert_sql)" --arg host "127.0.0.1:$AZ_PORT" --arg ca "$W/ca.crt" '
  {sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"]} as $apply |
  [{match: {subject: "Wi"}, claim_check: {url: "{$.data.url}", allowed_hosts: [$host],
                                           auth: "workload_identity", ca_file: $ca}} + $apply,
   {match: {subject: "NoSas"}, claim_check: {url: "{$.data.url}", allowed_hosts: [$host],
                                              ca_file: $ca}} + $apply]')
write_config "$W/inboxd.json" wi "$routes" "$(jq -n --arg u "$AZ_ENDPOINT/devstoreaccount1/docs" --arg ca "$W/ca.crt" \
  '{outbox: {relay: "true", poll_ms: 200, claim_check_over_bytes: 1000, claim_check_container: $u,
             claim_check_auth: "workload_identity", claim_check_ca_file: $ca}}')"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
jq -c -n --arg u "$url" '{message_id: "ev-wi", subject: "Wi", body: {eventType: "Microsoft.Storage.BlobCreated", data: {url: $u}}},
                        {message_id: "ev-nosas", subject: "NoSas", body: {eventType: "Microsoft.Storage.BlobCreated", data: {url: $u}}}' >"$W/events.jsonl"
send_file wi "$W/events.jsonl"
settled() { [ "$(broker_stat wi completed)" -ge 1 ] && [ "$(broker_stat wi dead_lettered)" -ge 1 ]; }
wait_until 60 settled || die "the events were not settled"
check "the blob's row, fetched with the bearer" "$(sql 'SELECT id || $$ $$ || n FROM items')" "wi-1 8"
check "the same blob without a bearer or a SAS" "$(dlq_reasons wi | tr '\n' ,)" "ev-nosas ClaimCheckRefused,"
check "the token was asked for the storage scope" \
  "$(jq -r '.form.scope' "$W/token.requests" | sort -u | tr '\n' ,)" "https://storage.azure.com/.default,"
check "with the federated token as the client assertion" \
  "$(jq -r '.form.client_assertion + " " + .form.client_id' "$W/token.requests" | sort -u)" \
  "federated-token-from-the-kubelet inboxd-client"
body=$(printf 'y%.0s' $(seq 1 2000))
sql "INSERT INTO inboxd_outbox (entity, message_id, content_type, body) VALUES ('out', 'big-wi', 'text/plain', '$body')" >/dev/null
published() { [ "$(sql "SELECT status FROM inboxd_outbox WHERE message_id = 'big-wi'")" = published ]; }
wait_until 60 published || die "the row was not published: $(sql "SELECT status, attempts, last_error FROM inboxd_outbox")"
check "the relay's blob, uploaded with its bearer" \
  "$(cd "$BLOB_DIR" && NODE_EXTRA_CA_CERTS="$W/ca.crt" node blob.mjs stat "$AZ_ENDPOINT" docs | jq -r 'select(.name == "big-wi") | .sha256')" \
  "$(printf '%s' "$body" | sha256sum | cut -c1-64)"
check "its message: the reference, no body" \
  "$("$INBOXCTL" peek --connection-string "$SB_CS" --entity out | jq -r '(.body | tostring | length | tostring) + " " + .properties["blob-url"]')" \
  "0 $AZ_ENDPOINT/devstoreaccount1/docs/big-wi"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
