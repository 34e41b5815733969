#include "wk_pipeline.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ib_log.h"
#include "wk_effect.h"
#include "ib_utf8.h"

long long wk_backoff_ms(long long base_ms, long long max_ms, int n, unsigned *seed)
{
    long long cap = base_ms;
    for (int i = 1; i < n && cap < max_ms; i++)
        cap *= 2;
    if (cap > max_ms)
        cap = max_ms;
    return cap > 0 ? (long long)(rand_r(seed) % (unsigned long long)(cap + 1)) : 0;
}

static void dead_letter(wk_decision_t *d, wk_outcome_t o, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void dead_letter(wk_decision_t *d, wk_outcome_t o, const char *reason, const char *fmt, ...)
{
    va_list ap;
    char raw[sizeof(d->description)];
    d->outcome = o;
    d->disposition = SB_DEADLETTER;
    /* Subjects, ids and driver texts may carry invalid UTF-8: the broker and
     * whoever reads the dead-letter queue get well-formed text. */
    ib_utf8_sanitize(d->reason, sizeof(d->reason), reason);
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    ib_utf8_sanitize(d->description, sizeof(d->description), raw);
}

static void complete(wk_decision_t *d, wk_outcome_t o)
{
    d->outcome = o;
    d->disposition = SB_COMPLETE;
}

/* The dead-letter description of a database failure: codes and driver text. */
static void describe_db(const ib_error_t *e, char *buf, size_t size)
{
    if (e->sqlstate[0])
        snprintf(buf, size, "SQLSTATE %s, native %ld: %s", e->sqlstate, e->native, e->text);
    else
        snprintf(buf, size, "%s", e->text);
}

static void sleep_ms(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A permanent failure: recorded and completed when the route says so. */
static void permanent(wk_pipeline_t *p, db_conn_t *dbc, const wk_route_t *route,
                      const db_claim_t *claim, const char *reason, wk_decision_t *d)
{
    char desc[sizeof(d->description)];
    describe_db(&d->err, desc, sizeof(desc));
    if (route && wk_route_records_failures(route) && claim) {
        ib_error_t rerr;
        db_outcome_t o = db_inbox_record_failure(dbc, claim, d->err.cls, desc, &rerr);
        if (o == DB_APPLIED || o == DB_DUPLICATE) {
            complete(d, o == DB_APPLIED ? WK_OUT_RECORDED : WK_OUT_DUPLICATE);
            return;
        }
        if (o == DB_CONFLICT) {
            dead_letter(d, WK_OUT_CONFLICT, "IdempotencyKeyConflict",
                        "idempotency key already used by a message with another body");
            return;
        }
        /* The record itself failed: leave the message to come back. */
        d->err = rerr;
        d->outcome = WK_OUT_ABANDONED;
        d->disposition = SB_ABANDON;
        return;
    }
    dead_letter(d, WK_OUT_DEAD_LETTERED, reason, "%s", desc);
}

static bool stopping(const wk_pipeline_t *p)
{
    return p->stopping && atomic_load(p->stopping);
}

/*
 * What is decided before the database: a message that cannot be decoded,
 * has no usable message-id, matches no route, or whose route completes or
 * dead-letters it outright. Returns the route when the inbox must run, NULL
 * when d is decided.
 */
static const wk_route_t *decide_early(wk_pipeline_t *p, const sb_msg_t *msg,
                                      const atomic_bool *lock_lost, wk_decision_t *d)
{
    const wk_route_t *route;
    if (atomic_load(lock_lost)) {
        d->outcome = WK_OUT_RELEASED;
        d->disposition = SB_RELEASE;
        return NULL;
    }
    if (msg->decode_err.code != IB_E_OK) {
        d->err = msg->decode_err;
        dead_letter(d, WK_OUT_DEAD_LETTERED, "MalformedMessage", "%s", msg->decode_err.text);
        return NULL;
    }
    if (msg->message_id_problem) {
        ib_error_set(&d->err, IB_E_INVAL, IB_CLASS_PERMANENT, "%s", msg->message_id_problem);
        dead_letter(d, WK_OUT_DEAD_LETTERED, "InvalidMessageId", "%s", msg->message_id_problem);
        return NULL;
    }
    if (!msg->message_id || !*msg->message_id || strlen(msg->message_id) > 128) {
        ib_error_set(&d->err, IB_E_INVAL, IB_CLASS_PERMANENT, "message-id missing or too long");
        dead_letter(d, WK_OUT_DEAD_LETTERED, "InvalidMessageId",
                    "the inbox needs a message-id of 1 to 128 characters");
        return NULL;
    }
    route = wk_routes_match(p->routes, msg);
    if (!route) {
        ib_error_set(&d->err, IB_E_NO_ROUTE, IB_CLASS_PERMANENT, "no route matches");
        dead_letter(d, WK_OUT_DEAD_LETTERED, "NoRoute", "no route matches subject '%s'",
                    msg->subject ? msg->subject : "");
        return NULL;
    }
    if (wk_route_action(route) == WK_ACT_COMPLETE) {
        complete(d, WK_OUT_SKIPPED);
        return NULL;
    }
    if (wk_route_action(route) == WK_ACT_DEADLETTER) {
        dead_letter(d, WK_OUT_DEAD_LETTERED, wk_route_reason(route), "routes[%zu] dead-letters it",
                    wk_route_index(route));
        return NULL;
    }
    return route;
}

/* thread: a db worker (see wk_pipeline.h). */
bool wk_pipeline_retry_wait(wk_pipeline_t *p, const sb_msg_t *msg, const atomic_bool *lock_lost,
                            unsigned *seed, wk_decision_t *d, long long min_wait_ms)
{
    const wk_config_t *cfg = p->cfg;
    long long deadline = p->retry_deadline_ms ? atomic_load(p->retry_deadline_ms) : 0;
    long long wait = 0;
    bool give_up = d->attempts > cfg->retry.attempts || atomic_load(lock_lost) || stopping(p);
    if (!give_up) {
        wait = wk_backoff_ms(cfg->retry.base_ms, cfg->retry.max_ms, d->attempts, seed);
        if (wait < min_wait_ms)
            wait = min_wait_ms; /* the destination's Retry-After */
        /* A Retry-After beyond the whole in-process budget: let the broker hold it instead. */
        give_up = (deadline && ib_mono_ms() + wait > deadline) ||
                  min_wait_ms > cfg->retry.max_ms * cfg->retry.attempts;
    }
    if (give_up) {
        d->outcome = WK_OUT_ABANDONED;
        d->disposition = SB_ABANDON;
        return false;
    }
    if (p->metrics)
        wk_metrics_retry(p->metrics, d->err.cls);
    IB_LOG(IB_LOG_INFO, "msg_retry", IB_MSG("transient failure, retrying"),
           IB_S("consumer", cfg->consumer), IB_S("message_id", msg->message_id),
           IB_S("result", "retried"), IB_S("error_class", ib_class_name(d->err.cls)),
           IB_S("sqlstate", d->err.sqlstate), IB_I("native_error", d->err.native),
           IB_S("error", d->err.text), IB_I("attempt", d->attempts), IB_I("backoff_ms", wait));
    sleep_ms(wait);
    return true;
}

/* The message is handed back untouched: released, no delivery counted. */
static void release(wk_decision_t *d)
{
    d->outcome = WK_OUT_RELEASED;
    d->disposition = SB_RELEASE;
}

static bool breaker_on(const wk_pipeline_t *p)
{
    return p->breaker && p->cfg->errors.circuit_breaker;
}

/*
 * While the circuit is open the message waits (its lock renewed by the
 * client) until it may run as the probe or the circuit closes. Returns
 * false with d released when the lock is lost or the worker drains.
 */
static bool await_breaker(wk_pipeline_t *p, const atomic_bool *lock_lost, wk_decision_t *d)
{
    long long wait = 0;
    if (!breaker_on(p))
        return true;
    while (!wk_breaker_admit(p->breaker, ib_mono_ms(), &wait)) {
        if (atomic_load(lock_lost) || stopping(p)) {
            release(d);
            return false;
        }
        sleep_ms(wait < 200 ? (wait > 0 ? wait : 1) : 200);
    }
    return true;
}

/* Feeds the breaker; logs the opening with the error that caused it. */
static void breaker_record(wk_pipeline_t *p, db_outcome_t o, const wk_decision_t *d)
{
    if (!p->breaker)
        return;
    if (wk_breaker_record(p->breaker, o == DB_FAILED ? &d->err : NULL, ib_mono_ms()) &&
        breaker_on(p))
        IB_LOG(IB_LOG_ERROR, "circuit_open",
               IB_MSG("the database's setup fails every message: receiving paused, held "
                      "messages kept, probing with backoff"),
               IB_S("error", d->err.text), IB_S("sqlstate", d->err.sqlstate),
               IB_I("native_error", d->err.native), IB_S("inbox_table", p->cfg->db.inbox_table));
}

/*
 * A setup error with the breaker on: not the message's fault, so no attempt
 * limit and no abandon (which would count a delivery). Returns true when d
 * is decided (released: lock lost or draining), false to try again.
 */
static bool setup_failure(wk_pipeline_t *p, const sb_msg_t *msg, const atomic_bool *lock_lost,
                          unsigned *seed, wk_decision_t *d)
{
    if (atomic_load(lock_lost) || stopping(p)) {
        release(d);
        return true;
    }
    if (wk_breaker_is_open(p->breaker))
        return false; /* await_breaker paces the next attempt */
    long long wait = wk_backoff_ms(p->cfg->retry.base_ms, p->cfg->retry.max_ms, d->attempts, seed);
    if (p->metrics)
        wk_metrics_retry(p->metrics, d->err.cls);
    IB_LOG(IB_LOG_WARN, "msg_retry", IB_MSG("the database's setup refused the statement"),
           IB_S("message_id", msg->message_id), IB_S("result", "retried"),
           IB_S("sqlstate", d->err.sqlstate), IB_S("error", d->err.text),
           IB_I("attempt", d->attempts), IB_I("backoff_ms", wait));
    sleep_ms(wait);
    return false;
}

/* One inbox transaction; returns true when d is decided (false: retry). */
static bool apply_once(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                       const wk_route_t *route, const db_claim_t *claim, const wk_binding_t *b,
                       const atomic_bool *lock_lost, unsigned *seed, wk_decision_t *d)
{
    if (!await_breaker(p, lock_lost, d))
        return true;
    long long t0 = ib_mono_ms();
    db_outcome_t o = db_inbox_apply(dbc, claim, b->stmts, b->nstmts, &d->err);
    long long took = ib_mono_ms() - t0;

    breaker_record(p, o, d);
    d->attempts++;
    d->duration_ms += took;
    if (p->metrics)
        wk_metrics_handler_duration(p->metrics, (double)took / 1000.0);
    if (o == DB_APPLIED || o == DB_DUPLICATE || o == DB_CONFLICT)
        atomic_store(&p->db_reachable, true);
    if (o == DB_APPLIED || o == DB_DUPLICATE) {
        complete(d, o == DB_APPLIED ? WK_OUT_APPLIED : WK_OUT_DUPLICATE);
        return true;
    }
    if (o == DB_CONFLICT) {
        ib_error_set(&d->err, IB_E_CONFLICT, IB_CLASS_PERMANENT,
                     "idempotency key reused with another body");
        dead_letter(d, WK_OUT_CONFLICT, "IdempotencyKeyConflict",
                    "idempotency key '%s' (or message-id '%s') was already applied with a "
                    "different body",
                    claim->idempotency_key ? claim->idempotency_key : "", claim->message_id);
        return true;
    }
    if (d->err.code == IB_E_DB_CONN)
        atomic_store(&p->db_reachable, false);
    if (d->err.code == IB_E_DB_SETUP && breaker_on(p))
        return setup_failure(p, msg, lock_lost, seed, d);
    if (d->err.cls == IB_CLASS_TRANSIENT)
        return !wk_pipeline_retry_wait(p, msg, lock_lost, seed, d, 0);
    if (d->err.cls == IB_CLASS_AMBIGUOUS) {
        /* Never blind-retry: record it uncertain and hand it to a human. */
        char desc[sizeof(d->description)];
        ib_error_t rerr;
        describe_db(&d->err, desc, sizeof(desc));
        db_inbox_record_failure(dbc, claim, IB_CLASS_AMBIGUOUS, desc, &rerr);
        dead_letter(d, WK_OUT_DEAD_LETTERED, "AmbiguousOutcome", "%s", desc);
        return true;
    }
    permanent(p, dbc, route, claim, "HandlerError", d);
    return true;
}

void wk_pipeline_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                         const atomic_bool *lock_lost, wk_decision_t *d)
{
    const wk_config_t *cfg = p->cfg;
    const wk_route_t *route;
    wk_binding_t b;
    char sha[65];
    unsigned seed = (unsigned)(ib_mono_ms() ^ (long long)(size_t)msg);
    ib_err_t rc;

    memset(d, 0, sizeof(*d));
    if (!(route = decide_early(p, msg, lock_lost, d)))
        return;
    db_sha256_hex(msg->body, msg->body_len, sha);
    db_claim_t claim = {
        .consumer = cfg->consumer,
        .message_id = msg->message_id,
        .idempotency_key = NULL,
        .body_sha256 = sha,
        .entity = cfg->servicebus.entity,
        .sequence_number = msg->sequence_number,
        .delivery_count = msg->delivery_count,
        .enqueued_at_ms = msg->enqueued_ms,
        .received_at_ms = 0,
    };
    rc = wk_route_bind(route, msg, &b, &d->err);
    if (rc != IB_E_OK) {
        wk_binding_free(&b);
        if (d->err.cls == IB_CLASS_TRANSIENT) { /* out of memory */
            d->outcome = WK_OUT_ABANDONED;
            d->disposition = SB_ABANDON;
            return;
        }
        permanent(p, dbc, route, &claim, wk_route_bind_reason(rc), d);
        return;
    }
    claim.idempotency_key = b.idempotency_key;
    if (wk_route_http(route)) {
        /* Claim, call and finish: never part of a batch. */
        wk_effect_process(p, dbc, msg, route, &claim, lock_lost, d);
        wk_binding_free(&b);
        return;
    }
    while (!apply_once(p, dbc, msg, route, &claim, &b, lock_lost, &seed, d))
        ;
    wk_binding_free(&b);
}
