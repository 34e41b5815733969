# azurite.sh - Azurite's blob service for a test, sourced after
# tests/e2e/lib.sh (it uses W, E2E_PIDS, die): on loopback, an ephemeral
# port (or the one given, for a restart), the scenario's own --location,
# telemetry off, so that nothing leaves the machine.
#
#   start_azurite [ARGS]   sets AZ_PID, AZ_PORT, AZ_ENDPOINT (ARGS: more azurite-blob
#                          options, e.g. --cert, --key, --oauth basic: then https)
#   start_gate             a TCP gate to Azurite (gate.mjs): sets GATE_PID, GATE_PORT
#   gate_close / gate_open connections to GATE_PORT refused / forwarded again
#   start_token            token.mjs (the Azure AD token endpoint's stand-in): TOKEN_PORT,
#                          its requests in $W/token.requests
#   blob_put SPEC          node blob.mjs put: one JSON line per blob
BLOB_DIR="$E2E_SRC/tests/blob"
AZ_KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
[ -d "$BLOB_DIR/node_modules/azurite" ] \
  || die "tests/blob: node_modules is missing; run npm ci in $BLOB_DIR (scripts/test does this)"

start_azurite() {
  local log="$W/azurite.out"
  mkdir -p "$W/azurite"
  "$BLOB_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort 0 \
    --location "$W/azurite" --disableTelemetry --skipApiVersionCheck --silent "$@" >"$log" 2>&1 &
  AZ_PID=$!
  E2E_PIDS+=("$AZ_PID")
  AZ_PORT=""
  for _ in $(seq 1 300); do
    AZ_ENDPOINT=$(grep -o 'listens on https\?://127.0.0.1:[0-9]*' "$log" 2>/dev/null | sed 's/listens on //')
    AZ_PORT=${AZ_ENDPOINT##*:}
    [ -n "$AZ_PORT" ] && break
    kill -0 "$AZ_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$AZ_PORT" ] || die "azurite did not start: $(cat "$log")"
}

blob_put() {
  (cd "$BLOB_DIR" && node blob.mjs put "$AZ_ENDPOINT" "$1") || die "blob.mjs put failed"
}

start_gate() {
  node "$BLOB_DIR/gate.mjs" "$AZ_PORT" >"$W/gate.out" 2>&1 &
  GATE_PID=$!
  E2E_PIDS+=("$GATE_PID")
  GATE_PORT=""
  for _ in $(seq 1 100); do
    GATE_PORT=$(head -n 1 "$W/gate.out" 2>/dev/null | jq -r '.port // empty' 2>/dev/null || true)
    [ -n "$GATE_PORT" ] && break
    sleep 0.1
  done
  [ -n "$GATE_PORT" ] || die "gate.mjs did not start: $(cat "$W/gate.out")"
}
gate_said() { [ "$(tail -n 1 "$W/gate.out")" = "$1" ]; }
gate_close() { kill -HUP "$GATE_PID"; wait_until 10 gate_said closed || die "the gate did not close"; }
gate_open() { kill -USR2 "$GATE_PID"; wait_until 10 gate_said open || die "the gate did not open"; }

start_token() {
  node "$BLOB_DIR/token.mjs" "$W/token.requests" >"$W/token.out" 2>&1 &
  E2E_PIDS+=("$!")
  TOKEN_PORT=""
  for _ in $(seq 1 100); do
    TOKEN_PORT=$(head -n 1 "$W/token.out" 2>/dev/null | jq -r '.port // empty' 2>/dev/null || true)
    [ -n "$TOKEN_PORT" ] && break
    sleep 0.1
  done
  [ -n "$TOKEN_PORT" ] || die "token.mjs did not start: $(cat "$W/token.out")"
}
