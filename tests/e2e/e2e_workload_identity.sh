#!/usr/bin/env bash
# servicebus.auth workload_identity end to end: inboxd exchanges a federated
# token at a local Azure AD stand-in for a JWT, puts it on $cbs as type jwt,
# and sbemu (which also requires a SAS key for anything else) lets it
# receive; the messages are applied.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-sqlite}"
N=50
create_items_table
iss="https://sts.windows.net/e2e-tenant/"
jwt_secret=$(head -c 24 /dev/urandom | base64)
start_emu '{"queues":[{"name":"wi","lock_duration_s":30,"max_delivery_count":10}]}' \
  --jwt-issuer "$iss" --jwt-secret "$jwt_secret"
# inboxd's connection string: no key. Under E2E_WEBSOCKETS (lib.sh) the
# WebSocket port, so the Azure AD token goes on $cbs over WebSockets too.
WI_CS="Endpoint=sb://127.0.0.1:$EMU_PORT/;UseDevelopmentEmulator=true"
[ "${E2E_WEBSOCKETS:-0}" = 0 ] ||
  WI_CS="Endpoint=sb://127.0.0.1:$EMU_WS_PORT/;UseDevelopmentEmulator=true;TransportType=AmqpWebSockets"
mkfifo "$W/aad.stdin"
node "$E2E_SRC/tests/aad/token_server.js" --jwt "$iss" "$jwt_secret" <"$W/aad.stdin" >"$W/aad.port" 2>"$W/aad.log" &
E2E_PIDS+=($!)
exec 7>"$W/aad.stdin" # keeps the token server alive until this script exits
wait_until 10 test -s "$W/aad.port" || die "token server did not start"
echo "federated-token-from-the-kubelet" >"$W/federated-token"
gen_items $N w >"$W/msgs.jsonl"
send_file wi "$W/msgs.jsonl" # inboxctl authenticates with the SAS key
write_config "$W/inboxd.json" wi "$(items_route)" '{"servicebus":{"auth":"workload_identity"}}'
AZURE_CLIENT_ID=jwt AZURE_TENANT_ID=e2e-tenant AZURE_AUTHORITY_HOST="http://127.0.0.1:$(cat "$W/aad.port")" \
  AZURE_FEDERATED_TOKEN_FILE="$W/federated-token" \
  INBOXD_SERVICEBUS_CONNECTION_STRING="$WI_CS" \
  start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
wait_until 60 queue_empty wi || die "queue not drained"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
check "business rows" "$(sql 'SELECT count(*) FROM items')" $N
check "token requests with the federated assertion" \
  "$(curl -s "http://127.0.0.1:$(cat "$W/aad.port")/requests" | jq '[.[] | select(.form.client_assertion == "federated-token-from-the-kubelet")] | length > 0')" true

# db.auth workload_identity: a second token source, for Azure SQL, from the
# same federated credential, asked for before every new database
# connection. SQLite stands in through a DSN (by name only Microsoft's
# driver is accepted); it ignores the token attribute, so this checks the
# hand-off from the AAD client to db/, not an Azure SQL login.
printf '[inboxd_e2e]\nDriver = SQLite3\nDatabase = %s\nTimeout = 10000\n' "$DB_FILE" >"$W/odbc.ini"
gen_items $N v >"$W/msgs2.jsonl"
send_file wi "$W/msgs2.jsonl"
write_config "$W/inboxd-db.json" wi "$(items_route)" \
  '{"servicebus":{"auth":"workload_identity"},"db":{"auth":"workload_identity","connection_string":"DSN=inboxd_e2e","dialect":"auto"}}'
# sqlite3odbc leaks a little while reading a DSN, through a library it
# unloads before exit; full unwinding lets LeakSanitizer see the driver's
# frame that tests/lsan.supp names (no effect without ASan).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0" \
  ODBCINI="$W/odbc.ini" AZURE_CLIENT_ID=jwt AZURE_TENANT_ID=e2e-tenant \
  AZURE_AUTHORITY_HOST="http://127.0.0.1:$(cat "$W/aad.port")" AZURE_FEDERATED_TOKEN_FILE="$W/federated-token" \
  INBOXD_SERVICEBUS_CONNECTION_STRING="$WI_CS" \
  start_inboxd "$W/inboxd-db.json" inboxd-db
pid=$LAST_PID
wait_until 60 queue_empty wi || die "queue not drained with db.auth workload_identity"
stop_inboxd $pid; check "inboxd (db.auth) exit status" "$STOP_RC" 0
check "business rows after the db.auth run" "$(sql 'SELECT count(*) FROM items')" $((2 * N))
check "token requests for Azure SQL" \
  "$(curl -s "http://127.0.0.1:$(cat "$W/aad.port")/requests" | jq '[.[] | select(.form.scope == "https://database.windows.net/.default" and .form.client_assertion == "federated-token-from-the-kubelet")] | length > 0')" true

# inboxctl opens the database through the same options as inboxd
# (wk_dbopt.c): with db.auth workload_identity each command asks the token
# server for an Azure SQL token before it connects, and without a federated
# credential it refuses rather than log in some other way.
sql_tokens() {
  curl -fsS "http://127.0.0.1:$(cat "$W/aad.port")/requests" \
    | jq '[.[] | select(.form.scope == "https://database.windows.net/.default")] | length'
}
before=$(sql_tokens)
ctl_env=(ODBCINI="$W/odbc.ini" AZURE_CLIENT_ID=jwt AZURE_TENANT_ID=e2e-tenant
         AZURE_AUTHORITY_HOST="http://127.0.0.1:$(cat "$W/aad.port")" AZURE_FEDERATED_TOKEN_FILE="$W/federated-token"
         ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0")
env "${ctl_env[@]}" "$INBOXCTL" inbox list --status processed --max 1000 --config "$W/inboxd-db.json" \
  >"$W/ctl-inbox.out" 2>>"$W/inboxctl.log" || die "inboxctl inbox list failed: $(tail -n 3 "$W/inboxctl.log")"
check "inboxctl inbox list (db.auth) read the rows" "$(grep -c . "$W/ctl-inbox.out")" $((2 * N))
check "inboxctl inbox list asked for an Azure SQL token" "$(sql_tokens)" $((before + 1))
env "${ctl_env[@]}" "$INBOXCTL" outbox list --config "$W/inboxd-db.json" >/dev/null 2>>"$W/inboxctl.log"
check "inboxctl outbox list asked for an Azure SQL token" "$(sql_tokens)" $((before + 2))
env -u AZURE_CLIENT_ID -u AZURE_FEDERATED_TOKEN_FILE ODBCINI="$W/odbc.ini" \
  "$INBOXCTL" inbox list --status processed --config "$W/inboxd-db.json" >/dev/null 2>"$W/ctl-noauth.err"
check "inboxctl without a federated credential refuses" "$?:$(grep -c 'db.auth' "$W/ctl-noauth.err")" 1:1
