/*
 * wk_route.h - routes: which SQL a message runs, with which parameters, and
 * under which idempotency key.
 *
 *   {"match": {"subject": "OrderPlaced"} | {"property": {"type": "X"}} | "*",
 *    "sql": "INSERT ..." | ["...", "..."],
 *    "params": ["$.orderId", "message_id", "prop:tenant", 42, null]
 *              (with several statements: one array per statement),
 *    "idempotency_key": "order:{$.orderId}",
 *    "on_permanent": "deadletter" | "record"}
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
 * Routes are compiled once at start and immutable afterwards: any thread may
 * match and bind concurrently.
 */
#ifndef WK_ROUTE_H
#define WK_ROUTE_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "db_inbox.h"
#include "ib_err.h"
#include "sb_msg.h"

typedef enum { WK_ACT_APPLY, WK_ACT_DEADLETTER, WK_ACT_COMPLETE } wk_action_t;

typedef struct wk_route wk_route_t;

typedef struct wk_routes {
    wk_route_t *v;
    size_t n;
} wk_routes_t;

/*
 * Compiles the routes array. Each problem is written to errs (when not
 * NULL) as one line "config: routes[I].FIELD: WHY"; returns the number of
 * problems. out must be freed with wk_routes_free either way.
 */
int wk_routes_compile(const json_t *routes, wk_routes_t *out, FILE *errs);
void wk_routes_free(wk_routes_t *routes);

/* The first route matching msg, or NULL (dead-letter NoRoute). */
const wk_route_t *wk_routes_match(const wk_routes_t *routes, const sb_msg_t *msg);

wk_action_t wk_route_action(const wk_route_t *r);
/* The configured reason of an action:"deadletter" route. */
const char *wk_route_reason(const wk_route_t *r);
/* on_permanent: "record" */
bool wk_route_records_failures(const wk_route_t *r);
/* Index in the routes array, for logs. */
size_t wk_route_index(const wk_route_t *r);

/* The statements of one message, bound; owns every string it points to. */
typedef struct wk_binding {
    db_stmt_t *stmts;
    size_t nstmts;
    char *idempotency_key; /* NULL when the route has none */
    /* storage */
    db_param_t *params;
    char **strings;
    size_t nstrings, cap_strings;
    json_t *body_json;
} wk_binding_t;

/*
 * Evaluates the route's parameters and key over msg. Fails (permanent) with
 * IB_E_INVALID_JSON when a JSON path is needed and the body is not JSON,
 * IB_E_MISSING_FIELD naming the path or property that is absent, or
 * IB_E_INVAL for an idempotency key over 400 bytes. out must be freed with
 * wk_binding_free either way.
 */
ib_err_t wk_route_bind(const wk_route_t *r, const sb_msg_t *msg, wk_binding_t *out,
                       ib_error_t *err);
void wk_binding_free(wk_binding_t *b);

#endif
