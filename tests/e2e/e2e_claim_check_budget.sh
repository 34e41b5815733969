#!/usr/bin/env bash
# Claim check and the byte budget: blobs fetched from Azurite (tests/blob,
# loopback, Shared Key) count against servicebus.max_held_mb together with
# the received messages, not beside them.
#   servicebus.max_held_mb 4, eight messages in flight at once (each ~100 KB,
#   counted twice by the receiver), each naming a 1 MiB blob; a trigger on
#   items makes each insert last 0.5 s, so that the blobs would be held
#   together. Final state: eight rows, once each, nothing dead-lettered, and
#   inboxd_held_bytes_peak (messages plus blobs held at once, as each blob
#   was admitted) within 4 MiB; a budget per kind (blobs 4 MiB beside the
#   messages) reached 4.75 MB here.
#   A 5 MiB blob (above the budget, below its route's max_bytes) is never
#   read: dead letter ClaimCheckTooLarge naming servicebus.max_held_mb.
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
. "$E2E_SRC/tests/blob/azurite.sh"
[ "$DIALECT" = postgresql ] || die "the slow insert is a PostgreSQL trigger"
create_items_table
sql "CREATE FUNCTION e2e_slow() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END \$\$;
     CREATE TRIGGER e2e_slow BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION e2e_slow()" >/dev/null
start_azurite
start_emu '{"queues":[{"name":"blobs","lock_duration_s":30,"max_delivery_count":10}]}'
blob_put "$(jq -n '[range(0; 8) | {container: "docs", name: "b\(.).json", doc: {id: "b-\(.)", n: .}, pad: 1048576}]
                   + [{container: "docs", name: "huge.json", doc: {id: "huge", n: 9}, pad: 5242880}]')" >"$W/blobs.jsonl"
export E2E_STORAGE_KEY=$AZ_KEY
routes=$(jq -n --arg sql "$(items_insert_sql)" --arg host "127.0.0.1:$AZ_PORT" '
  [{match: "*", sql: $sql, params: ["$.id", "$.n", "session_id", "sequence_number", "message_id"],
    claim_check: {url: "{$.data.url}", allowed_hosts: [$host], auth: "shared_key", account: "devstoreaccount1",
                  account_key: {env: "E2E_STORAGE_KEY"}, max_bytes: 16777216}}]')
write_config "$W/inboxd.json" blobs "$routes" \
  '{"http": {"listen": "127.0.0.1:0"},
    "servicebus": {"max_held_mb": 4, "max_concurrent_calls": 8, "prefetch": 0},
    "db": {"batch_max": 1, "pool_size": 8}}'
jq -c '{message_id: ("ev-" + .name), subject: "BlobCreated",
        body: {eventType: "Microsoft.Storage.BlobCreated", data: {url: .url}, pad: ("p" * 100000)}}' \
  "$W/blobs.jsonl" >"$W/events.jsonl"
start_inboxd "$W/inboxd.json" inboxd
pid=$LAST_PID
port=$(http_port inboxd)
send_file blobs "$W/events.jsonl"
settled() { [ "$(broker_stat blobs completed)" -ge 8 ] && [ "$(broker_stat blobs dead_lettered)" -ge 1 ]; }
wait_until 90 settled || die "the blobs' messages were not settled"
check "rows, once each" "$(sql "SELECT count(*) || ' ' || count(DISTINCT id) FROM items")" "8 8"
check "inbox rows" "$(sql 'SELECT count(*) FROM inboxd_inbox')" 8
check "dead letters and their reasons" "$(dlq_reasons blobs | tr '\n' ,)" "ev-huge.json ClaimCheckTooLarge,"
"$INBOXCTL" peek --connection-string "$SB_CS" --entity blobs --dlq >"$W/dlq.jsonl"
case "$(jq -r .dead_letter_description "$W/dlq.jsonl")" in
*servicebus.max_held_mb*) ;;
*) die "the dead letter does not name servicebus.max_held_mb: $(jq -r .dead_letter_description "$W/dlq.jsonl")" ;;
esac
peak=$(metric "$port" inboxd_held_bytes_peak)
e2e_log "inboxd_held_bytes_peak $peak"
[ "$peak" -ge 1048576 ] || die "no blob was counted in the peak ($peak)"
[ "$peak" -le 4194304 ] || die "messages and blobs held at once reached $peak bytes, above max_held_mb 4 MiB"
check "queue empty" "$(queue_empty blobs && echo yes)" yes
stop_inboxd "$pid"; check "inboxd exit status" "$STOP_RC" 0
