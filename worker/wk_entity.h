/*
 * wk_entity.h - what Service Bus itself says about the entity inboxd
 * consumes: its runtime counts (active, scheduled, dead-lettered,
 * transfer-dead-lettered), its MaxDeliveryCount and LockDuration, read from
 * the HTTPS management endpoint (GET https://NAMESPACE/ENTITY?api-version=
 * 2021-05, the Atom entry the administration clients read), and the
 * enqueued time of its oldest message, from a peek (no lock) through
 * $management.
 *
 * One thread of its own polls every servicebus.entity_poll_s: it never
 * touches the receiving client (the peek runs on a connection of its own),
 * so an unreachable or refusing endpoint costs a metric and one log line
 * per condition, never a stalled receiver. The figures reach /metrics
 * through wk_metrics_entity_source.
 */
#ifndef WK_ENTITY_H
#define WK_ENTITY_H

#include <stdbool.h>

#include "ib_err.h"
#include "sb_token.h"
#include "wk_metrics.h"

/* What one read of the management endpoint gives. */
typedef struct wk_entity_info {
    long long active, scheduled, dead_letter, transfer_dead_letter;
    long long max_delivery_count; /* 0 when the entity does not say (a topic) */
    long long lock_duration_ms;   /* 0 when the entity does not say */
    bool requires_session;
} wk_entity_info_t;

typedef struct wk_entity_opts {
    const char *connection_string; /* required */
    const char *entity;            /* required: a queue or "topic/Subscriptions/sub" */
    const char *endpoint;          /* base URL; NULL or "": https://HOST/ of the connection string */
    const char *ca_file;           /* NULL: the system store */
    sb_token_get_fn token_get;     /* NULL: SAS from the connection string */
    void *token_ctx;
    unsigned sas_token_lifetime_s; /* the peeker's SAS tokens; 0 = one hour */
    long poll_s;          /* seconds between polls (>= 1) */
    long http_timeout_ms; /* per request; 0 = 10000 */
    wk_metrics_t *metrics; /* where the figures are shown; may be NULL */
    /* Optional: each successful read's active count (the client's stall detection).
       thread: the poller. */
    void (*on_active)(void *ctx, long long active);
    void *active_ctx;
} wk_entity_opts_t;

typedef struct wk_entity wk_entity_t;

/*
 * Parses the Atom entry of a queue or subscription description. An Atom
 * feed without an entry (what Service Bus answers for an entity that does
 * not exist) is IB_E_NOTFOUND; anything without CountDetails is
 * IB_E_DECODE. thread: any.
 */
ib_err_t wk_entity_parse(const char *xml, wk_entity_info_t *out, ib_error_t *err);

/*
 * An xs:duration ("PT1M", "PT30S", "P10675199DT2H48M5.4775807S") in
 * milliseconds; -1 when it is not one. thread: any.
 */
long long wk_entity_duration_ms(const char *s);

/*
 * Reads the entity's description once (blocking, bounded by
 * http_timeout_ms). IB_E_AUTH for 401/403, IB_E_NOTFOUND, IB_E_IO when the
 * endpoint is unreachable or answers another status, IB_E_DECODE. For
 * one-shot checks (--check-config) and the polling thread. thread: any.
 */
ib_err_t wk_entity_fetch(const wk_entity_opts_t *o, wk_entity_info_t *out, ib_error_t *err);

/*
 * Starts the polling thread (first poll at once) and registers it as the
 * metrics' entity source. o is copied; the strings and the token context
 * must outlive the poller. NULL with err filled when the connection string
 * cannot be used or the thread cannot start. Call curl_global_init (or
 * fx_global_init) first (wk_daemon does). thread: main.
 */
wk_entity_t *wk_entity_start(const wk_entity_opts_t *o, ib_error_t *err);

/*
 * Stops and joins the thread (a request in flight is bounded by its
 * timeout); the last figures stay readable until wk_entity_free. Call it
 * before the token source goes. Again or NULL: no-op. thread: main.
 */
void wk_entity_stop(wk_entity_t *ep);
/* Stops if needed and frees; after the last /metrics reader (the http thread). NULL: no-op. */
void wk_entity_free(wk_entity_t *ep);

/*
 * The entity's MaxDeliveryCount as last read from Service Bus, 0 until a
 * read succeeded (or when ep is NULL). For the retry budget default
 * (retry.max_deliveries one below it) and the config checks. thread: any.
 */
long long wk_entity_max_delivery_count(wk_entity_t *ep);

/* The entity's LockDuration in ms as last read, 0 until known. thread: any. */
long long wk_entity_lock_duration_ms(wk_entity_t *ep);

/* The description as last read into out; false until a read succeeded (or ep NULL). thread: any. */
bool wk_entity_last(wk_entity_t *ep, wk_entity_info_t *out);

#endif
