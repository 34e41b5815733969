/*
 * wk_metrics.h - the metrics registry of inboxd and its Prometheus text
 * rendering (exposition format 0.0.4), served on /metrics by wk_health.
 *
 * The registry holds exactly the metrics the operator documentation lists:
 *
 *   inboxd_messages_total{result}        one per message outcome (wk_outcome.h)
 *   inboxd_duplicates_total{by}          completed without a second effect: by the
 *                                        inbox key, or by a route's business key
 *   inboxd_retries_total{class}          in-process retries by error class
 *   inboxd_dead_letters_total{reason,class}  by DeadLetterReason and error class (bounded)
 *   inboxd_lock_renewals_total{result}   renew-lock / renew-session-lock calls
 *   inboxd_lock_lost_total               locks lost before settlement
 *   inboxd_in_flight                     messages between receive and settle
 *   inboxd_oldest_in_flight_seconds      age of the oldest of those, at scrape time
 *   inboxd_oldest_unsettled_enqueued_seconds  since the oldest of those was enqueued
 *   inboxd_handler_duration_seconds      histogram of the inbox transaction time
 *   inboxd_message_age_seconds           histogram: enqueue to completed / dead-lettered
 *   inboxd_reconnects_total              AMQP reconnects
 *   inboxd_sessions_active               sessions held now (session entities)
 *   inboxd_sessions_parked               sessions seen parked, not since unparked
 *   inboxd_session_switches_total        sessions given back so their slot takes the next
 *   inboxd_session_switch_seconds        histogram: last message of a session settled ->
 *                                        its slot holding the next session
 *   inboxd_throttled_seconds_total       holding for com.microsoft:server-busy
 *   inboxd_server_busy_total             operations answered server-busy
 *   inboxd_receive_stalls_total          receive links recycled for a stall
 *   inboxd_link_recycles_total           receive links closed and attached again
 *   inboxd_batch_fallbacks_total         batches rolled back and applied one by one
 *   inboxd_entity_*                      what Service Bus says about the entity
 *                                        (wk_entity.c; see wk_metrics_entity_source)
 *   inboxd_build_info{version}           always 1
 *
 * Every label set is bounded: results and classes are enums, and dead-letter
 * reasons are interned up to WK_METRICS_MAX_REASONS distinct values, after
 * which new reasons are counted under reason="other". A reason is also cut
 * to WK_METRICS_REASON_MAX bytes.
 *
 * thread: every update function may be called from any thread at any time
 * between wk_metrics_new and wk_metrics_free. Counters and gauges are relaxed
 * atomics (no lock on the hot path); only the first sighting of a new
 * dead-letter reason takes a mutex.
 */
#ifndef WK_METRICS_H
#define WK_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"
#include "rl_relay.h"
#include "wk_outcome.h"

/* Distinct dead-letter reasons kept before folding into "other". */
#define WK_METRICS_MAX_REASONS 32
/* Longest reason label kept, in bytes (longer ones are truncated). */
#define WK_METRICS_REASON_MAX 64

/* The result label of inboxd_lock_renewals_total. */
typedef enum {
    WK_RENEW_OK = 0, /* broker granted a new locked-until */
    WK_RENEW_FAILED, /* request failed or timed out; the lock may still hold */
    WK_RENEW_LOST,   /* broker answered that the lock is gone */
    WK_RENEW__COUNT
} wk_renew_result_t;

/* The by label of inboxd_duplicates_total. */
typedef enum {
    WK_DUP_INBOX = 0,     /* the inbox row (message id or idempotency key) existed */
    WK_DUP_BUSINESS_KEY,  /* a route statement hit its own unique key (on_unique_violation) */
    WK_DUP__COUNT
} wk_dup_by_t;

typedef struct wk_metrics wk_metrics_t;

/*
 * Creates an empty registry. version labels inboxd_build_info (NULL: the
 * version inboxd was built as). Returns NULL only when out of memory.
 * thread: any (normally main, before other threads start).
 */
wk_metrics_t *wk_metrics_new(const char *version);
/* Frees the registry; no other thread may use it any more. NULL is a no-op. */
void wk_metrics_free(wk_metrics_t *m);

/* "ok", "failed", "lost"; "unknown" for an out-of-range value. */
const char *wk_renew_result_name(wk_renew_result_t result);

/*
 * Counts one message outcome. WK_OUT_DUPLICATE also counts
 * inboxd_duplicates_total, and WK_OUT_LOCK_LOST and WK_OUT_RELEASED (only
 * counted when the lock was lost first) inboxd_lock_lost_total, so
 * the caller makes one call per outcome. thread: any.
 */
void wk_metrics_message(wk_metrics_t *m, wk_outcome_t outcome);
/* Counts one batch rolled back and applied one message at a time. thread: any. */
void wk_metrics_batch_fallback(wk_metrics_t *m);
/*
 * Counts a duplicate found by a route's business key: inboxd_messages_total
 * {result="duplicate"} and inboxd_duplicates_total{by="business_key"}, in
 * place of wk_metrics_message(m, WK_OUT_DUPLICATE). thread: any.
 */
void wk_metrics_business_key_duplicate(wk_metrics_t *m);
/* Counts one in-process retry after an error of class cls. thread: any. */
void wk_metrics_retry(wk_metrics_t *m, ib_class_t cls);
/* The inboxd_circuit_open gauge (wk_breaker.h). thread: any. */
void wk_metrics_circuit_open_set(wk_metrics_t *m, bool open);
/* The inboxd_held_messages gauge: messages held for their destination (wk_dest.h). thread: any. */
void wk_metrics_held_set(wk_metrics_t *m, long long n);
/*
 * The inboxd_held_bytes_peak gauge reads peak (wk_claims_peak: received
 * messages and claim-checked blobs held at once); before serving. thread: main.
 */
void wk_metrics_held_peak(wk_metrics_t *m, const atomic_ullong *peak);
/* Counts a held message whose lock renewal ran out (inboxd_held_expired_total). thread: any. */
void wk_metrics_held_expired(wk_metrics_t *m);
/*
 * Counts a Retry-After longer than its route's http.max_retry_after_s, held
 * only that long (inboxd_http_retry_after_capped_total). thread: any.
 */
void wk_metrics_retry_after_capped(wk_metrics_t *m);
/*
 * The source of the inboxd_http_circuit_open{destination} lines: fn writes
 * them into buf (at most size bytes, NUL-terminated) and returns their
 * length. Set once before /metrics is served; called on the http thread.
 */
typedef size_t (*wk_metrics_dest_fn)(void *ctx, char *buf, size_t size);
void wk_metrics_dest_source(wk_metrics_t *m, wk_metrics_dest_fn fn, void *ctx);
/*
 * Counts one dead-lettered message under reason (NULL or "" count as
 * "unknown") and the class of the error behind it. Does not count
 * inboxd_messages_total: call wk_metrics_message with WK_OUT_DEAD_LETTERED
 * (or WK_OUT_CONFLICT) for that. thread: any.
 */
void wk_metrics_dead_letter(wk_metrics_t *m, const char *reason, ib_class_t cls);
/* Counts one lock renewal by result; WK_RENEW_LOST does not count lock_lost. */
void wk_metrics_lock_renewal(wk_metrics_t *m, wk_renew_result_t result);
/* Counts one AMQP reconnect. thread: any. */
void wk_metrics_reconnect(wk_metrics_t *m);
/*
 * Records one handler (inbox transaction) duration in seconds. Negative
 * values count as 0. thread: any.
 */
void wk_metrics_handler_duration(wk_metrics_t *m, double seconds);

/* One inbox transaction of this many messages (inboxd_batch_messages). */
void wk_metrics_batch(wk_metrics_t *m, size_t messages);

/*
 * HTTP routes: one request to a destination by route index and class
 * ("2xx", "429", "4xx", "5xx", "timeout", "error"), with its duration (also
 * inboxd_http_duration_seconds). Routes past WK_METRICS_HTTP_ROUTES share
 * the label route="other". thread: any.
 */
#define WK_METRICS_HTTP_ROUTES 32
void wk_metrics_http_request(wk_metrics_t *m, size_t route, const char *cls, double seconds);
/* An outcome recorded uncertain (inboxd_uncertain_total). thread: any. */
void wk_metrics_uncertain(wk_metrics_t *m);
/* An expired claim taken over (inboxd_claims_taken_over_total). thread: any. */
void wk_metrics_claim_taken_over(wk_metrics_t *m);
/* Records how long ago (seconds) a message that left the entity was enqueued. thread: any. */
void wk_metrics_message_age(wk_metrics_t *m, double seconds);
/*
 * Sets when the oldest in-flight message was enqueued (ms since the epoch;
 * 0 when none); the age is computed at scrape time. thread: any.
 */
void wk_metrics_oldest_enqueued_set(wk_metrics_t *m, long long enqueued_ms);

/* Sets inboxd_in_flight (negative values are stored as 0). thread: any. */
void wk_metrics_in_flight_set(wk_metrics_t *m, long long n);
/* Adds delta (+1 on receive, -1 on settle) to inboxd_in_flight. thread: any. */
void wk_metrics_in_flight_add(wk_metrics_t *m, long long delta);
/*
 * Sets when the oldest in-flight message was received, as ib_mono_ms();
 * 0 when nothing is in flight. The age is computed when /metrics is
 * scraped, so the owner only calls this when the oldest message changes.
 * thread: any.
 */
void wk_metrics_oldest_in_flight_set(wk_metrics_t *m, long long since_mono_ms);

/*
 * The outbox relay's figures (rl_relay_stats_t), read when /metrics is
 * scraped.
 */
typedef void (*wk_metrics_outbox_fn)(void *ctx, rl_relay_stats_t *out);
/*
 * Registers the source of the inboxd_outbox_* metrics (NULL: none, the
 * metrics are left out). Set once before /metrics is served; fn is called
 * on the http thread and must be thread-safe.
 */
void wk_metrics_outbox_source(wk_metrics_t *m, wk_metrics_outbox_fn fn, void *ctx);

/*
 * What Service Bus says about the consumed entity (wk_entity.c), read when
 * /metrics is scraped: inboxd_entity_messages{state} (left out until the
 * first successful read), inboxd_entity_oldest_enqueued_age_seconds,
 * inboxd_entity_max_delivery_count, inboxd_entity_lock_duration_seconds,
 * inboxd_entity_poll_up and inboxd_entity_poll_errors_total{source}.
 */
typedef struct wk_metrics_entity {
    bool counted; /* the counts were read at least once */
    long long active, scheduled, dead_letter, transfer_dead_letter;
    long long max_delivery_count, lock_duration_ms;
    bool up;        /* the last read of the management endpoint succeeded */
    bool age_known; /* a peek (or an empty entity) gave the oldest age */
    double oldest_age_s;
    unsigned long long errors_management, errors_peek;
} wk_metrics_entity_t;

typedef void (*wk_metrics_entity_fn)(void *ctx, wk_metrics_entity_t *out);
/* Registers the entity source (set once before serving; fn is called on the http thread). */
void wk_metrics_entity_source(wk_metrics_t *m, wk_metrics_entity_fn fn, void *ctx);

/*
 * Renders every metric in Prometheus text format 0.0.4 into a new
 * NUL-terminated string the caller frees; *len (if not NULL) gets its
 * length. Returns NULL when out of memory. thread: any.
 */
char *wk_metrics_render(wk_metrics_t *m, size_t *len);

/* A copy of the counters, for the stats log line. */
typedef struct wk_metrics_view {
    unsigned long long messages[WK_OUT__COUNT];
    unsigned long long retries; /* every class */
    unsigned long long lock_renewals[WK_RENEW__COUNT];
    unsigned long long reconnects;
    long long in_flight;
    long long oldest_in_flight_ms; /* age now; 0 when nothing is in flight */
} wk_metrics_view_t;

/* Copies the counters into v (each one atomically, not all at one instant). thread: any. */
void wk_metrics_read(wk_metrics_t *m, wk_metrics_view_t *v);
/*
 * Writes the dead-letter counts as a JSON object {"reason":n,...} into buf
 * (always NUL-terminated; reasons that do not fit are left out). thread: any.
 */
void wk_metrics_reasons_json(wk_metrics_t *m, char *buf, size_t size);

/* Sets the inboxd_otel_spans_* counters (shown from the first call on). thread: any. */
void wk_metrics_otel_set(wk_metrics_t *m, unsigned long long exported,
                         unsigned long long dropped);

/* The client's counters of the broker's misbehaviour, since start. */
typedef struct wk_metrics_broker {
    unsigned long long throttled_ms, server_busy, stalls, link_recycles;
} wk_metrics_broker_t;
/* Sets inboxd_throttled_seconds_total, _server_busy_total, _receive_stalls_total,
   _link_recycles_total. thread: any. */
void wk_metrics_broker_set(wk_metrics_t *m, const wk_metrics_broker_t *v);

/* Sets inboxd_sessions_parked. thread: any. */
void wk_metrics_sessions_parked_set(wk_metrics_t *m, long long n);
/* Sets inboxd_sessions_active. thread: any. */
void wk_metrics_sessions_active_set(wk_metrics_t *m, long long n);
/* Adds n to inboxd_session_switches_total. thread: any. */
void wk_metrics_session_switches_add(wk_metrics_t *m, unsigned long long n);
/* Records one session switch latency in seconds (negative or NaN count as 0). thread: any. */
void wk_metrics_session_switch(wk_metrics_t *m, double seconds);

/* Bucket upper bounds (seconds) of inboxd_session_switch_seconds, for tests. */
extern const double wk_metrics_switch_buckets[];
extern const size_t wk_metrics_switch_bucket_count;

/* Bucket upper bounds (seconds) of inboxd_handler_duration_seconds, for tests. */
extern const double wk_metrics_duration_buckets[];
extern const size_t wk_metrics_duration_bucket_count;
/* Bucket upper bounds (seconds) of inboxd_message_age_seconds. */
extern const double wk_metrics_age_buckets[];
extern const size_t wk_metrics_age_bucket_count;

#endif
