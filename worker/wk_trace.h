/*
 * wk_trace.h - a message's trace in inboxd: its consumer span, parented on
 * the sender's traceparent (or Diagnostic-Id), the traceparent its HTTP
 * calls and emitted messages carry, and the settlement's child span.
 *
 * The daemon keeps one wk_trace_t per message in flight (in its job) and
 * points msg->user at it, so wk_traceparent (wk_msgctx.h) finds the context
 * to propagate. With tracing off every function here is a no-op and
 * messages carry the incoming traceparent as before.
 */
#ifndef WK_TRACE_H
#define WK_TRACE_H

#include <stdbool.h>

#include "db_inbox.h"
#include "fx_client.h"
#include "ot_trace.h"
#include "sb_client.h"
#include "wk_config.h"
#include "wk_outcome.h"
#include "wk_pipeline.h"

typedef struct wk_trace {
    ot_span_t *span;                         /* the consumer span; NULL when off */
    char traceparent[OT_TRACEPARENT_LEN];    /* what the message's effects carry on; "" off */
    char trace_id[33], span_id[17];          /* for log lines; "" off */
    ot_span_t *settle;                       /* the settlement's span, once handed over */
    long long settle_ns;                     /* when the settlement was handed over */
    sb_disposition_t settle_disp;            /* the disposition settle was started with */
    bool msg_attrs;                          /* the message's attributes are on span */
} wk_trace_t;

/*
 * The exporter from the otel.* settings (NULL: off, or err set); also
 * computes once what every consumer span shares (its name, destination,
 * consumer group), before any message. thread: main, once at start.
 */
ot_exporter_t *wk_trace_exporter(const wk_config_t *cfg, ib_error_t *err);

/*
 * Starts msg's consumer span and sets msg->user = t. thread: proactor
 * (on_message). The proactor hands every message over: what can wait for
 * a db worker (the message's attributes, the settlement's span) does.
 */
void wk_trace_begin(ot_exporter_t *x, const wk_config_t *cfg, sb_msg_t *msg, wk_trace_t *t);
/*
 * The settlement of msg with disp is handed to the client: adds the
 * message's attributes and starts the settlement's span. thread: a db worker.
 */
void wk_trace_settling(wk_trace_t *t, const sb_msg_t *msg, sb_disposition_t disp);
/*
 * Ends the consumer span with the outcome (and a child span of the
 * settlement) and clears msg->user. thread: proactor (on_settled).
 */
void wk_trace_end(wk_trace_t *t, sb_msg_t *msg, sb_disposition_t disp, wk_outcome_t o,
                  const wk_decision_t *d);

/*
 * One inbox transaction round of wk_pipeline (db_inbox_apply_batch): while
 * it runs, the connection's phase hook makes a CLIENT span of the inbox
 * claim, each route statement and the commit. Alone (n == 1), or a
 * message applied alone after its batch rolled back, they are children of
 * the message's consumer span; in a batch (n > 1) they are children of the
 * batch's own transaction span ("inbox batch"), which links to every
 * message span it carries (and each message span links back to it).
 * msg_at(arg, i) is the i-th message. thread: the db worker owning dbc.
 */
typedef struct wk_trace_txn {
    db_conn_t *dbc; /* NULL: nothing traced */
    ot_span_t *batch;
    const sb_msg_t *(*msg_at)(void *arg, size_t i);
    void *arg;
    size_t n;
} wk_trace_txn_t;

void wk_trace_txn_begin(wk_trace_txn_t *tx, db_conn_t *dbc, size_t n,
                        const sb_msg_t *(*msg_at)(void *arg, size_t i), void *arg);
/* Ends the round: fallback is the failure that rolled the batch back (code 0: none). */
void wk_trace_txn_end(wk_trace_txn_t *tx, const ib_error_t *fallback);

/* An HTTP call's CLIENT span, child of the message's consumer span. */
#define WK_TRACE_MAX_HEADERS 32
typedef struct wk_trace_call {
    ot_span_t *span; /* NULL when tracing is off */
    char traceparent[OT_TRACEPARENT_LEN];
    fx_header_t headers[WK_TRACE_MAX_HEADERS];
} wk_trace_call_t;

/*
 * Starts the CLIENT span of a call of msg to url (redacted: no secret) and,
 * when the call's headers carry a traceparent, points *headers at a copy
 * whose traceparent names this span, so the destination's span is its
 * child. thread: a db worker.
 */
void wk_trace_call_begin(wk_trace_call_t *c, const sb_msg_t *msg, const char *method,
                         const char *url, const fx_header_t **headers, size_t nheaders);
/* Ends the call's span with the answer. */
void wk_trace_call_end(wk_trace_call_t *c, const fx_response_t *resp);

#endif
