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
 * A batch (wk_effect_process_batch) runs the same steps for several
 * messages: each call admitted by its destination first (one it will not
 * take now is held before any claim), their fresh claims in one transaction, their calls at once
 * (fx_multi), the answers through the same outcome() as a call made alone,
 * their finishes in one transaction (one by one when it fails). Its calls
 * follow the claim at once, under the lease the claim just set, so no
 * renewal precedes them; a message whose row already exists, and every
 * retry, goes through the path of one message after the batch.
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
#include "fx_multi.h"
#include "ib_log.h"
#include "wk_decide.h"
#include "wk_replicas.h"
#include "rl_relay.h"

#define SNIPPET_MAX 200

static pthread_once_t client_once = PTHREAD_ONCE_INIT;
static pthread_key_t client_key, multi_key;
static bool client_ready;

static void free_client(void *fx)
{
    fx_client_free(fx);
}

static void free_multi(void *fm)
{
    fx_multi_free(fm);
}

static void init_clients(void)
{
    ib_error_t err;
    client_ready = fx_global_init(&err) == IB_E_OK &&
                   pthread_key_create(&client_key, free_client) == 0 &&
                   pthread_key_create(&multi_key, free_multi) == 0;
}

/* This thread's client of concurrent calls (a batch); NULL when it cannot start. */
static fx_multi_t *thread_multi(void)
{
    pthread_once(&client_once, init_clients);
    if (!client_ready)
        return NULL;
    fx_multi_t *fm = pthread_getspecific(multi_key);
    if (!fm && (fm = fx_multi_new()) != NULL && pthread_setspecific(multi_key, fm) != 0) {
        fx_multi_free(fm);
        fm = NULL;
    }
    return fm;
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

/* A finish prepared for the row: what runs after its transaction. */
typedef enum { FIN_NONE = 0, FIN_APPLIED, FIN_REJECTED, FIN_UNCERTAIN } fin_kind_t;

/* The state of one message's run through the route. */
typedef struct run {
    wk_pipeline_t *p;
    db_conn_t *dbc;
    const sb_msg_t *msg;
    const rt_route_t *route;
    const rt_http_spec_t *h;
    const db_claim_t *claim;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
    db_claim_row_t row;
    rt_http_call_t call;
    bool reached; /* a call of this claim (or an earlier owner's) may have acted */
    bool replayed; /* an operator's replay or retry took a refused row over: its rejection was
                      published */
    ib_rand_t seed; /* the backoff's state, seeded on first use */
    /* In a batch (wk_effect_process_batch): the finish waits for the batch's
     * transaction, a retry for the end of the batch. */
    bool defer;
    bool batched;            /* its call is made with the batch's (wk_dest's window) */
    fin_kind_t fin;          /* the finish prepared, FIN_NONE when none */
    db_effect_result_t res;  /* its outcome for the row */
    rt_binding_t fb;         /* FIN_APPLIED: the route's finishing statements;
                                FIN_REJECTED: the route's rejection events */
    const db_stmt_t *fin_stmts; /* the statements of the finish, in fb */
    size_t fin_nstmts;
    char detail[512];        /* res.error_detail's storage */
    char snip[SNIPPET_MAX + 1];
    bool again;              /* a retry after the batch (retry_after_ms: again_ms) */
    long long again_ms;
    wk_trace_call_t tc;      /* the batch call's span */
    char rec_dest[FX_DEST_KEY_MAX]; /* the reconcile URL's destination ("" when ungoverned) */
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
    rt_route_scrub(r->route, wide);
    snprintf(buf, size, "%.*s", SNIPPET_MAX, wide);
}

/*
 * Gives the claim up (kept, its lease expired, when a call may have acted)
 * and notes whether the message leaves with its outcome undecided.
 */
static void release_claim(run_t *r)
{
    ib_error_t e;
    if (r->row.token[0])
        db_effect_release(r->dbc, r->p->cfg->consumer, &r->row, r->reached, &e);
    r->d->carry.unresolved = r->reached && !rt_http_idempotent(r->h);
}

/* Gives the claim up and leaves the message to come back (abandon). */
static void give_up(run_t *r)
{
    release_claim(r);
    set_abandon(r->d);
}

/*
 * The destination (dest: the call's or the reconcile URL's) will not take
 * a call now (open circuit, Retry-After, a limit) or just failed
 * transiently: the claim is given back and the message held by the daemon
 * for wait ms, under its renewed lock.
 */
static void hold(run_t *r, long long wait, const char *dest)
{
    if (r->d->err.text[0])
        ib_strlcpy(r->d->carry.last_error, r->d->err.text, sizeof r->d->carry.last_error);
    release_claim(r);
    set_abandon(r->d);
    r->d->held = true;
    r->d->hold_ms = wait;
    ib_strlcpy(r->d->dest, dest, sizeof r->d->dest);
}

/* Whether a call (or a lookup) may go to dest now; if not, the message is held. */
static bool admitted(run_t *r, const char *dest)
{
    long long wait;
    wk_dest_limits_t lim = {rt_http_rate_per_s(r->h), rt_http_max_concurrent(r->h), r->batched};
    if (rt_http_cluster_limits(r->h))
        wk_replicas_share(r->p->replicas, &lim);
    if (!r->p->dests || !dest[0] || wk_dest_admit(r->p->dests, dest, &lim, ib_mono_ms(), &wait))
        return true;
    hold(r, wait, dest);
    return false;
}

/*
 * A Retry-After longer than the route's http.max_retry_after_s is held only
 * that long (counted): one answer must not stop a destination for a day.
 */
static void cap_retry_after(run_t *r, fx_response_t *resp)
{
    long cap = rt_http_max_retry_after_s(r->h) * 1000L;
    if (resp->retry_after_ms <= cap)
        return;
    resp->retry_after_ms = cap;
    if (r->p->metrics)
        wk_metrics_retry_after_capped(r->p->metrics);
}

/* What an answer of dest says of it (res; Retry-After capped); logs a circuit that opens. */
static void dest_done(run_t *r, const char *dest, wk_dest_result_t res, fx_response_t *resp)
{
    cap_retry_after(r, resp);
    if (!r->p->dests || !dest[0])
        return;
    if (wk_dest_done(r->p->dests, dest, res, resp->retry_after_ms, ib_mono_ms()))
        IB_LOG(IB_LOG_ERROR, "http_circuit_open",
               IB_MSG("the destination failed several calls in a row: its messages are held, "
                      "one probe at a time"),
               IB_S("destination", dest), IB_I("http_status", resp->status),
               IB_S("error", resp->err.text));
}

/* What a call's answer says of its destination: sent without an answer says nothing. */
static wk_dest_result_t call_result(const fx_response_t *resp)
{
    return resp->cls == FX_TRANSIENT   ? WK_DEST_TRANSIENT
           : resp->cls == FX_AMBIGUOUS ? WK_DEST_UNKNOWN
                                       : WK_DEST_OK;
}

/* Writes the row's outcome, retrying the database (never the call). */
static db_outcome_t finish(run_t *r, const db_effect_result_t *res, const db_stmt_t *stmts,
                           size_t nstmts)
{
    for (;;) {
        ib_error_t e;
        db_outcome_t o =
            db_effect_finish(r->dbc, r->p->cfg->consumer, &r->row, res, stmts, nstmts, &e);
        if (o == DB_APPLIED) {
            r->d->carry.unresolved = false; /* the row holds the outcome */
            return o;
        }
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

static void fin_run(run_t *r);

/* Prepares the row's finish (fin, res) and runs it now unless the batch defers it. */
static void fin_prepare(run_t *r, fin_kind_t kind, db_row_status_t status, const char *remote_id,
                        long remote_status, const char *error_class, const char *detail)
{
    r->fin = kind;
    if (detail && detail != r->detail)
        ib_strlcpy(r->detail, detail, sizeof r->detail);
    r->res = (db_effect_result_t){status, remote_id, remote_status, error_class,
                                  detail ? r->detail : NULL};
    if (!r->defer)
        fin_run(r);
}

static void record_uncertain(run_t *r, const char *why)
{
    fin_prepare(r, FIN_UNCERTAIN, DB_ROW_UNCERTAIN, NULL, r->d->http_status,
                ib_class_name(IB_CLASS_AMBIGUOUS), why);
}

/* After the uncertain row was written (or not). */
static void uncertain_after(run_t *r, db_outcome_t o)
{
    if (o != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    if (r->p->metrics)
        wk_metrics_uncertain(r->p->metrics);
    ib_error_set(&r->d->err, IB_E_TIMEOUT, IB_CLASS_AMBIGUOUS, "%s", r->detail);
    wk_decide_dead_letter(r->d, WK_DL_UNCERTAIN,
                          "%s; recorded uncertain: resolve with inboxctl inbox resolve "
                          "--message-id %s",
                          r->detail, r->row.message_id);
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
    wk_decide_dead_letter(r->d, wk_dl_reason_of_bind(e->code),
                          "the call succeeded (HTTP %ld, remote id '%s') but the finishing SQL "
                          "could not be bound: %s",
                          resp->status, r->d->remote_id, e->text);
}

/* The row becomes processed with the remote id, the route's bound SQL runs (fb is taken). */
static void finish_applied(run_t *r, const fx_response_t *resp, rt_binding_t *fb)
{
    r->fb = *fb;
    r->fin_stmts = r->fb.stmts;
    r->fin_nstmts = r->fb.nstmts;
    fin_prepare(r, FIN_APPLIED, DB_ROW_PROCESSED, r->d->remote_id, resp->status, NULL, NULL);
}

/* After the processed row and the route's SQL were written (or not); fb is freed. */
static void applied_after(run_t *r, db_outcome_t o)
{
    bool emitted = r->fb.nemits > 0;
    rt_binding_free(&r->fb);
    if (o == DB_APPLIED) {
        if (emitted)
            rl_relay_wake(r->p->relay); /* committed emits: publish now, not at the next poll */
        ib_error_clear(&r->d->err);
        wk_decide(r->d, WK_OUT_APPLIED);
        return;
    }
    if (r->d->err.cls == IB_CLASS_PERMANENT && r->d->err.code != IB_E_LOCK_LOST) {
        /* The route's own SQL failed: say so on the row, with the remote id. */
        ib_error_t sqlerr = r->d->err;
        db_effect_result_t bad = {DB_ROW_FAILED, r->d->remote_id, r->res.remote_status,
                                  ib_class_name(IB_CLASS_PERMANENT), sqlerr.text};
        if (finish(r, &bad, NULL, 0) == DB_APPLIED)
            r->d->err = sqlerr;
    }
    finish_failed(r);
}

/* 2xx: the row becomes processed with the remote id, the route's SQL runs. */
static void applied(run_t *r, const fx_response_t *resp)
{
    rt_binding_t fb;
    ib_error_t e;
    rt_route_remote_id(r->route, resp, r->d->remote_id, sizeof r->d->remote_id);
    if (rt_route_bind_finish(r->route, r->msg, wk_traceparent(r->msg), resp, &fb, &e) != IB_E_OK) {
        rt_binding_free(&fb);
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
 * rt_route_stored_answer). When the finishing SQL needs more of the answer,
 * an idempotent destination is called again (the same key: the same answer,
 * no second effect) and any other is not (not_stored). Any other failed row
 * (refused, HttpRejected, or failed before a call): the destination did not
 * act, so the route, fixed meanwhile, calls again.
 */
static bool replay_failed(run_t *r)
{
    long status = r->row.remote_status;
    fx_response_t stored;
    rt_binding_t fb;
    ib_error_t e;

    IB_LOG(IB_LOG_INFO, "replay_failed_row", IB_MSG("a replay took a failed inbox row over"),
           IB_S("message_id", r->msg->message_id), IB_S("inbox_message_id", r->row.message_id),
           IB_S("trace_id", r->d->trace_id[0] ? r->d->trace_id : NULL),
           IB_S("span_id", wk_span_id(r->msg)),
           IB_I("remote_status", status), IB_B("call_succeeded", status >= 200 && status <= 299));
    if (status < 200 || status > 299)
        return false;
    r->reached = true; /* given up, the row is kept (expired), never deleted */
    ib_strlcpy(r->d->remote_id, r->row.remote_id, sizeof r->d->remote_id);
    if (rt_route_stored_answer(r->route, status, r->row.remote_id, &stored, &e) != IB_E_OK) {
        r->d->err = e;
        give_up(r);
        return true;
    }
    if (rt_route_finish_reads_headers(r->route)) {
        ib_error_set(&e, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                     "the finishing SQL reads response headers, which the row does not store");
    } else if (rt_route_bind_finish(r->route, r->msg, wk_traceparent(r->msg), &stored, &fb, &e) == IB_E_OK) {
        finish_applied(r, &stored, &fb);
        fx_response_free(&stored);
        return true;
    } else {
        rt_binding_free(&fb);
    }
    fx_response_free(&stored);
    if (e.cls == IB_CLASS_TRANSIENT) { /* out of memory */
        r->d->err = e;
        give_up(r);
        return true;
    }
    if (rt_http_idempotent(r->h))
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
static const db_stmt_t *rejection_events(run_t *r, const rt_failure_t *f, rt_binding_t *rb,
                                         size_t *n)
{
    ib_error_t e;
    *n = 0;
    memset(rb, 0, sizeof(*rb));
    if (!rt_route_rejects(r->route) || r->replayed)
        return NULL; /* a replay or retry refused again: the row's first failure published it */
    if (rt_route_bind_rejection(r->route, r->msg, wk_traceparent(r->msg), f, rb, &e) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "rejection_unbound",
               IB_MSG("the route's emit_on_failure could not be bound: the failure is recorded "
                      "without its rejection event"),
               IB_S("message_id", r->msg->message_id),
               IB_I("route", (long long)rt_route_index(r->route)), IB_S("reason", f->reason),
               IB_S("error", e.text));
        return NULL;
    }
    return rt_binding_emits(rb, n);
}

/* Any other 4xx (and 3xx): the destination refused; recorded failed (with its rejection events). */
static void rejected(run_t *r, const fx_response_t *resp)
{
    snippet(r, resp, r->snip, sizeof r->snip);
    snprintf(r->detail, sizeof r->detail, "HTTP %ld: %s", resp->status, r->snip);
    rt_failure_t f = {wk_dl_reason_name(WK_DL_HTTP_REJECTED), ib_class_name(IB_CLASS_PERMANENT),
                      r->detail};
    r->fin_stmts = rejection_events(r, &f, &r->fb, &r->fin_nstmts);
    fin_prepare(r, FIN_REJECTED, DB_ROW_FAILED, NULL, resp->status,
                ib_class_name(IB_CLASS_PERMANENT), r->detail);
}

/* After the refused row and its rejection events were written (or not); fb is freed. */
static void rejected_after(run_t *r, db_outcome_t o)
{
    size_t events = r->fin_nstmts;
    rt_binding_free(&r->fb);
    if (o != DB_APPLIED) {
        finish_failed(r);
        return;
    }
    if (events)
        rl_relay_wake(r->p->relay); /* the committed rejection: publish now */
    long status = r->res.remote_status;
    ib_error_set(&r->d->err, IB_E_BROKER, IB_CLASS_PERMANENT, "http: status %ld", status);
    wk_decide_dead_letter(r->d, WK_DL_HTTP_REJECTED, "HTTP %ld from %s %s: %s", status,
                          rt_http_method(r->h), r->call.url_redacted, r->snip);
}

/* What follows the row's finishing transaction, by the finish prepared. */
static void fin_after(run_t *r, db_outcome_t o)
{
    fin_kind_t kind = r->fin;
    r->fin = FIN_NONE;
    switch (kind) {
    case FIN_APPLIED:
        applied_after(r, o);
        break;
    case FIN_REJECTED:
        rejected_after(r, o);
        break;
    case FIN_UNCERTAIN:
        uncertain_after(r, o);
        break;
    case FIN_NONE:
        break;
    }
}

/* The prepared finish in a transaction of its own (retrying the database), then what follows. */
static void fin_run(run_t *r)
{
    fin_after(r, finish(r, &r->res, r->fin_stmts, r->fin_nstmts));
}

static void count_call(run_t *r, const fx_response_t *resp)
{
    r->d->http_status = resp->status;
    r->d->calls++;
    if (r->p->metrics)
        wk_metrics_http_request(r->p->metrics, rt_route_index(r->route),
                                fx_response_metric_class(resp), resp->duration_s);
    IB_LOG(IB_LOG_DEBUG, "http_call", IB_MSG("destination answered"),
           IB_S("message_id", r->msg->message_id), IB_I("http_status", resp->status),
           IB_S("trace_id", r->d->trace_id[0] ? r->d->trace_id : NULL),
           IB_S("span_id", wk_span_id(r->msg)),
           IB_S("class", fx_class_name(resp->cls)), IB_B("sent", resp->sent),
           IB_D("duration_s", resp->duration_s),
           IB_S("error", resp->cls == FX_APPLIED ? NULL : resp->err.text));
}

typedef enum { REC_APPLIED, REC_ABSENT, REC_UNKNOWN, REC_HELD } reconcile_t;

/*
 * Asks the destination whether the call took effect: a call like any
 * other, admitted by the reconcile URL's destination (its circuit, rate
 * and slots; REC_HELD when it will not take it now: the message is held),
 * counted in the message's attempts and the delivery's lookups, and
 * telling the circuit what its answer says: a lookup is safe to repeat, so
 * one that gets no answer (5xx, refused, a timeout, sent or not) is a
 * failure of the destination.
 */
static reconcile_t reconcile(run_t *r, fx_client_t *fx)
{
    if (!admitted(r, r->rec_dest))
        return REC_HELD;
    r->d->attempts++;
    r->d->carry.lookups++;
    fx_response_t resp;
    fx_request_t rq = {.method = rt_http_reconcile_method(r->h),
                       .url = r->call.reconcile_url,
                       .headers = r->call.headers,
                       .nheaders = r->call.nheaders,
                       .timeout_ms = rt_http_timeout_ms(r->h),
                       .ca_file = rt_http_ca_file(r->h)};
    wk_trace_call_t tc;
    wk_trace_call_begin(&tc, r->msg, rq.method, r->call.reconcile_url_redacted, &rq.headers,
                        rq.nheaders);
    fx_client_call(fx, &rq, &resp);
    wk_trace_call_end(&tc, &resp);
    bool answered = resp.cls == FX_APPLIED || resp.status == 404;
    dest_done(r, r->rec_dest,
              answered || resp.cls == FX_PERMANENT ? WK_DEST_OK : WK_DEST_TRANSIENT, &resp);
    count_call(r, &resp);
    reconcile_t rc = REC_UNKNOWN;
    if (resp.cls == FX_APPLIED && rt_http_reconcile_found(r->h, &resp)) {
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

/*
 * A retry of the call after a backoff (at least retry_after_ms); returns
 * true when the message is decided (given up). In a batch the wait and the
 * retry come after the batch's finish (again).
 */
static bool retry_later(run_t *r, long long retry_after_ms)
{
    if (r->defer) {
        r->again = true;
        r->again_ms = retry_after_ms;
        return true;
    }
    bool decided =
        !wk_pipeline_retry_wait(r->p, r->msg, r->lock_lost, &r->seed, r->d, retry_after_ms);
    if (!decided)
        return false;
    if (r->d->disposition != SB_DEADLETTER) {
        give_up(r);
    } else if (r->reached && !rt_http_idempotent(r->h)) {
        /* The budget ended while the call may have acted: uncertain, never a bare budget. */
        char why[1024];
        snprintf(why, sizeof why, "%s", r->d->description);
        record_uncertain(r, why);
    } else {
        release_claim(r); /* the budget's dead letter stands */
    }
    return true;
}

/*
 * What the call's answer means for the message (the one place: a call made
 * alone and a call made in a batch); returns true when it is decided.
 */
static bool outcome(run_t *r, const fx_response_t *resp)
{
    switch (resp->cls) {
    case FX_APPLIED:
        applied(r, resp);
        return true;
    case FX_PERMANENT:
        if (rt_http_applied_status(r->h, resp->status))
            applied(r, resp); /* http.applied_statuses: "already done" */
        else
            rejected(r, resp);
        return true;
    case FX_TRANSIENT:
        r->d->err = resp->err;
        if (resp->err.code == IB_E_TLS)
            IB_LOG(IB_LOG_ERROR, "http_tls", IB_MSG(resp->err.text),
                   IB_S("message_id", r->msg->message_id), IB_S("url", r->call.url_redacted),
                   IB_S("span_id", wk_span_id(r->msg)));
        if (r->p->dests && r->call.dest[0]) {
            /* Held, not retried here nor abandoned: the destination paces it (a long
             * Retry-After is wk_dest's to keep, so this message may be its probe). */
            long long wait = ib_backoff_ms(r->p->cfg->retry.base_ms, r->p->cfg->retry.max_ms,
                                           r->d->attempts, &r->seed);
            long long ra = resp->retry_after_ms < WK_DEST_HOLD_PROBE_MS ? resp->retry_after_ms
                                                                         : WK_DEST_HOLD_PROBE_MS;
            hold(r, ra > wait ? ra : wait, r->call.dest);
            return true;
        }
        return retry_later(r, resp->retry_after_ms);
    case FX_AMBIGUOUS:
        r->d->err = resp->err;
        r->reached = true;
        if (!rt_http_idempotent(r->h) && !rt_http_has_reconcile(r->h)) {
            record_uncertain(r, resp->err.text);
            return true;
        }
        /* Same key again (idempotent), or reconcile first: both after a backoff. */
        return retry_later(r, 0);
    }
    return true;
}

/* The request of the run's call. */
static fx_request_t request(const run_t *r)
{
    return (fx_request_t){.method = rt_http_method(r->h),
                          .url = r->call.url,
                          .body = r->call.body,
                          .body_len = r->call.body_len,
                          .headers = r->call.headers,
                          .nheaders = r->call.nheaders,
                          .timeout_ms = rt_http_timeout_ms(r->h),
                          .ca_file = rt_http_ca_file(r->h)};
}

/* The call itself; returns true when the message is decided. */
static bool call_once(run_t *r, fx_client_t *fx)
{
    fx_response_t resp;
    fx_request_t rq = request(r);
    if (!admitted(r, r->call.dest))
        return true;
    wk_trace_call_t tc;
    wk_trace_call_begin(&tc, r->msg, rq.method, r->call.url_redacted, &rq.headers, rq.nheaders);
    fx_client_call(fx, &rq, &resp);
    wk_trace_call_end(&tc, &resp);
    dest_done(r, r->call.dest, call_result(&resp), &resp);
    count_call(r, &resp);
    bool decided = outcome(r, &resp);
    fx_response_free(&resp);
    return decided;
}

/* Extends our lease before a call; false when the message is decided. */
static bool renew(run_t *r)
{
    for (;;) {
        ib_error_t e;
        if (db_effect_renew(r->dbc, r->p->cfg->consumer, &r->row, rt_http_lease_s(r->h), &e) ==
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

/*
 * The retry budget ended with the outcome unknown: the row becomes
 * uncertain and the message is dead-lettered OutcomeUncertain, naming the
 * lookups, the reconcile URL's destination and the last error.
 */
static void lookups_spent(run_t *r)
{
    char why[512];
    if (r->d->err.text[0])
        ib_strlcpy(r->d->carry.last_error, r->d->err.text, sizeof r->d->carry.last_error);
    snprintf(why, sizeof why,
             "the call may have acted and reconcile at %s could not tell: %d lookups on "
             "delivery %u, the last the retry budget allows; last error: %s",
             r->rec_dest[0] ? r->rec_dest : r->call.reconcile_url_redacted, r->d->carry.lookups,
             r->msg->delivery_count,
             r->d->carry.last_error[0] ? r->d->carry.last_error : "none");
    /* The attempts of this run and of the runs before its holds. */
    if (r->d->attempts < r->d->carry.lookups)
        r->d->attempts = r->d->carry.lookups;
    record_uncertain(r, why);
}

/*
 * After a lookup that could not answer: the message is held for the
 * destination (ib_backoff_ms on the delivery's lookups, the circuit's pace
 * on top) while the delivery has lookups left (retry.attempts + 1); then
 * it is given back (abandon: the next delivery asks again), or, when the
 * retry budget ends with this delivery, recorded uncertain.
 */
static void lookup_failed(run_t *r)
{
    const wk_config_t *cfg = r->p->cfg;
    if (r->d->carry.lookups > cfg->retry.attempts) {
        if (wk_pipeline_budget_ends(r->p, r->msg))
            lookups_spent(r);
        else
            give_up(r);
        return;
    }
    hold(r, ib_backoff_ms(cfg->retry.base_ms, cfg->retry.max_ms, r->d->carry.lookups, &r->seed),
         r->rec_dest);
}

/* The reconcile step of a call that may have acted: true when the destination never acted. */
static bool reconciled(run_t *r, fx_client_t *fx)
{
    if (r->d->carry.spent) { /* its hold outlasted the last delivery's lock renewal */
        lookups_spent(r);
        return false;
    }
    if (!r->rec_dest[0] && !fx_dest_key(r->call.reconcile_url, r->rec_dest, sizeof r->rec_dest))
        r->rec_dest[0] = '\0'; /* a literal host wk_dest cannot name: asked, not governed */
    switch (reconcile(r, fx)) {
    case REC_ABSENT:
        return true;
    case REC_UNKNOWN:
        lookup_failed(r);
        return false;
    case REC_APPLIED:
    case REC_HELD:
        break;
    }
    return false;
}

/*
 * Its hold ran out on the last delivery and no call of it may have acted
 * unanswered: dead-lettered RetryBudgetExhausted with the last error,
 * never called again (the claim given back).
 */
static void hold_spent(run_t *r)
{
    release_claim(r);
    ib_error_set(&r->d->err, IB_E_AGAIN, IB_CLASS_TRANSIENT, "%s",
                 r->d->carry.last_error[0] ? r->d->carry.last_error : "held for its destination");
    wk_decide_dead_letter(r->d, WK_DL_RETRY_BUDGET,
                          "delivery %u reached retry.max_deliveries, held for %s until its "
                          "lock renewal ran out; last error: %s",
                          r->msg->delivery_count,
                          r->call.dest[0] ? r->call.dest : "its destination", r->d->err.text);
}

static void call_loop(run_t *r, fx_client_t *fx)
{
    bool prior = r->reached; /* a takeover: the earlier owner may have called */
    for (;;) {
        if (atomic_load(r->lock_lost)) {
            give_up(r);
            return;
        }
        if (prior && !rt_http_idempotent(r->h)) {
            if (!rt_http_has_reconcile(r->h)) {
                record_uncertain(r, "the claim was taken over after its lease ran out: an "
                                    "earlier call may have reached the destination");
                return;
            }
            if (!reconciled(r, fx))
                return;
            prior = r->reached = false; /* the destination never acted: call */
        }
        if (r->d->carry.spent) {
            hold_spent(r);
            return;
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
            db_effect_claim(r->dbc, r->claim, rt_http_lease_s(r->h), &r->row, &r->d->err);
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
    d->carry.unresolved = false;
    ib_strlcpy(d->remote_id, r->row.remote_id, sizeof d->remote_id);
    ib_error_clear(&d->err);
    wk_decide(d, WK_OUT_DUPLICATE);
}

/* Binds the call (URL, headers, body); false when the message is decided. */
static bool bind_call(run_t *r)
{
    const db_claim_t *c = r->claim;
    if (rt_route_bind_http(r->route, r->msg, c->idempotency_key ? c->idempotency_key
                                                                : r->msg->message_id,
                           wk_traceparent(r->msg), &r->call, &r->d->err) == IB_E_OK)
        return true;
    /* Nothing was called: give the row up and dead-letter the message. */
    ib_error_t e;
    db_effect_release(r->dbc, r->p->cfg->consumer, &r->row, r->reached, &e);
    if (r->d->err.cls == IB_CLASS_TRANSIENT)
        set_abandon(r->d);
    else
        wk_decide_dead_letter(r->d, wk_dl_reason_of_bind(r->d->err.code), "%s", r->d->err.text);
    return false;
}

void wk_effect_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                       const rt_route_t *route, const db_claim_t *dbclaim,
                       const atomic_bool *lock_lost, wk_decision_t *d)
{
    run_t r = {.p = p,
               .dbc = dbc,
               .msg = msg,
               .route = route,
               .h = rt_route_http(route),
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
    case DB_CLAIM_RETRY:
        /* Resolved retry: a row the destination had refused (3xx, 4xx; an uncertain row
         * holds no such status) published its rejection then. */
        r.replayed = r.row.remote_status >= 300 && r.row.remote_status < 500;
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
               IB_S("inbox_message_id", r.row.message_id), IB_I("claims", r.row.attempts),
               IB_S("span_id", wk_span_id(msg)));
        break;
    default:
        break;
    }
    if (bind_call(&r))
        call_loop(&r, fx);
out:
    rt_http_call_free(&r.call);
    d->duration_ms += ib_mono_ms() - t0;
}

/* ---- a batch of messages on HTTP routes ------------------------------------ */

/* Where a message of a batch stands. */
typedef enum {
    B_ALONE = 0, /* decided by wk_effect_process after the batch */
    B_HELD,      /* its destination would not take a call: held, no claim made */
    B_CALL,      /* claimed by the batch: called with it */
} bstate_t;

/* The batch's state (thread: its db worker). */
typedef struct batch {
    wk_pipeline_t *p;
    db_conn_t *dbc;
    run_t *runs;
    bstate_t *st;
    db_effect_claim_item_t *claims;
    fx_request_t *reqs;
    fx_response_t *resps;
    size_t *called; /* the run of each request */
    size_t n, ncalled;
    const wk_effect_item_t *items;
    bool *early;  /* settled before the batch ended */
    size_t *done; /* fx_multi_next's answered requests */
    long long t0;
} batch_t;

static void batch_free(batch_t *b)
{
    free(b->runs);
    free(b->st);
    free(b->claims);
    free(b->reqs);
    free(b->resps);
    free(b->called);
    free(b->early);
    free(b->done);
}

static bool batch_alloc(batch_t *b, size_t n)
{
    b->n = n;
    b->runs = calloc(n, sizeof(*b->runs));
    b->st = calloc(n, sizeof(*b->st));
    b->claims = calloc(n, sizeof(*b->claims));
    b->reqs = calloc(n, sizeof(*b->reqs));
    b->resps = calloc(n, sizeof(*b->resps));
    b->called = calloc(n, sizeof(*b->called));
    b->early = calloc(n, sizeof(*b->early));
    b->done = calloc(n, sizeof(*b->done));
    return b->runs && b->st && b->claims && b->reqs && b->resps && b->called && b->early &&
           b->done;
}

/*
 * Binds each message's call and asks its destination first: one it will
 * not take now is held before any claim is made (no claim, no release); a
 * message that cannot be bound, a replay or one whose lock is lost is left
 * to the path of one message.
 */
static void admit_all(batch_t *b, const wk_effect_item_t *items)
{
    for (size_t i = 0; i < b->n; i++) {
        run_t *r = &b->runs[i];
        *r = (run_t){.p = b->p,
                     .dbc = b->dbc,
                     .msg = items[i].msg,
                     .route = items[i].route,
                     .h = rt_route_http(items[i].route),
                     .claim = items[i].claim,
                     .lock_lost = items[i].lock_lost,
                     .d = items[i].d,
                     .batched = true};
        const db_claim_t *c = r->claim;
        ib_error_t e;
        b->st[i] = B_ALONE;
        if (c->replay || atomic_load(r->lock_lost) || r->d->carry.unresolved || r->d->carry.spent)
            continue; /* unresolved: its row exists, looked up alone; spent: decided alone */
        if (rt_route_bind_http(r->route, r->msg,
                               c->idempotency_key ? c->idempotency_key : r->msg->message_id,
                               wk_traceparent(r->msg), &r->call, &e) != IB_E_OK) {
            rt_http_call_free(&r->call);
            continue;
        }
        r->d->attempts++;
        b->st[i] = admitted(r, r->call.dest) ? B_CALL : B_HELD;
        if (b->st[i] == B_CALL)
            b->claims[i] = (db_effect_claim_item_t){.claim = c, .lease_s = rt_http_lease_s(r->h)};
    }
}

/* The admitted messages' claims in one transaction; those claimed go into reqs. */
static void claim_together(batch_t *b)
{
    ib_error_t e;
    if (db_effect_claim_batch(b->dbc, b->claims, b->n, &e) == 0 && e.code != IB_E_OK)
        IB_LOG(IB_LOG_INFO, "http_batch_claim_fallback",
               IB_MSG("batch claim rolled back; its messages are claimed one by one"),
               IB_I("messages", (long long)b->n), IB_S("sqlstate", e.sqlstate),
               IB_S("error", e.text));
    for (size_t i = 0; i < b->n; i++) {
        run_t *r = &b->runs[i];
        if (b->st[i] != B_CALL)
            continue;
        if (!b->claims[i].claimed) {
            /* Its row exists (or the claim failed): decided alone, after the batch. */
            if (r->p->dests && r->call.dest[0])
                wk_dest_cancel(r->p->dests, r->call.dest);
            rt_http_call_free(&r->call);
            r->d->attempts--;
            b->st[i] = B_ALONE;
            continue;
        }
        r->row = b->claims[i].row;
        fx_request_t *rq = &b->reqs[b->ncalled];
        *rq = request(r);
        wk_trace_call_begin(&r->tc, r->msg, rq->method, r->call.url_redacted, &rq->headers,
                            rq->nheaders);
        b->called[b->ncalled++] = i;
    }
}

/*
 * The finishing transactions of the answered runs (requests done[0..k)) as
 * one; one by one when it fails.
 */
static void finish_together(batch_t *b, const size_t *done, size_t k)
{
    db_effect_finish_item_t *fi = calloc(k ? k : 1, sizeof(*fi));
    size_t m = 0;
    ib_error_t e;
    for (size_t j = 0; fi && j < k; j++) {
        run_t *r = &b->runs[b->called[done[j]]];
        if (r->fin != FIN_NONE)
            fi[m++] = (db_effect_finish_item_t){&r->row, &r->res, r->fin_stmts, r->fin_nstmts};
    }
    db_outcome_t o = m > 1 ? db_effect_finish_batch(b->dbc, b->p->cfg->consumer, fi, m, &e)
                           : DB_FAILED;
    if (m > 1 && o != DB_APPLIED) {
        if (b->p->metrics)
            wk_metrics_batch_fallback(b->p->metrics);
        IB_LOG(IB_LOG_INFO, "http_batch_finish_fallback",
               IB_MSG("batch finish rolled back; its rows are finished one by one"),
               IB_I("messages", (long long)m), IB_S("sqlstate", e.sqlstate),
               IB_S("error", e.text));
    }
    free(fi);
    for (size_t j = 0; j < k; j++) {
        run_t *r = &b->runs[b->called[done[j]]];
        if (r->fin == FIN_NONE)
            continue;
        if (o == DB_APPLIED)
            fin_after(r, DB_APPLIED);
        else
            fin_run(r);
    }
}

/*
 * Message i of the batch, decided, settled now rather than when the batch
 * ends (wk_pipeline_t.settle_now): after this its message and decision are
 * the settler's, and the batch touches neither again.
 */
static void settle_now(batch_t *b, size_t i)
{
    const wk_effect_item_t *it = &b->items[i];
    if (!it->settled || !b->p->settle_now)
        return;
    rt_http_call_free(&b->runs[i].call);
    it->d->duration_ms += ib_mono_ms() - b->t0;
    b->early[i] = true;
    *it->settled = true;
    b->p->settle_now(b->p->settle_ctx, it->d);
}

/*
 * The requests done[0..k) have answered: their outcomes, their finishing
 * transactions as one, and each decided message settled at once, so a slow
 * call of the batch holds only its own message.
 */
static void answered(batch_t *b, const size_t *done, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        run_t *r = &b->runs[b->called[done[j]]];
        fx_response_t *resp = &b->resps[done[j]];
        wk_trace_call_end(&r->tc, resp);
        dest_done(r, r->call.dest, call_result(resp), resp);
        count_call(r, resp);
        r->defer = true;
        outcome(r, resp);
        r->defer = false;
    }
    finish_together(b, done, k);
    for (size_t j = 0; j < k; j++)
        if (!b->runs[b->called[done[j]]].again)
            settle_now(b, b->called[done[j]]);
}

void wk_effect_process_batch(wk_pipeline_t *p, db_conn_t *dbc, const wk_effect_item_t *items,
                             size_t n)
{
    batch_t b = {.p = p, .dbc = dbc};
    fx_client_t *fx = thread_client();
    fx_multi_t *fm = thread_multi();
    long long t0 = ib_mono_ms();

    if (n < 2 || !fx || !fm || !batch_alloc(&b, n)) {
        batch_free(&b);
        for (size_t i = 0; i < n; i++)
            wk_effect_process(p, dbc, items[i].msg, items[i].route, items[i].claim,
                              items[i].lock_lost, items[i].d);
        return;
    }
    b.items = items;
    b.t0 = t0;
    admit_all(&b, items);
    claim_together(&b);
    fx_multi_start(fm, b.reqs, b.resps, b.ncalled);
    for (size_t k; (k = fx_multi_next(fm, b.done)) > 0;)
        answered(&b, b.done, k);
    for (size_t k = 0; k < b.ncalled; k++) {
        run_t *r = &b.runs[b.called[k]];
        if (r->again && !retry_later(r, r->again_ms))
            call_loop(r, fx);
        fx_response_free(&b.resps[k]);
    }
    long long took = ib_mono_ms() - t0;
    for (size_t i = 0; i < n; i++) {
        if (b.early[i])
            continue; /* settled: no longer this batch's */
        if (b.st[i] == B_ALONE) {
            /* Decided alone, after the batch's rows are finished (a copy of a
             * message of this batch finds its row done: a duplicate). */
            wk_effect_process(p, dbc, items[i].msg, items[i].route, items[i].claim,
                              items[i].lock_lost, items[i].d);
            continue;
        }
        rt_http_call_free(&b.runs[i].call);
        items[i].d->duration_ms += took;
    }
    batch_free(&b);
}
