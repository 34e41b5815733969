/*
 * rt_emit.c - a route's "emit" list: compiled once (templates and sources
 * as for idempotency_key, a deterministic message_id enforced), then bound
 * per message into the eight parameters of the outbox insert that
 * rt_route_bind appends to the route's statements. thread: any (compiled
 * data is immutable).
 */
#include "rt_emit.h"

#include <stdlib.h>
#include <string.h>

#include "db_limits.h"
#include "ib_time.h"
#include "rt_int.h"
#include "rt_keys.h"

/* One templated field of an emit ("ship:{$.id}"); set is false when not configured. */
typedef struct tmpl {
    template_t tpl;
    bool set;
} tmpl_t;

typedef struct emit_prop {
    char *name;
    src_t src;
} emit_prop_t;

typedef struct emit_spec {
    char *entity;
    tmpl_t message_id, subject, session_id, correlation_id, content_type;
    src_t body;
    bool body_set;
    emit_prop_t *props;
    size_t nprops;
    bool created_at;      /* the "created-at" property: when the row was written */
    char *schema_version; /* the "schema-version" property; NULL: none */
} emit_spec_t;

struct rt_emits {
    emit_spec_t *v;
    size_t n;
    bool failure; /* emit_on_failure: the failure's sources, a default body describing it */
};

/* How one list compiles: its key in the route ("emit", "emit_on_failure") and its sources. */
typedef struct emit_ctx {
    const char *name;
    unsigned allow;
    bool *needs_json;
    ib_problems_t *p;
} emit_ctx_t;

static void emit_free(emit_spec_t *e)
{
    free(e->entity);
    free(e->schema_version);
    rt_tpl_free(&e->message_id.tpl);
    rt_tpl_free(&e->subject.tpl);
    rt_tpl_free(&e->session_id.tpl);
    rt_tpl_free(&e->correlation_id.tpl);
    rt_tpl_free(&e->content_type.tpl);
    rt_src_free(&e->body);
    for (size_t i = 0; i < e->nprops; i++) {
        free(e->props[i].name);
        rt_src_free(&e->props[i].src);
    }
    free(e->props);
}

void rt_emits_free(rt_emits_t *emits)
{
    if (!emits)
        return;
    for (size_t i = 0; i < emits->n; i++)
        emit_free(&emits->v[i]);
    free(emits->v);
    free(emits);
}

size_t rt_emits_count(const rt_emits_t *emits)
{
    return emits ? emits->n : 0;
}

static void compile_emit_tmpl(tmpl_t *t, const json_t *j, const char *field, const emit_ctx_t *c)
{
    if (!j)
        return;
    t->set = true;
    if (!json_is_string(j) || !*json_string_value(j)) {
        ib_problem(c->p, field, "must be a non-empty string");
        return;
    }
    rt_tpl_compile(json_string_value(j), field, c->allow, &t->tpl, c->needs_json, c->p);
}

/* message_id must name the message: a template with a source that is the same in every copy. */
static void check_emit_id(const tmpl_t *t, const char *field, ib_problems_t *p)
{
    bool sourced = false;
    if (!t->set) {
        ib_problem(p, field,
                   "missing: every emitted message needs a deterministic message id (e.g. "
                   "\"shipment:{$.orderId}\") so that duplicate detection and the next inbox "
                   "recognise a re-send");
        return;
    }
    for (size_t k = 0; k < t->tpl.n; k++) {
        src_kind_t kind = t->tpl.v[k].src.kind;
        if (t->tpl.v[k].lit)
            continue;
        if (kind == SRC_FAIL_ERROR) {
            ib_problem(p, field,
                       "{error} is a driver's or a destination's text, which may differ between "
                       "two failures of one message; build the id from message_id, the body or "
                       "properties (with {reason} if wanted)");
            return;
        }
        if (kind == SRC_FAIL_REASON || kind == SRC_FAIL_CLASS)
            continue; /* the same for every message: names none */
        if (rt_src_varies(kind)) {
            ib_problem(p, field,
                       "{%s} differs between copies of one message (a resend or redelivery), "
                       "so the id would too and duplicates would get through; build it from "
                       "message_id, the body or properties",
                       t->tpl.v[k].src.text);
            return;
        }
        sourced = true;
    }
    if (!sourced)
        ib_problem(p, field,
                   "is a constant: every message would emit the same id and duplicate "
                   "detection would drop all but the first; include a source such as "
                   "{message_id} or {$.orderId}");
}

static void compile_emit_props(emit_spec_t *e, const json_t *j, const char *field,
                               const emit_ctx_t *c)
{
    ib_problems_t *p = c->p;
    const char *k;
    json_t *v;
    if (!json_is_object(j)) {
        ib_problem(p, field, "must be an object of name: source");
        return;
    }
    e->props = calloc(json_object_size(j) ? json_object_size(j) : 1, sizeof(*e->props));
    if (!e->props) {
        ib_problem(p, field, "out of memory");
        return;
    }
    json_object_foreach((json_t *)j, k, v)
    {
        emit_prop_t *ep = &e->props[e->nprops];
        if (!rt_src_compile_param(v, c->allow, &ep->src)) {
            ib_problem(p, field, "%s: unknown source (use a field, prop:NAME, $.path or a literal)",
                       k);
            continue;
        }
        if (!(ep->name = strdup(k))) {
            rt_src_free(&ep->src);
            ib_problem(p, field, "out of memory");
            return;
        }
        e->nprops++;
    }
}

/* The envelope's optional parts: "created_at": true, "schema_version": "text". */
static void compile_envelope(emit_spec_t *e, const json_t *j, size_t i, const char *name,
                             ib_problems_t *p)
{
    const json_t *c = json_object_get(j, "created_at"), *v = json_object_get(j, "schema_version");
    char f[64];
    if (c && !json_is_boolean(c)) {
        snprintf(f, sizeof(f), "%s[%zu].created_at", name, i);
        ib_problem(p, f, "must be true or false");
    }
    e->created_at = json_is_true(c);
    if (v && (!json_is_string(v) || !*json_string_value(v) || strlen(json_string_value(v)) > 64)) {
        snprintf(f, sizeof(f), "%s[%zu].schema_version", name, i);
        ib_problem(p, f, "must be a string of 1 to 64 characters");
    } else if (v) {
        e->schema_version = strdup(json_string_value(v));
    }
}

static void compile_emit_one(emit_spec_t *e, const json_t *j, size_t i, const emit_ctx_t *c)
{
    ib_problems_t *p = c->p;
    char f[64];
    json_t *v, *entity;

#define EMIT_FIELD(fld) (snprintf(f, sizeof(f), "%s[%zu].%s", c->name, i, (fld)), f)
    if (!json_is_object(j)) {
        snprintf(f, sizeof(f), "%s[%zu]", c->name, i);
        ib_problem(p, f, "must be an object");
        return;
    }
    snprintf(f, sizeof(f), "%s[%zu]", c->name, i);
    rt_keys_check(j, RT_SCOPE_EMIT, f, p);
    entity = json_object_get(j, "entity");
    if (!json_is_string(entity) || !*json_string_value(entity) ||
        strlen(json_string_value(entity)) > DB_ENTITY_MAX)
        ib_problem(p, EMIT_FIELD("entity"),
                   "must be a queue or topic name (1 to " DB_WIDTH(DB_ENTITY_MAX) " characters)");
    else if (!(e->entity = strdup(json_string_value(entity))))
        ib_problem(p, EMIT_FIELD("entity"), "out of memory");
    compile_emit_tmpl(&e->message_id, json_object_get(j, "message_id"),
                      EMIT_FIELD("message_id"), c);
    check_emit_id(&e->message_id, EMIT_FIELD("message_id"), p);
    compile_emit_tmpl(&e->subject, json_object_get(j, "subject"), EMIT_FIELD("subject"), c);
    compile_emit_tmpl(&e->session_id, json_object_get(j, "session_id"),
                      EMIT_FIELD("session_id"), c);
    compile_emit_tmpl(&e->correlation_id, json_object_get(j, "correlation_id"),
                      EMIT_FIELD("correlation_id"), c);
    compile_emit_tmpl(&e->content_type, json_object_get(j, "content_type"),
                      EMIT_FIELD("content_type"), c);
    if ((v = json_object_get(j, "body")) != NULL) {
        if (!rt_src_compile_param(v, c->allow, &e->body))
            ib_problem(p, EMIT_FIELD("body"),
                       "unknown source (use body, $.path, a field, prop:NAME or {\"const\": ...})");
        else
            e->body_set = true;
        if (e->body_set && e->body.kind == SRC_JSON)
            *c->needs_json = true;
    }
    if ((v = json_object_get(j, "properties")) != NULL)
        compile_emit_props(e, v, EMIT_FIELD("properties"), c);
    compile_envelope(e, j, i, c->name, p);
#undef EMIT_FIELD
}

rt_emits_t *rt_emits_compile(const json_t *j, bool failure, bool *needs_json, ib_problems_t *p)
{
    rt_emits_t *emits;
    const emit_ctx_t c = {failure ? "emit_on_failure" : "emit", failure ? SRC_ALLOW_FAILURE : 0,
                          needs_json, p};
    if (!json_is_array(j) || json_array_size(j) == 0) {
        ib_problem(p, c.name, "must be a non-empty array of messages");
        return NULL;
    }
    emits = calloc(1, sizeof(*emits));
    if (emits)
        emits->v = calloc(json_array_size(j), sizeof(*emits->v));
    if (!emits || !emits->v) {
        free(emits);
        ib_problem(p, c.name, "out of memory");
        return NULL;
    }
    emits->n = json_array_size(j);
    emits->failure = failure;
    for (size_t i = 0; i < emits->n; i++)
        compile_emit_one(&emits->v[i], json_array_get(j, i), i, &c);
    return emits;
}

/* A bound value as JSON (properties). */
static json_t *param_json(const db_param_t *v)
{
    switch (v->type) {
    case DB_PARAM_TEXT:
        return json_string(v->text ? v->text : "");
    case DB_PARAM_INT:
        return json_integer(v->i);
    case DB_PARAM_FLOAT:
        return json_real(v->f);
    default:
        return json_null();
    }
}

/* A bound value as text (body); NULL for SQL NULL. */
static char *param_text(const db_param_t *v)
{
    char num[64];
    switch (v->type) {
    case DB_PARAM_TEXT:
        return strdup(v->text ? v->text : "");
    case DB_PARAM_INT:
        snprintf(num, sizeof(num), "%lld", v->i);
        return strdup(num);
    case DB_PARAM_FLOAT:
        snprintf(num, sizeof(num), "%.17g", v->f);
        return strdup(num);
    default:
        return NULL;
    }
}

/*
 * The trace context travels on: traceparent and Diagnostic-Id name the span
 * that emitted the message (the consumer span when tracing is on, else the
 * incoming context), tracestate as it came.
 */
static void carry_trace(json_t *props, const sb_msg_t *msg, const char *tp)
{
    const sb_prop_t *ts = sb_msg_prop(msg, "tracestate");
    if (tp && !json_object_get(props, "traceparent"))
        json_object_set_new(props, "traceparent", json_string(tp));
    if (tp && !json_object_get(props, "Diagnostic-Id"))
        json_object_set_new(props, "Diagnostic-Id", json_string(tp));
    if (ts && ts->str && !json_object_get(props, "tracestate"))
        json_object_set_new(props, "tracestate", json_string(ts->str));
}

/*
 * The message that caused this one (causation-id: the incoming message id,
 * beside the correlation id that names the whole conversation), and the
 * route's optional created-at (RFC 3339 UTC, when the outbox row is written:
 * a re-send of the row carries the same) and schema-version.
 */
static void add_envelope(const emit_spec_t *e, json_t *props, const sb_msg_t *msg)
{
    char at[40];
    if (msg->message_id && !json_object_get(props, "causation-id"))
        json_object_set_new(props, "causation-id", json_string(msg->message_id));
    if (e->created_at && !json_object_get(props, "created-at")) {
        ib_time_rfc3339(at, sizeof(at), ib_now_ms());
        json_object_set_new(props, "created-at", json_string(at));
    }
    if (e->schema_version && !json_object_get(props, "schema-version"))
        json_object_set_new(props, "schema-version", json_string(e->schema_version));
}

static ib_err_t bind_emit_props(const emit_spec_t *e, const sb_msg_t *msg, rt_binding_t *b,
                                db_param_t *out, ib_error_t *err)
{
    json_t *props = json_object();
    char *text;
    for (size_t i = 0; i < e->nprops; i++) {
        db_param_t v;
        ib_err_t rc = rt_src_eval(b, &e->props[i].src, msg, &v, err);
        if (rc != IB_E_OK) {
            json_decref(props);
            return rc;
        }
        json_object_set_new(props, e->props[i].name, param_json(&v));
    }
    carry_trace(props, msg, b->traceparent);
    add_envelope(e, props, msg);
    text = json_object_size(props) ? json_dumps(props, JSON_COMPACT) : NULL;
    json_decref(props);
    *out = text ? DB_TEXT(rt_binding_keep(b, text)) : DB_NULL();
    return IB_E_OK;
}

/* An optional template as a parameter: NULL when the field was not given. */
static ib_err_t bind_tmpl(const tmpl_t *t, const char *what, size_t max, const sb_msg_t *msg,
                          rt_binding_t *b, db_param_t *out, ib_error_t *err)
{
    char *s = NULL;
    ib_err_t rc;
    if (!t->set) {
        *out = DB_NULL();
        return IB_E_OK;
    }
    rc = rt_tpl_render(&t->tpl, msg, b, NULL, false, max, what, &s, err);
    if (rc != IB_E_OK)
        return rc;
    *out = DB_TEXT(s); /* kept by b already */
    return IB_E_OK;
}

/*
 * A rejection's default body: what failed and why, as JSON
 * {"message_id", "reason", "error_class", "error"} (absent parts left out).
 */
static db_param_t failure_body(const sb_msg_t *msg, rt_binding_t *b)
{
    const rt_failure_t *f = b->failure;
    json_t *o = json_object();
    char *text;
    if (msg->message_id)
        json_object_set_new(o, "message_id", json_string(msg->message_id));
    if (f && f->reason)
        json_object_set_new(o, "reason", json_string(f->reason));
    if (f && f->error_class)
        json_object_set_new(o, "error_class", json_string(f->error_class));
    if (f && f->error)
        json_object_set_new(o, "error", json_string(f->error));
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return DB_TEXT(rt_binding_keep(b, text));
}

/*
 * The nine parameters of the outbox insert (db_outbox_sql_insert) for one
 * emit: entity, message_id, session_id, subject, correlation_id,
 * content_type, properties, body, trace_context (the span that emitted it,
 * as carry_trace also puts in the traceparent property).
 */
ib_err_t rt_emits_bind(const rt_emits_t *emits, size_t i, const sb_msg_t *msg, rt_binding_t *b,
                       db_param_t *out, ib_error_t *err)
{
    const emit_spec_t *e = &emits->v[i];
    ib_err_t rc;
    const char *tp = b->traceparent;
    out[0] = DB_TEXT(e->entity);
    /* borrowed like out[4]; a later version longer than the column stays a property */
    out[8] = tp && strlen(tp) <= DB_MESSAGE_ID_MAX ? DB_TEXT(tp) : DB_NULL();
    if ((rc = bind_tmpl(&e->message_id, "emit message_id", DB_MESSAGE_ID_MAX, msg, b, &out[1],
                        err)) ||
        (rc = bind_tmpl(&e->session_id, "emit session_id", DB_MESSAGE_ID_MAX, msg, b, &out[2],
                        err)) ||
        (rc = bind_tmpl(&e->subject, "emit subject", DB_ENTITY_MAX, msg, b, &out[3], err)) ||
        (rc = bind_tmpl(&e->correlation_id, "emit correlation_id", DB_MESSAGE_ID_MAX, msg, b,
                        &out[4], err)) ||
        (rc =
             bind_tmpl(&e->content_type, "emit content_type", DB_ENTITY_MAX, msg, b, &out[5], err)))
        return rc;
    if (!e->correlation_id.set)
        out[4] = (msg->message_id ? DB_TEXT(msg->message_id) : DB_NULL()); /* the chain stays traceable */
    if ((rc = bind_emit_props(e, msg, b, &out[6], err)) != IB_E_OK)
        return rc;
    if (emits->failure && !e->body_set) {
        out[7] = failure_body(msg, b);
        if (!e->content_type.set)
            out[5] = DB_TEXT("application/json");
    } else if (!e->body_set || e->body.kind == SRC_BODY) {
        rc = rt_src_eval(b, &(src_t){.kind = SRC_BODY}, msg, &out[7], err);
        if (!e->content_type.set)
            out[5] = (msg->content_type ? DB_TEXT(msg->content_type) : DB_NULL());
    } else {
        db_param_t v;
        rc = rt_src_eval(b, &e->body, msg, &v, err);
        out[7] = rc == IB_E_OK ? (v.type == DB_PARAM_NULL ? DB_NULL()
                                                          : DB_TEXT(rt_binding_keep(b, param_text(&v))))
                               : DB_NULL();
        if (rc == IB_E_OK && !e->content_type.set && e->body.kind == SRC_JSON)
            out[5] = DB_TEXT("application/json");
    }
    return rc;
}
