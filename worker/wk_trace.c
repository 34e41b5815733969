/*
 * wk_trace.c - the spans of a message: one consumer span from hand-off to
 * settlement, parented on the sender's trace context, with the
 * OpenTelemetry messaging attributes and inboxd's outcome, and a child span
 * of the settlement. thread: as each function says (wk_trace.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_limits.h"
#include "sb_msg.h"
#include "wk_msgctx.h"
#include "wk_trace.h"

/*
 * What every consumer span shares, computed once at start (wk_trace_exporter,
 * before any worker runs) and only read afterwards: spans borrow these.
 */
static struct {
    char name[sizeof("process ") + DB_ENTITY_MAX]; /* "process <entity>" */
    char topic[DB_ENTITY_MAX + 1];                /* messaging.destination.name */
    const char *sub;  /* messaging.destination.subscription.name, or NULL */
    const char *consumer;
    ot_shared_t process;              /* a consumer span's constant attributes */
    ot_shared_t settle[SB_RELEASE + 1]; /* a settlement span's, by disposition */
} consts;

/* messaging.destination.name and .subscription.name from "topic/Subscriptions/sub". */
static void consts_set(const wk_config_t *cfg)
{
    const char *entity = cfg->servicebus.entity;
    const char *sub = entity ? strstr(entity, "/Subscriptions/") : NULL;
    snprintf(consts.name, sizeof(consts.name), "process %s",
             entity && *entity ? entity : "servicebus");
    snprintf(consts.topic, sizeof(consts.topic), "%.*s",
             (int)(sub ? (size_t)(sub - entity) : entity ? strlen(entity) : 0),
             entity ? entity : "");
    consts.sub = sub ? sub + strlen("/Subscriptions/") : NULL;
    consts.consumer = cfg->consumer;
    consts.process = (ot_shared_t){0};
    ot_shared_add(&consts.process, "messaging.system", "servicebus");
    ot_shared_add(&consts.process, "messaging.operation.name", "process");
    ot_shared_add(&consts.process, "messaging.operation.type", "process");
    if (consts.topic[0])
        ot_shared_add(&consts.process, "messaging.destination.name", consts.topic);
    ot_shared_add(&consts.process, "messaging.destination.subscription.name", consts.sub);
    ot_shared_add(&consts.process, "messaging.consumer.group.name", consts.consumer);
    for (int d = SB_COMPLETE; d <= SB_RELEASE; d++) {
        ot_shared_t *set = &consts.settle[d];
        *set = (ot_shared_t){0};
        ot_shared_add(set, "messaging.system", "servicebus");
        ot_shared_add(set, "messaging.operation.name", sb_disposition_name((sb_disposition_t)d));
        ot_shared_add(set, "messaging.operation.type", "settle");
    }
}

ot_exporter_t *wk_trace_exporter(const wk_config_t *cfg, ib_error_t *err)
{
    ot_options_t o = wk_config_otel(cfg);
    consts_set(cfg);
    return ot_exporter_new(&o, err);
}

void wk_trace_begin(ot_exporter_t *x, const wk_config_t *cfg, sb_msg_t *msg, wk_trace_t *t)
{
    ot_ctx_t parent;
    (void)cfg; /* its constants are in consts */
    t->span = t->settle = NULL;
    t->settle_ns = 0;
    t->msg_attrs = false;
    t->traceparent[0] = t->trace_id[0] = t->span_id[0] = '\0';
    if (!x)
        return;
    bool has_parent = wk_trace_parent(msg, &parent) != NULL;
    /* A message without trace context that the sampler leaves out costs nothing more. */
    t->span = ot_span_start_keep(x, consts.name, OT_KIND_CONSUMER, has_parent ? &parent : NULL,
                                 true, 0, OT_KEEP_PROPAGATED);
    if (!t->span)
        return;
    ot_span_shared(t->span, &consts.process);
    ot_ctx_format(ot_span_ctx(t->span), t->traceparent);
    memcpy(t->trace_id, t->traceparent + 3, 32); /* "00-" trace-id "-" span-id "-" flags */
    t->trace_id[32] = '\0';
    memcpy(t->span_id, t->traceparent + 36, 16);
    t->span_id[16] = '\0';
    msg->user = t;
}

/* The message's own attributes on its consumer span, once. */
static void msg_attrs(wk_trace_t *t, const sb_msg_t *msg)
{
    if (t->msg_attrs)
        return;
    t->msg_attrs = true;
    ot_span_str(t->span, "messaging.message.id", msg->message_id);
    ot_span_str(t->span, "messaging.message.conversation_id", msg->correlation_id);
    ot_span_int(t->span, "azure.servicebus.message.delivery_count", msg->delivery_count);
    if (msg->enqueued_ms)
        ot_span_int(t->span, "azure.servicebus.message.enqueued_time", msg->enqueued_ms / 1000);
    ot_span_str(t->span, "inboxd.session_id", msg->session_id);
    ot_span_str(t->span, "inboxd.subject", msg->subject);
}

/* The child span of the settlement: from hand-over (start_ns) to the broker's answer. */
static ot_span_t *settle_span(wk_trace_t *t, sb_disposition_t disp, long long start_ns)
{
    ot_span_t *s = ot_span_start_keep(ot_span_exporter(t->span), sb_disposition_name(disp),
                                      OT_KIND_CLIENT, ot_span_ctx(t->span), false, start_ns,
                                      OT_KEEP_RECORDED);
    ot_span_shared(s, &consts.settle[disp]);
    return s;
}

void wk_trace_settling(wk_trace_t *t, const sb_msg_t *msg, sb_disposition_t disp)
{
    if (!t->span)
        return;
    msg_attrs(t, msg);
    ot_span_drop(t->settle); /* a settlement handed over again */
    t->settle_ns = ot_now_ns();
    t->settle = settle_span(t, disp, t->settle_ns);
    t->settle_disp = disp;
}

void wk_trace_end(wk_trace_t *t, sb_msg_t *msg, sb_disposition_t disp, wk_outcome_t o,
                  const wk_decision_t *d)
{
    long long now;
    if (msg->user == t)
        msg->user = NULL;
    if (!t->span)
        return;
    now = ot_now_ns();
    msg_attrs(t, msg); /* settled without a db worker (released at a drain) */
    if (t->settle && t->settle_disp != disp) { /* the client settled it otherwise */
        ot_span_drop(t->settle);
        t->settle = NULL;
    }
    ot_span_end(t->settle ? t->settle : settle_span(t, disp, t->settle_ns ? t->settle_ns : now),
                now);
    t->settle = NULL;
    ot_span_str_const(t->span, "azure.servicebus.disposition_status", sb_disposition_name(disp));
    ot_span_str_const(t->span, "inboxd.outcome", wk_outcome_name(o));
    if (d->err.code) {
        ot_span_str_const(t->span, "inboxd.error_class", ib_class_name(d->err.cls));
        ot_span_str_const(t->span, "error.type", ib_err_name(d->err.code));
    }
    if (d->disposition == SB_DEADLETTER)
        ot_span_str(t->span, "inboxd.dead_letter_reason", d->reason);
    if (d->route_index >= 0)
        ot_span_int(t->span, "inboxd.route", d->route_index);
    if ((d->err.code && (disp == SB_DEADLETTER || disp == SB_ABANDON)) ||
        o == WK_OUT_LOCK_LOST || o == WK_OUT_SETTLEMENT_UNKNOWN)
        ot_span_error(t->span, d->err.code ? d->err.text : wk_outcome_name(o));
    ot_span_end(t->span, now);
    t->span = NULL;
}

/* server.address and server.port from "scheme://host[:port]/..." */
static void server_of(ot_span_t *s, const char *url)
{
    const char *h = strstr(url, "://"), *end, *colon;
    char host[256];
    if (!h)
        return;
    h += 3;
    end = h + strcspn(h, "/?#");
    colon = memchr(h, ':', (size_t)(end - h));
    snprintf(host, sizeof(host), "%.*s", (int)((colon ? colon : end) - h), h);
    ot_span_str(s, "server.address", host);
    if (colon)
        ot_span_int(s, "server.port", strtol(colon + 1, NULL, 10));
    else
        ot_span_int(s, "server.port", strncmp(url, "https", 5) == 0 ? 443 : 80);
}

void wk_trace_call_begin(wk_trace_call_t *c, const sb_msg_t *msg, const char *method,
                         const char *url, const fx_header_t **headers, size_t nheaders)
{
    const wk_trace_t *t = msg->user;
    c->span = NULL;
    if (!t || !t->span)
        return;
    c->span = ot_span_start(ot_span_exporter(t->span), method, OT_KIND_CLIENT,
                            ot_span_ctx(t->span), false, 0);
    if (!c->span)
        return;
    ot_span_str(c->span, "http.request.method", method);
    ot_span_str(c->span, "url.full", url);
    server_of(c->span, url);
    ot_ctx_format(ot_span_ctx(c->span), c->traceparent);
    if (nheaders > WK_TRACE_MAX_HEADERS)
        return;
    for (size_t i = 0; i < nheaders; i++) {
        c->headers[i] = (*headers)[i];
        if (strcmp(c->headers[i].name, "traceparent") == 0)
            c->headers[i].value = c->traceparent;
    }
    *headers = c->headers;
}

void wk_trace_call_end(wk_trace_call_t *c, const fx_response_t *resp)
{
    if (!c->span)
        return;
    if (resp->status)
        ot_span_int(c->span, "http.response.status_code", resp->status);
    if (resp->cls != FX_APPLIED) {
        char type[16];
        snprintf(type, sizeof(type), "%ld", resp->status);
        ot_span_str(c->span, "error.type", resp->status ? type : ib_err_name(resp->err.code));
        ot_span_error(c->span, resp->err.text);
    }
    ot_span_end(c->span, 0);
    c->span = NULL;
}

/* ---- the inbox transaction's phases --------------------------------------- */

static const char *const phase_names[] = {"inbox claim", "route statement", "inbox commit"};

/* The consumer span of the i-th message of the round, if it is recorded; else NULL. */
static ot_span_t *msg_span(const wk_trace_txn_t *tx, size_t i)
{
    const wk_trace_t *t = i < tx->n ? tx->msg_at(tx->arg, i)->user : NULL;
    return t && ot_span_recording(t->span) ? t->span : NULL;
}

/* db.system.name as OpenTelemetry's database conventions spell it. */
static const char *db_system(const db_conn_t *dbc)
{
    const db_traits_t *tr = db_dialect_traits(db_conn_dialect(dbc));
    return tr ? tr->otel_system : "other_sql";
}

/* The phase hook (db_conn_set_phase_hook): one CLIENT span per phase. */
static void on_phase(void *arg, const db_phase_info_t *info)
{
    wk_trace_txn_t *tx = arg;
    ot_span_t *parent = info->item == DB_PHASE_BATCH ? tx->batch : msg_span(tx, info->item);
    ot_span_t *s;
    if (!ot_span_recording(parent) ||
        !(s = ot_span_start_keep(ot_span_exporter(parent), phase_names[info->phase],
                                 OT_KIND_CLIENT, ot_span_ctx(parent), false, info->start_ns,
                                 OT_KEEP_RECORDED)))
        return;
    ot_span_str_const(s, "db.system.name", db_system(tx->dbc));
    if (info->phase == DB_PHASE_STMT)
        ot_span_int(s, "inboxd.statement", (long long)info->stmt + 1);
    if (info->rows > 1)
        ot_span_int(s, "db.operation.batch.size", (long long)info->rows);
    if (info->err) {
        ot_span_str(s, "db.response.status_code", info->err->sqlstate);
        ot_span_str_const(s, "error.type", ib_class_name(info->err->cls));
        ot_span_error(s, info->err->text);
    }
    ot_span_end(s, info->end_ns);
}

void wk_trace_txn_begin(wk_trace_txn_t *tx, db_conn_t *dbc, size_t n,
                        const sb_msg_t *(*msg_at)(void *arg, size_t i), void *arg)
{
    ot_span_t *any = NULL;
    *tx = (wk_trace_txn_t){NULL, NULL, msg_at, arg, n};
    for (size_t i = 0; i < n && !any; i++)
        any = msg_span(tx, i);
    if (!any)
        return; /* tracing off, or none of them recorded */
    tx->dbc = dbc;
    db_conn_set_phase_hook(dbc, on_phase, tx);
    if (n < 2)
        return;
    /* A root recorded whenever a message it carries is: its links are what it is for. */
    tx->batch = ot_span_start_keep(ot_span_exporter(any), "inbox batch", OT_KIND_INTERNAL, NULL,
                                   false, 0, OT_KEEP_FORCED);
    if (!tx->batch)
        return;
    ot_span_str_const(tx->batch, "db.system.name", db_system(dbc));
    ot_span_int(tx->batch, "inboxd.batch.messages", (long long)n);
    for (size_t i = 0; i < n; i++) {
        ot_span_t *m = msg_span(tx, i);
        if (m) {
            ot_span_link(tx->batch, ot_span_ctx(m));
            ot_span_link(m, ot_span_ctx(tx->batch));
        }
    }
}

void wk_trace_txn_end(wk_trace_txn_t *tx, const ib_error_t *fallback)
{
    if (!tx->dbc)
        return;
    db_conn_set_phase_hook(tx->dbc, NULL, NULL);
    if (tx->batch && fallback && fallback->code) {
        ot_span_str_const(tx->batch, "error.type", ib_class_name(fallback->cls));
        ot_span_error(tx->batch, fallback->text);
    }
    ot_span_end(tx->batch, 0);
    tx->batch = NULL;
    tx->dbc = NULL;
}
