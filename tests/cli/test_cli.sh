#!/usr/bin/env bash
# The inboxd command line: --check-config exit codes and messages,
# --print-config redaction, --help, the README reference kept in step, and
# one version in CHANGELOG.md, inboxd --version and the chart.
set -u
inboxd=${1:?usage: test_cli.sh INBOXD SOURCE_DIR}
src=${2:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi
}

sb='Endpoint=sb://127.0.0.1:5672/;SharedAccessKeyName=root;SharedAccessKey=Key0fTheKingdom=;UseDevelopmentEmulator=true'
db='Driver={SQLite3};Database=/tmp/x.db;Pwd=Passw0rdOfDoom'

# An unknown key, a negative prefetch and a missing consumer: exit 2, all three named.
cat >"$tmp/bad.json" <<JSON
{"servicebus": {"prefetch": -1, "connection_string": "$sb", "entity": "orders"},
 "db": {"connection_string": "$db"}, "colour": "blue"}
JSON
env -u INBOXD_CONSUMER "$inboxd" --check-config --config "$tmp/bad.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "check-config exits 2 on a bad config" test "$rc" = 2
check "names the unknown key" grep -q '^config: colour: unknown key' "$tmp/err"
check "names the negative prefetch" grep -q '^config: servicebus.prefetch: .*out of range' "$tmp/err"
check "names the missing consumer" grep -q '^config: consumer: missing required' "$tmp/err"
check "no secret in the errors" bash -c "! grep -q -e Key0fTheKingdom -e Passw0rdOfDoom '$tmp/err' '$tmp/out'"

cat >"$tmp/good.json" <<JSON
{"consumer": "c1", "servicebus": {"connection_string": "$sb", "entity": "orders"},
 "db": {"connection_string": "$db"}}
JSON
"$inboxd" --check-config --config "$tmp/good.json" >/dev/null 2>"$tmp/err"
check "check-config exits 0 on a good config" test $? = 0
# The README's first config is valid as it is, its secrets from the environment.
awk '/^## A first config/ { on = 1 } on && /^```json/ { j = 1; next } j && /^```/ { exit } j' "$src/README.md" >"$tmp/first.json"
check "the README has a first config" test -s "$tmp/first.json"
INBOXD_SERVICEBUS_CONNECTION_STRING="$sb" INBOXD_DB_CONNECTION_STRING="$db" \
  "$inboxd" --check-config --config "$tmp/first.json" >/dev/null 2>"$tmp/err"
check "the README's first config checks out" test $? = 0
INBOXD_CONFIG="$tmp/good.json" INBOXD_SERVICEBUS_PREFETCH=abc "$inboxd" --check-config >/dev/null 2>"$tmp/err"
check "an env override of the wrong type exits 2" test $? = 2
check "and names the variable" grep -q 'servicebus.prefetch: INBOXD_SERVICEBUS_PREFETCH: wrong type' "$tmp/err"

# http.listen is checked as the daemon parses it: each of these would stop the
# daemon at start, so --check-config must refuse it (exit 2, key named).
for listen in junk 127.0.0.1:99999 127.0.0.1: ':' '[::1]' 'no.such.host.invalid:80'; do
  INBOXD_CONFIG="$tmp/good.json" INBOXD_HTTP_LISTEN="$listen" "$inboxd" --check-config >/dev/null 2>"$tmp/err"
  check "http.listen '$listen' exits 2" test $? = 2
  check "http.listen '$listen' is named" grep -q '^config: http.listen: ' "$tmp/err"
done
for listen in 127.0.0.1:0 ':9090' '[::1]:9090' ''; do
  INBOXD_CONFIG="$tmp/good.json" INBOXD_HTTP_LISTEN="$listen" "$inboxd" --check-config >/dev/null 2>"$tmp/err"
  check "http.listen '$listen' is accepted" test $? = 0
done
# A variable that looks like a setting but is none: an error under
# --check-config, named without its value.
INBOXD_CONFIG="$tmp/good.json" INBOXD_NOSUCH=s3cretValue "$inboxd" --check-config >/dev/null 2>"$tmp/err"
check "INBOXD_NOSUCH makes check-config exit 2" test $? = 2
check "INBOXD_NOSUCH is named" grep -q '^config: INBOXD_NOSUCH: unknown environment variable' "$tmp/err"
check "its value is not printed" bash -c "! grep -q s3cretValue '$tmp/err'"

"$inboxd" --print-config --config "$tmp/good.json" >"$tmp/print" 2>&1
check "print-config exits 0" test $? = 0
check "print-config redacts the Service Bus key" bash -c "! grep -q Key0fTheKingdom '$tmp/print'"
check "print-config redacts the database password" bash -c "! grep -q Passw0rdOfDoom '$tmp/print'"
check "print-config shows the entity" grep -q '"entity": "orders"' "$tmp/print"

"$inboxd" --help >"$tmp/help"
check "help lists every section" bash -c "grep -q servicebus.prefetch '$tmp/help' && grep -q db.inbox_table '$tmp/help' && grep -q INBOXD_DB_CONNECTION_STRING '$tmp/help'"
"$inboxd" --no-such-flag >/dev/null 2>&1
check "an unknown flag exits 2" test $? = 2
"$inboxd" --config "$tmp/missing.json" --check-config >/dev/null 2>"$tmp/err"
check "a missing config file exits 2" test $? = 2
check "and it is the only finding (no missing-setting lines after it)" \
  test "$(grep -c '^config: ' "$tmp/err")" = 1
mkdir -p "$tmp/confdir"
"$inboxd" --check-config --config "$tmp/confdir" >/dev/null 2>"$tmp/err"
check "a directory as the config exits 2" test $? = 2
check "and says it is a directory, naming the path" grep -q "^config: $tmp/confdir: cannot load: it is a directory" "$tmp/err"
check "and nothing else" test "$(grep -c '^config: ' "$tmp/err")" = 1
printf '{"consumer": "c1",\n' >"$tmp/cut.json"
"$inboxd" --check-config --config "$tmp/cut.json" >/dev/null 2>"$tmp/err"
check "a file cut short exits 2" test $? = 2
check "names where the parse stopped" grep -q "^config: $tmp/cut.json: cannot load: .*line 2" "$tmp/err"
check "and nothing else" test "$(grep -c '^config: ' "$tmp/err")" = 1

# retry.max_deliveries not below the entity's MaxDeliveryCount: a warning, not an error.
jq '.retry = {"max_deliveries": 10} | .servicebus.max_delivery_count = 10' "$tmp/good.json" >"$tmp/budget.json"
"$inboxd" --check-config --config "$tmp/budget.json" >/dev/null 2>"$tmp/err"
check "a budget at MaxDeliveryCount still checks ok" test $? = 0
check "and warns naming both keys" grep -q '^config: warning: retry.max_deliveries: 10 is not below .*servicebus.max_delivery_count 10' "$tmp/err"
jq '.retry = {"max_deliveries": 3} | .servicebus.max_delivery_count = 10' "$tmp/good.json" >"$tmp/budget.json"
"$inboxd" --check-config --config "$tmp/budget.json" >/dev/null 2>"$tmp/err"
check "a budget below MaxDeliveryCount does not warn" bash -c "! grep -q 'warning: retry.max_deliveries' '$tmp/err'"
# By default the budget is one below the entity's MaxDeliveryCount (Service
# Bus's default 10 when it is not given), and --check-config says so.
"$inboxd" --check-config --config "$tmp/good.json" >"$tmp/out" 2>"$tmp/err"
check "default budget: 9, below Service Bus's default" grep -q "^retry.max_deliveries: 9, one below Service Bus's default MaxDeliveryCount 10" "$tmp/out"
"$inboxd" --print-config --config "$tmp/good.json" >"$tmp/print" 2>&1
check "and --print-config shows 9" test "$(jq .retry.max_deliveries "$tmp/print")" = 9
jq '.servicebus.max_delivery_count = 5' "$tmp/good.json" >"$tmp/budget.json"
"$inboxd" --check-config --config "$tmp/budget.json" >"$tmp/out" 2>"$tmp/err"
check "with the entity's MaxDeliveryCount 5: 4" grep -q '^retry.max_deliveries: 4, one below servicebus.max_delivery_count 5' "$tmp/out"
jq '.retry = {"max_deliveries": 0}' "$tmp/good.json" >"$tmp/budget.json"
"$inboxd" --check-config --config "$tmp/budget.json" >"$tmp/out" 2>"$tmp/err"
check "0 turns it off, and says what that means" grep -q "^retry.max_deliveries: 0 (set): off, the broker's MaxDeliveryCount" "$tmp/out"

# The entity's description (MaxDeliveryCount, LockDuration) out of reach:
# one warning line, still a valid configuration. (e2e/budget_pg checks it
# against a reachable endpoint.)
jq '.servicebus.management_endpoint = "http://127.0.0.1:1/"' "$tmp/good.json" >"$tmp/mgmt.json"
"$inboxd" --check-config --config "$tmp/mgmt.json" >"$tmp/out" 2>"$tmp/err"
check "an unreachable management endpoint still checks ok" test $? = 0
check "and says so in one line" test "$(grep -c "servicebus.entity: the entity's description could not be read" "$tmp/err")" = 1
check "and it is a warning" grep -q "^config: warning: servicebus.entity: the entity's description could not be read (unreachable" "$tmp/err"

# A route's own transaction control would end inboxd's transaction (on SQL
# Server a COMMIT commits the inbox row): refused by --check-config and at
# start, naming the route, the statement and the keyword.
jq '.routes = [{"match": "*", "sql": "INSERT INTO t VALUES (1)"},
               {"match": "*", "sql": ["INSERT INTO t VALUES (2)", "insert into t values (3); Commit"]}]' \
  "$tmp/good.json" >"$tmp/txn.json"
"$inboxd" --check-config --config "$tmp/txn.json" >/dev/null 2>"$tmp/err"
check "a route's COMMIT fails check-config (exit 2)" test $? = 2
check "and names route, statement and keyword" grep -q '^config: routes\[1\].sql\[1\]: holds the transaction statement COMMIT' "$tmp/err"
check "and nothing else" test "$(grep -c '^config: ' "$tmp/err")" = 1
timeout 20 "$inboxd" --config "$tmp/txn.json" >/dev/null 2>"$tmp/err"
check "inboxd refuses to start with it (exit 2)" test $? = 2
check "and names it the same way" grep -q '^config: routes\[1\].sql\[1\]: holds the transaction statement COMMIT' "$tmp/err"

# One version: CHANGELOG.md's first "## X.Y.Z" heading, inboxd --version and
# the chart's appVersion (and the image tag in the docs' build lines).
top=$(grep -m1 -oE '^## [0-9]+\.[0-9]+\.[0-9]+' "$src/CHANGELOG.md" | cut -c4-)
check "CHANGELOG.md has a version at the top" test -n "$top"
check "inboxd --version is CHANGELOG's top version" test "$("$inboxd" --version)" = "inboxd $top"
check "the chart's appVersion is CHANGELOG's top version" grep -qx "appVersion: \"$top\"" "$src/helm/inboxd/Chart.yaml"
check "the docs build and push that version's image" \
  test "$(grep -ohE 'inboxd:[0-9]+\.[0-9]+\.[0-9]+' "$src/README.md" "$src/helm/inboxd/README.md" | sort -u)" = "inboxd:$top"

# The README's reference table is the one the code prints.
"$inboxd" --config-reference >"$tmp/ref"
sed -n '/<!-- config-reference:begin -->/,/<!-- config-reference:end -->/p' "$src/docs/configuration.md" | sed '1d;$d' >"$tmp/readme-ref"
check "docs/configuration.md reference matches --config-reference" diff -u "$tmp/readme-ref" "$tmp/ref"
"$inboxd" --route-reference >"$tmp/rref"
sed -n '/<!-- route-reference:begin -->/,/<!-- route-reference:end -->/p' "$src/docs/routes.md" | sed '1d;$d' >"$tmp/docs-rref"
check "docs/routes.md reference matches --route-reference" diff -u "$tmp/docs-rref" "$tmp/rref"

# HTTP routes: every field checked, the lease against the lock renewal limit,
# secrets only from the environment and never printed.
http_cfg() { # http_cfg FILE HTTP_JSON [RENEWAL_S]
  cat >"$1" <<JSON
{"consumer": "c1", "servicebus": {"connection_string": "$sb", "entity": "orders",
  "max_auto_lock_renewal_s": ${3:-300}},
 "db": {"connection_string": "$db"},
 "routes": [{"match": "*", "idempotency_key": "k:{\$.id}", "http": $2}]}
JSON
}
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "headers": {"Authorization": {"env": "CLI_PAY_TOKEN"}},
  "idempotency_header": "Idempotency-Key", "idempotent": true, "lease_s": 60}'
CLI_PAY_TOKEN=Bearer-Sup3rS3cret "$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "an HTTP route checks out" test $? = 0
CLI_PAY_TOKEN=Bearer-Sup3rS3cret "$inboxd" --print-config --config "$tmp/http.json" >"$tmp/print" 2>&1
check "print-config shows the secret's variable" grep -q CLI_PAY_TOKEN "$tmp/print"
check "print-config never the secret" bash -c "! grep -q Sup3rS3cret '$tmp/print'"
env -u CLI_PAY_TOKEN "$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "a missing secret exits 2" test $? = 2
check "and names header and variable" grep -q '^config: routes\[0\].http.headers.Authorization: environment variable CLI_PAY_TOKEN is not set' "$tmp/err"
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "lease_s": 120}' 60
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "a lease past the renewal limit exits 2" test $? = 2
check "and says why" grep -q '^config: routes\[0\].http.lease_s: (120 s) must be shorter than servicebus.max_auto_lock_renewal_s' "$tmp/err"
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "retries": 3}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "an unknown http field exits 2" test $? = 2
check "and is named" grep -q '^config: routes\[0\].http.retries: unknown key' "$tmp/err"
# Where the route's headers (its secret) go is the configuration's choice:
# a message may fill the path and query, never the scheme, host or port.
for url in 'https://{$.host}/charges' 'https://pay.example:{$.port}/x' 'https://pay.{$.zone}/x' '{$.url}'; do
  http_cfg "$tmp/http.json" "$(jq -n --arg u "$url" '{url: $u, headers: {Authorization: {env: "CLI_PAY_TOKEN"}}}')"
  CLI_PAY_TOKEN=Bearer-Sup3rS3cret "$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
  check "url '$url' exits 2" test $? = 2
  check "url '$url': refused, naming http.url" grep -q -e '^config: routes\[0\].http.url: .*host' -e '^config: routes\[0\].http.url: must be a string starting' "$tmp/err"
done
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "reconcile": {"url": "https://{$.h}/x?key={key}"}}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "a templated reconcile host exits 2" grep -q '^config: routes\[0\].http.reconcile.url: .*host' "$tmp/err"
http_cfg "$tmp/http.json" '{"url": "https://pay.example/c/{$.id}?k={key}"}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "templates in the path and query are accepted" test $? = 0
http_cfg "$tmp/http.json" '{"url": "https://{$.host}/charges", "allowed_hosts": ["a.example", "b.example:8443"]}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "a templated host with http.allowed_hosts is accepted" test $? = 0
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "applied_statuses": [409, 200, 503], "rate_per_s": 0, "max_concurrent": 0, "reconcile": {"url": "https://pay.example/x", "found": "id"}}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "bad applied_statuses, rate_per_s, max_concurrent, reconcile.found exit 2" test $? = 2
for k in applied_statuses rate_per_s max_concurrent reconcile.found; do
  check "http.$k is named" grep -q "^config: routes\[0\].http.$k: " "$tmp/err"
done
http_cfg "$tmp/http.json" '{"url": "https://pay.example/x", "applied_statuses": [409], "rate_per_s": 2.5, "max_concurrent": 4, "reconcile": {"url": "https://pay.example/x?key={key}", "found": "$[0].id"}}'
"$inboxd" --check-config --config "$tmp/http.json" >/dev/null 2>"$tmp/err"
check "good applied_statuses, rate_per_s, max_concurrent, reconcile.found" test $? = 0

# Keys that cannot drift: a key from a source that differs between copies of
# one message, the lock token, or constants alone is refused (exit 2, key
# named); an HTTP route without a key is accepted with a warning.
for key in 'k:{$.id}:{delivery_count}' 'k:{sequence_number}' 'k:{enqueued_at}' 'k:{lock_token}' 'fixed'; do
  jq --arg k "$key" '.routes = [{match: "*", sql: "select 1", idempotency_key: $k}]' "$tmp/good.json" >"$tmp/key.json"
  "$inboxd" --check-config --config "$tmp/key.json" >/dev/null 2>"$tmp/err"
  check "idempotency_key '$key' exits 2" test $? = 2
  check "idempotency_key '$key' is named" grep -q '^config: routes\[0\].idempotency_key: ' "$tmp/err"
done
jq '.routes = [{match: "*", sql: "select 1", idempotency_key: "k:{message_id}:{$.id}"}]' "$tmp/good.json" >"$tmp/key.json"
"$inboxd" --check-config --config "$tmp/key.json" >/dev/null 2>"$tmp/err"
check "a key from the message id and the body checks out" test $? = 0
jq '.routes = [{match: "*", http: {url: "https://pay.example/x"}}]' "$tmp/good.json" >"$tmp/key.json"
"$inboxd" --check-config --config "$tmp/key.json" >/dev/null 2>"$tmp/err"
check "an HTTP route without a key still checks out" test $? = 0
check "and warns that it keys on the message id" grep -q '^config: warning: routes\[0\].idempotency_key: not set, so this HTTP route keys its call on the message id' "$tmp/err"

# emit_on_failure: its message_id is checked like emit's (a source that
# differs between copies, the failure's text, a constant: exit 2, named).
for id in 'r:{delivery_count}' 'r:{error}' 'r:{reason}'; do
  jq --arg id "$id" '.routes = [{match: "*", sql: "select 1",
      emit_on_failure: [{entity: "rejections", message_id: $id}]}]' "$tmp/good.json" >"$tmp/rej.json"
  "$inboxd" --check-config --config "$tmp/rej.json" >/dev/null 2>"$tmp/err"
  check "emit_on_failure message_id '$id' exits 2" test $? = 2
  check "emit_on_failure message_id '$id' is named" grep -q '^config: routes\[0\].emit_on_failure\[0\].message_id: ' "$tmp/err"
done
jq '.routes = [{match: "*", sql: "select 1", emit_on_failure: [{entity: "rejections",
    message_id: "{message_id}:rejected", subject: "Rejected.{reason}", properties: {why: "error"}}]}]' \
  "$tmp/good.json" >"$tmp/rej.json"
"$inboxd" --check-config --config "$tmp/rej.json" >/dev/null 2>"$tmp/err"
check "an emit_on_failure with the failure's sources checks out" test $? = 0

# Retention against the replay window: a warning (exit 0) naming both keys
# when db.inbox_retention_days is shorter than the entity's message TTL or
# duplicate-detection history; none when it is longer, or when rows are kept.
jq '.db.inbox_retention_days = 7 | .servicebus.message_ttl_s = 1209600' "$tmp/good.json" >"$tmp/ret.json"
"$inboxd" --check-config --config "$tmp/ret.json" >/dev/null 2>"$tmp/err"
check "retention shorter than the TTL still checks ok" test $? = 0
check "and warns naming both" grep -q '^config: warning: db.inbox_retention_days: 7 days (604800 s) is shorter than servicebus.message_ttl_s (1209600 s)' "$tmp/err"
jq '.db.inbox_retention_days = 1 | .servicebus.duplicate_detection_window_s = 172800' "$tmp/good.json" >"$tmp/ret.json"
"$inboxd" --check-config --config "$tmp/ret.json" >/dev/null 2>"$tmp/err"
check "retention shorter than duplicate detection warns" grep -q '^config: warning: db.inbox_retention_days: 1 days (86400 s) is shorter than servicebus.duplicate_detection_window_s (172800 s)' "$tmp/err"
jq '.db.inbox_retention_days = 30 | .servicebus.message_ttl_s = 1209600 | .servicebus.duplicate_detection_window_s = 600' "$tmp/good.json" >"$tmp/ret.json"
"$inboxd" --check-config --config "$tmp/ret.json" >/dev/null 2>"$tmp/err"
check "retention longer than both does not warn" bash -c "! grep -q 'warning: db.inbox_retention_days' '$tmp/err'"
jq '.db.inbox_retention_days = 0 | .servicebus.message_ttl_s = 1209600' "$tmp/good.json" >"$tmp/ret.json"
"$inboxd" --check-config --config "$tmp/ret.json" >/dev/null 2>"$tmp/err"
check "rows kept forever do not warn" bash -c "! grep -q 'warning: db.inbox_retention_days' '$tmp/err'"

# The words: "applied once in effect", never a bare "exactly once" claim.
check "the READMEs say applied once in effect" grep -q "applied once in effect" "$src/README.md" "$src/db/README.md"
check "and never exactly once" bash -c "! grep -i -q -E 'exactly[ -]once' '$src/README.md' '$src/db/README.md' '$src/helm/inboxd/README.md' '$src'/docs/*.md"
check "the README names the uncertain state where it does not hold" grep -q "leaves a call that timed out after it was sent in the \*\*uncertain\*\* state" "$src/README.md"

exit $fail
