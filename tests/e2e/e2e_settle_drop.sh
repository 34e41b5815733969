#!/usr/bin/env bash
# 2,000 messages while the broker applies but never answers 50 settlements
# (sbemu --fault-drop-settle-reply 50): every message applied once, the
# queue empty, no lock_lost counted (the broker completed those messages),
# the unanswered ones reported as settlement_unknown. A clean run of the
# same load comes first; the ratio of the two times is printed, not
# asserted (speed belongs to benchmarks, and the machine may be loaded).
. "$(dirname "$0")/lib.sh"
e2e_init "${1:-postgresql}"
N=2000
DROPS=50
create_items_table

# run_once TAG [sbemu flags...]: one broker, N messages, inboxd until the
# queue is empty; sets ELAPSED_MS and METRICS.
run_once() {
  local tag=$1; shift
  start_emu '{"queues":[{"name":"drop","lock_duration_s":30,"max_delivery_count":10}]}' "$@"
  E2E_SENT[drop]=0
  gen_items $N "$tag" >"$W/msgs-$tag.jsonl"
  send_file drop "$W/msgs-$tag.jsonl"
  write_config "$W/inboxd-$tag.json" drop "$(items_route)" \
    '{"http":{"listen":"127.0.0.1:0"},"servicebus":{"settle_timeout_ms":2000}}'
  local t0; t0=$(date +%s%3N)
  start_inboxd "$W/inboxd-$tag.json" "inboxd-$tag"
  local pid=$LAST_PID port; port=$(http_port "inboxd-$tag")
  wait_until 300 queue_empty drop || die "$tag: queue not drained: active=$(broker_stat drop active) locked=$(broker_stat drop locked)"
  # Done when every message has its msg_done outcome (the unanswered ones too).
  wait_until 60 bash -c "[ \$(jq -r 'select(.event==\"msg_done\") | .message_id' '$W/inboxd-$tag.log' | sort -u | grep -c .) -ge $N ]" \
    || die "$tag: not every message reported an outcome"
  ELAPSED_MS=$(( $(date +%s%3N) - t0 ))
  METRICS=$(metrics_get "$port")
  stop_inboxd $pid; check "$tag: inboxd exit status" "$STOP_RC" 0
  check "$tag: business rows" "$(sql "SELECT count(*) FROM items WHERE id LIKE '$tag-%'")" $N
  check "$tag: applied once" "$(sql "SELECT count(DISTINCT id) FROM items WHERE id LIKE '$tag-%'")" $N
  check "$tag: completed by the broker" "$(broker_stat drop completed)" $N
  check "$tag: queue empty" "$(( $(broker_stat drop active) + $(broker_stat drop locked) ))" 0
  check "$tag: dead-lettered" "$(broker_stat drop dead_lettered)" 0
  # Nothing lost in transit when a link is recycled: no second delivery.
  check "$tag: all on the first delivery" \
    "$(sql "SELECT max(delivery_count) FROM inboxd_inbox WHERE message_id LIKE '$tag-%'")" 1
  kill "$EMU_PID" 2>/dev/null; wait "$EMU_PID" 2>/dev/null || true
}

run_once clean
clean_ms=$ELAPSED_MS
check "clean: no settlement unknown" "$(metric_in "$METRICS" 'inboxd_messages_total{result="settlement_unknown"}')" 0

run_once fault --fault-drop-settle-reply $DROPS
fault_ms=$ELAPSED_MS
unknown=$(metric_in "$METRICS" 'inboxd_messages_total{result="settlement_unknown"}')
check "fault: no lock_lost for completed messages" "$(metric_in "$METRICS" 'inboxd_messages_total{result="lock_lost"}')" 0
check "fault: lock losses" "$(metric_in "$METRICS" inboxd_lock_lost_total)" 0
check "fault: the unanswered settlements are reported" "$([ "$unknown" -ge 1 ] && echo yes)" yes
ratio=$(awk -v a="$fault_ms" -v b="$clean_ms" 'BEGIN { printf "%.2f", a / b }')
echo "settle-drop: clean ${clean_ms} ms, with $DROPS unanswered settlements ${fault_ms} ms, ratio $ratio, settlement_unknown $unknown"
e2e_log "ratio fault/clean: $ratio"
