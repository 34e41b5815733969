/*
 * wk_effect.c - one message through an HTTP route: claim the inbox row
 * with a lease, call the destination with the idempotency key, classify
 * the answer, finish the row (and the route's SQL) in one transaction.
 *
 * The rule that matters: a call that may have acted is never made again
 * unless the destination honours the key (idempotent) or a reconcile query
 * said it did not act. Otherwise the row is recorded `uncertain` and the
 * message dead-lettered OutcomeUncertain for a person to resolve. An
 * operator's replay of a failed row whose call succeeded finishes it with
 * the answer the row stores, never a second call unless the destination is
 * idempotent (replay_failed).
 *
 * thread: a db worker. Each worker thread has its own HTTP client (kept in
 * thread-specific data, freed when the thread ends) so connections are
 * reused per worker.
 */
#include "wk_effect.h"
#include "wk_trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_effect.h"
#include "fx_client.h"
#include "ib_log.h"
#include "wk_decide.h"
#include "wk_relay.h"

#define SNIPPET_MAX 200

static pthread_once_t client_once = PTHREAD_ONCE_INIT;
static pthread_key_t client_key;
static bool client_ready;

static void free_client(void *fx)
{
    fx_client_free(fx);
}

static void init_clients(void)
{
    ib_error_t err;
    client_ready =
        fx_global_init(&err) == IB_E_OK && pthread_key_create(&client_key, free_client) == 0;
}

/* This thread's client; NULL when libcurl could not start. */
static fx_client_t *thread_client(void)
{
    pthread_once(&client_once, init_clients);
    if (!client_ready)
        return NULL;
    fx_client_t *fx = pthread_getspecific(client_key);
    if (!fx && (fx = fx_client_new()) != NULL && pthread_setspecific(client_key, fx) != 0) {
        fx_client_free(fx);
        fx = NULL;
    }
    return fx;
}

/* The state of one message's run through the route. */
typedef struct run {
    wk_pipeline_t *p;
    db_conn_t *dbc;
    const sb_msg_t *msg;
    const wk_route_t *route;
    const wk_http_spec_t *h;
    const db_claim_t *claim;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
    db_claim_row_t row;
    wk_http_call_t call;
    bool reached; /* a call of this claim (or an earlier owner's) may have acted */
    bool replayed; /* an operator's replay took a failed row over: its rejection was published */
    ib_rand_t seed; /* the backoff's state, seeded on first use */
} run_t;

static void set_abandon(wk_decision_t *d)
{
    wk_decide(d, WK_OUT_ABANDONED);
}

/*
 * The first bytes of an answer, printable, with the route's secrets masked
 * (masked over a wider window first, so a secret cut at the edge is still
 * caught).
 */
static void snippet(const run_t *r, const fx_response_t *resp, char *buf, size_t size)
{
    char wide[4 * SNIPPET_MAX + 1];
    size_t n = resp->body_len < sizeof wide - 1 ? resp->body_len : sizeof wide - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)resp->body[i];
        wide[i] = c >= 0x20 && c < 0x7f ? (char)c : ' ';
    }
    wide[n] = '\0';
    wk_route_scrub(r->route, wide);
    snprintf(buf, size, "%.*s", SNIPPET_MAX, wide);
}

/* Gives the claim up and leaves the message to come back (abandon). */
static void give_up(run_t *r)
{
    ib_error_t e;
    if (r->row.token[0])
        db_effect_release(r->dbc, r->p->cfg->consumer, &r->row, r->reached, &e);
    set_abandon(r->d);
}

/*
 * The destination will not take the call now (open circuit, Retry-After, a
 * limit) or just failed transiently: the claim is given back and the
 * message held by the daemon for wait ms, under its renewed lock.
 */
static void hold(run_t *r, long long wait)
{
    ib_error_t e;
    if (r->row.token[0])
        db_effect_release(r->dbc, r->p->cfg->consumer, &r->row, r->reached, &e);
    set_abandon(r->d);
    r->d->held = true;
    r->d->hold_ms = wait;
    ib_strlcpy(r->d->dest, r->call.dest, sizeof r->d->dest);
}

/* Whether the call may go to its destination now; if not, the message is held. */
static bool admitted(run_t *r)
{
    long long wait;
    wk_dest_limits_t lim = {wk_http_rate_per_s(r->h), wk_http_max_concurrent(r->h)};
    if (!r->p->dests || !r->call.dest[0] ||
        wk_dest_admit(r->p->dests, r->call.dest, &lim, ib_mono_ms(), &wait))
        return true;
    hold(r, wait);
    return false;
}

/* What the answer says of the destination; logs a circuit that opens. */
static void dest_done(run_t *r, const fx_response_t *resp)
{
    wk_dest_result_t res = resp->cls == FX_TRANSIENT   ? WK_DEST_TRANSIENT
                           : resp->cls == FX_AMBIGUOUS ? WK_DEST_UNKNOWN
                                                       : WK_DEST_OK;
    if (!r->p->dests || !r->call.dest[0])
        return;
    if (wk_dest_done(r->p->dests, r->call.dest, res, resp->retry_after_ms, ib_mono_ms()))
        IB_LOG(IB_LOG_ERROR, "http_circuit_open",
               IB_MSG("the destination failed several calls in a row: its messages are held, "
                      "one probe at a time"),
               IB_S("destination", r->call.dest), IB_I("http_status", resp->status),
               IB_S("error", resp->err.text));
}

/* Writes the row's outcome, retrying the database (never the call). */
static db_outcome_t finish(run_t *r, const db_effect_result_t *res, const db_stmt_t *stmts,
                           size_t nstmts)
{
    for (;;) {
        ib_error_t e;
        db_outcome_t o =
            db_effect_finish(r->dbc, r->p->cfg->consumer, &r->row, res, stmts, nstmts, &e);
        if (o == DB_APPLIED)
            return o;
        r->d->err = e;
        if (e.code == IB_E_LOCK_LOST || e.cls != IB_CLASS_TRANSIENT)
            return o;
        r->d->attempts++;
        /* The lease, not a release, covers a finish we could not write:
         * the next delivery takes the row over as possibly applied. */
        if (!wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, 0))
            return o;
    }
}

/* After finish failed: abandon (weather, a takeover) or say why it is stuck. */
static void finish_failed(run_t *r)
{
    if (r->d->err.code == IB_E_LOCK_LOST || r->d->err.cls == IB_CLASS_TRANSIENT) {
        set_abandon(r->d);
        return;
    }
    wk_decide_dead_letter(r->d, WK_DL_HANDLER_ERROR, "%s", r->d->err.text);
}

static void record_uncertain(run_t *r, const char *why)
{
    db_effect_result_t res = {DB_ROW_UNCERTAIN, NULL, r->d->http_status,
                              ib_class_name(IB_CLASS_AMBIGUOUS), why};
    if (finish(r, &res, NULL, 0) != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    if (r->p->metrics)
        wk_metrics_uncertain(r->p->metrics);
    ib_error_set(&r->d->err, IB_E_TIMEOUT, IB_CLASS_AMBIGUOUS, "%s", why);
    wk_decide_dead_letter(r->d, WK_DL_UNCERTAIN,
                          "%s; recorded uncertain: resolve with inboxctl inbox resolve "
                          "--message-id %s",
                          why, r->row.message_id);
}

/* The effect happened but its finishing SQL cannot be bound: record that much. */
static void unbound(run_t *r, const fx_response_t *resp, const ib_error_t *e)
{
    db_effect_result_t res = {DB_ROW_FAILED, r->d->remote_id, resp->status,
                              ib_class_name(IB_CLASS_PERMANENT), e->text};
    r->d->err = *e;
    if (finish(r, &res, NULL, 0) != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    r->d->err = *e;
    wk_decide_dead_letter(r->d, wk_route_bind_reason(e->code),
                          "the call succeeded (HTTP %ld, remote id '%s') but the finishing SQL "
                          "could not be bound: %s",
                          resp->status, r->d->remote_id, e->text);
}

/* The row becomes processed with the remote id, the route's bound SQL runs (fb is freed). */
static void finish_applied(run_t *r, const fx_response_t *resp, wk_binding_t *fb)
{
    db_effect_result_t res = {DB_ROW_PROCESSED, r->d->remote_id, resp->status, NULL, NULL};
    db_outcome_t o = finish(r, &res, fb->stmts, fb->nstmts);
    bool emitted = fb->nemits > 0;
    wk_binding_free(fb);
    if (o == DB_APPLIED) {
        if (emitted)
            wk_relay_wake(r->p->relay); /* committed emits: publish now, not at the next poll */
        ib_error_clear(&r->d->err);
        wk_decide(r->d, WK_OUT_APPLIED);
        return;
    }
    if (r->d->err.cls == IB_CLASS_PERMANENT && r->d->err.code != IB_E_LOCK_LOST) {
        /* The route's own SQL failed: say so on the row, with the remote id. */
        ib_error_t sqlerr = r->d->err;
        db_effect_result_t bad = {DB_ROW_FAILED, r->d->remote_id, resp->status,
                                  ib_class_name(IB_CLASS_PERMANENT), sqlerr.text};
        if (finish(r, &bad, NULL, 0) == DB_APPLIED)
            r->d->err = sqlerr;
    }
    finish_failed(r);
}

/* 2xx: the row becomes processed with the remote id, the route's SQL runs. */
static void applied(run_t *r, const fx_response_t *resp)
{
    wk_binding_t fb;
    ib_error_t e;
    wk_route_remote_id(r->route, resp, r->d->remote_id, sizeof r->d->remote_id);
    if (wk_route_bind_finish(r->route, r->msg, resp, &fb, &e) != IB_E_OK) {
        wk_binding_free(&fb);
        unbound(r, resp, &e);
        return;
    }
    finish_applied(r, resp, &fb);
}

/*
 * A replay whose stored answer cannot feed the finishing SQL, at a
 * destination that is not idempotent: never called again; the row stays
 * failed and a person finishes it.
 */
static void not_stored(run_t *r, long status, const ib_error_t *e)
{
    char detail[768];
    snprintf(detail, sizeof detail,
             "replayed: the finishing SQL needs more of the answer than the row stores: %s",
             e->text);
    db_effect_result_t res = {DB_ROW_FAILED, r->row.remote_id, status,
                              ib_class_name(IB_CLASS_PERMANENT), detail};
    if (finish(r, &res, NULL, 0) != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    r->d->err = *e;
    wk_decide_dead_letter(r->d, WK_DL_ANSWER_NOT_STORED,
                          "the call succeeded earlier (HTTP %ld, remote id '%s') but the "
                          "finishing SQL needs more of the answer than the inbox row stores (%s) "
                          "and the destination is not idempotent: not called again; apply the "
                          "route's SQL by hand and run inboxctl inbox resolve --message-id %s "
                          "--as processed (or --as retry to call it again)",
                          status, r->row.remote_id, e->text, r->row.message_id);
}

/*
 * An operator's replay of a row recorded failed (DB_CLAIM_REPLAY: the row
 * is ours again). Returns true when the message is decided, false to call.
 * A row whose call was answered 2xx: the effect happened, so the finishing
 * transaction runs with the answer the row stores (status and remote id,
 * wk_route_stored_answer). When the finishing SQL needs more of the answer,
 * an idempotent destination is called again (the same key: the same answer,
 * no second effect) and any other is not (not_stored). Any other failed row
 * (refused, HttpRejected, or failed before a call): the destination did not
 * act, so the route, fixed meanwhile, calls again.
 */
static bool replay_failed(run_t *r)
{
    long status = r->row.remote_status;
    fx_response_t stored;
    wk_binding_t fb;
    ib_error_t e;

    IB_LOG(IB_LOG_INFO, "replay_failed_row", IB_MSG("a replay took a failed inbox row over"),
           IB_S("message_id", r->msg->message_id), IB_S("inbox_message_id", r->row.message_id),
           IB_I("remote_status", status), IB_B("call_succeeded", status >= 200 && status <= 299));
    if (status < 200 || status > 299)
        return false;
    r->reached = true; /* given up, the row is kept (expired), never deleted */
    ib_strlcpy(r->d->remote_id, r->row.remote_id, sizeof r->d->remote_id);
    if (wk_route_stored_answer(r->route, status, r->row.remote_id, &stored, &e) != IB_E_OK) {
        r->d->err = e;
        give_up(r);
        return true;
    }
    if (wk_route_finish_reads_headers(r->route)) {
        ib_error_set(&e, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                     "the finishing SQL reads response headers, which the row does not store");
    } else if (wk_route_bind_finish(r->route, r->msg, &stored, &fb, &e) == IB_E_OK) {
        finish_applied(r, &stored, &fb);
        fx_response_free(&stored);
        return true;
    } else {
        wk_binding_free(&fb);
    }
    fx_response_free(&stored);
    if (e.cls == IB_CLASS_TRANSIENT) { /* out of memory */
        r->d->err = e;
        give_up(r);
        return true;
    }
    if (wk_http_idempotent(r->h))
        return false;
    not_stored(r, status, &e);
    return true;
}

/*
 * The route's rejection events (emit_on_failure) for f, to commit with the
 * row's failed outcome: *n of them in rb (0 when the route has none, or
 * when they cannot be bound: then the failure is recorded without them,
 * and said so).
 */
static const db_stmt_t *rejection_events(run_t *r, const wk_failure_t *f, wk_binding_t *rb,
                                         size_t *n)
{
    ib_error_t e;
    *n = 0;
    memset(rb, 0, sizeof(*rb));
    if (!wk_route_rejects(r->route) || r->replayed)
        return NULL; /* a replay refused again: the row's first failure published it */
    if (wk_route_bind_rejection(r->route, r->msg, f, rb, &e) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "rejection_unbound",
               IB_MSG("the route's emit_on_failure could not be bound: the failure is recorded "
                      "without its rejection event"),
               IB_S("message_id", r->msg->message_id),
               IB_I("route", (long long)wk_route_index(r->route)), IB_S("reason", f->reason),
               IB_S("error", e.text));
        return NULL;
    }
    return wk_binding_emits(rb, n);
}

/* Any other 4xx (and 3xx): the destination refused; recorded failed (with its rejection events). */
static void rejected(run_t *r, const fx_response_t *resp)
{
    char snip[SNIPPET_MAX + 1], detail[512];
    snippet(r, resp, snip, sizeof snip);
    snprintf(detail, sizeof detail, "HTTP %ld: %s", resp->status, snip);
    db_effect_result_t res = {DB_ROW_FAILED, NULL, resp->status,
                              ib_class_name(IB_CLASS_PERMANENT), detail};
    wk_failure_t f = {wk_dl_reason_name(WK_DL_HTTP_REJECTED), ib_class_name(IB_CLASS_PERMANENT),
                      detail};
    wk_binding_t rb;
    size_t n = 0;
    const db_stmt_t *ev = rejection_events(r, &f, &rb, &n);
    db_outcome_t o = finish(r, &res, ev, n);
    wk_binding_free(&rb);
    if (o != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    if (n)
        wk_relay_wake(r->p->relay); /* the committed rejection: publish now */
    ib_error_set(&r->d->err, IB_E_BROKER, IB_CLASS_PERMANENT, "http: status %ld", resp->status);
    wk_decide_dead_letter(r->d, WK_DL_HTTP_REJECTED, "HTTP %ld from %s %s: %s", resp->status,
                          wk_http_method(r->h), r->call.url_redacted, snip);
}

static void count_call(run_t *r, const fx_response_t *resp)
{
    r->d->http_status = resp->status;
    r->d->calls++;
    if (r->p->metrics)
        wk_metrics_http_request(r->p->metrics, wk_route_index(r->route),
                                fx_response_metric_class(resp), resp->duration_s);
    IB_LOG(IB_LOG_DEBUG, "http_call", IB_MSG("destination answered"),
           IB_S("message_id", r->msg->message_id), IB_I("http_status", resp->status),
           IB_S("class", fx_class_name(resp->cls)), IB_B("sent", resp->sent),
           IB_D("duration_s", resp->duration_s),
           IB_S("error", resp->cls == FX_APPLIED ? NULL : resp->err.text));
}

typedef enum { REC_APPLIED, REC_ABSENT, REC_UNKNOWN } reconcile_t;

/* Asks the destination whether the call took effect. */
static reconcile_t reconcile(run_t *r, fx_client_t *fx)
{
    fx_response_t resp;
    fx_request_t rq = {.method = wk_http_reconcile_method(r->h),
                       .url = r->call.reconcile_url,
                       .headers = r->call.headers,
                       .nheaders = r->call.nheaders,
                       .timeout_ms = wk_http_timeout_ms(r->h),
                       .ca_file = wk_http_ca_file(r->h)};
    fx_client_call(fx, &rq, &resp);
    count_call(r, &resp);
    reconcile_t rc = REC_UNKNOWN;
    if (resp.cls == FX_APPLIED && wk_http_reconcile_found(r->h, &resp)) {
        applied(r, &resp);
        rc = REC_APPLIED;
    } else if (resp.status == 404 || resp.cls == FX_APPLIED) {
        /* 404, or a 2xx without reconcile.found's value (200 []): not there. */
        rc = REC_ABSENT;
    } else {
        r->d->err = resp.err;
    }
    fx_response_free(&resp);
    return rc;
}

/* The call itself; returns true when the message is decided. */
static bool call_once(run_t *r, fx_client_t *fx)
{
    fx_response_t resp;
    fx_request_t rq = {.method = wk_http_method(r->h),
                       .url = r->call.url,
                       .body = r->call.body,
                       .body_len = r->call.body_len,
                       .headers = r->call.headers,
                       .nheaders = r->call.nheaders,
                       .timeout_ms = wk_http_timeout_ms(r->h),
                       .ca_file = wk_http_ca_file(r->h)};
    if (!admitted(r))
        return true;
    wk_trace_call_t tc;
    wk_trace_call_begin(&tc, r->msg, rq.method, r->call.url_redacted, &rq.headers, rq.nheaders);
    fx_client_call(fx, &rq, &resp);
    wk_trace_call_end(&tc, &resp);
    dest_done(r, &resp);
    count_call(r, &resp);
    bool decided = true;
    switch (resp.cls) {
    case FX_APPLIED:
        applied(r, &resp);
        break;
    case FX_PERMANENT:
        if (wk_http_applied_status(r->h, resp.status))
            applied(r, &resp); /* http.applied_statuses: "already done" */
        else
            rejected(r, &resp);
        break;
    case FX_TRANSIENT:
        r->d->err = resp.err;
        if (resp.err.code == IB_E_TLS)
            IB_LOG(IB_LOG_ERROR, "http_tls", IB_MSG(resp.err.text),
                   IB_S("message_id", r->msg->message_id), IB_S("url", r->call.url_redacted));
        if (r->p->dests && r->call.dest[0]) {
            /* Held, not retried here nor abandoned: the destination paces it. */
            long long wait = ib_backoff_ms(r->p->cfg->retry.base_ms, r->p->cfg->retry.max_ms,
                                           r->d->attempts, &r->seed);
            hold(r, resp.retry_after_ms > wait ? resp.retry_after_ms : wait);
            break;
        }
        decided = !wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d,
                                          resp.retry_after_ms);
        if (decided)
            give_up(r);
        break;
    case FX_AMBIGUOUS:
        r->d->err = resp.err;
        r->reached = true;
        if (!wk_http_idempotent(r->h) && !wk_http_has_reconcile(r->h)) {
            record_uncertain(r, resp.err.text);
            break;
        }
        /* Same key again (idempotent), or reconcile first: both after a backoff. */
        decided = !wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, 0);
        if (decided)
            give_up(r);
        break;
    }
    fx_response_free(&resp);
    return decided;
}

/* Extends our lease before a call; false when the message is decided. */
static bool renew(run_t *r)
{
    for (;;) {
        ib_error_t e;
        if (db_effect_renew(r->dbc, r->p->cfg->consumer, &r->row, wk_http_lease_s(r->h), &e) ==
            IB_E_OK)
            return true;
        r->d->err = e;
        if (e.code == IB_E_LOCK_LOST) {
            /* Another worker owns the row now: it calls, we do not. */
            r->row.token[0] = '\0';
            set_abandon(r->d);
            return false;
        }
        r->d->attempts++;
        if (e.cls != IB_CLASS_TRANSIENT ||
            !wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, 0)) {
            give_up(r);
            return false;
        }
    }
}

static void call_loop(run_t *r, fx_client_t *fx)
{
    bool prior = r->reached; /* a takeover: the earlier owner may have called */
    for (;;) {
        if (atomic_load(r->lock_lost)) {
            give_up(r);
            return;
        }
        if (prior && !wk_http_idempotent(r->h)) {
            if (!wk_http_has_reconcile(r->h)) {
                record_uncertain(r, "the claim was taken over after its lease ran out: an "
                                    "earlier call may have reached the destination");
                return;
            }
            reconcile_t rc = reconcile(r, fx);
            if (rc == REC_APPLIED)
                return;
            if (rc == REC_UNKNOWN) {
                if (!wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, 0)) {
                    give_up(r);
                    return;
                }
                continue;
            }
            prior = r->reached = false; /* the destination never acted: call */
        }
        if (!renew(r))
            return;
        r->d->attempts++;
        if (call_once(r, fx))
            return;
        prior = r->reached;
    }
}

/* Claims the row, retrying the database; returns true when d is decided. */
static bool claim(run_t *r, db_claim_outcome_t *out)
{
    for (;;) {
        db_claim_outcome_t o =
            db_effect_claim(r->dbc, r->claim, wk_http_lease_s(r->h), &r->row, &r->d->err);
        *out = o;
        if (o != DB_CLAIM_FAILED)
            return false;
        r->d->attempts++;
        if (r->d->err.cls != IB_CLASS_TRANSIENT) {
            wk_decide_dead_letter(r->d, WK_DL_HANDLER_ERROR, "%s", r->d->err.text);
            return true;
        }
        if (!wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, 0))
            return true;
    }
}

/* The row is finished (processed, failed or uncertain): no call. */
static void already_done(run_t *r)
{
    wk_decision_t *d = r->d;
    if (r->row.status == DB_ROW_UNCERTAIN) {
        /* Recorded uncertain, but the dead-letter was lost (a crash or a lost lock between
         * the commit and the settlement): dead-letter again, never call again. */
        ib_error_set(&d->err, IB_E_TIMEOUT, IB_CLASS_AMBIGUOUS,
                     "the inbox row is uncertain from an earlier delivery");
        wk_decide_dead_letter(d, WK_DL_UNCERTAIN,
                              "recorded uncertain by an earlier delivery: resolve with "
                              "inboxctl inbox resolve --message-id %s",
                              r->row.message_id);
        return;
    }
    /* Processed, or failed and not replayed (its dead letter already said why). */
    ib_strlcpy(d->remote_id, r->row.remote_id, sizeof d->remote_id);
    ib_error_clear(&d->err);
    wk_decide(d, WK_OUT_DUPLICATE);
}

void wk_effect_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                       const wk_route_t *route, const db_claim_t *dbclaim,
                       const atomic_bool *lock_lost, wk_decision_t *d)
{
    run_t r = {.p = p,
               .dbc = dbc,
               .msg = msg,
               .route = route,
               .h = wk_route_http(route),
               .claim = dbclaim,
               .lock_lost = lock_lost,
               .d = d};
    db_claim_outcome_t o;
    fx_client_t *fx = thread_client();
    long long t0 = ib_mono_ms();

    if (!fx) {
        ib_error_set(&d->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "http client could not start");
        set_abandon(d);
        return;
    }
    if (claim(&r, &o))
        goto out;
    switch (o) {
    case DB_CLAIM_CONFLICT:
        wk_decide_dead_letter(d, WK_DL_KEY_CONFLICT,
                              "idempotency key '%s' (or message-id '%s') was already used with a "
                              "different body",
                              dbclaim->idempotency_key ? dbclaim->idempotency_key : "",
                              dbclaim->message_id);
        goto out;
    case DB_CLAIM_DONE:
        already_done(&r);
        goto out;
    case DB_CLAIM_REPLAY:
        r.replayed = true;
        if (replay_failed(&r))
            goto out;
        break;
    case DB_CLAIM_BUSY: {
        /* Another worker is calling: its outcome is what a redelivery finds. */
        ib_sleep_ms(ib_backoff_ms(p->cfg->retry.max_ms, p->cfg->retry.max_ms, 1, &r.seed), NULL);
        ib_error_set(&d->err, IB_E_AGAIN, IB_CLASS_TRANSIENT,
                     "another worker holds the claim of this message");
        set_abandon(d);
        goto out;
    }
    case DB_CLAIM_TAKEN_OVER:
        r.reached = true;
        if (p->metrics)
            wk_metrics_claim_taken_over(p->metrics);
        IB_LOG(IB_LOG_WARN, "claim_taken_over",
               IB_MSG("an expired claim was taken over; its earlier call may have acted"),
               IB_S("consumer", p->cfg->consumer), IB_S("message_id", msg->message_id),
               IB_S("inbox_message_id", r.row.message_id), IB_I("claims", r.row.attempts));
        break;
    default:
        break;
    }
    if (wk_route_bind_http(route, msg,
                           dbclaim->idempotency_key ? dbclaim->idempotency_key : msg->message_id,
                           &r.call, &d->err) != IB_E_OK) {
        /* Nothing was called: give the row up and dead-letter the message. */
        ib_error_t e;
        db_effect_release(dbc, p->cfg->consumer, &r.row, r.reached, &e);
        if (d->err.cls == IB_CLASS_TRANSIENT)
            set_abandon(d);
        else
            wk_decide_dead_letter(d, wk_route_bind_reason(d->err.code), "%s", d->err.text);
        goto out;
    }
    call_loop(&r, fx);
out:
    wk_http_call_free(&r.call);
    d->duration_ms += ib_mono_ms() - t0;
}
