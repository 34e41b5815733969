/*
 * rt_int.h - the inside of routes, shared by rt_route.c (matching,
 * SQL parameters, the idempotency key) and rt_http.c (the "http"
 * section). Not a door for the rest of inboxd: rt_route.h is.
 *
 * thread: compile on main; everything else on any thread (read-only).
 */
#ifndef RT_ROUTE_INT_H
#define RT_ROUTE_INT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "ib_problems.h"
#include "rt_json.h"
#include "rt_route.h"

typedef enum {
    SRC_CONST,
    SRC_MESSAGE_ID,
    SRC_BODY,
    SRC_SUBJECT,
    SRC_CORRELATION_ID,
    SRC_SESSION_ID,
    SRC_CONTENT_TYPE,
    SRC_ENQUEUED_AT,
    SRC_SEQUENCE_NUMBER,
    SRC_DELIVERY_COUNT,
    SRC_PROP,
    SRC_JSON,
    SRC_KEY,             /* {key}: the idempotency key (or message id); http templates only */
    SRC_RESPONSE_STATUS, /* response:status; finishing SQL of http routes only */
    SRC_RESPONSE_HEADER, /* response:header:NAME */
    SRC_RESPONSE_JSON,   /* response:$.path */
    SRC_FAIL_REASON,     /* reason: the failure's reason word; emit_on_failure only */
    SRC_FAIL_CLASS,      /* error_class */
    SRC_FAIL_ERROR,      /* error: the failure's description (sanitised, bounded) */
} src_kind_t;

typedef rt_json_step_t step_t; /* an object member (name), or an array index (name NULL) */

typedef struct src {
    src_kind_t kind;
    char *text; /* the source as written (for errors), the property or header name */
    step_t *steps;
    size_t nsteps;
    json_t *constant;
} src_t;

/* One piece of a template: literal text, or a source. */
typedef struct part {
    char *lit;
    src_t src;
} part_t;

typedef struct template
{
    part_t *v;
    size_t n;
}
template_t;

/* What a source may be, where it is compiled. */
enum {
    SRC_ALLOW_KEY = 0x1,      /* {key} */
    SRC_ALLOW_RESPONSE = 0x2, /* response:... */
    SRC_ALLOW_FAILURE = 0x4,  /* reason, error_class, error (emit_on_failure) */
};

/* A source given as text: field name, prop:NAME, $.path, {key}, response:... */
bool rt_src_compile_text(const char *t, unsigned allow, src_t *out);
/* A parameter: source text, {"const": "text"}, or a JSON literal. */
bool rt_src_compile_param(const json_t *v, unsigned allow, src_t *out);
void rt_src_free(src_t *s);
/* A source that differs between copies of one message (sequence number, delivery count, enqueue time). */
bool rt_src_varies(src_kind_t k);
/* The value of s for msg (and b->response for response sources). */
ib_err_t rt_src_eval(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, db_param_t *out,
                     ib_error_t *err);
/* The JSON value at s (a $.path) in msg's body; NULL with err filled when absent. */
const json_t *rt_src_json(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, ib_error_t *err);
/* Keeps s in b (freed by rt_binding_free); returns s. */
char *rt_binding_keep(rt_binding_t *b, char *s);

/*
 * Compiles "text {source} text" ('{{' and '}}' are literal braces) into
 * tpl, reporting problems under field. Sets *needs_json when a source
 * reads the body as JSON.
 */
void rt_tpl_compile(const char *text, const char *field, unsigned allow, template_t *tpl,
                    bool *needs_json, ib_problems_t *p);
void rt_tpl_free(template_t *tpl);
/*
 * Renders tpl for msg into a string kept in b (max bytes at most, what
 * names the template in errors). key fills {key}. With url_encode, every
 * value from a source is percent-encoded (all but A-Z a-z 0-9 - . _ ~), so
 * a message can never change a URL's path or query beyond its own value;
 * but a value in the URL's authority (a host the route lets the message
 * choose) is written as is when it is a host, an IP literal or a port,
 * with an optional ":port", and refused otherwise (IB_E_NOT_ALLOWED).
 */
ib_err_t rt_tpl_render(const template_t *tpl, const sb_msg_t *msg, rt_binding_t *b, const char *key,
                       bool url_encode, size_t max, const char *what, char **out, ib_error_t *err);

/* The "http" section of a route (rt_http.c). */
rt_http_spec_t *rt_http_compile(const json_t *http, bool has_key, ib_problems_t *p);
void rt_http_free(rt_http_spec_t *h);

/* The "claim_check" section of a route (rt_claim.c); *nj set when it reads the body as JSON. */
rt_claim_spec_t *rt_claim_compile(const json_t *o, bool *nj, ib_problems_t *p);
void rt_claim_free(rt_claim_spec_t *c);

/*
 * The transaction keyword a route's SQL holds as a statement (outside string
 * literals, quoted identifiers and comments, case-insensitive), in capitals
 * ("COMMIT", "BEGIN TRANSACTION", "SAVEPOINT", ...), or NULL when none.
 * rt_sqltxn.c. thread: any.
 */
const char *rt_sql_txn_keyword(const char *sql);

#endif
