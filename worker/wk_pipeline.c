/*
 * wk_pipeline.c - one message (or a batch) through its route and the inbox
 * transaction, with in-process retries; a message whose route calls out
 * over HTTP is handed to wk_effect_process (hand_off_http). Every decision
 * is made with wk_decide / wk_decide_dead_letter (wk_decide.h).
 *
 * thread: a db worker (the owner of its connection).
 */
#include "wk_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_limits.h"
#include "ib_backoff.h"
#include "ib_log.h"
#include "wk_claim.h"
#include "wk_decide.h"
#include "wk_limits.h"
#include "wk_effect.h"
#include "rl_relay.h"
#include "wk_trace.h"

/*
 * The route's rejection events (emit_on_failure) of msg failing for
 * reason; *n of them in rb (0 when the route has none, or when they cannot
 * be bound: then the failure is recorded without them, and said so).
 */
static const db_stmt_t *rejection(const rt_route_t *route, const sb_msg_t *msg,
                                  wk_dl_reason_t reason, const char *desc, rt_binding_t *rb,
                                  size_t *n)
{
    rt_failure_t f = {wk_dl_reason_name(reason), ib_class_name(wk_dl_reason_class(reason)), desc};
    ib_error_t e;
    *n = 0;
    memset(rb, 0, sizeof(*rb));
    if (!rt_route_rejects(route))
        return NULL;
    if (rt_route_bind_rejection(route, msg, wk_traceparent(msg), &f, rb, &e) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "rejection_unbound",
               IB_MSG("the route's emit_on_failure could not be bound: the failure is recorded "
                      "without its rejection event"),
               IB_S("message_id", msg->message_id), IB_I("route", (long long)rt_route_index(route)),
               IB_S("reason", f.reason), IB_S("error", e.text));
        return NULL;
    }
    return rt_binding_emits(rb, n);
}

/*
 * A permanent failure: recorded when the route says so (on_permanent
 * "record": completed) or emits a rejection (emit_on_failure: the failure
 * row and the events commit together, then it is dead-lettered unless
 * recorded); else dead-lettered.
 */
static void permanent(wk_pipeline_t *p, db_conn_t *dbc, const rt_route_t *route,
                      const sb_msg_t *msg, const db_claim_t *claim, wk_dl_reason_t reason,
                      wk_decision_t *d)
{
    char desc[sizeof(d->description)];
    wk_decide_describe_db(&d->err, desc, sizeof(desc));
    if (route && claim && (rt_route_records_failures(route) || rt_route_rejects(route))) {
        ib_error_t rerr;
        rt_binding_t rb;
        size_t n;
        const db_stmt_t *ev = rejection(route, msg, reason, desc, &rb, &n);
        db_outcome_t o = db_inbox_record_failure_with(dbc, claim, d->err.cls, desc, ev, n, &rerr);
        rt_binding_free(&rb);
        if (o == DB_APPLIED && n)
            rl_relay_wake(p->relay); /* committed rejection: publish now */
        if ((o == DB_APPLIED || o == DB_DUPLICATE) && !rt_route_records_failures(route)) {
            wk_decide_dead_letter(d, reason, "%s", desc);
            return;
        }
        if (o == DB_APPLIED || o == DB_DUPLICATE) {
            wk_decide(d, o == DB_APPLIED ? WK_OUT_RECORDED : WK_OUT_DUPLICATE);
            return;
        }
        if (o == DB_CONFLICT) {
            wk_decide_dead_letter(d, WK_DL_KEY_CONFLICT,
                                  "idempotency key already used by a message with another body");
            return;
        }
        /* The record itself failed: leave the message to come back. */
        d->err = rerr;
        wk_decide(d, WK_OUT_ABANDONED);
        return;
    }
    wk_decide_dead_letter(d, reason, "%s", desc);
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
static const rt_route_t *decide_early(wk_pipeline_t *p, const sb_msg_t *msg,
                                      const atomic_bool *lock_lost, wk_decision_t *d)
{
    const rt_route_t *route;
    if (atomic_load(lock_lost)) {
        wk_decide(d, WK_OUT_RELEASED);
        return NULL;
    }
    if (msg->decode_err.code != IB_E_OK) {
        d->err = msg->decode_err;
        wk_decide_dead_letter(d, WK_DL_MALFORMED, "%s", msg->decode_err.text);
        return NULL;
    }
    if (msg->message_id_problem) {
        ib_error_set(&d->err, IB_E_INVAL, IB_CLASS_PERMANENT, "%s", msg->message_id_problem);
        wk_decide_dead_letter(d, WK_DL_BAD_MESSAGE_ID, "%s", msg->message_id_problem);
        return NULL;
    }
    if (!msg->message_id || !*msg->message_id || strlen(msg->message_id) > DB_MESSAGE_ID_MAX) {
        ib_error_set(&d->err, IB_E_INVAL, IB_CLASS_PERMANENT, "message-id missing or too long");
        wk_decide_dead_letter(
            d, WK_DL_BAD_MESSAGE_ID,
            "the inbox needs a message-id of 1 to " DB_WIDTH(DB_MESSAGE_ID_MAX) " characters");
        return NULL;
    }
    route = rt_routes_match(p->routes, msg);
    if (!route) {
        ib_error_set(&d->err, IB_E_NO_ROUTE, IB_CLASS_PERMANENT, "no route matches");
        wk_decide_dead_letter(d, WK_DL_NO_ROUTE, "no route matches subject '%s'",
                              msg->subject ? msg->subject : "");
        return NULL;
    }
    d->route_index = (long)rt_route_index(route);
    if (rt_route_action(route) == RT_ACT_COMPLETE) {
        wk_decide(d, WK_OUT_SKIPPED);
        return NULL;
    }
    if (rt_route_action(route) == RT_ACT_DEADLETTER) {
        wk_decide_route_dead_letter(d, rt_route_reason(route), "routes[%zu] dead-letters it",
                                    rt_route_index(route));
        return NULL;
    }
    return route;
}

/* One message on its way through a batch (thread: its db worker). */
typedef struct item {
    const sb_msg_t *msg;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
    bool *settled; /* wk_batch_msg_t's */
    const rt_route_t *route;
    rt_binding_t b;
    bool bound; /* b holds a binding to free */
    db_claim_t claim;
    char sha[65];
    wk_claim_t blob; /* claim_check: the blob and the message that binds from it */
    const char *sid; /* its session (NULL: none): the batch keeps a session's order */
    int prep;        /* what prepare() said (prep_t) */
    bool open;       /* still to be applied (in todo) */
    bool held;       /* the last round did not run it: an earlier one of its session failed */
} item_t;

/* Where prepare() sends a message. */
typedef enum {
    PREP_DECIDED, /* d is filled: nothing more to run */
    PREP_INBOX,   /* bound for the inbox transaction (a batch, or alone) */
    PREP_HTTP,    /* bound, its route calls out over HTTP: hand_off_http */
} prep_t;

/*
 * Before the database: decides what can be decided without it, or routes,
 * hashes and binds the message and says where it goes next. behind: an
 * earlier message of its session in the batch is yet to be applied, so a
 * failure that would write its row now (ahead of that one) is released
 * instead, to come back after it.
 */
static prep_t prepare(wk_pipeline_t *p, db_conn_t *dbc, item_t *it, bool behind)
{
    const wk_config_t *cfg = p->cfg;
    const sb_msg_t *msg = it->msg;
    wk_decision_t *d = it->d;
    ib_err_t rc;

    wk_carry_t carry = d->carry; /* this delivery's, across its holds */
    memset(d, 0, sizeof(*d));
    d->carry = carry;
    d->route_index = -1;
    wk_trace_id(msg, d->trace_id);
    if (!(it->route = decide_early(p, msg, it->lock_lost, d)))
        return PREP_DECIDED;
    db_sha256_hex(msg->body, msg->body_len, it->sha);
    it->claim = (db_claim_t){
        .consumer = cfg->consumer,
        .message_id = msg->message_id,
        .idempotency_key = NULL,
        .body_sha256 = it->sha,
        .entity = cfg->servicebus.entity,
        .sequence_number = msg->sequence_number,
        .delivery_count = msg->delivery_count,
        .enqueued_at_ms = msg->enqueued_ms,
        .received_at_ms = 0,
        /* An operator's replay takes a row recorded 'failed' over (db_inbox_apply). */
        .replay = sb_msg_prop(msg, "inboxd-replay-count") != NULL,
    };
    if (rt_route_claim(it->route)) {
        wk_dl_reason_t why;
        if (!wk_claim_fetch(p, it->route, msg, &it->blob, d, &why)) {
            if (why != WK_DL__COUNT && behind)
                wk_decide(d, WK_OUT_RELEASED);
            else if (why != WK_DL__COUNT)
                permanent(p, dbc, it->route, msg, &it->claim, why, d);
            return PREP_DECIDED;
        }
        it->msg = msg = &it->blob.msg; /* binds and calls with the blob as its body */
        memcpy(it->sha, it->blob.blob.sha256, sizeof it->sha); /* fx_blob_get hashed it */
    }
    rc = rt_route_bind(it->route, msg, wk_traceparent(msg), &it->b, &d->err);
    if (rc != IB_E_OK) {
        rt_binding_free(&it->b);
        if (d->err.cls == IB_CLASS_TRANSIENT) { /* out of memory */
            wk_decide(d, WK_OUT_ABANDONED);
            return PREP_DECIDED;
        }
        if (behind) {
            wk_decide(d, WK_OUT_RELEASED);
            return PREP_DECIDED;
        }
        permanent(p, dbc, it->route, msg, &it->claim, wk_dl_reason_of_bind(rc), d);
        return PREP_DECIDED;
    }
    it->bound = true;
    it->claim.idempotency_key = it->b.idempotency_key;
    rt_route_payload_hash(it->route, &it->b, it->sha); /* payload_hash "params" */
    return rt_route_http(it->route) ? PREP_HTTP : PREP_INBOX;
}

/*
 * The hand-off of the batch's messages on HTTP routes (the nh items in
 * http): claim, call and finish run in transactions of their own
 * (wk_effect.c), shared by the messages of the batch.
 */
static void hand_off_http(wk_pipeline_t *p, db_conn_t *dbc, item_t **http, size_t nh)
{
    wk_effect_item_t one, *ei = nh == 1 ? &one : calloc(nh, sizeof(*ei));
    if (!ei) {
        for (size_t i = 0; i < nh; i++)
            wk_effect_process(p, dbc, http[i]->msg, http[i]->route, &http[i]->claim,
                              http[i]->lock_lost, http[i]->d);
        return;
    }
    for (size_t i = 0; i < nh; i++)
        ei[i] = (wk_effect_item_t){http[i]->msg, http[i]->route, &http[i]->claim,
                                   http[i]->lock_lost, http[i]->d, http[i]->settled};
    wk_effect_process_batch(p, dbc, ei, nh);
    if (ei != &one)
        free(ei);
}

/* The message is handed back untouched: released, no delivery counted. */
static void release(wk_decision_t *d)
{
    wk_decide(d, WK_OUT_RELEASED);
}

static bool breaker_on(const wk_pipeline_t *p)
{
    return p->breaker && p->cfg->errors.circuit_breaker;
}

/*
 * While the circuit is open the batch waits (its locks renewed by the
 * client) until it may run as the probe or the circuit closes; a message
 * whose lock is lost meanwhile, or every one when the worker drains, is
 * released. Returns how many of the n in todo remain.
 */
static size_t await_breaker(wk_pipeline_t *p, item_t **todo, size_t n)
{
    long long wait = 0;
    if (!breaker_on(p))
        return n;
    while (n > 0 && !wk_breaker_admit(p->breaker, ib_mono_ms(), &wait)) {
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (atomic_load(todo[i]->lock_lost) || stopping(p))
                release(todo[i]->d);
            else
                todo[kept++] = todo[i];
        }
        n = kept;
        if (n)
            ib_sleep_ms(wait < 200 ? (wait > 0 ? wait : 1) : 200, NULL);
    }
    return n;
}

/*
 * Feeds the breaker one result per inbox transaction (a setup error first,
 * else any failure, else a pass); logs the opening with its error.
 */
static void breaker_record(wk_pipeline_t *p, const db_batch_item_t *bi, size_t n)
{
    const ib_error_t *rec = NULL;
    if (!p->breaker)
        return;
    for (size_t i = 0; i < n; i++)
        if (bi[i].outcome == DB_FAILED &&
            (!rec || (bi[i].err.code == IB_E_DB_SETUP && rec->code != IB_E_DB_SETUP)))
            rec = &bi[i].err;
    if (wk_breaker_record(p->breaker, rec, ib_mono_ms()) && breaker_on(p) && rec)
        IB_LOG(IB_LOG_ERROR, "circuit_open",
               IB_MSG("the database's setup fails every message: receiving paused, held "
                      "messages kept, probing with backoff"),
               IB_S("error", rec->text), IB_S("sqlstate", rec->sqlstate),
               IB_I("native_error", rec->native), IB_S("inbox_table", p->cfg->db.inbox_table));
}

/*
 * A setup error with the breaker on is not the message's fault: no attempt
 * limit and no abandon (which would count a delivery). Returns true to try
 * it again, false when it is released (lock lost or draining).
 */
static bool setup_retry(wk_pipeline_t *p, item_t *it, long long wait)
{
    wk_decision_t *d = it->d;
    if (atomic_load(it->lock_lost) || stopping(p)) {
        release(d);
        return false;
    }
    if (p->metrics)
        wk_metrics_retry(p->metrics, d->err.cls);
    IB_LOG(IB_LOG_WARN, "msg_retry", IB_MSG("the database's setup refused the statement"),
           IB_S("message_id", it->msg->message_id), IB_S("sqlstate", d->err.sqlstate), IB_S("error", d->err.text),
           IB_I("attempt", d->attempts), IB_I("backoff_ms", wait),
           IB_S("trace_id", d->trace_id[0] ? d->trace_id : NULL),
           IB_S("span_id", wk_span_id(it->msg)));
    return true;
}

/*
 * The business-key backstop: a unique violation in one of the route's
 * statements, on a key the route names (on_unique_violation "duplicate"),
 * means a producer re-sent a fact already applied under another message
 * id. The transaction was rolled back; the message completes as a
 * duplicate. Returns true when it decided d.
 */
static bool business_key_duplicate(db_conn_t *dbc, const rt_route_t *route, wk_decision_t *d)
{
    char name[sizeof(d->constraint)];
    if (!db_unique_violation(db_conn_dialect(dbc), &d->err, name, sizeof(name)) ||
        !rt_route_unique_is_duplicate(route, name))
        return false;
    wk_decide(d, WK_OUT_DUPLICATE);
    d->business_key = true;
    ib_strlcpy(d->constraint, name, sizeof(d->constraint));
    ib_error_clear(&d->err);
    return true;
}

/*
 * A commit whose answer was lost: it may have applied the message, as an
 * HTTP call may have acted, so one reason (OutcomeUncertain). Never
 * blind-retried: the row is recorded uncertain for a person to resolve,
 * and the description says when it could not be.
 */
static void ambiguous(wk_pipeline_t *p, db_conn_t *dbc, const db_claim_t *claim,
                      wk_decision_t *d)
{
    char desc[sizeof(d->description)];
    ib_error_t rerr;
    wk_decide_describe_db(&d->err, desc, sizeof(desc));
    db_outcome_t o = db_inbox_record_failure(dbc, claim, IB_CLASS_AMBIGUOUS, desc, &rerr);
    if (o == DB_APPLIED) {
        if (p->metrics)
            wk_metrics_uncertain(p->metrics);
        wk_decide_dead_letter(d, WK_DL_UNCERTAIN,
                              "%s; recorded uncertain: resolve with inboxctl inbox resolve "
                              "--message-id %s",
                              desc, claim->message_id);
        return;
    }
    wk_decide_dead_letter(d, WK_DL_UNCERTAIN,
                          "%s; not recorded uncertain (%s): check the inbox row of message-id %s "
                          "and the route's tables before a replay",
                          desc,
                          o == DB_FAILED ? rerr.text : "an inbox row for it is already there",
                          claim->message_id);
}

/*
 * Settles what one inbox outcome means for the message: true when decided,
 * false for a transient failure (the caller decides on a retry).
 */
static bool decide_db(wk_pipeline_t *p, db_conn_t *dbc, item_t *it, db_outcome_t o)
{
    wk_decision_t *d = it->d;
    const db_claim_t *claim = &it->claim;

    if (o == DB_APPLIED || o == DB_DUPLICATE || o == DB_CONFLICT)
        atomic_store(&p->db_reachable, true);
    if (o == DB_APPLIED || o == DB_DUPLICATE) {
        wk_decide(d, o == DB_APPLIED ? WK_OUT_APPLIED : WK_OUT_DUPLICATE);
        return true;
    }
    if (o == DB_CONFLICT) {
        ib_error_set(&d->err, IB_E_CONFLICT, IB_CLASS_PERMANENT,
                     "idempotency key reused with another body");
        wk_decide_dead_letter(d, WK_DL_KEY_CONFLICT,
                              "idempotency key '%s' (or message-id '%s') was already applied "
                              "with a different body",
                              claim->idempotency_key ? claim->idempotency_key : "",
                              claim->message_id);
        return true;
    }
    if (d->err.code == IB_E_DB_CONN)
        atomic_store(&p->db_reachable, false);
    if (d->err.code == IB_E_DB_SETUP && breaker_on(p))
        return false; /* setup_retry */
    if (d->err.cls == IB_CLASS_TRANSIENT)
        return false;
    if (d->err.cls == IB_CLASS_AMBIGUOUS) {
        ambiguous(p, dbc, claim, d);
        return true;
    }
    if (business_key_duplicate(dbc, it->route, d))
        return true;
    permanent(p, dbc, it->route, it->msg, claim, WK_DL_HANDLER_ERROR, d);
    return true;
}

/*
 * A transient failure after attempt d->attempts: true when the message may
 * be tried again after wait ms (counted and logged as a retry), else the
 * abandon decision is set (attempts spent, lock lost, draining, or past the
 * drain's retry deadline).
 */
/*
 * The retry budget beyond one delivery: a transient failure of a message
 * enqueued longer ago than retry.max_age_s, or one that outlasts the
 * attempts on delivery retry.max_deliveries or later, is dead-lettered
 * naming the last error, rather than abandoned until the broker's
 * MaxDeliveryCount dead-letters it without one. Returns true when it
 * decided d.
 */
static bool budget_spent(const wk_pipeline_t *p, const sb_msg_t *msg, bool attempts_spent,
                         wk_decision_t *d)
{
    const wk_config_t *cfg = p->cfg;
    char last[768];
    wk_decide_describe_db(&d->err, last, sizeof(last));
    if (cfg->retry.max_age_s > 0 && msg->enqueued_ms > 0) {
        long long age_s = (ib_now_ms() - msg->enqueued_ms) / 1000;
        if (age_s > cfg->retry.max_age_s) {
            wk_decide_dead_letter(d, WK_DL_MAX_AGE,
                                  "enqueued %lld s ago, over retry.max_age_s %lld; last error: %s",
                                  age_s, cfg->retry.max_age_s, last);
            return true;
        }
    }
    long long budget = attempts_spent ? wk_limits_max_deliveries(
                                            cfg, wk_entity_max_delivery_count(p->entity))
                                      : 0;
    if (budget > 0 && (long long)msg->delivery_count >= budget) {
        wk_decide_dead_letter(d, WK_DL_RETRY_BUDGET,
                              "delivery %u reached retry.max_deliveries %lld, %d attempts in it; "
                              "last error: %s",
                              msg->delivery_count, budget, d->attempts, last);
        return true;
    }
    return false;
}

bool wk_pipeline_budget_ends(const wk_pipeline_t *p, const sb_msg_t *msg)
{
    const wk_config_t *cfg = p->cfg;
    long long budget = wk_limits_max_deliveries(cfg, wk_entity_max_delivery_count(p->entity));
    if (budget > 0 && (long long)msg->delivery_count >= budget)
        return true;
    return cfg->retry.max_age_s > 0 && msg->enqueued_ms > 0 &&
           (ib_now_ms() - msg->enqueued_ms) / 1000 > cfg->retry.max_age_s;
}

static bool may_retry(wk_pipeline_t *p, item_t *it, long long wait)
{
    const wk_config_t *cfg = p->cfg;
    wk_decision_t *d = it->d;
    long long deadline = p->retry_deadline_ms ? atomic_load(p->retry_deadline_ms) : 0;
    bool interrupted = atomic_load(it->lock_lost) || stopping(p);
    /* The database out of reach is not the message's fault: held (retried while its lock is
     * renewed), never abandoned for it, which would count a delivery. */
    bool spent = d->attempts > cfg->retry.attempts && d->err.code != IB_E_DB_CONN;

    if (!interrupted && budget_spent(p, it->msg, spent, d))
        return false;
    if (spent || interrupted ||
        (deadline && ib_mono_ms() + wait > deadline)) {
        wk_decide(d, WK_OUT_ABANDONED);
        return false;
    }
    if (p->metrics)
        wk_metrics_retry(p->metrics, d->err.cls);
    IB_LOG(IB_LOG_INFO, "msg_retry", IB_MSG("transient failure, retrying"),
           IB_S("consumer", cfg->consumer), IB_S("message_id", it->msg->message_id),
           IB_S("error_class", ib_class_name(d->err.cls)),
           IB_S("sqlstate", d->err.sqlstate), IB_I("native_error", d->err.native),
           IB_S("error", d->err.text), IB_I("attempt", d->attempts), IB_I("backoff_ms", wait),
           IB_S("trace_id", d->trace_id[0] ? d->trace_id : NULL),
           IB_S("span_id", wk_span_id(it->msg)));
    return true;
}

/* thread: a db worker (see wk_decide.h). */
bool wk_pipeline_retry_wait(wk_pipeline_t *p, const sb_msg_t *msg, const atomic_bool *lock_lost,
                            ib_rand_t *seed, wk_decision_t *d, long long min_wait_ms)
{
    const wk_config_t *cfg = p->cfg;
    item_t it = {.msg = msg, .lock_lost = lock_lost, .d = d};
    long long wait = ib_backoff_ms(cfg->retry.base_ms, cfg->retry.max_ms, d->attempts, seed);

    if (wait < min_wait_ms)
        wait = min_wait_ms; /* the destination's Retry-After */
    /* A Retry-After beyond the whole in-process budget: let the broker hold it instead. */
    if (min_wait_ms > cfg->retry.max_ms * cfg->retry.attempts) {
        wk_decide(d, WK_OUT_ABANDONED);
        return false;
    }
    if (!may_retry(p, &it, wait))
        return false;
    ib_sleep_ms(wait, NULL);
    return true;
}

const rt_route_t *wk_pipeline_http(const wk_pipeline_t *p, const sb_msg_t *msg)
{
    const rt_route_t *route = rt_routes_match(p->routes, msg);
    return route && rt_route_http(route) ? route : NULL;
}

/* The i-th message of a round's todo (wk_trace_txn_begin). */
static const sb_msg_t *todo_msg(void *arg, size_t i)
{
    return ((item_t **)arg)[i]->msg;
}

/*
 * A transient failure that outlasted the retry budget (RetryBudgetExhausted,
 * MaxAgeExceeded) is a final failure too: on a route with emit_on_failure
 * its 'failed' row (error_class transient) and the rejection commit before
 * the dead letter; when they cannot (the database is what fails), the
 * message is abandoned and comes back rather than being dead-lettered
 * without them.
 */
static void budget_rejection(wk_pipeline_t *p, db_conn_t *dbc, item_t *it)
{
    wk_decision_t *d = it->d;
    wk_dl_reason_t reason = WK_DL_RETRY_BUDGET;
    rt_binding_t rb;
    ib_error_t rerr;
    size_t n;
    if (d->outcome != WK_OUT_DEAD_LETTERED || !rt_route_rejects(it->route))
        return;
    if (strcmp(d->reason, wk_dl_reason_name(WK_DL_MAX_AGE)) == 0)
        reason = WK_DL_MAX_AGE;
    const db_stmt_t *ev = rejection(it->route, it->msg, reason, d->description, &rb, &n);
    db_outcome_t o = db_inbox_record_failure_with(dbc, &it->claim, wk_dl_reason_class(reason),
                                                  d->description, ev, n, &rerr);
    rt_binding_free(&rb);
    if (o == DB_APPLIED && n)
        rl_relay_wake(p->relay);
    if (o == DB_FAILED) {
        d->err = rerr;
        d->reason[0] = d->description[0] = '\0'; /* no dead letter after all */
        wk_decide(d, WK_OUT_ABANDONED);
    }
}

/*
 * One inbox transaction for the n messages in todo (a batch, or one
 * message alone); leaves in todo those to try again and returns how many.
 */
static size_t apply_round(wk_pipeline_t *p, db_conn_t *dbc, item_t **todo, size_t n,
                          db_batch_item_t *bi, const char **keys)
{
    ib_error_t fallback;
    size_t again = 0;

    if ((n = await_breaker(p, todo, n)) == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        bi[i] =
            (db_batch_item_t){&todo[i]->claim, todo[i]->b.stmts, todo[i]->b.nstmts, DB_FAILED, {0}};
        keys[i] = todo[i]->sid;
    }
    wk_trace_txn_t tx;
    wk_trace_txn_begin(&tx, dbc, n, todo_msg, todo);
    long long t0 = ib_mono_ms();
    db_inbox_apply_batch_ordered(dbc, bi, keys, n, &fallback);
    long long took = ib_mono_ms() - t0;
    wk_trace_txn_end(&tx, &fallback);
    breaker_record(p, bi, n);
    if (p->metrics)
        wk_metrics_batch(p->metrics, n);
    if (fallback.code != IB_E_OK) {
        if (p->metrics)
            wk_metrics_batch_fallback(p->metrics);
        IB_LOG(IB_LOG_INFO, "batch_fallback",
               IB_MSG("batch rolled back; its messages were applied one by one"),
               IB_I("messages", (long long)n), IB_S("sqlstate", fallback.sqlstate),
               IB_S("error", fallback.text));
    }
    for (size_t i = 0; i < n; i++) {
        item_t *it = todo[i];
        it->held = it->sid && bi[i].outcome == DB_FAILED && bi[i].err.code == IB_E_AGAIN;
        if (it->held) { /* not run: no attempt of its own */
            todo[again++] = it;
            continue;
        }
        it->d->attempts++;
        it->d->duration_ms += took;
        it->d->err = bi[i].err;
        if (p->metrics)
            wk_metrics_handler_duration(p->metrics, (double)took / 1000.0);
        if (!decide_db(p, dbc, it, bi[i].outcome))
            todo[again++] = it;
        else
            it->open = false;
    }
    return again;
}

bool wk_pipeline_goes_on(const wk_decision_t *d)
{
    return d->outcome == WK_OUT_APPLIED || d->outcome == WK_OUT_DUPLICATE ||
           d->outcome == WK_OUT_SKIPPED || d->outcome == WK_OUT_RECORDED;
}

static bool same_session(const item_t *a, const item_t *b)
{
    return a->sid && b->sid && strcmp(a->sid, b->sid) == 0;
}

/*
 * Whether an earlier message of its session in the batch (items[0..i))
 * ended so that the session cannot go on past it (dead-lettered, abandoned,
 * released...): then it is released, to come back after it in order.
 */
static bool stopped_before(const item_t *items, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (same_session(&items[j], &items[i]) && !items[j].open && items[j].prep != PREP_HTTP &&
            !wk_pipeline_goes_on(items[j].d))
            return true;
    return false;
}

/* Whether an earlier message of its session in the batch is yet to be applied. */
static bool pending_before(const item_t *items, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (same_session(&items[j], &items[i]) && (items[j].open || items[j].prep == PREP_HTTP))
            return true;
    return false;
}

/*
 * Prepares the n messages in order; fills todo (inbox ones from the start)
 * and returns *nh. items come zeroed: each is filled field by field, as a
 * compound literal would zero its 2 KB once more.
 */
static size_t prepare_all(wk_pipeline_t *p, db_conn_t *dbc, const wk_batch_msg_t *m, size_t n,
                          item_t *items, item_t **todo, size_t *nh)
{
    size_t k = 0;
    *nh = 0;
    for (size_t i = 0; i < n; i++) {
        items[i].msg = m[i].msg;
        items[i].lock_lost = m[i].lock_lost;
        items[i].d = m[i].d;
        items[i].settled = m[i].settled;
        items[i].sid = m[i].msg->session_id;
        items[i].prep = PREP_DECIDED;
        if (items[i].sid && stopped_before(items, i)) {
            wk_carry_t carry = items[i].d->carry;
            memset(items[i].d, 0, sizeof(*items[i].d));
            items[i].d->carry = carry;
            items[i].d->route_index = -1;
            release(items[i].d);
            continue;
        }
        bool behind = items[i].sid && pending_before(items, i);
        switch (items[i].prep = (int)prepare(p, dbc, &items[i], behind)) {
        case PREP_INBOX:
            items[i].open = true;
            todo[k++] = &items[i];
            break;
        case PREP_HTTP:
            /* Collected from the end of todo; the inbox ones fill it from the start. */
            todo[n - ++*nh] = &items[i];
            break;
        case PREP_DECIDED:
            break;
        }
    }
    return k;
}

/*
 * The retry decisions after a round, in order: again of todo failed
 * transiently or were held; returns how many are tried again (in todo).
 * A message whose session stopped before it is released; one held behind
 * an earlier one that goes on is tried again with it, not counted.
 */
static size_t retry_decisions(wk_pipeline_t *p, db_conn_t *dbc, item_t *items, item_t **todo,
                              size_t again, long long wait, bool *paced)
{
    size_t kept = 0;
    for (size_t i = 0; i < again; i++) {
        item_t *it = todo[i];
        bool setup = it->d->err.code == IB_E_DB_SETUP && breaker_on(p);
        if (it->sid && stopped_before(items, (size_t)(it - items))) {
            release(it->d);
            it->open = false;
        } else if (it->held || (setup ? setup_retry(p, it, wait) : may_retry(p, it, wait))) {
            todo[kept++] = it;
            *paced |= !it->held && setup && wk_breaker_is_open(p->breaker);
        } else {
            it->open = false;
            budget_rejection(p, dbc, it);
        }
    }
    return kept;
}

/*
 * After the rounds: a message decided before the database (nothing
 * written for it) behind one of its session that stopped is released.
 */
static void release_stopped(item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].sid && items[i].prep == PREP_DECIDED &&
            items[i].d->outcome != WK_OUT_RELEASED && stopped_before(items, i))
            release(items[i].d);
}

void wk_pipeline_process_batch(wk_pipeline_t *p, db_conn_t *dbc, const wk_batch_msg_t *m, size_t n)
{
    item_t one, *items = n == 1 ? &one : calloc(n, sizeof(*items));
    item_t *todo_one, **todo = n == 1 ? &todo_one : calloc(n, sizeof(*todo));
    db_batch_item_t bi_one, *bi = n == 1 ? &bi_one : calloc(n, sizeof(*bi));
    const char *key_one, **keys = n == 1 ? &key_one : calloc(n, sizeof(*keys));
    ib_rand_t seed = 0; /* seeded on first use */
    size_t k = 0, nh = 0;

    if (!items || !todo || !bi || !keys) {
        /* Out of memory: every message comes back later. */
        for (size_t i = 0; i < n; i++) {
            memset(m[i].d, 0, sizeof(*m[i].d));
            wk_decide(m[i].d, WK_OUT_ABANDONED);
        }
        goto out;
    }
    if (n == 1)
        memset(items, 0, sizeof(*items)); /* calloc zeroed the others */
    k = prepare_all(p, dbc, m, n, items, todo, &nh);
    for (size_t i = 0; i < nh / 2; i++) { /* back to queue order */
        item_t *t = todo[n - nh + i];
        todo[n - nh + i] = todo[n - 1 - i];
        todo[n - 1 - i] = t;
    }
    if (nh)
        hand_off_http(p, dbc, todo + (n - nh), nh);
    for (int round = 1; k > 0; round++) {
        size_t again = apply_round(p, dbc, todo, k, bi, keys);
        long long wait = ib_backoff_ms(p->cfg->retry.base_ms, p->cfg->retry.max_ms, round, &seed);
        bool paced = false; /* the open circuit paces the next attempt itself */
        size_t kept = retry_decisions(p, dbc, items, todo, again, wait, &paced);
        if (kept && !paced)
            ib_sleep_ms(wait, NULL);
        k = kept;
    }
    release_stopped(items, n);
    for (size_t i = 0; i < n; i++) {
        /* Committed emits: publish now, not at the relay's next poll. A
         * message settled early is no longer this worker's to read. */
        bool early = m[i].settled && *m[i].settled;
        if (items[i].bound && items[i].b.nemits &&
            (early || m[i].d->outcome == WK_OUT_APPLIED))
            rl_relay_wake(p->relay);
        if (items[i].bound)
            rt_binding_free(&items[i].b);
        wk_claim_free(&items[i].blob); /* the blob's bytes back to the budget */
    }
out:
    if (n != 1) {
        free(items);
        free(todo);
        free(bi);
        free(keys);
    }
}

void wk_pipeline_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                         const atomic_bool *lock_lost, wk_decision_t *d)
{
    wk_batch_msg_t one = {msg, lock_lost, d, NULL};
    wk_pipeline_process_batch(p, dbc, &one, 1);
}
