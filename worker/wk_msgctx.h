/*
 * wk_msgctx.h - what inboxd says about a message beyond its outcome: the
 * trace id it logs, and the context properties a dead letter carries.
 *
 * Pure functions over the decoded message; thread: any.
 */
#ifndef WK_MSGCTX_H
#define WK_MSGCTX_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"
#include "ot_trace.h"
#include "sb_msg.h"

/*
 * The sender's trace context, the one reader of it: the W3C traceparent
 * application property ("00-<32 hex trace id>-<16 hex parent>-<2 hex
 * flags>"), else Diagnostic-Id (the Azure SDKs' name for it) in that form,
 * each checked by the one validator, ot_ctx_parse (lower-case hex, no
 * all-zero id). Returns the property's text (points into msg) with *ctx
 * filled, or NULL when neither is one. thread: any.
 */
const char *wk_trace_parent(const sb_msg_t *msg, ot_ctx_t *ctx);

/*
 * The trace id of msg: wk_trace_parent's, else the root of a Diagnostic-Id
 * that is an older SDK's hierarchical Request-Id "|<root>.<...>.". Writes it
 * (lower case, at most 64 characters) into out and returns true; false with
 * out "" when the message carries neither or a malformed value.
 */
#define WK_TRACE_ID_MAX 65
bool wk_trace_id(const sb_msg_t *msg, char out[WK_TRACE_ID_MAX]);

/*
 * The W3C traceparent value to carry forward on the HTTP calls and messages
 * msg causes: its traceparent property, else a Diagnostic-Id in that
 * format; NULL when it has neither (or a malformed one). Points into msg.
 */
const char *wk_traceparent(const sb_msg_t *msg);

/*
 * The span id (16 hex characters) of msg's consumer span for log lines, so
 * they join the exported spans; NULL when tracing is off (or the message
 * has no span). Points into the message's trace (wk_trace.h).
 */
const char *wk_span_id(const sb_msg_t *msg);

/* The application properties a dead letter carries (see the README). */
#define WK_DL_PROPS 7
typedef struct wk_dl_context {
    const char *consumer;
    const ib_error_t *err; /* the failure; code IB_E_OK: none known */
    int attempts;          /* inbox transactions tried on this delivery */
    long route_index;      /* -1: no route matched */
    long long failed_at_ms;
} wk_dl_context_t;

/*
 * Fills props (at least WK_DL_PROPS entries) with inboxd-consumer,
 * inboxd-error-class, inboxd-sqlstate and inboxd-native-error (when the
 * database gave codes), inboxd-attempts, inboxd-route (when a route matched)
 * and inboxd-failed-at (RFC 3339, UTC, written into at). Strings point into
 * ctx and at. Returns the number of properties.
 */
size_t wk_dl_props(const wk_dl_context_t *ctx, sb_prop_t *props, char at[32]);

#endif
