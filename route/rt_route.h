/*
 * rt_route.h - routes: which SQL a message runs, with which parameters, and
 * under which idempotency key.
 *
 *   {"match": {"subject": "OrderPlaced"} | {"property": {"type": "X"}} | "*",
 *    "sql": "INSERT ..." | ["...", "..."],
 *    "params": ["$.orderId", "message_id", "prop:tenant", 42, null]
 *              (with several statements: one array per statement),
 *    "idempotency_key": "order:{$.orderId}",
 *    "on_permanent": "deadletter" | "record",
 *    "emit": [{"entity": "shipments", "message_id": "shipment:{$.orderId}",
 *              "subject": "...", "session_id": "{$.customerId}",
 *              "correlation_id": "{message_id}", "content_type": "...",
 *              "body": "$.shipping", "properties": {"k": "$.x", "c": {"const": "v"}}}],
 *    "emit_on_failure": [{"entity": "rejections", "message_id": "{message_id}:rejected",
 *                         "subject": "Rejected.{reason}", "properties": {"why": "error"}}],
 *    "on_unique_violation": "permanent" | "duplicate",
 *    "constraints": ["ux_shipments_order"]}
 *   {"match": ..., "action": "deadletter", "reason": "Unsupported"}
 *   {"match": ..., "action": "complete"}
 *
 * Parameter sources: message_id, body, subject, correlation_id, session_id,
 * content_type, enqueued_at (UTC "YYYY-MM-DD HH:MM:SS.mmm"),
 * sequence_number, delivery_count, prop:NAME, a JSON path into the body
 * ($.a.b[0], $["odd key"]), or a literal (number, boolean, null, or
 * {"const": "text"}). Message fields that are absent bind NULL; a property or
 * JSON path that is absent is a MissingField error naming it.
 *
 * emit: outgoing messages, each an outbox row inserted in the route's inbox
 * transaction (so a rolled-back message emits nothing) and published later
 * by the relay. message_id, subject, session_id, correlation_id and
 * content_type are templates like idempotency_key; message_id is required
 * and must not depend on sequence_number, delivery_count or enqueued_at (a
 * resent or redelivered copy must emit the same id). correlation_id
 * defaults to the incoming message id; body (a source, default the incoming
 * body) is the value's text, JSON for objects; properties are sources; the
 * incoming traceparent / Diagnostic-Id / tracestate properties ride along.
 *
 * emit_on_failure: the same list, inserted in the transaction that records
 * the message's final failure (the inbox row 'failed') instead; its
 * templates and sources may also use reason, error_class and error (the
 * failure's reason word, class and description), and its body defaults to
 * a JSON object of them with the incoming message id.
 *
 * Routes are compiled once at start and immutable afterwards: any thread may
 * match and bind concurrently.
 */
#ifndef RT_ROUTE_H
#define RT_ROUTE_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "db_inbox.h"
#include "fx_client.h"
#include "fx_dest.h"
#include "ib_err.h"
#include "sb_msg.h"

typedef enum { RT_ACT_APPLY, RT_ACT_DEADLETTER, RT_ACT_COMPLETE } rt_action_t;

typedef struct rt_route rt_route_t;

typedef struct rt_routes {
    rt_route_t *v;
    size_t n;
    char *outbox_sql; /* the outbox insert emits use (rt_routes_set_outbox) */
} rt_routes_t;

/*
 * Compiles the routes array. Each problem is written to errs (when not
 * NULL) as one line "config: routes[I].FIELD: WHY"; returns the number of
 * problems. out must be freed with rt_routes_free either way.
 */
int rt_routes_compile(const json_t *routes, rt_routes_t *out, FILE *errs);
/*
 * The outbox table emits are inserted into (outbox.table); call once after
 * compiling, before binding. Returns false when the name is not valid.
 */
bool rt_routes_set_outbox(rt_routes_t *routes, const char *table);
/* True when any route has an emit list. */
bool rt_routes_emit(const rt_routes_t *routes);
void rt_routes_free(rt_routes_t *routes);

/* The first route matching msg, or NULL (dead-letter NoRoute). */
const rt_route_t *rt_routes_match(const rt_routes_t *routes, const sb_msg_t *msg);

rt_action_t rt_route_action(const rt_route_t *r);
/* The configured reason of an action:"deadletter" route. */
const char *rt_route_reason(const rt_route_t *r);
/* on_permanent: "record" */
bool rt_route_records_failures(const rt_route_t *r);
/*
 * on_unique_violation "duplicate": true when a unique violation on
 * constraint (the name db_unique_violation read; "" when unknown) in one
 * of the route's statements means the fact is already there (a producer
 * re-sent it under a new message id), so the message completes as a
 * business-key duplicate. With "constraints" only those names qualify.
 */
bool rt_route_unique_is_duplicate(const rt_route_t *r, const char *constraint);
/* Index in the routes array, for logs. */
size_t rt_route_index(const rt_route_t *r);

/*
 * The final failure of a message, for its route's emit_on_failure: the
 * sources {reason} (the dead-letter reason word, "HandlerError", ...),
 * {error_class} ("permanent", ...) and {error} (the description; bound
 * sanitised to UTF-8 and cut to RT_FAILURE_ERROR_MAX bytes). Borrowed.
 */
typedef struct rt_failure {
    const char *reason;
    const char *error_class;
    const char *error;
} rt_failure_t;

#define RT_FAILURE_ERROR_MAX 1000

/* The statements of one message, bound; owns every string it points to. */
typedef struct rt_binding {
    db_stmt_t *stmts; /* the route's statements, then one outbox insert per emit */
    size_t nstmts;
    size_t nemits;    /* the last nemits of stmts are the emits' outbox inserts */
    char *idempotency_key; /* NULL when the route has none */
    /* storage */
    db_param_t *params;
    char **strings;
    size_t nstrings, cap_strings;
    bool nomem; /* a value could not be kept: the bind fails IB_E_NOMEM */
    json_t *body_json;
    int body_checked; /* 0 not yet; 1 rt_json_checked accepted the body; -1 it did not */
    const fx_response_t *response; /* the call's answer (finishing statements of HTTP routes) */
    json_t *response_json;
    const rt_failure_t *failure; /* the failure a rejection is bound for (emit_on_failure) */
    const char *traceparent; /* the trace context effects carry on (borrowed); NULL: none */
} rt_binding_t;

/*
 * Evaluates the route's parameters and key over msg. Fails (permanent) with
 * IB_E_INVALID_JSON when a JSON path is needed and the body is not JSON,
 * IB_E_MISSING_FIELD naming the path or property that is absent, or
 * IB_E_INVAL for an idempotency key over 400 bytes. out must be freed with
 * rt_binding_free either way.
 *
 * traceparent is the W3C trace context the message's effects carry on (the
 * emitted messages' traceparent, Diagnostic-Id and trace_context; an HTTP
 * call's traceparent header): the caller's, NULL for none. It is borrowed,
 * not copied, and must outlive the binding. The same holds for every
 * rt_route_bind_* below.
 */
ib_err_t rt_route_bind(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                       rt_binding_t *out, ib_error_t *err);
void rt_binding_free(rt_binding_t *b);
/*
 * The payload hash of a bound message when the route sets payload_hash
 * "params": SHA-256 (lowercase hex) over the route's bound parameter values
 * in order, each typed and length-prefixed. Leaves hex (the body's hash)
 * as it is otherwise.
 */
void rt_route_payload_hash(const rt_route_t *r, const rt_binding_t *b, char hex[65]);
/*
 * The emits' outbox inserts of a bound message (*n of them, 0 when none):
 * for a transaction other than the route's own (an HTTP route's finishing
 * transaction) that must insert them before its COMMIT.
 */
const db_stmt_t *rt_binding_emits(const rt_binding_t *b, size_t *n);

/* True when the route has an emit_on_failure list (its final failures are recorded). */
bool rt_route_rejects(const rt_route_t *r);
/*
 * The rejection events of a message that failed for good (emit_on_failure):
 * one outbox insert per entry, out->stmts / out->nstmts (== out->nemits),
 * to run in the transaction that records the failure. Fails (permanent)
 * as rt_route_bind does when a template's source is missing; out must be
 * freed with rt_binding_free either way. thread: any.
 */
ib_err_t rt_route_bind_rejection(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                                 const rt_failure_t *f, rt_binding_t *out, ib_error_t *err);

/* ---- HTTP routes (rt_http.c) ---------------------------------------
 *
 * {"match": ..., "idempotency_key": "charge:{$.orderId}",
 *  "http": {"method", "url", "body", "headers", "idempotency_header",
 *           "idempotent", "timeout_ms", "lease_s", "remote_id", "ca_file",
 *           "reconcile": {"method", "url"}},
 *  "sql": [...], "params": [[..., "response:$.id", "response:status",
 *                            "response:header:NAME"]]}
 *
 * url, header values and reconcile.url are templates over the key's
 * sources plus {key} (the idempotency key, or the message id); body is a
 * parameter source. Header values may be {"env": NAME}: the secret is read
 * once at start and never printed.
 */
typedef struct rt_http_spec rt_http_spec_t;

/* Whether any route has an http section. */
bool rt_routes_have_http(const rt_routes_t *routes);
/* The route's http section, or NULL for a SQL route. */
const rt_http_spec_t *rt_route_http(const rt_route_t *r);
const char *rt_http_method(const rt_http_spec_t *h);
const char *rt_http_reconcile_method(const rt_http_spec_t *h);
long rt_http_timeout_ms(const rt_http_spec_t *h);
long rt_http_lease_s(const rt_http_spec_t *h);
bool rt_http_idempotent(const rt_http_spec_t *h);
bool rt_http_has_reconcile(const rt_http_spec_t *h);
const char *rt_http_ca_file(const rt_http_spec_t *h); /* NULL: the system store */
double rt_http_rate_per_s(const rt_http_spec_t *h);   /* 0: unlimited */
long rt_http_max_concurrent(const rt_http_spec_t *h); /* 0: unlimited */
/* limit_scope "cluster": rate_per_s and max_concurrent are the replicas' together. */
bool rt_http_cluster_limits(const rt_http_spec_t *h);
/* Whether any HTTP route's limits are for the cluster (worker/wk_replicas.c runs then). */
bool rt_routes_have_cluster_limits(const rt_routes_t *routes);
long rt_http_max_retry_after_s(const rt_http_spec_t *h); /* the longest Retry-After held */
/* Whether status is one of http.applied_statuses (an answer meaning "already done"). */
bool rt_http_applied_status(const rt_http_spec_t *h, long status);
/*
 * Whether a reconcile lookup's 2xx answer found the effect: without
 * reconcile.found, any 2xx; with it, the path must be present and neither
 * null, "", [] nor {}.
 */
bool rt_http_reconcile_found(const rt_http_spec_t *h, const fx_response_t *resp);

/* One message's request, bound; owns its strings (through b). */
typedef struct rt_http_call {
    char *url;
    char dest[FX_DEST_KEY_MAX]; /* its destination: scheme://host:port (fx_dest_key) */
    char *url_redacted; /* scheme://host/path, for logs and dead letters */
    char *reconcile_url;
    char *reconcile_url_redacted; /* as url_redacted; NULL without reconcile */
    const char *body; /* NULL: no body */
    size_t body_len;
    fx_header_t *headers; /* the route's, Content-Type, the key header, traceparent */
    size_t nheaders;
    rt_binding_t b;
} rt_http_call_t;

/*
 * Binds the request of msg on HTTP route r; key fills {key} and the key
 * header. Fails (permanent) as rt_route_bind does. out must be freed with
 * rt_http_call_free either way. thread: any.
 */
ib_err_t rt_route_bind_http(const rt_route_t *r, const sb_msg_t *msg, const char *key,
                            const char *traceparent, rt_http_call_t *out, ib_error_t *err);
void rt_http_call_free(rt_http_call_t *c);
/* The route's finishing statements, with response:... sources from resp. */
ib_err_t rt_route_bind_finish(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                              const fx_response_t *resp, rt_binding_t *out, ib_error_t *err);
/* The remote id (http.remote_id) found in resp, "" when none. */
void rt_route_remote_id(const rt_route_t *r, const fx_response_t *resp, char *buf, size_t size);
/*
 * The answer an HTTP route's inbox row keeps, as a response: status, and a
 * JSON body holding remote_id (text) at http.remote_id's path when both are
 * there; no headers. The finishing SQL binds response:status and the remote
 * id's response:$.path from it as from the call's answer; any other
 * response:$.path is missing. resp is freed with fx_response_free.
 * IB_E_NOMEM (transient) when out of memory.
 */
ib_err_t rt_route_stored_answer(const rt_route_t *r, long status, const char *remote_id,
                                fx_response_t *resp, ib_error_t *err);
/* True when the route's finishing SQL reads response:header:NAME (a stored answer has none). */
bool rt_route_finish_reads_headers(const rt_route_t *r);
/* Replaces the route's secrets in text with "***" (in place). */
void rt_route_scrub(const rt_route_t *r, char *text);
/*
 * Checks that need the rest of the config: an HTTP route's lease is shorter
 * than the broker lock's renewal limit. Problems are written like
 * rt_routes_compile's; returns their number.
 */
int rt_routes_check_limits(const rt_routes_t *routes, long long renewal_s, FILE *errs);
/*
 * Each HTTP route's lease_s against the entity's LockDuration (lock_ms, as
 * read from Service Bus; 0 = unknown: nothing): a warning per lease longer
 * than the lock. Returns their number.
 */
int rt_routes_check_lock(const rt_routes_t *routes, long long lock_ms, FILE *errs);
/*
 * Prints a warning (not a problem) for each route that works but is
 * fragile: an HTTP route without idempotency_key keys on the message id.
 * Returns the number of warnings.
 */
int rt_routes_warn(const rt_routes_t *routes, FILE *errs);
/*
 * Checks at start that every unique key a route names in "constraints"
 * exists (db_migrate_check_unique); IB_E_CONFIG naming the route, the
 * position and the key when one does not. thread: the owner of dbc.
 */
ib_err_t rt_routes_check_unique(const rt_routes_t *routes, db_conn_t *dbc, ib_error_t *err);

/* ---- claim check (rt_claim.c) --------------------------------------
 *
 * {"match": ..., "claim_check": {"url": "{$.data.url}", "allowed_hosts": [...],
 *  "max_bytes": N, "sha256": "{prop:...}", "etag": "{$.data.eTag}",
 *  "auth": "sas" | "shared_key" | "workload_identity", "account": "acct",
 *  "account_key": {"env": NAME}, "timeout_ms": 30000, "ca_file": "..."},
 *  "sql": ..., "params": [...]}
 *
 * The route's body is the blob the message points at: its url, sha256 and
 * etag are templates over the message (body paths, properties); the
 * route's statements, key and payload hash then read the blob as they
 * would read a body (the caller binds them over a message whose body is
 * the blob).
 */
typedef struct rt_claim_spec rt_claim_spec_t;

typedef enum { RT_CLAIM_SAS, RT_CLAIM_SHARED_KEY, RT_CLAIM_WORKLOAD_IDENTITY } rt_claim_auth_t;

/* The route's claim_check, or NULL when its body is the message's. */
const rt_claim_spec_t *rt_route_claim(const rt_route_t *r);
/* Whether any route has a claim_check with auth a. */
bool rt_routes_claim_auth(const rt_routes_t *routes, rt_claim_auth_t a);
long rt_claim_max_bytes(const rt_claim_spec_t *c);
long rt_claim_timeout_ms(const rt_claim_spec_t *c);
rt_claim_auth_t rt_claim_auth(const rt_claim_spec_t *c);
const char *rt_claim_account(const rt_claim_spec_t *c);     /* shared_key; else NULL */
const char *rt_claim_account_key(const rt_claim_spec_t *c); /* shared_key: base64; else NULL */
const char *rt_claim_ca_file(const rt_claim_spec_t *c);     /* NULL: the system store */

/* One message's blob reference, bound; owns its strings (through b). */
typedef struct rt_claim_ref {
    char *url;                  /* as the message gave it (a SAS in its query) */
    char *url_redacted;         /* scheme://host/path, for logs and dead letters */
    char dest[FX_DEST_KEY_MAX]; /* scheme://host:port (fx_dest_key) */
    char *sha256;               /* what the message expects; NULL: not carried */
    char *etag;                 /* NULL: not carried */
    rt_binding_t b;
} rt_claim_ref_t;

/*
 * Binds the blob reference of msg on route r (which has a claim_check).
 * Fails (permanent) as rt_route_bind does, and with IB_E_NOT_ALLOWED when
 * the URL is not http(s) on a host of claim_check.allowed_hosts. An absent
 * sha256 / etag source leaves that check out. ref must be freed with
 * rt_claim_ref_free either way. thread: any.
 */
ib_err_t rt_route_bind_claim(const rt_route_t *r, const sb_msg_t *msg, rt_claim_ref_t *ref,
                             ib_error_t *err);
void rt_claim_ref_free(rt_claim_ref_t *ref);

#endif
