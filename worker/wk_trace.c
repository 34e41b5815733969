/*
 * wk_trace.c - the spans of a message: one consumer span from hand-off to
 * settlement, parented on the sender's trace context, with the
 * OpenTelemetry messaging attributes and inboxd's outcome, and a child span
 * of the settlement. thread: as each function says (wk_trace.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_enc.h"
#include "sb_msg.h"
#include "wk_trace.h"

static ot_options_t options_of(const wk_config_t *cfg)
{
    return (ot_options_t){
        .endpoint = cfg->otel.endpoint,
        .traces_endpoint = cfg->otel.traces_endpoint,
        .protocol = cfg->otel.protocol,
        .headers = cfg->otel.headers,
        .service_name = cfg->otel.service_name,
        .resource_attributes = cfg->otel.resource_attributes,
        .sampler = cfg->otel.sampler,
        .sampler_arg = cfg->otel.sampler_arg,
    };
}

ot_exporter_t *wk_trace_exporter(const wk_config_t *cfg, ib_error_t *err)
{
    ot_options_t o = options_of(cfg);
    return ot_exporter_new(&o, err);
}

bool wk_trace_check(const wk_config_t *cfg, ib_error_t *err)
{
    ot_options_t o = options_of(cfg);
    return ot_options_check(&o, err);
}

/* The sender's context: traceparent, else a Diagnostic-Id in that form. */
static bool parent_of(const sb_msg_t *msg, ot_ctx_t *parent)
{
    static const char *const keys[] = {"traceparent", "Diagnostic-Id"};
    for (size_t i = 0; i < 2; i++) {
        const sb_prop_t *p = sb_msg_prop(msg, keys[i]);
        if (p && p->type == SB_PROP_STRING && ot_ctx_parse(p->str, parent))
            return true;
    }
    return false;
}

/* messaging.destination.name and .subscription.name from "topic/Subscriptions/sub". */
static void destination(ot_span_t *s, const char *entity)
{
    const char *sub = entity ? strstr(entity, "/Subscriptions/") : NULL;
    char topic[260];
    if (!entity || !*entity)
        return;
    if (!sub) {
        ot_span_str(s, "messaging.destination.name", entity);
        return;
    }
    snprintf(topic, sizeof(topic), "%.*s", (int)(sub - entity), entity);
    ot_span_str(s, "messaging.destination.name", topic);
    ot_span_str(s, "messaging.destination.subscription.name", sub + strlen("/Subscriptions/"));
}

void wk_trace_begin(ot_exporter_t *x, const wk_config_t *cfg, sb_msg_t *msg, wk_trace_t *t)
{
    ot_ctx_t parent;
    char name[300];
    const char *entity = cfg->servicebus.entity;
    memset(t, 0, sizeof(*t));
    if (!x)
        return;
    bool has_parent = parent_of(msg, &parent);
    snprintf(name, sizeof(name), "process %s", entity && *entity ? entity : "servicebus");
    t->span = ot_span_start(x, name, OT_KIND_CONSUMER, has_parent ? &parent : NULL, true, 0);
    if (!t->span)
        return;
    ot_span_str(t->span, "messaging.system", "servicebus");
    ot_span_str(t->span, "messaging.operation.name", "process");
    ot_span_str(t->span, "messaging.operation.type", "process");
    destination(t->span, entity);
    ot_span_str(t->span, "messaging.consumer.group.name", cfg->consumer);
    ot_span_str(t->span, "messaging.message.id", msg->message_id);
    ot_span_str(t->span, "messaging.message.conversation_id", msg->correlation_id);
    ot_span_int(t->span, "azure.servicebus.message.delivery_count", msg->delivery_count);
    if (msg->enqueued_ms)
        ot_span_int(t->span, "azure.servicebus.message.enqueued_time", msg->enqueued_ms / 1000);
    ot_span_str(t->span, "inboxd.session_id", msg->session_id);
    ot_span_str(t->span, "inboxd.subject", msg->subject);
    ot_ctx_format(ot_span_ctx(t->span), t->traceparent);
    ib_enc_hex(t->trace_id, ot_span_ctx(t->span)->trace_id, 16);
    ib_enc_hex(t->span_id, ot_span_ctx(t->span)->span_id, 8);
    msg->user = t;
}

void wk_trace_settling(wk_trace_t *t)
{
    if (t->span)
        t->settle_ns = ot_now_ns();
}

/* The child span of the settlement: from hand-over to the broker's answer. */
static void settle_span(wk_trace_t *t, const char *disposition, long long now)
{
    ot_exporter_t *x = ot_span_exporter(t->span);
    ot_span_t *s = ot_span_start(x, disposition, OT_KIND_CLIENT, ot_span_ctx(t->span), false,
                                 t->settle_ns ? t->settle_ns : now);
    ot_span_str(s, "messaging.system", "servicebus");
    ot_span_str(s, "messaging.operation.name", disposition);
    ot_span_str(s, "messaging.operation.type", "settle");
    ot_span_end(s, now);
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
    settle_span(t, sb_disposition_name(disp), now);
    ot_span_str(t->span, "azure.servicebus.disposition_status", sb_disposition_name(disp));
    ot_span_str(t->span, "inboxd.outcome", wk_outcome_name(o));
    if (d->err.code) {
        ot_span_str(t->span, "inboxd.error_class", ib_class_name(d->err.cls));
        ot_span_str(t->span, "error.type", ib_err_name(d->err.code));
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
