# http_lib.sh - the HTTP destination of the HTTP-route scenarios: the fake
# service (tests/fakehttp/fakehttp.js) started per scenario, its ledger read
# back for assertions, and the charge route and orders the scenarios use.
# Source after lib.sh and e2e_init.

FAKEHTTP="$E2E_SRC/tests/fakehttp/fakehttp.js"
# The destination's credential: a route reads it with {"env": "E2E_PAYMENTS_TOKEN"}.
E2E_PAYMENTS_TOKEN="tok-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
export E2E_PAYMENTS_TOKEN

# start_fake NAME MODE [--tls CERT KEY]: sets FAKE_URL (base URL) for NAME.
start_fake() {
  local name=$1 mode=$2; shift 2
  command -v node >/dev/null || { echo "skip: node is not installed"; exit 77; }
  node "$FAKEHTTP" --mode "$mode" --detach "$@" >"$W/$name.port" 2>"$W/$name.log" &
  E2E_PIDS+=("$!")
  local port=""
  for _ in $(seq 1 100); do
    port=$(head -n 1 "$W/$name.port" 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || die "fake service $name did not start: $(cat "$W/$name.log")"
  local scheme=http
  [ "${1:-}" = --tls ] && scheme=https
  FAKE_URL="$scheme://127.0.0.1:$port"
  eval "FAKE_URL_$name=\$FAKE_URL"
}

# fake_config URL JSON: mode and faults of a running fake.
fake_config() {
  curl -sfk -X POST -H 'Content-Type: application/json' --data "$2" "$1/_config" >/dev/null \
    || die "cannot configure the fake service at $1"
}

# ledger URL FILE: the fake's ledger into FILE.
ledger() { curl -sfk "$1/_ledger" >"$2" || die "cannot read the ledger at $1"; }

# ledger_q FILE JQ: a jq query over a ledger file; fails the scenario when
# the file is missing or the query errs.
ledger_q() {
  [ -s "$1" ] || fail "ledger_q: no ledger file $1"
  jq -r "$2" "$1" || fail "ledger_q: '$2' failed on $1"
}

# ledger_calls FILE KEY / ledger_effects FILE KEY: the calls (reconciling
# GETs not counted) and the effects the destination recorded for KEY. Both
# fail when no request at all carried KEY, so a misspelt key never reads 0.
ledger_calls() {
  ledger_key_seen "$1" "$2"
  ledger_q "$1" "[.requests[] | select(.key == \"$2\" and (.reconcile | not))] | length"
}
ledger_effects() {
  ledger_key_seen "$1" "$2"
  ledger_q "$1" "if .effects | has(\"$2\") then .effects[\"$2\"] | length else 0 end"
}
ledger_key_seen() {
  [ "$(ledger_q "$1" "[.requests[] | select(.key == \"$2\")] | length")" -gt 0 ] \
    || fail "ledger: no request with key '$2' in $1"
}

# gen_orders N [PREFIX] [SUBJECT]: JSON lines of N ChargeRequested messages.
gen_orders() {
  local n=$1 prefix=${2:-o} subject=${3:-ChargeRequested}
  awk -v n="$n" -v p="$prefix" -v s="$subject" 'BEGIN {
    for (i = 1; i <= n; i++)
      printf "{\"message_id\":\"%s-%d\",\"subject\":\"%s\",\"properties\":{\"traceparent\":\"00-%032x-%016x-01\"},\"body\":{\"orderId\":\"%s-%d\",\"amount\":%d}}\n", p, i, s, i, i, p, i, i
  }'
}

# The business table of the charge route: one row per order, with the remote id.
create_charges_table() {
  sql "CREATE TABLE charges (order_id varchar(64) PRIMARY KEY, charge_id varchar(64) NOT NULL)"
}

# charge_route URL IDEMPOTENT [EXTRA_HTTP_JSON]: the route of the scenarios.
charge_route() {
  local url=$1 idem=$2 extra=${3:-'{}'}
  jq -n --arg url "$url/charges" --argjson idem "$idem" --argjson extra "$extra" '
    [{match: {subject: "ChargeRequested"},
      idempotency_key: "charge:{$.orderId}",
      http: ({method: "POST", url: $url, body: "body",
              headers: {"Content-Type": "application/json",
                        "Authorization": {env: "E2E_PAYMENTS_TOKEN"}},
              idempotency_header: "Idempotency-Key", idempotent: $idem,
              timeout_ms: 1000, lease_s: 4, remote_id: "$.id"} * $extra),
      sql: ["INSERT INTO charges (order_id, charge_id) VALUES (?, ?)"],
      params: [["$.orderId", "response:$.id"]]}]'
}

# inbox_count STATUS: inbox rows with that status.
inbox_count() { sql "SELECT count(*) FROM inboxd_inbox WHERE status = '$1'"; }
