/*
 * wk_pipeline.h - one message through the inbox: route, bind, the inbox
 * transaction with in-process retries, and the settlement decision.
 *
 * The decision is pure data so that the daemon can settle it and log it,
 * and so that it can be tested without a broker.
 */
#ifndef WK_PIPELINE_H
#define WK_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "db_inbox.h"
#include "ib_err.h"
#include "sb_msg.h"
#include "wk_breaker.h"
#include "wk_config.h"
#include "wk_metrics.h"
#include "wk_msgctx.h"
#include "wk_outcome.h"
#include "wk_route.h"

typedef struct wk_decision {
    wk_outcome_t outcome;
    sb_disposition_t disposition;
    char reason[128];       /* dead-letter reason */
    char description[1024]; /* dead-letter description; no secret, no body */
    ib_error_t err;         /* the failure behind the outcome, if any */
    int attempts;           /* inbox transactions (or HTTP calls) tried */
    long long duration_ms;  /* time spent in the database (and on the call) */
    long http_status;       /* HTTP routes: the last answer's status, 0 when none */
    int calls;              /* HTTP routes: requests sent */
    char remote_id[128];    /* HTTP routes: the destination's id of the effect */
    long route_index;       /* the route that matched; -1 when none did */
    bool business_key;      /* a duplicate found by the route's own unique key */
    char constraint[128];   /* that key's name, as the database gave it */
    char trace_id[WK_TRACE_ID_MAX]; /* from traceparent / Diagnostic-Id; "" when none */
} wk_decision_t;

/* What a db worker needs; shared read-only, except the atomics. */
typedef struct wk_pipeline {
    const wk_config_t *cfg;
    const wk_routes_t *routes;
    wk_metrics_t *metrics;           /* may be NULL */
    atomic_bool *stopping;           /* stop retrying when set (may be NULL) */
    atomic_llong *retry_deadline_ms; /* mono ms after which no retry starts (0 = none) */
    atomic_bool db_reachable;
    /*
     * Every inbox attempt's result goes here (database health for /readyz).
     * With errors.circuit_breaker, a setup error (IB_E_DB_SETUP) is never
     * the message's fault: it is retried without limit while the lock is
     * held and the worker is not draining, and while the circuit is open
     * the message waits for its turn to probe. May be NULL (tests).
     */
    wk_breaker_t *breaker;
    struct wk_relay *relay; /* woken after a commit that emitted (may be NULL) */
} wk_pipeline_t;

/*
 * Decides the fate of msg: runs it through its route and the inbox
 * transaction on dbc (retrying transient failures with exponential backoff
 * and full jitter, while *lock_lost stays false), and fills d.
 * thread: a db worker (the owner of dbc).
 */
void wk_pipeline_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                         const atomic_bool *lock_lost, wk_decision_t *d);

/* One message of a batch, and the decision to fill for it. */
typedef struct wk_batch_msg {
    const sb_msg_t *msg;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
} wk_batch_msg_t;

/*
 * Decides the fate of n messages together: what needs no database is
 * decided first, the rest run their inbox transactions as one batch
 * (db_inbox_apply_batch: each ends exactly as it would alone). Messages
 * that failed transiently are retried together after one backoff while
 * each one's lock holds; n == 1 is wk_pipeline_process. Sessions: the
 * caller never puts two messages of one session in a batch, nor a message
 * whose route is HTTP (wk_pipeline_alone) with others.
 * thread: a db worker (the owner of dbc).
 */
void wk_pipeline_process_batch(wk_pipeline_t *p, db_conn_t *dbc, const wk_batch_msg_t *m, size_t n);

/*
 * True when msg must be processed alone, never in a batch: its route calls
 * out over HTTP (claim, call, finish in transactions of their own).
 * thread: any.
 */
bool wk_pipeline_alone(const wk_pipeline_t *p, const sb_msg_t *msg);

/*
 * Whether a transient failure (in d->err) may be retried: attempts left,
 * lock held, not draining, the drain deadline not passed. When so, logs
 * msg_retry, sleeps the backoff (at least min_wait_ms, e.g. a Retry-After)
 * and returns true; otherwise sets the abandon decision (or, past
 * retry.max_deliveries / retry.max_age_s, the budget's dead letter) and
 * returns false.
 * thread: a db worker.
 */
bool wk_pipeline_retry_wait(wk_pipeline_t *p, const sb_msg_t *msg, const atomic_bool *lock_lost,
                            unsigned *seed, wk_decision_t *d, long long min_wait_ms);

/* Backoff before retry attempt n (1-based): uniform in [0, min(max, base * 2^(n-1))]. */
long long wk_backoff_ms(long long base_ms, long long max_ms, int n, unsigned *seed);

#endif
