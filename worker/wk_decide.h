/*
 * wk_decide.h - the decision about one message and the one way to make it:
 * shared by the pipeline (wk_pipeline.c: SQL routes, batches, retries) and
 * the HTTP effect runner (wk_effect.c), which do not include each other.
 *
 * Every decision goes through wk_decide (complete, abandon, release) or
 * wk_decide_dead_letter (a reason of wk_outcome.h's table, which gives its
 * outcome and class; the text always sanitised to UTF-8). No path sets an
 * outcome, a disposition or a reason by hand.
 *
 * thread: a db worker (the decision is its own until settle hands it over).
 */
#ifndef WK_DECIDE_H
#define WK_DECIDE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "ib_backoff.h"
#include "ib_err.h"
#include "sb_msg.h"
#include "wk_breaker.h"
#include "wk_config.h"
#include "wk_dest.h"
#include "wk_metrics.h"
#include "wk_msgctx.h"
#include "wk_outcome.h"
#include "rt_route.h"

/*
 * What one delivery keeps from run to run across its holds (the
 * pipeline's prepare clears the rest of the decision): the reconcile
 * lookups made, the last error a hold was for, whether an HTTP call of it
 * may have acted while its row is unfinished (unresolved), and whether
 * its hold ran out on the last delivery the retry budget allows (spent:
 * decided by a worker without another call: recorded uncertain when its
 * call may have acted, else dead-lettered RetryBudgetExhausted).
 */
typedef struct wk_carry {
    int lookups;
    char last_error[256];
    bool unresolved;
    bool spent;
    int fetches;    /* claim check: fetches held for the storage service (the backoff's n) */
    ib_rand_t seed; /* their backoff's state */
} wk_carry_t;

typedef struct wk_decision {
    wk_outcome_t outcome;
    sb_disposition_t disposition;
    char reason[128];        /* dead-letter reason */
    char description[1024];  /* dead-letter description; no secret, no body */
    ib_class_t reason_class; /* the dead-letter reason's class (wk_outcome.h) */
    ib_error_t err;          /* the failure behind the outcome, if any */
    int attempts;            /* inbox transactions (or HTTP calls) tried */
    long long duration_ms;   /* time spent in the database (and on the call) */
    long http_status;        /* HTTP routes: the last answer's status, 0 when none */
    int calls;               /* HTTP routes: requests sent */
    char remote_id[128];     /* HTTP routes: the destination's id of the effect */
    long route_index;        /* the route that matched; -1 when none did */
    bool business_key;       /* a duplicate found by the route's own unique key */
    char constraint[128];    /* that key's name, as the database gave it */
    char trace_id[WK_TRACE_ID_MAX]; /* from traceparent / Diagnostic-Id; "" when none */
    /*
     * HTTP routes: not settled but held for its destination (wk_dest.h),
     * its claim given back: the daemon keeps it under its renewed lock and
     * runs it again after hold_ms once the destination may take a call.
     */
    bool held;
    long long hold_ms;
    char dest[FX_DEST_KEY_MAX];
    bool decided; /* set by wk_decide (and so by every dead letter): a settlement was chosen */
    wk_carry_t carry;
} wk_decision_t;

/* What a db worker needs; shared read-only, except the atomics. */
typedef struct wk_pipeline {
    const wk_config_t *cfg;
    const rt_routes_t *routes;
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
    struct rl_relay *relay; /* woken after a commit that emitted (may be NULL) */
    /* HTTP destinations: calls held rather than retried in the worker (NULL: retried). */
    wk_dests_t *dests;
    /* Live replicas, dividing limits set for the cluster (NULL: none such route). */
    struct wk_replicas *replicas;
    /* The entity poller: its MaxDeliveryCount sets retry.max_deliveries -1 (NULL: none). */
    struct wk_entity *entity;
    /*
     * Settles one message of a batch before the batch ends (an HTTP call
     * answered while others are under way); after it the decision is the
     * settler's. NULL: every message is settled when its batch ends.
     */
    void (*settle_now)(void *ctx, wk_decision_t *d);
    void *settle_ctx;
    /* Claim check (wk_claim.h): the blob budget and token; NULL: unbounded, no identity. */
    struct wk_claims *claims;
} wk_pipeline_t;

/*
 * Settles d as o, with o's settlement: complete (applied, duplicate,
 * skipped, recorded), abandon (abandoned) or release (released). A dead
 * letter is wk_decide_dead_letter's.
 */
void wk_decide(wk_decision_t *d, wk_outcome_t o);

/*
 * Dead-letters d for reason r: r's word, outcome and class from the table;
 * the description formatted and sanitised to well-formed UTF-8 (subjects,
 * ids and driver texts may carry invalid bytes). d->err is left as it is.
 */
void wk_decide_dead_letter(wk_decision_t *d, wk_dl_reason_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same for a route's `action: "deadletter"`: its own reason word, class permanent. */
void wk_decide_route_dead_letter(wk_decision_t *d, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * The settlement to send for d, the one rule every path goes through: d's
 * own, except that a message never decided is released and one whose
 * outcome is still undecided (carry.unresolved: a call may have acted and
 * its row is unfinished) is never completed but abandoned, so that its
 * finishing SQL is not lost and its retry budget still ends it.
 */
sb_disposition_t wk_decide_settlement(const wk_decision_t *d);

/* The description of a database failure: SQLSTATE, native code, driver text. */
void wk_decide_describe_db(const ib_error_t *e, char *buf, size_t size);

/*
 * Whether a transient failure (in d->err) may be retried: attempts left,
 * lock held, not draining, the drain deadline not passed. When so, logs
 * msg_retry, sleeps the backoff (at least min_wait_ms, e.g. a Retry-After)
 * and returns true; otherwise sets the abandon decision (or, past
 * retry.max_deliveries / retry.max_age_s, the budget's dead letter) and
 * returns false. Defined in wk_pipeline.c.
 * thread: a db worker.
 */
bool wk_pipeline_retry_wait(wk_pipeline_t *p, const sb_msg_t *msg, const atomic_bool *lock_lost,
                            ib_rand_t *seed, wk_decision_t *d, long long min_wait_ms);

/*
 * Whether msg's retry budget ends with this delivery: delivery
 * retry.max_deliveries or later, or enqueued longer ago than
 * retry.max_age_s. Defined in wk_pipeline.c. thread: any.
 */
bool wk_pipeline_budget_ends(const wk_pipeline_t *p, const sb_msg_t *msg);

#endif
