/*
 * wk_msgctx.c - trace ids and dead-letter context properties (see
 * wk_msgctx.h). thread: any.
 */
#include "wk_msgctx.h"
#include "wk_trace.h"

#include <ctype.h>
#include <string.h>

#include "ib_enc.h"
#include "ib_log.h"

const char *wk_trace_parent(const sb_msg_t *msg, ot_ctx_t *ctx)
{
    static const char *const keys[] = {"traceparent", "Diagnostic-Id"};
    for (size_t i = 0; i < 2; i++) {
        const sb_prop_t *p = sb_msg_prop(msg, keys[i]);
        if (p && p->type == SB_PROP_STRING && p->str && ot_ctx_parse(p->str, ctx))
            return p->str;
    }
    return NULL;
}

/* "|<root>.<...>": the root, printable, without '|' and '.'. */
static bool from_request_id(const char *v, char out[WK_TRACE_ID_MAX])
{
    size_t n;
    if (v[0] != '|')
        return false;
    v++;
    n = strcspn(v, ".");
    if (n == 0 || n >= WK_TRACE_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)v[i]) && v[i] != '-' && v[i] != '_')
            return false;
        out[i] = (char)tolower((unsigned char)v[i]);
    }
    out[n] = '\0';
    return true;
}

bool wk_trace_id(const sb_msg_t *msg, char out[WK_TRACE_ID_MAX])
{
    ot_ctx_t ctx;
    const sb_prop_t *p;
    out[0] = '\0';
    if (wk_trace_parent(msg, &ctx)) {
        ib_enc_hex(out, ctx.trace_id, sizeof(ctx.trace_id));
        return true;
    }
    p = sb_msg_prop(msg, "Diagnostic-Id");
    if (p && p->type == SB_PROP_STRING && p->str && from_request_id(p->str, out))
        return true;
    out[0] = '\0';
    return false;
}

const char *wk_traceparent(const sb_msg_t *msg)
{
    ot_ctx_t ctx;
    const wk_trace_t *t = msg->user;
    if (t && t->traceparent[0]) /* tracing on: the span the message's effects belong to */
        return t->traceparent;
    return wk_trace_parent(msg, &ctx);
}

const char *wk_span_id(const sb_msg_t *msg)
{
    const wk_trace_t *t = msg->user;
    return t && t->span_id[0] ? t->span_id : NULL;
}

size_t wk_dl_props(const wk_dl_context_t *ctx, sb_prop_t *props, char at[32])
{
    size_t n = 0;
    const ib_error_t *e = ctx->err;

    props[n++] = (sb_prop_t){.key = "inboxd-consumer", .type = SB_PROP_STRING,
                             .str = (char *)(ctx->consumer ? ctx->consumer : "")};
    props[n++] = (sb_prop_t){.key = "inboxd-error-class", .type = SB_PROP_STRING,
                             .str = (char *)ib_class_name(e && e->code != IB_E_OK
                                                              ? e->cls
                                                              : IB_CLASS_PERMANENT)};
    if (e && e->code != IB_E_OK && e->sqlstate[0]) {
        props[n++] = (sb_prop_t){.key = "inboxd-sqlstate", .type = SB_PROP_STRING,
                                 .str = (char *)e->sqlstate};
        props[n++] = (sb_prop_t){.key = "inboxd-native-error", .type = SB_PROP_INT64,
                                 .i = e->native};
    }
    props[n++] = (sb_prop_t){.key = "inboxd-attempts", .type = SB_PROP_INT64, .i = ctx->attempts};
    if (ctx->route_index >= 0)
        props[n++] = (sb_prop_t){.key = "inboxd-route", .type = SB_PROP_INT64,
                                 .i = ctx->route_index};
    ib_time_rfc3339(at, 32, ctx->failed_at_ms);
    props[n++] = (sb_prop_t){.key = "inboxd-failed-at", .type = SB_PROP_STRING, .str = at};
    return n;
}
