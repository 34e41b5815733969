#!/usr/bin/env bash
# The Grafana dashboard (helm/inboxd/dashboards/inboxd.json) and the chart's
# alerts, proven against a real Prometheus (Debian's package) scraping a live
# inboxd every second, with the labels the chart's ServiceMonitor gives
# (namespace, consumer, entity, pod). The run: orders through an HTTP route
# whose destination is down for a while (held, its circuit open) and that
# emits a receipt each through the outbox, items through a SQL route, and
# bad items dead-lettered, with the entity poller on. Asserted:
#   - final state: one charge and one receipt per order, the items applied,
#     the bad ones in the DLQ as HandlerError;
#   - every panel query, with the dashboard's variables set to this run's
#     labels, returns a non-empty result through Prometheus's HTTP API, and
#     each variable's query lists this run's value;
#   - Prometheus saw the destination held (circuit 1, held messages > 0);
#   - every metric name the dashboard or the PrometheusRule uses is on
#     inboxd's /metrics (a metric renamed in code without them fails here),
#     and the check itself refuses a name that is not there.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
. "$(dirname "$0")/outbox_lib.sh"
e2e_init "${1:-postgresql}"
command -v prometheus >/dev/null || die "prometheus is not installed (Debian package prometheus; scripts/install-deps)"
DASH="$E2E_SRC/helm/inboxd/dashboards/inboxd.json"
RULES="$E2E_SRC/helm/inboxd/templates/prometheusrule.yaml"
N=20
create_charges_table
create_items_table
start_emu '{"queues":[{"name":"charges","lock_duration_s":5,"max_delivery_count":10},
                      {"name":"receipts"}]}' --http-listen 127.0.0.1:0
EMU_HTTP=$(head -n 1 "$W/sbemu.log" | jq -r .http_port)
start_fake pay idempotent; PAY=$FAKE_URL
routes=$(charge_route "$PAY" true '{"lease_s": 10}' | jq --arg sql "$(items_insert_sql)" '
  .[0].emit = [{entity: "receipts", message_id: "receipt:{$.orderId}", subject: "ChargeCaptured", body: "$"}]
  | . + [{match: {subject: "Item"}, sql: $sql,
          params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
          idempotency_key: "item:{$.id}"}]')
write_config "$W/inboxd.json" charges "$routes" "$(jq -n --arg ep "http://127.0.0.1:$EMU_HTTP/" '{
  servicebus: {entity_poll_s: 1, management_endpoint: $ep, max_concurrent_calls: 64},
  retry: {attempts: 3, base_ms: 200, max_ms: 2000},
  outbox: {poll_ms: 500},
  http: {listen: "127.0.0.1:0"}}')"
start_inboxd "$W/inboxd.json" inboxd; pid=$LAST_PID
port=$(http_port inboxd)

# ---- Prometheus, scraping inboxd as the chart's ServiceMonitor would ----
prom_port=""
for _ in $(seq 1 200); do
  p=$((20000 + RANDOM % 12000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then prom_port=$p; break; fi
done
[ -n "$prom_port" ] || die "no free port for Prometheus"
cat >"$W/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: inboxd
    static_configs:
      - targets: ["127.0.0.1:$port"]
        labels: {namespace: apps, consumer: e2e, entity: charges, pod: inboxd-0}
YAML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prom" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$W/prometheus.log" 2>&1 &
E2E_PIDS+=("$!")
PROM="http://127.0.0.1:$prom_port"

# prom_query EXPR: the JSON answer of an instant query (fails on an error).
prom_query() {
  local out
  out=$(curl -fsS -G "$PROM/api/v1/query" --data-urlencode "query=$1" 2>&1) \
    || fail "prometheus query failed: $1: $out"
  [ "$(jq -r .status <<<"$out")" = success ] || fail "prometheus refused $1: $out"
  printf '%s\n' "$out"
}
# prom_count EXPR: how many series the query returns.
prom_count() { prom_query "$1" | jq '.data.result | length'; }
# scraped: Prometheus answers and has scraped inboxd (false while it starts).
scraped() {
  curl -fsS -G "$PROM/api/v1/query" --data-urlencode 'query=up{job="inboxd"} == 1' 2>/dev/null \
    | jq -e '.data.result | length == 1' >/dev/null
}
wait_until 30 scraped || die "Prometheus never scraped inboxd: $(tail -n 5 "$W/prometheus.log")"

# ---- the run ----
{ gen_orders $N
  gen_items $N i Item
  awk 'BEGIN { for (i = 1; i <= 3; i++) printf "{\"message_id\":\"bad-%d\",\"subject\":\"Item\",\"body\":{\"id\":\"bad%d\",\"n\":-1}}\n", i, i }'
} >"$W/msgs.jsonl"
fake_config "$PAY" '{"faults":[{"kind":"status","status":503,"for_ms":6000}]}'
send_file charges "$W/msgs.jsonl"
wait_until 90 queue_empty charges || die "charges not drained"
wait_until 30 all_published $N || die "receipts not published: $(outbox_count pending) pending"
# A scrape two seconds after the last settlement, so every rate has its samples.
t_done=$(date +%s)
fresh_scrape() { [ "$(prom_count "timestamp(up{job=\"inboxd\"}) > $((t_done + 2))")" = 1 ]; }
wait_until 20 fresh_scrape || die "Prometheus scraped nothing after the run"
check "Prometheus saw the receipts published" \
  "$(prom_query 'inboxd_outbox_published_total{job="inboxd"}' | jq -r '.data.result[0].value[1]')" $N

check "charges rows" "$(sql 'SELECT count(*) FROM charges')" $N
check "items applied" "$(sql "SELECT count(*) FROM items WHERE id LIKE 'i-%'")" $N
check "receipts in the target queue" "$(broker_stat receipts active)" $N
check "dead letters" "$(dlq_reasons charges | awk '{ print $2 }' | sort | uniq -c | awk '{ print $1, $2 }')" "3 HandlerError"
check "Prometheus saw the destination's circuit open" \
  "$(prom_query 'max(max_over_time(inboxd_http_circuit_open{job="inboxd"}[5m]))' | jq -r '.data.result[0].value[1]')" 1
held=$(prom_query 'max(max_over_time(inboxd_held_messages{job="inboxd"}[5m]))' | jq -r '.data.result[0].value[1]')
[ "${held%.*}" -gt 0 ] || die "Prometheus never saw a held message (max $held)"
e2e_log "ok   Prometheus saw up to $held held messages"

# ---- every panel's query, the variables set to this run's labels ----
jq -r '.panels[] | select(.type != "row") | .title as $t | .targets[] | [$t, .expr] | @tsv' "$DASH" >"$W/queries.tsv"
nq=$(grep -c . "$W/queries.tsv")
[ "$nq" -ge 20 ] || die "the dashboard has only $nq queries"
empty=()
while IFS=$'\t' read -r title expr; do
  q=${expr//'$namespace'/apps}; q=${q//'$consumer'/e2e}; q=${q//'$entity'/charges}
  q=${q//'$__rate_interval'/1m}
  case "$q" in *'$'*) die "panel '$title': unknown variable left in $q" ;; esac
  n=$(prom_count "$q")
  [ "$n" -gt 0 ] || empty+=("$title: $q")
done <"$W/queries.tsv"
[ "${#empty[@]}" = 0 ] || die "panel queries with no result: $(printf '%s; ' "${empty[@]}")"
e2e_log "ok   $nq panel queries answered"
for v in namespace:apps entity:charges consumer:e2e; do
  name=${v%%:*}
  vals=$(curl -fsS -G "$PROM/api/v1/label/$name/values" --data-urlencode 'match[]=inboxd_build_info' | jq -r '.data[]')
  grep -qx "${v#*:}" <<<"$vals" || die "variable $name lists '$vals', not ${v#*:}"
  jq -e --arg n "$name" '.templating.list[] | select(.name == $n) | .query.query | test("inboxd_build_info")' "$DASH" >/dev/null \
    || die "variable $name does not read inboxd_build_info"
done
e2e_log "ok   variables namespace, entity, consumer list this run's labels"

# ---- every metric name used exists on /metrics ----
metrics_get "$port" >"$W/metrics.txt"
stop_inboxd $pid; check "inboxd exit status" "$STOP_RC" 0
# missing_names FILE...: names used in FILEs that /metrics does not declare.
missing_names() {
  grep -ohE '\b(inboxd_[a-z_]+|process_start_time_seconds)\b' "$@" | sort -u | while read -r m; do
    base=$m
    case "$m" in *_bucket | *_sum | *_count)
      base=${m%_*}; grep -q "^# TYPE $base histogram" "$W/metrics.txt" || base=$m ;;
    esac
    grep -q "^# TYPE $base " "$W/metrics.txt" || echo "$m"
  done
}
missing=$(missing_names "$DASH" "$RULES")
check "metric names of the dashboard and alerts missing from /metrics" "$missing" ""
echo 'rate(inboxd_renamed_total[1m])' >"$W/renamed.txt"
check "the check catches a renamed metric" "$(missing_names "$W/renamed.txt")" inboxd_renamed_total
