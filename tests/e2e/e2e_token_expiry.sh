#!/usr/bin/env bash
# Tokens that last 6 s: sbemu grants a put-token for at most 6 s and detaches
# the links (receive, $management, send) whose token expired. Two inboxd run
# side by side: one signs 6 s SAS tokens (servicebus.sas_token_lifetime_s),
# the other has Azure AD (workload identity) tokens that a local token
# endpoint issues for 6 s. Each puts new tokens before they expire while one
# of its handlers holds its message for 18 s (the lock, 4 s long, renewed
# over $management across three token lifetimes), messages keep arriving
# and the SAS one's outbox relay keeps sending. Two renewals are refused 401
# on the way (--fault-refuse-put-token) and tried again before the old
# token ends. Nothing is delivered twice, abandoned or dead-lettered, and no
# link ever loses its token.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
command -v node >/dev/null || { echo "skip: node is not installed"; exit 77; }
create_items_table
iss="https://sts.windows.net/e2e-tenant/"
jwt_secret=$(head -c 24 /dev/urandom | base64)
start_emu '{"queues":[{"name":"tok","lock_duration_s":4,"max_delivery_count":10},
                      {"name":"tokwi","lock_duration_s":4,"max_delivery_count":10},{"name":"fwd"}]}' \
  --token-lifetime-s 6 --fault-refuse-put-token 2 --jwt-issuer "$iss" --jwt-secret "$jwt_secret"
mkfifo "$W/aad.stdin"
node "$E2E_SRC/tests/aad/token_server.js" --jwt "$iss" "$jwt_secret" --jwt-lifetime 6 \
  <"$W/aad.stdin" >"$W/aad.port" 2>"$W/aad.log" &
E2E_PIDS+=($!)
exec 7>"$W/aad.stdin" # keeps the token server alive until this script exits
wait_until 10 test -s "$W/aad.port" || die "token server did not start"
echo "federated-token" >"$W/federated-token"
# n = 0 holds its worker 18 s; every other message is applied at once.
routes=$(jq -n --arg sql "$(items_insert_sql)" '[{match: "*",
  sql: ["SELECT pg_sleep(CASE WHEN CAST(? AS int) = 0 THEN 18 ELSE 0 END)", $sql],
  params: [["$.n"], ["$.id", "$.n", "session_id", "sequence_number", "message_id"]]}]')
for q in tok tokwi; do
  echo "{\"message_id\":\"$q-slow\",\"subject\":\"Item\",\"body\":{\"id\":\"$q-slow\",\"n\":0}}" >"$W/slow.jsonl"
  send_file $q "$W/slow.jsonl"
done
write_config "$W/inboxd.json" tok "$routes" \
  '{"servicebus":{"sas_token_lifetime_s":6,"max_auto_lock_renewal_s":120},"outbox":{"relay":"true","poll_ms":200}}'
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
SAS_CS=$SB_CS
SB_CS="Endpoint=sb://127.0.0.1:$EMU_PORT/;UseDevelopmentEmulator=true" write_config "$W/inboxd-wi.json" tokwi "$routes" \
  '{"servicebus":{"auth":"workload_identity","max_auto_lock_renewal_s":120}}'
AZURE_CLIENT_ID=jwt AZURE_TENANT_ID=e2e-tenant AZURE_AUTHORITY_HOST="http://127.0.0.1:$(cat "$W/aad.port")" \
  AZURE_FEDERATED_TOKEN_FILE="$W/federated-token" start_inboxd "$W/inboxd-wi.json" inboxd-wi
pid_wi=$LAST_PID
wait_until 30 outbox_ready || die "inboxd did not create the outbox table"
# Messages and outbox rows spread over 16 s, while the slow ones hold their
# locks for 18 s: three token lifetimes.
for i in 1 2 3 4 5; do
  gen_items 50 "b$i-" >"$W/msgs$i.jsonl"
  send_file tok "$W/msgs$i.jsonl"
  gen_items 50 "w$i-" >"$W/wi$i.jsonl"
  send_file tokwi "$W/wi$i.jsonl"
  app_rows 20 2 fwd "r$i"
  [ $i = 5 ] || sleep 4
done
wait_until 60 queue_empty tok || die "tok not drained"
wait_until 60 queue_empty tokwi || die "tokwi not drained"
wait_until 30 all_published 100 || die "only $(outbox_count published) of 100 outbox rows published"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
stop_inboxd $pid_wi; check "inboxd (workload identity) exit status" "$STOP_RC" 0
stats_fresh
check "business rows" "$(sql 'SELECT count(*) FROM items')" 502
check "the slow messages applied" "$(sql "SELECT count(*) FROM items WHERE id LIKE '%-slow'")" 2
for q in tok tokwi; do
  check "$q: delivered once each" "$(broker_stat $q delivered)" 251
  check "$q: completed" "$(broker_stat $q completed)" 251
  check "$q: abandoned" "$(broker_stat $q abandoned)" 0
  check "$q: dead-lettered" "$(dlq_reasons $q | grep -c .)" 0
done
check "inbox rows delivered twice" "$(sql 'SELECT count(*) FROM inboxd_inbox WHERE delivery_count > 1')" 0
check "outbox rows sent once each" "$(broker_stat fwd sent)" 100
check "failed outbox rows" "$(outbox_count failed)" 0
check "renewals refused 401" "$(broker_conn tokens_refused)" 2
check "links detached for an expired token" "$(broker_conn links_expired)" 0
check "Azure AD tokens fetched (one per lifetime or so)" \
  "$(curl -s "http://127.0.0.1:$(cat "$W/aad.port")/requests" | jq '[.[] | select(.form.client_id == "jwt")] | length >= 4')" true
