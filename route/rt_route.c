#include "rt_route.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fx_client.h"
#include "ib_enc.h"
#include "ib_json.h"
#include "ib_time.h"
#include "ib_utf8.h"
#include "db_outbox.h"
#include "rt_emit.h"
#include "rt_int.h"
#include "rt_keys.h"
#include "rt_json.h"

#define KEY_MAX 400

static const struct {
    const char *name;
    src_kind_t kind;
} field_sources[] = {
    {"message_id", SRC_MESSAGE_ID},
    {"body", SRC_BODY},
    {"subject", SRC_SUBJECT},
    {"correlation_id", SRC_CORRELATION_ID},
    {"session_id", SRC_SESSION_ID},
    {"content_type", SRC_CONTENT_TYPE},
    {"enqueued_at", SRC_ENQUEUED_AT},
    {"sequence_number", SRC_SEQUENCE_NUMBER},
    {"delivery_count", SRC_DELIVERY_COUNT},
};

typedef struct stmt_spec {
    char *sql;
    src_t *params;
    size_t nparams;
} stmt_spec_t;

typedef struct prop_match {
    char *key;
    char *value;
} prop_match_t;

struct rt_route {
    size_t index;
    bool any;
    char *subject;
    prop_match_t *props;
    size_t nprops;
    rt_action_t action;
    char *reason;
    stmt_spec_t *stmts;
    size_t nstmts;
    template_t key;
    rt_http_spec_t *http; /* NULL: a SQL route */
    bool record;
    bool needs_json;
    rt_emits_t *emits;      /* NULL: the route emits nothing */
    rt_emits_t *rejects;    /* emit_on_failure; NULL: a final failure emits nothing */
    const char *outbox_sql; /* the outbox insert, owned by rt_routes_t */
    bool unique_duplicate; /* on_unique_violation: "duplicate" */
    json_t *constraints;   /* array of names limiting it; NULL = any unique key */
    bool hash_params;      /* payload_hash "params": the conflict check hashes the bound values */
    rt_claim_spec_t *claim; /* claim_check; NULL: the body is the message's */
};

/* ---- compile ---------------------------------------------------------- */

/* Parses "$.a.b[0]['x']" into steps; returns false on a syntax error. */
static bool parse_path(const char *path, src_t *src)
{
    const char *p = path + 1;
    size_t cap = 0;

    while (*p) {
        step_t st = {NULL, 0};
        if (*p == '.') {
            const char *s = ++p;
            while (*p && *p != '.' && *p != '[')
                p++;
            if (p == s)
                return false;
            st.name = strndup(s, (size_t)(p - s));
        } else if (*p == '[' && (p[1] == '"' || p[1] == '\'')) {
            char q = p[1];
            const char *s = p + 2, *e = strchr(s, q);
            if (!e || e[1] != ']')
                return false;
            st.name = strndup(s, (size_t)(e - s));
            p = e + 2;
        } else if (*p == '[') {
            char *end;
            long v;
            if (!isdigit((unsigned char)p[1]))
                return false;
            v = strtol(p + 1, &end, 10);
            if (*end != ']' || v < 0)
                return false;
            st.index = (size_t)v;
            p = end + 1;
        } else {
            return false;
        }
        if (src->nsteps == cap) {
            cap = cap ? cap * 2 : 4;
            src->steps = realloc(src->steps, cap * sizeof(*src->steps));
        }
        src->steps[src->nsteps++] = st;
    }
    return true;
}

void rt_src_free(src_t *s)
{
    free(s->text);
    for (size_t i = 0; i < s->nsteps; i++)
        free(s->steps[i].name);
    free(s->steps);
    json_decref(s->constant);
    memset(s, 0, sizeof(*s));
}

/* The failure's own sources of an emit_on_failure: reason, error_class, error. */
static bool failure_source(const char *t, src_t *out)
{
    static const struct {
        const char *name;
        src_kind_t kind;
    } fail[] = {{"reason", SRC_FAIL_REASON}, {"error_class", SRC_FAIL_CLASS}, {"error", SRC_FAIL_ERROR}};
    for (size_t i = 0; i < sizeof(fail) / sizeof(fail[0]); i++) {
        if (strcmp(t, fail[i].name) == 0) {
            out->kind = fail[i].kind;
            out->text = strdup(t);
            return true;
        }
    }
    return false;
}

/* Compiles a source given as text (a field name, prop:NAME, $path, key, response:...). */
bool rt_src_compile_text(const char *t, unsigned allow, src_t *out)
{
    memset(out, 0, sizeof(*out));
    if ((allow & SRC_ALLOW_KEY) && strcmp(t, "key") == 0) {
        out->kind = SRC_KEY;
        out->text = strdup(t);
        return true;
    }
    if ((allow & SRC_ALLOW_RESPONSE) && strncmp(t, "response:", 9) == 0) {
        const char *r = t + 9;
        if (strcmp(r, "status") == 0) {
            out->kind = SRC_RESPONSE_STATUS;
            out->text = strdup(t);
            return true;
        }
        if (strncmp(r, "header:", 7) == 0 && r[7]) {
            out->kind = SRC_RESPONSE_HEADER;
            out->text = strdup(r + 7);
            return true;
        }
        if (r[0] == '$' && rt_src_compile_text(r, 0, out)) {
            out->kind = SRC_RESPONSE_JSON;
            return true;
        }
        return false;
    }
    if ((allow & SRC_ALLOW_FAILURE) && failure_source(t, out))
        return true;
    for (size_t i = 0; i < sizeof(field_sources) / sizeof(field_sources[0]); i++) {
        if (strcmp(t, field_sources[i].name) == 0) {
            out->kind = field_sources[i].kind;
            out->text = strdup(t);
            return true;
        }
    }
    if (strncmp(t, "prop:", 5) == 0 && t[5]) {
        out->kind = SRC_PROP;
        out->text = strdup(t + 5);
        return true;
    }
    if (t[0] == '$') {
        out->kind = SRC_JSON;
        out->text = strdup(t);
        if (!parse_path(t, out)) {
            rt_src_free(out);
            return false;
        }
        return true;
    }
    return false;
}

bool rt_src_compile_param(const json_t *v, unsigned allow, src_t *out)
{
    memset(out, 0, sizeof(*out));
    if (json_is_string(v))
        return rt_src_compile_text(json_string_value(v), allow, out);
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "const");
        if (json_object_size(v) != 1 || !c || !json_is_string(c))
            return false;
        out->kind = SRC_CONST;
        out->constant = json_incref(c);
        out->text = strdup("const");
        return true;
    }
    if (json_is_number(v) || json_is_boolean(v) || json_is_null(v)) {
        out->kind = SRC_CONST;
        out->constant = json_incref((json_t *)v);
        out->text = strdup("const");
        return true;
    }
    return false;
}

/* Counts '?' placeholders outside quoted literals and identifiers. */
static size_t count_placeholders(const char *sql)
{
    size_t n = 0;
    char quote = 0;
    for (const char *c = sql; *c; c++) {
        if (quote) {
            if (*c == quote)
                quote = 0;
        } else if (*c == '\'' || *c == '"' || *c == '[' || *c == '`') {
            quote = *c == '[' ? ']' : *c;
        } else if (*c == '?') {
            n++;
        }
    }
    return n;
}

static void compile_stmts(rt_route_t *r, const json_t *sql, const json_t *params, unsigned allow,
                          ib_problems_t *p)
{
    size_t nsql = json_is_array(sql) ? json_array_size(sql) : 1;

    if (!json_is_string(sql) && !json_is_array(sql)) {
        ib_problem(p, "sql", "must be a string or an array of strings");
        return;
    }
    if (nsql == 0) {
        ib_problem(p, "sql", "is an empty array");
        return;
    }
    if (params && !json_is_array(params)) {
        ib_problem(p, "params", "must be an array");
        return;
    }
    if (json_is_array(sql) && params && json_array_size(params) != nsql) {
        ib_problem(p, "params", "with %zu statements, params must hold %zu arrays (one per statement)",
                nsql, nsql);
        return;
    }
    r->stmts = calloc(nsql, sizeof(*r->stmts));
    r->nstmts = nsql;
    for (size_t i = 0; i < nsql; i++) {
        const json_t *s = json_is_array(sql) ? json_array_get(sql, i) : sql;
        const json_t *plist = !params              ? NULL
                              : json_is_array(sql) ? json_array_get(params, i)
                                                   : params;
        char field[32];
        size_t np, want;

        snprintf(field, sizeof(field), json_is_array(sql) ? "sql[%zu]" : "sql", i);
        if (!json_is_string(s) || !*json_string_value(s)) {
            ib_problem(p, field, "must be a non-empty string");
            continue;
        }
        r->stmts[i].sql = strdup(json_string_value(s));
        if (rt_sql_txn_keyword(json_string_value(s))) {
            ib_problem(p, field,
                       "holds the transaction statement %s: a route's statements run inside "
                       "inboxd's transaction with the inbox row, which inboxd alone begins "
                       "and ends",
                       rt_sql_txn_keyword(json_string_value(s)));
            continue;
        }
        if (plist && !json_is_array(plist)) {
            ib_problem(p, "params", "entry %zu must be an array", i);
            continue;
        }
        np = plist ? json_array_size(plist) : 0;
        want = count_placeholders(r->stmts[i].sql);
        if (np != want) {
            ib_problem(p, field, "has %zu '?' placeholders but %zu params", want, np);
            continue;
        }
        r->stmts[i].params = calloc(np ? np : 1, sizeof(src_t));
        r->stmts[i].nparams = np;
        for (size_t k = 0; k < np; k++) {
            if (!rt_src_compile_param(json_array_get(plist, k), allow, &r->stmts[i].params[k])) {
                char *t = json_dumps(json_array_get(plist, k), JSON_ENCODE_ANY);
                ib_problem(
                    p, "params",
                    "unknown source %s (use message_id, body, subject, "
                    "correlation_id, session_id, content_type, enqueued_at, sequence_number, "
                    "delivery_count, prop:NAME, $.json.path, %sor a literal)",
                    t ? t : "?",
                    (allow & SRC_ALLOW_RESPONSE)
                        ? "response:status, response:header:NAME, response:$.path, "
                        : "");
                free(t);
            } else if (r->stmts[i].params[k].kind == SRC_JSON) {
                r->needs_json = true;
            }
        }
    }
}

static part_t *tpl_next(template_t *tpl, size_t *cap)
{
    if (tpl->n + 1 > *cap) {
        *cap = *cap ? *cap * 2 : 4;
        tpl->v = realloc(tpl->v, *cap * sizeof(*tpl->v));
    }
    memset(&tpl->v[tpl->n], 0, sizeof(part_t));
    return &tpl->v[tpl->n];
}

void rt_tpl_compile(const char *t, const char *field, unsigned allow, template_t *tpl,
                    bool *needs_json, ib_problems_t *p)
{
    const char *c;
    size_t cap = 0, llen = 0;
    char *lit = malloc(strlen(t) + 1);

    memset(tpl, 0, sizeof(*tpl));
    for (c = t;; c++) {
        bool end = *c == '\0';
        bool open = *c == '{' && c[1] != '{';
        if ((*c == '{' && c[1] == '{') || (*c == '}' && c[1] == '}')) {
            lit[llen++] = *c++;
            continue;
        }
        if ((end || open) && llen) {
            lit[llen] = '\0';
            tpl_next(tpl, &cap)->lit = strdup(lit);
            tpl->n++;
            llen = 0;
        }
        if (end)
            break;
        if (open) {
            const char *close = strchr(c, '}');
            if (!close) {
                ib_problem(p, field, "a '{' is never closed");
                break;
            }
            char *inner = strndup(c + 1, (size_t)(close - c - 1));
            part_t *pt = tpl_next(tpl, &cap);
            if (!rt_src_compile_text(inner, allow, &pt->src)) {
                ib_problem(p, field, "unknown source {%s}", inner);
            } else {
                if (pt->src.kind == SRC_JSON)
                    *needs_json = true;
                tpl->n++;
            }
            free(inner);
            c = close;
            continue;
        }
        if (*c == '}') {
            ib_problem(p, field, "a '}' has no '{' (write '}}' for a literal brace)");
            break;
        }
        lit[llen++] = *c;
    }
    free(lit);
}

void rt_tpl_free(template_t *tpl)
{
    for (size_t k = 0; k < tpl->n; k++) {
        free(tpl->v[k].lit);
        rt_src_free(&tpl->v[k].src);
    }
    free(tpl->v);
    memset(tpl, 0, sizeof(*tpl));
}

/*
 * A resend has another sequence number and enqueue time, a redelivery
 * another delivery count: what is built from these differs between copies.
 */
bool rt_src_varies(src_kind_t k)
{
    return k == SRC_SEQUENCE_NUMBER || k == SRC_DELIVERY_COUNT || k == SRC_ENQUEUED_AT;
}

/*
 * The key must name the operation: two deliveries (a redelivery, a resend)
 * of one message must render the same key, or both apply; and a key of
 * constants alone would make every message after the first a duplicate.
 */
static void check_key_stable(const template_t *key, ib_problems_t *p)
{
    bool sourced = false;
    for (size_t k = 0; k < key->n; k++) {
        if (key->v[k].lit)
            continue;
        if (rt_src_varies(key->v[k].src.kind)) {
            ib_problem(p, "idempotency_key",
                       "{%s} differs between copies of one message (a redelivery or a resend), "
                       "so each copy would get its own key and every copy would apply; build it "
                       "from message_id, the body or properties",
                       key->v[k].src.text);
            return;
        }
        sourced = true;
    }
    if (!sourced && key->n)
        ib_problem(p, "idempotency_key",
                   "is a constant: every message would share one key, so all but the first "
                   "would be taken for duplicates; include a source such as {$.orderId}");
}

static void compile_key(rt_route_t *r, const json_t *key, ib_problems_t *p)
{
    const char *text;
    if (!json_is_string(key) || !*json_string_value(key)) {
        ib_problem(p, "idempotency_key", "must be a non-empty string");
        return;
    }
    text = json_string_value(key);
    if (strstr(text, "{lock_token}")) { /* no source: named here rather than "unknown" */
        ib_problem(p, "idempotency_key",
                   "{lock_token} is new on every delivery, so each copy of a message would get "
                   "its own key and every copy would apply; build it from message_id, the body "
                   "or properties");
        return;
    }
    int before = p->n;
    rt_tpl_compile(text, "idempotency_key", 0, &r->key, &r->needs_json, p);
    if (p->n == before) /* a template that did not compile is reported once */
        check_key_stable(&r->key, p);
}

static void compile_match(rt_route_t *r, const json_t *m, ib_problems_t *p)
{
    const char *k;
    json_t *v;

    if (json_is_string(m) && strcmp(json_string_value(m), "*") == 0) {
        r->any = true;
        return;
    }
    if (!json_is_object(m) || json_object_size(m) == 0) {
        ib_problem(p, "match", "must be \"*\" or an object with subject and/or property");
        return;
    }
    rt_keys_check(m, RT_SCOPE_MATCH, "match", p);
    json_object_foreach((json_t *)m, k, v)
    {
        if (strcmp(k, "subject") == 0) {
            if (!json_is_string(v))
                ib_problem(p, "match.subject", "must be a string");
            else
                r->subject = strdup(json_string_value(v));
        } else if (strcmp(k, "property") == 0) {
            const char *pk;
            json_t *pv;
            if (!json_is_object(v) || json_object_size(v) == 0) {
                ib_problem(p, "match.property", "must be an object of name: value");
                continue;
            }
            r->props = calloc(json_object_size(v), sizeof(*r->props));
            json_object_foreach(v, pk, pv)
            {
                char buf[64];
                const char *text = NULL;
                if (json_is_string(pv))
                    text = json_string_value(pv);
                else if (json_is_integer(pv))
                    snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(pv)),
                        text = buf;
                else if (json_is_boolean(pv))
                    text = json_is_true(pv) ? "true" : "false";
                if (!text) {
                    ib_problem(p, "match.property", "%s must be a string, integer or boolean", pk);
                    continue;
                }
                r->props[r->nprops].key = strdup(pk);
                r->props[r->nprops++].value = strdup(text);
            }
        }
    }
}

/* "on_unique_violation": "duplicate" | "permanent", "constraints": ["name", ...]. */
static void compile_unique(rt_route_t *r, const json_t *j, ib_problems_t *p)
{
    json_t *onu = json_object_get(j, "on_unique_violation");
    json_t *names = json_object_get(j, "constraints");
    const char *o = json_is_string(onu) ? json_string_value(onu) : "";
    size_t i;
    json_t *v;

    if (onu && strcmp(o, "duplicate") == 0)
        r->unique_duplicate = true;
    else if (onu && strcmp(o, "permanent") != 0)
        ib_problem(p, "on_unique_violation", "must be \"duplicate\" or \"permanent\"");
    if (!names)
        return;
    if (!r->unique_duplicate)
        ib_problem(p, "constraints", "only allowed with on_unique_violation \"duplicate\"");
    if (!json_is_array(names) || json_array_size(names) == 0) {
        ib_problem(p, "constraints", "must be a non-empty array of constraint or index names");
        return;
    }
    json_array_foreach(names, i, v) if (!json_is_string(v) || !*json_string_value(v))
    {
        ib_problem(p, "constraints", "element %zu is not a non-empty string", i);
        return;
    }
    r->constraints = json_incref(names);
}

/* "payload_hash": "body" (the whole body, the default) | "params" (the bound values). */
static void compile_payload_hash(rt_route_t *r, const json_t *j, ib_problems_t *p)
{
    const char *v = json_is_string(j) ? json_string_value(j) : "";
    size_t nparams = 0;
    if (!j || strcmp(v, "body") == 0)
        return;
    if (strcmp(v, "params") != 0) {
        ib_problem(p, "payload_hash", "must be \"body\" or \"params\"");
        return;
    }
    if (r->http) {
        ib_problem(p, "payload_hash",
                   "\"params\" is for SQL routes (an HTTP route's parameters are bound after "
                   "its call, too late for the claim)");
        return;
    }
    for (size_t s = 0; s < r->nstmts; s++)
        nparams += r->stmts[s].nparams;
    if (nparams == 0) {
        ib_problem(p, "payload_hash",
                   "\"params\" needs params: with none, every payload would hash alike");
        return;
    }
    r->hash_params = true;
}

/* An action route settles without applying: a key that only an applying
 * route takes (the table's kinds) is refused rather than ignored. */
static void refuse_with_action(const json_t *j, ib_problems_t *p)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        const rt_key_t *d = rt_key_find(RT_SCOPE_ROUTE, k);
        if (d && !(d->kinds & RT_KIND_ACTION))
            ib_problem(p, k, "not allowed with action%s",
                       strcmp(k, "emit_on_failure") == 0
                           ? " (the route's dead letter is the configuration's, not a failure)"
                           : "");
    }
}

static void compile_route(rt_route_t *r, const json_t *j, ib_problems_t *p)
{
    json_t *action, *onp;

    if (!json_is_object(j)) {
        ib_problem(p, "", "must be an object");
        return;
    }
    rt_keys_check(j, RT_SCOPE_ROUTE, "", p);
    if (!json_object_get(j, "match"))
        ib_problem(p, "match", "missing (use \"*\" to match every message)");
    else
        compile_match(r, json_object_get(j, "match"), p);

    action = json_object_get(j, "action");
    if (action) {
        const char *a = json_is_string(action) ? json_string_value(action) : "";
        if (strcmp(a, "deadletter") == 0) {
            json_t *reason = json_object_get(j, "reason");
            r->action = RT_ACT_DEADLETTER;
            if (!json_is_string(reason) || !*json_string_value(reason))
                ib_problem(p, "reason", "action \"deadletter\" needs a non-empty reason");
            else
                r->reason = strdup(json_string_value(reason));
        } else if (strcmp(a, "complete") == 0) {
            r->action = RT_ACT_COMPLETE;
        } else {
            ib_problem(p, "action", "must be \"deadletter\" or \"complete\"");
        }
        refuse_with_action(j, p);
        return;
    }
    r->action = RT_ACT_APPLY;
    if (json_object_get(j, "reason"))
        ib_problem(p, "reason", "only allowed with action \"deadletter\"");
    if (json_object_get(j, "http")) {
        /* An HTTP route: the call is the effect; sql (optional) runs when it finishes. */
        r->http =
            rt_http_compile(json_object_get(j, "http"), json_object_get(j, "idempotency_key"), p);
        if (json_object_get(j, "on_permanent"))
            ib_problem(p, "on_permanent", "not allowed with http (a refusal is always recorded)");
        if (json_object_get(j, "sql"))
            compile_stmts(r, json_object_get(j, "sql"), json_object_get(j, "params"),
                          SRC_ALLOW_RESPONSE, p);
        else if (json_object_get(j, "params"))
            ib_problem(p, "params", "given without sql");
    } else if (!json_object_get(j, "sql")) {
        ib_problem(p, "sql", "missing (or give http, or action \"deadletter\" / \"complete\")");
    } else {
        compile_stmts(r, json_object_get(j, "sql"), json_object_get(j, "params"), 0, p);
    }
    if (json_object_get(j, "idempotency_key"))
        compile_key(r, json_object_get(j, "idempotency_key"), p);
    if (json_object_get(j, "emit"))
        r->emits = rt_emits_compile(json_object_get(j, "emit"), false, &r->needs_json, p);
    if (json_object_get(j, "emit_on_failure"))
        r->rejects =
            rt_emits_compile(json_object_get(j, "emit_on_failure"), true, &r->needs_json, p);
    onp = json_object_get(j, "on_permanent");
    if (onp) {
        const char *o = json_is_string(onp) ? json_string_value(onp) : "";
        if (strcmp(o, "record") == 0)
            r->record = true;
        else if (strcmp(o, "deadletter") != 0)
            ib_problem(p, "on_permanent", "must be \"deadletter\" or \"record\"");
    }
    compile_unique(r, j, p);
    compile_payload_hash(r, json_object_get(j, "payload_hash"), p);
    if (json_object_get(j, "claim_check")) {
        bool nj = false; /* the reference reads the message's body, not the blob */
        r->claim = rt_claim_compile(json_object_get(j, "claim_check"), &nj, p);
    }
}

int rt_routes_compile(const json_t *routes, rt_routes_t *out, FILE *errs)
{
    ib_problems_t p = {.errs = errs};
    size_t n = json_array_size(routes);

    memset(out, 0, sizeof(*out));
    if (!json_is_array(routes)) {
        if (errs)
            fprintf(errs, "config: routes: must be an array\n");
        return 1;
    }
    out->v = calloc(n ? n : 1, sizeof(*out->v));
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(p.prefix, sizeof(p.prefix), "routes[%zu]", i);
        out->v[i].index = i;
        compile_route(&out->v[i], json_array_get(routes, i), &p);
    }
    return p.n;
}

void rt_routes_free(rt_routes_t *routes)
{
    for (size_t i = 0; i < routes->n; i++) {
        rt_route_t *r = &routes->v[i];
        free(r->subject);
        for (size_t k = 0; k < r->nprops; k++) {
            free(r->props[k].key);
            free(r->props[k].value);
        }
        free(r->props);
        free(r->reason);
        for (size_t s = 0; s < r->nstmts; s++) {
            free(r->stmts[s].sql);
            for (size_t k = 0; k < r->stmts[s].nparams; k++)
                rt_src_free(&r->stmts[s].params[k]);
            free(r->stmts[s].params);
        }
        free(r->stmts);
        rt_tpl_free(&r->key);
        rt_http_free(r->http);
        rt_emits_free(r->emits);
        rt_emits_free(r->rejects);
        json_decref(r->constraints);
        rt_claim_free(r->claim);
    }
    free(routes->v);
    free(routes->outbox_sql);
    memset(routes, 0, sizeof(*routes));
}

/* ---- match ------------------------------------------------------------ */

/* The text of a property for matching; buf holds rendered numbers. */
static const char *prop_text(const sb_prop_t *pr, char *buf, size_t size)
{
    switch (pr->type) {
    case SB_PROP_STRING:
    case SB_PROP_OTHER:
        return pr->str;
    case SB_PROP_INT64:
        snprintf(buf, size, "%lld", pr->i);
        return buf;
    case SB_PROP_BOOL:
        return pr->i ? "true" : "false";
    case SB_PROP_DOUBLE:
        snprintf(buf, size, "%.17g", pr->d);
        return buf;
    default:
        return NULL;
    }
}

const rt_route_t *rt_routes_match(const rt_routes_t *routes, const sb_msg_t *msg)
{
    for (size_t i = 0; i < routes->n; i++) {
        const rt_route_t *r = &routes->v[i];
        bool ok = true;
        if (r->any)
            return r;
        if (r->subject && (!msg->subject || strcmp(r->subject, msg->subject) != 0))
            ok = false;
        for (size_t k = 0; ok && k < r->nprops; k++) {
            const sb_prop_t *pr = sb_msg_prop(msg, r->props[k].key);
            char buf[64];
            const char *t = pr ? prop_text(pr, buf, sizeof(buf)) : NULL;
            if (!t || strcmp(t, r->props[k].value) != 0)
                ok = false;
        }
        if (ok && (r->subject || r->nprops))
            return r;
    }
    return NULL;
}

rt_action_t rt_route_action(const rt_route_t *r)
{
    return r->action;
}

const char *rt_route_reason(const rt_route_t *r)
{
    return r->reason;
}

bool rt_route_records_failures(const rt_route_t *r)
{
    return r->record;
}

bool rt_route_unique_is_duplicate(const rt_route_t *r, const char *constraint)
{
    size_t i;
    json_t *v;
    if (!r->unique_duplicate)
        return false;
    if (!r->constraints)
        return true;
    json_array_foreach(r->constraints, i, v) if (constraint &&
                                                 strcmp(json_string_value(v), constraint) == 0)
        return true;
    return false;
}

size_t rt_route_index(const rt_route_t *r)
{
    return r->index;
}

/* ---- bind ------------------------------------------------------------- */

char *rt_binding_keep(rt_binding_t *b, char *s)
{
    if (!s) {
        b->nomem = true; /* every caller keeps a fresh allocation: NULL is out of memory */
        return NULL;
    }
    if (b->nstrings == b->cap_strings) {
        size_t cap = b->cap_strings ? b->cap_strings * 2 : 8;
        char **v = realloc(b->strings, cap * sizeof(*v));
        if (!v) {
            free(s);
            b->nomem = true;
            return NULL;
        }
        b->strings = v;
        b->cap_strings = cap;
    }
    b->strings[b->nstrings++] = s;
    return s;
}

static const json_t *walk(const json_t *root, const src_t *s)
{
    const json_t *cur = root;
    for (size_t i = 0; cur && i < s->nsteps; i++)
        cur = s->steps[i].name ? json_object_get(cur, s->steps[i].name)
                               : json_array_get(cur, s->steps[i].index);
    return cur;
}

static ib_err_t body_json(rt_binding_t *b, const sb_msg_t *msg, ib_error_t *err)
{
    json_error_t jerr;
    if (b->body_json)
        return IB_E_OK;
    b->body_json = json_loadb((const char *)msg->body, msg->body_len,
                              JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!b->body_json) {
        /* Kind and position only: jansson's own text quotes the body. */
        char why[128];
        return ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                            "body is not valid JSON: %s",
                            ib_json_error_describe(&jerr, why, sizeof(why)));
    }
    return IB_E_OK;
}

static db_param_t from_json(rt_binding_t *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return DB_TEXT(rt_binding_keep(b, strdup(json_string_value(v))));
    case JSON_INTEGER:
        return DB_INT(json_integer_value(v));
    case JSON_REAL:
        return DB_FLOAT(json_real_value(v));
    case JSON_TRUE:
        return DB_INT(1);
    case JSON_FALSE:
        return DB_INT(0);
    case JSON_NULL:
        return DB_NULL();
    default:
        return DB_TEXT(rt_binding_keep(b, json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)));
    }
}

/*
 * A $.path source read by rt_json_find when the body passed rt_json_checked
 * (no tree is built). True when decided here (*out or err set); false
 * leaves it to jansson: a body the check did not accept (jansson names the
 * error), or an object or array value (bound as jansson prints it).
 */
static bool body_field_fast(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, db_param_t *out,
                            ib_err_t *rc, ib_error_t *err)
{
    const char *text = (const char *)msg->body;
    rt_json_span_t v;

    if (b->body_checked == 0)
        b->body_checked = rt_json_checked(text, msg->body_len) ? 1 : -1;
    if (b->body_checked < 0 || b->body_json)
        return false;
    *rc = IB_E_OK;
    if (!rt_json_find(text, msg->body_len, s->steps, s->nsteps, &v)) {
        *rc = ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                           "field %s is missing from the body", s->text);
        return true;
    }
    switch (v.kind) {
    case RT_JV_STRING: {
        char *t = rt_json_string(&v);
        if (!t)
            *rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        *out = DB_TEXT(rt_binding_keep(b, t));
        return true;
    }
    case RT_JV_INTEGER:
    case RT_JV_REAL: {
        char num[64]; /* rt_json_checked takes numbers shorter than this */
        memcpy(num, v.at, v.len);
        num[v.len] = '\0';
        *out = v.kind == RT_JV_INTEGER ? DB_INT(strtoll(num, NULL, 10)) : DB_FLOAT(strtod(num, NULL));
        return true;
    }
    case RT_JV_TRUE:
    case RT_JV_FALSE:
        *out = DB_INT(v.kind == RT_JV_TRUE);
        return true;
    case RT_JV_NULL:
        *out = DB_NULL();
        return true;
    default:
        return false;
    }
}

static db_param_t opt_text(rt_binding_t *b, const char *s)
{
    return s ? DB_TEXT(s) : DB_NULL();
}

/* response:... sources: the answer of the call, in the finishing statements. */
static ib_err_t eval_response(rt_binding_t *b, const src_t *s, db_param_t *out, ib_error_t *err)
{
    const fx_response_t *resp = b->response;
    char buf[1024];
    if (!resp)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "%s: no response yet", s->text);
    switch (s->kind) {
    case SRC_RESPONSE_STATUS:
        *out = DB_INT(resp->status);
        return IB_E_OK;
    case SRC_RESPONSE_HEADER:
        *out = fx_response_header(resp, s->text, buf, sizeof buf)
                   ? DB_TEXT(rt_binding_keep(b, strdup(buf)))
                   : DB_NULL();
        return IB_E_OK;
    default: {
        if (!b->response_json &&
            !(b->response_json = json_loadb(resp->body, resp->body_len, JSON_DECODE_ANY, NULL)))
            return ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                                "the response body is not JSON (needed by response:%s)", s->text);
        const json_t *v = walk(b->response_json, s);
        if (!v)
            return ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                                "field %s is missing from the response", s->text);
        *out = from_json(b, v);
        return IB_E_OK;
    }
    }
}

const json_t *rt_src_json(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, ib_error_t *err)
{
    if (body_json(b, msg, err) != IB_E_OK)
        return NULL;
    const json_t *v = walk(b->body_json, s);
    if (!v)
        ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                     "field %s is missing from the body", s->text);
    return v;
}

/* The enqueue time as "YYYY-MM-DD hh:mm:ss.mmm" UTC text, NULL when unknown. */
static ib_err_t eval_enqueued_at(rt_binding_t *b, const sb_msg_t *msg, db_param_t *out,
                                 ib_error_t *err)
{
    char *t;
    if (msg->enqueued_ms <= 0) {
        *out = DB_NULL();
        return IB_E_OK;
    }
    if (!(t = malloc(IB_TIME_TEXT_MAX)))
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    ib_time_sql(t, IB_TIME_TEXT_MAX, msg->enqueued_ms);
    *out = DB_TEXT(rt_binding_keep(b, t));
    return IB_E_OK;
}

/* An application property by its type; missing is a permanent MissingField. */
static ib_err_t eval_prop(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, db_param_t *out,
                          ib_error_t *err)
{
    const sb_prop_t *pr = sb_msg_prop(msg, s->text);
    if (!pr)
        return ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                            "application property '%s' is missing", s->text);
    switch (pr->type) {
    case SB_PROP_INT64:
    case SB_PROP_BOOL:
        *out = DB_INT(pr->i);
        break;
    case SB_PROP_DOUBLE:
        *out = DB_FLOAT(pr->d);
        break;
    case SB_PROP_NULL:
        *out = DB_NULL();
        break;
    default:
        *out = opt_text(b, pr->str);
    }
    return IB_E_OK;
}

/* {reason}, {error_class} or {error} of the failure an emit_on_failure binding carries. */
static ib_err_t eval_failure(rt_binding_t *b, const src_t *s, db_param_t *out, ib_error_t *err)
{
    const rt_failure_t *f = b->failure;
    const char *t = !f                         ? NULL
                    : s->kind == SRC_FAIL_REASON ? f->reason
                    : s->kind == SRC_FAIL_CLASS  ? f->error_class
                                                 : f->error;
    /* Kept: the failure is the caller's and may be gone before the binding is used. */
    *out = t ? DB_TEXT(rt_binding_keep(b, strdup(t))) : DB_NULL();
    return b->nomem ? ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory")
                    : IB_E_OK;
}

ib_err_t rt_src_eval(rt_binding_t *b, const src_t *s, const sb_msg_t *msg, db_param_t *out,
                     ib_error_t *err)
{
    switch (s->kind) {
    case SRC_CONST:
        *out = from_json(b, s->constant);
        return IB_E_OK;
    case SRC_MESSAGE_ID:
        *out = opt_text(b, msg->message_id);
        return IB_E_OK;
    case SRC_BODY: {
        char *t = malloc(msg->body_len + 1);
        if (!t)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        if (msg->body_len)
            memcpy(t, msg->body, msg->body_len);
        t[msg->body_len] = '\0';
        *out = DB_TEXT(rt_binding_keep(b, t));
        return IB_E_OK;
    }
    case SRC_SUBJECT:
        *out = opt_text(b, msg->subject);
        return IB_E_OK;
    case SRC_CORRELATION_ID:
        *out = opt_text(b, msg->correlation_id);
        return IB_E_OK;
    case SRC_SESSION_ID:
        *out = opt_text(b, msg->session_id);
        return IB_E_OK;
    case SRC_CONTENT_TYPE:
        *out = opt_text(b, msg->content_type);
        return IB_E_OK;
    case SRC_ENQUEUED_AT:
        return eval_enqueued_at(b, msg, out, err);
    case SRC_SEQUENCE_NUMBER:
        *out = DB_INT(msg->sequence_number);
        return IB_E_OK;
    case SRC_DELIVERY_COUNT:
        *out = DB_INT(msg->delivery_count);
        return IB_E_OK;
    case SRC_PROP:
        return eval_prop(b, s, msg, out, err);
    case SRC_JSON: {
        const json_t *v;
        ib_err_t rc;
        if (body_field_fast(b, s, msg, out, &rc, err))
            return rc;
        rc = body_json(b, msg, err);
        if (rc != IB_E_OK)
            return rc;
        v = walk(b->body_json, s);
        if (!v)
            return ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                                "field %s is missing from the body", s->text);
        *out = from_json(b, v);
        return IB_E_OK;
    }
    case SRC_RESPONSE_STATUS:
    case SRC_RESPONSE_HEADER:
    case SRC_RESPONSE_JSON:
        return eval_response(b, s, out, err);
    case SRC_FAIL_REASON:
    case SRC_FAIL_CLASS:
    case SRC_FAIL_ERROR:
        return eval_failure(b, s, out, err);
    case SRC_KEY:
        break; /* rendered by rt_tpl_render */
    }
    return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "unknown source");
}

/* The text of one template part. */
static ib_err_t part_text(const part_t *pt, const sb_msg_t *msg, rt_binding_t *b, const char *key,
                          const char *what, char *num, size_t nsize, const char **t,
                          ib_error_t *err)
{
    db_param_t v;
    if (pt->lit) {
        *t = pt->lit;
        return IB_E_OK;
    }
    if (pt->src.kind == SRC_KEY) {
        *t = key ? key : "";
        return IB_E_OK;
    }
    ib_err_t rc = rt_src_eval(b, &pt->src, msg, &v, err);
    if (rc != IB_E_OK)
        return rc;
    switch (v.type) {
    case DB_PARAM_TEXT:
        *t = v.text;
        return IB_E_OK;
    case DB_PARAM_INT:
        snprintf(num, nsize, "%lld", v.i);
        *t = num;
        return IB_E_OK;
    case DB_PARAM_FLOAT:
        snprintf(num, nsize, "%.17g", v.f);
        *t = num;
        return IB_E_OK;
    default:
        return ib_error_set(err, IB_E_MISSING_FIELD, IB_CLASS_PERMANENT,
                            "%s source %s is null or absent", what, pt->src.text);
    }
}

/* Appends t (tl bytes) percent-encoded when encode; false when over max. */
static bool append(char *buf, size_t *len, size_t max, const char *t, size_t tl, bool encode)
{
    size_t w = encode ? ib_enc_pct(NULL, 0, t, tl) : tl;
    if (*len + w > max)
        return false;
    if (encode)
        ib_enc_pct(buf + *len, w + 1, t, tl);
    else
        memcpy(buf + *len, t, tl);
    *len += w;
    return true;
}

/* Whether a URL rendered so far (buf, len) ends in its authority: past "://", before "/?#". */
static bool in_authority(char *buf, size_t len)
{
    buf[len] = '\0';
    const char *a = strstr(buf, "://");
    return a && a[3 + strcspn(a + 3, "/?#")] == '\0';
}

/*
 * A value bound into a URL's authority (http.allowed_hosts lets a route
 * template its host): a host name, an IPv4 or a bracketed IPv6 literal, or
 * a port, each optionally followed by ":port". Nothing that could end the
 * authority or add userinfo ('/', '?', '#', '@', '%', '\\') gets through.
 */
static bool authority_value_ok(const char *t)
{
    static const char host[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-";
    size_t h;
    if (t[0] == '[') {
        h = 1 + strspn(t + 1, "0123456789abcdefABCDEF:.");
        if (h == 1 || t[h] != ']')
            return false;
        h++;
    } else if ((h = strspn(t, host)) == 0) {
        return false;
    }
    if (t[h] == '\0')
        return true;
    size_t p = t[h] == ':' ? strspn(t + h + 1, "0123456789") : 0;
    return p >= 1 && p <= 5 && t[h + 1 + p] == '\0';
}

ib_err_t rt_tpl_render(const template_t *tpl, const sb_msg_t *msg, rt_binding_t *b, const char *key,
                       bool url_encode, size_t max, const char *what, char **out, ib_error_t *err)
{
    char *buf = malloc(max + 1);
    size_t len = 0;
    if (!buf)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < tpl->n; i++) {
        char num[64];
        const char *t = "";
        bool encode = url_encode && !tpl->v[i].lit;
        ib_err_t rc = part_text(&tpl->v[i], msg, b, key, what, num, sizeof num, &t, err);
        if (rc == IB_E_OK && encode && in_authority(buf, len)) {
            encode = false; /* a host, written as is: percent-encoded it would name none */
            if (!authority_value_ok(t))
                rc = ib_error_set(err, IB_E_NOT_ALLOWED, IB_CLASS_PERMANENT,
                                  "%s: a value bound into the host is not a host or host:port "
                                  "(http.allowed_hosts)",
                                  what);
        }
        if (rc != IB_E_OK) {
            free(buf);
            return rc;
        }
        if (!append(buf, &len, max, t, strlen(t), encode)) {
            free(buf);
            return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "%s is longer than %zu bytes",
                                what, max);
        }
    }
    buf[len] = '\0';
    *out = rt_binding_keep(b, buf);
    return IB_E_OK;
}

/* The route's statements with their parameters evaluated. */
/* The outbox inserts of emits after the statements in out (room for them is allocated). */
static ib_err_t bind_emits(const rt_route_t *r, const rt_emits_t *emits, const sb_msg_t *msg,
                           rt_binding_t *out, size_t at, ib_error_t *err)
{
    size_t n = rt_emits_count(emits);
    if (n && !r->outbox_sql)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_TRANSIENT,
                            "routes[%zu] emits but no outbox table is set", r->index);
    for (size_t e = 0; e < n; e++) {
        db_stmt_t *st = &out->stmts[out->nstmts];
        ib_err_t rc = rt_emits_bind(emits, e, msg, out, out->params + at, err);
        if (rc != IB_E_OK)
            return rc;
        *st = (db_stmt_t){r->outbox_sql, out->params + at, RT_EMIT_PARAMS};
        at += RT_EMIT_PARAMS;
        out->nstmts++;
        out->nemits++;
    }
    return IB_E_OK;
}

/*
 * The route's statements with their parameters evaluated, then one outbox
 * insert per emit: they commit with the inbox row (for an HTTP route, in
 * its finishing transaction) or not at all.
 */
static ib_err_t bind_stmts(const rt_route_t *r, const sb_msg_t *msg, rt_binding_t *out,
                           ib_error_t *err)
{
    size_t total = 0, at = 0, nemits = rt_emits_count(r->emits);
    for (size_t s = 0; s < r->nstmts; s++)
        total += r->stmts[s].nparams;
    total += nemits * RT_EMIT_PARAMS;
    out->stmts = calloc(r->nstmts + nemits ? r->nstmts + nemits : 1, sizeof(*out->stmts));
    out->params = calloc(total ? total : 1, sizeof(*out->params));
    if (!out->stmts || !out->params)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    out->nstmts = r->nstmts;
    for (size_t s = 0; s < r->nstmts; s++) {
        out->stmts[s].sql = r->stmts[s].sql;
        out->stmts[s].params = out->params + at;
        out->stmts[s].nparams = r->stmts[s].nparams;
        for (size_t k = 0; k < r->stmts[s].nparams; k++) {
            ib_err_t rc = rt_src_eval(out, &r->stmts[s].params[k], msg, &out->params[at++], err);
            if (rc != IB_E_OK)
                return rc;
        }
    }
    ib_err_t rc = bind_emits(r, r->emits, msg, out, at, err);
    if (rc == IB_E_OK && out->nomem)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    return rc;
}

ib_err_t rt_route_bind(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                       rt_binding_t *out, ib_error_t *err)
{
    ib_err_t rc;
    memset(out, 0, sizeof(*out));
    out->traceparent = traceparent;
    /* An HTTP route's statements need the answer: rt_route_bind_finish. */
    if (!r->http && (rc = bind_stmts(r, msg, out, err)) != IB_E_OK)
        return rc;
    if (r->key.n && (rc = rt_tpl_render(&r->key, msg, out, NULL, false, KEY_MAX, "idempotency key",
                                        &out->idempotency_key, err)) != IB_E_OK)
        return rc;
    if (out->nomem)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    ib_error_clear(err);
    return IB_E_OK;
}

ib_err_t rt_route_bind_finish(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                              const fx_response_t *resp, rt_binding_t *out, ib_error_t *err)
{
    memset(out, 0, sizeof(*out));
    out->traceparent = traceparent;
    out->response = resp;
    ib_err_t rc = bind_stmts(r, msg, out, err);
    if (rc == IB_E_OK)
        ib_error_clear(err);
    return rc;
}

bool rt_route_rejects(const rt_route_t *r)
{
    return r->rejects != NULL;
}

ib_err_t rt_route_bind_rejection(const rt_route_t *r, const sb_msg_t *msg, const char *traceparent,
                                 const rt_failure_t *f, rt_binding_t *out, ib_error_t *err)
{
    size_t n = rt_emits_count(r->rejects);
    char error[RT_FAILURE_ERROR_MAX + 1];
    rt_failure_t bounded = *f;
    ib_err_t rc;

    memset(out, 0, sizeof(*out));
    out->traceparent = traceparent;
    if (f->error) { /* a driver's or a destination's text: well-formed UTF-8, bounded */
        ib_utf8_sanitize(error, sizeof(error), f->error);
        bounded.error = error;
    }
    out->failure = &bounded;
    out->stmts = calloc(n ? n : 1, sizeof(*out->stmts));
    out->params = calloc(n ? n * RT_EMIT_PARAMS : 1, sizeof(*out->params));
    if (!out->stmts || !out->params)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    else
        rc = bind_emits(r, r->rejects, msg, out, 0, err);
    if (rc == IB_E_OK && out->nomem)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    out->failure = NULL; /* bounded is gone after the return: every value is kept in out */
    if (rc == IB_E_OK)
        ib_error_clear(err);
    return rc;
}

/* Appends one value, typed and length-prefixed so that no two lists encode alike. */
static size_t hash_put(char *buf, const db_param_t *v)
{
    switch (v->type) {
    case DB_PARAM_TEXT: {
        size_t len = strlen(v->text ? v->text : "");
        size_t n = (size_t)sprintf(buf, "T%zu:", len);
        memcpy(buf + n, v->text ? v->text : "", len);
        return n + len;
    }
    case DB_PARAM_INT:
        return (size_t)sprintf(buf, "I%lld;", v->i);
    case DB_PARAM_FLOAT:
        return (size_t)sprintf(buf, "F%.17g;", v->f);
    default:
        buf[0] = 'N';
        return 1;
    }
}

void rt_route_payload_hash(const rt_route_t *r, const rt_binding_t *b, char hex[65])
{
    size_t n = 0, cap = 0, len = 0;
    char *buf;
    if (!r->hash_params)
        return;
    for (size_t s = 0; s < r->nstmts; s++)
        n += r->stmts[s].nparams;
    for (size_t k = 0; k < n; k++) /* a tag, a number of up to 32 characters and a separator */
        cap += 40 + (b->params[k].type == DB_PARAM_TEXT && b->params[k].text
                         ? strlen(b->params[k].text)
                         : 0);
    if (!(buf = malloc(cap + 1)))
        return; /* out of memory: the body's hash stays, the check is only stricter */
    for (size_t k = 0; k < n; k++)
        len += hash_put(buf + len, &b->params[k]);
    db_sha256_hex(buf, len, hex);
    free(buf);
}

const db_stmt_t *rt_binding_emits(const rt_binding_t *b, size_t *n)
{
    *n = b->nemits;
    return b->nemits ? b->stmts + (b->nstmts - b->nemits) : NULL;
}

bool rt_routes_set_outbox(rt_routes_t *routes, const char *table)
{
    char sql[1024];
    /* The insert's text is the same in every dialect. */
    if (db_outbox_sql_insert(DB_DIALECT_POSTGRESQL, table, sql, sizeof(sql)) != IB_E_OK)
        return false;
    free(routes->outbox_sql);
    routes->outbox_sql = strdup(sql);
    for (size_t i = 0; i < routes->n; i++)
        routes->v[i].outbox_sql = routes->outbox_sql;
    return routes->outbox_sql != NULL;
}

bool rt_routes_emit(const rt_routes_t *routes)
{
    for (size_t i = 0; i < routes->n; i++)
        if (routes->v[i].emits || routes->v[i].rejects)
            return true;
    return false;
}

bool rt_routes_have_http(const rt_routes_t *routes)
{
    for (size_t i = 0; i < routes->n; i++)
        if (routes->v[i].http)
            return true;
    return false;
}

bool rt_routes_have_cluster_limits(const rt_routes_t *routes)
{
    for (size_t i = 0; i < routes->n; i++)
        if (routes->v[i].http && rt_http_cluster_limits(routes->v[i].http))
            return true;
    return false;
}

const rt_claim_spec_t *rt_route_claim(const rt_route_t *r)
{
    return r->claim;
}

bool rt_routes_claim_auth(const rt_routes_t *routes, rt_claim_auth_t a)
{
    for (size_t i = 0; i < routes->n; i++)
        if (routes->v[i].claim && rt_claim_auth(routes->v[i].claim) == a)
            return true;
    return false;
}

const rt_http_spec_t *rt_route_http(const rt_route_t *r)
{
    return r->http;
}

bool rt_route_finish_reads_headers(const rt_route_t *r)
{
    for (size_t i = 0; r->http && i < r->nstmts; i++)
        for (size_t k = 0; k < r->stmts[i].nparams; k++)
            if (r->stmts[i].params[k].kind == SRC_RESPONSE_HEADER)
                return true;
    return false;
}

ib_err_t rt_routes_check_unique(const rt_routes_t *routes, db_conn_t *dbc, ib_error_t *err)
{
    for (size_t i = 0; i < routes->n; i++) {
        size_t k;
        json_t *v;
        if (!routes->v[i].constraints)
            continue;
        json_array_foreach(routes->v[i].constraints, k, v)
        {
            if (db_migrate_check_unique(dbc, json_string_value(v), err) != IB_E_OK) {
                ib_error_prefix(err, "routes[%zu].constraints[%zu]", i, k);
                return err->code;
            }
        }
    }
    return IB_E_OK;
}

int rt_routes_warn(const rt_routes_t *routes, FILE *errs)
{
    int n = 0;
    for (size_t i = 0; i < routes->n; i++) {
        if (!routes->v[i].http || routes->v[i].key.n)
            continue;
        n++;
        if (errs)
            fprintf(errs,
                    "config: warning: routes[%zu].idempotency_key: not set, so this HTTP route "
                    "keys its call on the message id: a producer that re-sends the operation "
                    "under a new message id makes a second call; set a key built from the "
                    "operation (e.g. \"charge:{$.orderId}\")\n",
                    i);
    }
    return n;
}

int rt_routes_check_limits(const rt_routes_t *routes, long long renewal_s, FILE *errs)
{
    ib_problems_t p = {.errs = errs};
    for (size_t i = 0; i < routes->n; i++) {
        const rt_http_spec_t *h = routes->v[i].http;
        if (!h)
            continue;
        snprintf(p.prefix, sizeof(p.prefix), "routes[%zu]", i);
        if (renewal_s > 0 && rt_http_lease_s(h) >= renewal_s)
            ib_problem(&p, "http.lease_s",
                       "(%ld s) must be shorter than servicebus.max_auto_lock_renewal_s (%lld s): "
                       "the broker lock must outlive the claim",
                       rt_http_lease_s(h), renewal_s);
        else if (renewal_s == 0)
            ib_problem(&p, "http.lease_s",
                       "HTTP routes need lock renewal (servicebus.max_auto_lock_renewal_s > 0)");
    }
    return p.n;
}

int rt_routes_check_lock(const rt_routes_t *routes, long long lock_ms, FILE *errs)
{
    int n = 0;
    for (size_t i = 0; lock_ms > 0 && i < routes->n; i++) {
        const rt_http_spec_t *h = routes->v[i].http;
        if (!h || rt_http_lease_s(h) * 1000LL <= lock_ms)
            continue;
        n++;
        if (errs)
            fprintf(errs,
                    "config: warning: routes[%zu].http.lease_s: %ld s is longer than the "
                    "entity's LockDuration %lld ms (read from Service Bus): after a crash "
                    "mid-call the message comes back while its claim is still leased, and each "
                    "copy abandoned meanwhile costs a delivery\n",
                    i, rt_http_lease_s(h), lock_ms);
    }
    return n;
}

void rt_binding_free(rt_binding_t *b)
{
    for (size_t i = 0; i < b->nstrings; i++)
        free(b->strings[i]);
    free(b->strings);
    free(b->stmts);
    free(b->params);
    json_decref(b->body_json);
    json_decref(b->response_json);
    memset(b, 0, sizeof(*b));
}
