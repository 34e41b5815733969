/*
 * rt_http.c - the "http" section of a route: compiled once at start
 * (every field checked, unknown fields refused, secrets read from the
 * environment), then bound per message into the request to send.
 *
 *   "http": {"method": "POST", "url": "https://h/charges", "body": "body",
 *            "headers": {"Content-Type": "application/json",
 *                        "Authorization": {"env": "PAYMENTS_TOKEN"}},
 *            "idempotency_header": "Idempotency-Key", "idempotent": true,
 *            "timeout_ms": 10000, "lease_s": 60, "remote_id": "$.id",
 *            "ca_file": "/etc/ssl/payments-ca.pem",
 *            "reconcile": {"method": "GET", "url": "https://h/charges?key={key}"}}
 *
 * A secret's value is registered with the logger's mask and kept only in
 * the compiled header; the config (and so --print-config) holds its
 * variable's name.
 *
 * thread: compile on main; bind on any thread (the spec is read-only).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_dest.h"
#include "ib_log.h"
#include "rt_int.h"
#include "rt_keys.h"

#define URL_MAX 4096
#define HEADER_MAX 4096
#define SECRET_MIN 4 /* shorter values are not masked (they would mask everything) */

typedef struct http_header {
    char *name;
    template_t value; /* when not a secret */
    char *secret;     /* the value from {"env": NAME} */
} http_header_t;

struct rt_http_spec {
    char *method;
    template_t url;
    bool has_body;
    src_t body;
    http_header_t *headers;
    size_t nheaders;
    bool has_content_type;
    char *idem_header;
    bool idempotent;
    long timeout_ms;
    long lease_s;
    bool has_remote_id;
    src_t remote_id;
    char *ca_file;
    bool has_reconcile;
    char *rec_method;
    template_t rec_url;
    bool has_found;
    src_t found; /* reconcile.found: a $.path that must hold something */
    long *applied;  /* http.applied_statuses */
    size_t napplied;
    char **hosts; /* http.allowed_hosts: "host" or "host:port", lower case */
    size_t nhosts;
    double rate_per_s;
    long max_concurrent;
    bool cluster; /* limit_scope "cluster" */
    long max_retry_after_s;
};

static bool method_valid(const char *m)
{
    static const char *const ok[] = {"GET", "POST", "PUT", "PATCH", "DELETE", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(m, ok[i]) == 0)
            return true;
    return false;
}

/* A header name is an HTTP token. */
static bool token_valid(const char *s)
{
    if (!*s)
        return false;
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("!#$%&'*+-.^_`|~", *c))
            return false;
    return true;
}

static bool url_template_ok(const char *t)
{
    return strncmp(t, "https://", 8) == 0 || strncmp(t, "http://", 7) == 0;
}

/*
 * Whether the scheme, host and port of URL template t are literal: the
 * first '{' comes after the authority ends (at '/', '?' or '#').
 */
static bool authority_literal(const char *t)
{
    const char *a = strstr(t, "://") + 3;
    size_t alen = strcspn(a, "/?#");
    return memchr(a, '{', alen) == NULL && alen > 0;
}

/*
 * A URL template. Where a secret goes is the configuration's choice: with
 * no http.allowed_hosts, the scheme, host and port must be literal
 * (templates only in the path and query); with it, a templated host is
 * checked against the list on every call (rt_route_bind_http).
 */
static void compile_url(const json_t *v, const char *field, template_t *tpl, bool hosts, bool *nj,
                        ib_problems_t *p)
{
    if (!json_is_string(v) || !url_template_ok(json_string_value(v))) {
        ib_problem(p, field, "must be a string starting with https:// or http://");
        return;
    }
    if (!hosts && !authority_literal(json_string_value(v)))
        ib_problem(p, field,
                   "the scheme, host and port must be written out (templates only in the path "
                   "and query), or the hosts a message may choose listed in http.allowed_hosts: "
                   "a message must not choose where the route's headers go");
    rt_tpl_compile(json_string_value(v), field, SRC_ALLOW_KEY, tpl, nj, p);
}

static void compile_headers(rt_http_spec_t *h, const json_t *hs, bool *nj, ib_problems_t *p)
{
    const char *name;
    json_t *v;
    if (!json_is_object(hs)) {
        ib_problem(p, "http.headers", "must be an object of name: value");
        return;
    }
    h->headers = calloc(json_object_size(hs) + 1, sizeof(*h->headers));
    json_object_foreach((json_t *)hs, name, v)
    {
        char field[160];
        snprintf(field, sizeof field, "http.headers.%s", name);
        if (!token_valid(name)) {
            ib_problem(p, field, "is not a valid header name");
            continue;
        }
        http_header_t *hd = &h->headers[h->nheaders];
        if (json_is_string(v)) {
            rt_tpl_compile(json_string_value(v), field, SRC_ALLOW_KEY, &hd->value, nj, p);
        } else if (json_is_object(v) && json_object_size(v) == 1 &&
                   json_is_string(json_object_get(v, "env"))) {
            const char *var = json_string_value(json_object_get(v, "env"));
            const char *val = getenv(var);
            if (!val || !*val) {
                ib_problem(p, field, "environment variable %s is not set", var);
                continue;
            }
            if (strchr(val, '\r') || strchr(val, '\n')) {
                ib_problem(p, field, "environment variable %s holds a line break", var);
                continue;
            }
            hd->secret = strdup(val);
            if (strlen(val) >= SECRET_MIN)
                ib_log_add_secret(val);
        } else {
            ib_problem(p, field, "must be a string template or {\"env\": NAME}");
            continue;
        }
        if (strcasecmp(name, "Content-Type") == 0)
            h->has_content_type = true;
        hd->name = strdup(name);
        h->nheaders++;
    }
}

static void compile_reconcile(rt_http_spec_t *h, const json_t *rc, bool *nj, ib_problems_t *p)
{
    json_t *v;
    if (!json_is_object(rc)) {
        ib_problem(p, "http.reconcile", "must be an object with method and url");
        return;
    }
    rt_keys_check(rc, RT_SCOPE_RECONCILE, "http.reconcile", p);
    if ((v = json_object_get(rc, "found"))) {
        if (!json_is_string(v) || json_string_value(v)[0] != '$' ||
            !rt_src_compile_text(json_string_value(v), 0, &h->found))
            ib_problem(p, "http.reconcile.found",
                       "must be a JSON path into the lookup's answer ($[0].id)");
        else
            h->has_found = true;
    }
    json_t *m = json_object_get(rc, "method");
    h->rec_method = strdup(m && json_is_string(m) ? json_string_value(m) : "GET");
    if (m && (!json_is_string(m) || !method_valid(h->rec_method)))
        ib_problem(p, "http.reconcile.method", "must be GET, POST, PUT, PATCH or DELETE");
    if (!json_object_get(rc, "url"))
        ib_problem(p, "http.reconcile.url", "missing");
    else
        compile_url(json_object_get(rc, "url"), "http.reconcile.url", &h->rec_url, h->nhosts > 0,
                    nj, p);
    h->has_reconcile = true;
}

static void compile_scalars(rt_http_spec_t *h, const json_t *o, ib_problems_t *p)
{
    json_t *v;
    h->method =
        strdup(json_is_string(v = json_object_get(o, "method")) ? json_string_value(v) : "POST");
    if (v && (!json_is_string(v) || !method_valid(h->method)))
        ib_problem(p, "http.method", "must be GET, POST, PUT, PATCH or DELETE");
    if ((v = json_object_get(o, "idempotency_header"))) {
        if (!json_is_string(v) || !token_valid(json_string_value(v)))
            ib_problem(p, "http.idempotency_header", "must be a header name");
        else
            h->idem_header = strdup(json_string_value(v));
    }
    if ((v = json_object_get(o, "idempotent")) && !json_is_boolean(v))
        ib_problem(p, "http.idempotent", "must be true or false");
    h->idempotent = v && json_is_true(v);
    h->timeout_ms = rt_key_int(o, RT_SCOPE_HTTP, "timeout_ms", "http.timeout_ms", p);
    h->lease_s = rt_key_int(o, RT_SCOPE_HTTP, "lease_s", "http.lease_s", p);
    if (h->lease_s * 1000L <= h->timeout_ms)
        ib_problem(p, "http.lease_s",
                   "(%ld s) must be longer than http.timeout_ms (%ld ms): the lease must outlast "
                   "a call",
                   h->lease_s, h->timeout_ms);
    if ((v = json_object_get(o, "ca_file"))) {
        if (!json_is_string(v) || !*json_string_value(v))
            ib_problem(p, "http.ca_file", "must be a file path");
        else
            h->ca_file = strdup(json_string_value(v));
    }
}

static void compile_statuses(rt_http_spec_t *h, const json_t *v, ib_problems_t *p)
{
    size_t i;
    json_t *e;
    if (!json_is_array(v)) {
        ib_problem(p, "http.applied_statuses", "must be an array of HTTP statuses ([409])");
        return;
    }
    h->applied = calloc(json_array_size(v) + 1, sizeof(*h->applied));
    json_array_foreach(v, i, e)
    {
        long st = json_is_integer(e) ? (long)json_integer_value(e) : 0;
        if (st < 300 || st > 499 || st == 408 || st == 429) {
            ib_problem(p, "http.applied_statuses",
                       "each must be a 3xx or 4xx status other than 408 and 429 (2xx is applied "
                       "already; 408, 429 and 5xx are transient)");
            continue;
        }
        h->applied[h->napplied++] = st;
    }
}

static void compile_hosts(rt_http_spec_t *h, const json_t *v, ib_problems_t *p)
{
    size_t i;
    json_t *e;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        ib_problem(p, "http.allowed_hosts", "must be a non-empty array of host names");
        return;
    }
    h->hosts = calloc(json_array_size(v) + 1, sizeof(*h->hosts));
    json_array_foreach(v, i, e)
    {
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        if (!*t || strcspn(t, "/?#@{} ") != strlen(t)) {
            ib_problem(p, "http.allowed_hosts", "each must be a host or host:port");
            continue;
        }
        char *c = strdup(t);
        for (char *q = c; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        h->hosts[h->nhosts++] = c;
    }
}

static void compile_limits(rt_http_spec_t *h, const json_t *o, ib_problems_t *p)
{
    json_t *v;
    if ((v = json_object_get(o, "rate_per_s"))) {
        if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 100000)
            ib_problem(p, "http.rate_per_s", "must be a number above 0, at most 100000");
        else
            h->rate_per_s = json_number_value(v);
    }
    h->max_concurrent = rt_key_int(o, RT_SCOPE_HTTP, "max_concurrent", "http.max_concurrent", p);
    if ((v = json_object_get(o, "limit_scope"))) {
        const char *sc = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(sc, "cluster") == 0)
            h->cluster = true;
        else if (strcmp(sc, "process") != 0)
            ib_problem(p, "http.limit_scope", "must be \"process\" or \"cluster\"");
    }
    h->max_retry_after_s =
        rt_key_int(o, RT_SCOPE_HTTP, "max_retry_after_s", "http.max_retry_after_s", p);
    if ((v = json_object_get(o, "applied_statuses")))
        compile_statuses(h, v, p);
    if ((v = json_object_get(o, "allowed_hosts")))
        compile_hosts(h, v, p);
}

rt_http_spec_t *rt_http_compile(const json_t *o, bool has_key, ib_problems_t *p)
{
    json_t *v;
    bool nj = false;
    if (!json_is_object(o)) {
        ib_problem(p, "http", "must be an object");
        return NULL;
    }
    rt_http_spec_t *h = calloc(1, sizeof(*h));
    rt_keys_check(o, RT_SCOPE_HTTP, "http", p);
    compile_scalars(h, o, p);
    compile_limits(h, o, p);
    if (!json_object_get(o, "url"))
        ib_problem(p, "http.url", "missing");
    else
        compile_url(json_object_get(o, "url"), "http.url", &h->url, h->nhosts > 0, &nj, p);
    if ((v = json_object_get(o, "body"))) {
        if (!rt_src_compile_param(v, 0, &h->body))
            ib_problem(p, "http.body",
                       "must be body, a $.path, a message field or {\"const\": ...}");
        else
            h->has_body = true;
    }
    if ((v = json_object_get(o, "headers")))
        compile_headers(h, v, &nj, p);
    if ((v = json_object_get(o, "remote_id"))) {
        if (!json_is_string(v) || json_string_value(v)[0] != '$' ||
            !rt_src_compile_text(json_string_value(v), 0, &h->remote_id))
            ib_problem(p, "http.remote_id", "must be a JSON path into the response ($.id)");
        else
            h->has_remote_id = true;
    }
    if ((v = json_object_get(o, "reconcile")))
        compile_reconcile(h, v, &nj, p);
    if (h->idempotent && !h->idem_header)
        ib_problem(p, "http.idempotent",
                   "true needs idempotency_header (the destination can only honour a key it is "
                   "sent)");
    (void)has_key;
    return h;
}

void rt_http_free(rt_http_spec_t *h)
{
    if (!h)
        return;
    free(h->method);
    rt_tpl_free(&h->url);
    rt_src_free(&h->body);
    for (size_t i = 0; i < h->nheaders; i++) {
        free(h->headers[i].name);
        rt_tpl_free(&h->headers[i].value);
        free(h->headers[i].secret);
    }
    free(h->headers);
    free(h->idem_header);
    rt_src_free(&h->remote_id);
    free(h->ca_file);
    free(h->rec_method);
    rt_tpl_free(&h->rec_url);
    rt_src_free(&h->found);
    free(h->applied);
    for (size_t i = 0; i < h->nhosts; i++)
        free(h->hosts[i]);
    free(h->hosts);
    free(h);
}

const char *rt_http_method(const rt_http_spec_t *h)
{
    return h->method;
}

const char *rt_http_reconcile_method(const rt_http_spec_t *h)
{
    return h->rec_method ? h->rec_method : "GET";
}

long rt_http_timeout_ms(const rt_http_spec_t *h)
{
    return h->timeout_ms;
}

long rt_http_lease_s(const rt_http_spec_t *h)
{
    return h->lease_s;
}

bool rt_http_idempotent(const rt_http_spec_t *h)
{
    return h->idempotent;
}

bool rt_http_has_reconcile(const rt_http_spec_t *h)
{
    return h->has_reconcile;
}

const char *rt_http_ca_file(const rt_http_spec_t *h)
{
    return h->ca_file;
}

double rt_http_rate_per_s(const rt_http_spec_t *h)
{
    return h->rate_per_s;
}

long rt_http_max_concurrent(const rt_http_spec_t *h)
{
    return h->max_concurrent;
}

bool rt_http_cluster_limits(const rt_http_spec_t *h)
{
    return h->cluster;
}

long rt_http_max_retry_after_s(const rt_http_spec_t *h)
{
    return h->max_retry_after_s;
}

bool rt_http_applied_status(const rt_http_spec_t *h, long status)
{
    for (size_t i = 0; i < h->napplied; i++)
        if (h->applied[i] == status)
            return true;
    return false;
}

/* The value at path s in resp's body (a new reference), NULL when absent. */
static json_t *response_at(const src_t *s, const fx_response_t *resp)
{
    json_t *j = json_loadb(resp->body, resp->body_len, JSON_DECODE_ANY, NULL);
    const json_t *v = j;
    for (size_t i = 0; v && i < s->nsteps; i++)
        v = s->steps[i].name ? json_object_get(v, s->steps[i].name)
                             : json_array_get(v, s->steps[i].index);
    json_t *out = v ? json_incref((json_t *)v) : NULL;
    json_decref(j);
    return out;
}

bool rt_http_reconcile_found(const rt_http_spec_t *h, const fx_response_t *resp)
{
    if (!h->has_found)
        return true;
    json_t *v = response_at(&h->found, resp);
    bool found = v && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)) &&
                 !(json_is_array(v) && json_array_size(v) == 0) &&
                 !(json_is_object(v) && json_object_size(v) == 0);
    json_decref(v);
    return found;
}

/* Whether allowed_hosts entry e names a port ("host:port", "[v6]:port"). */
static bool entry_has_port(const char *e)
{
    const char *colon = strrchr(e, ':');
    return colon && !strchr(colon, ']') && (e[0] != '[' || colon > strchr(e, ']'));
}

/*
 * Whether a bound URL goes where the configuration says: its destination
 * parses, and with http.allowed_hosts its host and port are listed: a
 * "host:port" entry as written, a bare "host" at the scheme's default port.
 */
static bool host_allowed(const rt_http_spec_t *h, const char *url, char *dest, size_t size)
{
    if (!fx_dest_key(url, dest, size)) {
        dest[0] = '\0'; /* a literal host fx_dest_key cannot name: called, not governed */
        return h->nhosts == 0;
    }
    if (h->nhosts == 0)
        return true;
    const char *hp = strstr(dest, "://") + 3;
    const char *colon = strrchr(hp, ':');
    size_t hlen = (size_t)(colon - hp);
    bool default_port = strcmp(colon + 1, strncmp(dest, "https", 5) == 0 ? "443" : "80") == 0;
    for (size_t i = 0; i < h->nhosts; i++)
        if (entry_has_port(h->hosts[i]) ? strcmp(h->hosts[i], hp) == 0
                                        : default_port && strlen(h->hosts[i]) == hlen &&
                                              strncmp(h->hosts[i], hp, hlen) == 0)
            return true;
    return false;
}

/* ---- bind -------------------------------------------------------------- */

static ib_err_t add_header(rt_http_call_t *c, rt_binding_t *b, const char *name, const char *value,
                           ib_error_t *err)
{
    if (strchr(value, '\r') || strchr(value, '\n'))
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT,
                            "header %s would hold a line break", name);
    c->headers[c->nheaders].name = name;
    c->headers[c->nheaders].value = rt_binding_keep(b, strdup(value));
    c->nheaders++;
    return IB_E_OK;
}

/* The body as bytes: the message body as is, a JSON value serialised, or text. */
static ib_err_t bind_body(const rt_http_spec_t *h, const sb_msg_t *msg, rt_binding_t *b,
                          rt_http_call_t *c, ib_error_t *err)
{
    char num[64];
    char *text = NULL;
    db_param_t v;
    if (!h->has_body)
        return IB_E_OK;
    switch (h->body.kind) {
    case SRC_BODY:
        c->body = msg->body_len ? (const char *)msg->body : "";
        c->body_len = msg->body_len;
        return IB_E_OK;
    case SRC_JSON: {
        const json_t *j = rt_src_json(b, &h->body, msg, err);
        if (!j)
            return err->code;
        text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        break;
    }
    case SRC_CONST:
        text = json_is_string(h->body.constant)
                   ? strdup(json_string_value(h->body.constant))
                   : json_dumps(h->body.constant, JSON_COMPACT | JSON_ENCODE_ANY);
        break;
    default: {
        ib_err_t rc = rt_src_eval(b, &h->body, msg, &v, err);
        if (rc != IB_E_OK)
            return rc;
        if (v.type == DB_PARAM_INT)
            snprintf(num, sizeof num, "%lld", v.i);
        else if (v.type == DB_PARAM_FLOAT)
            snprintf(num, sizeof num, "%.17g", v.f);
        text = strdup(v.type == DB_PARAM_TEXT ? v.text : v.type == DB_PARAM_NULL ? "" : num);
    }
    }
    if (!(c->body = rt_binding_keep(b, text)))
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    c->body_len = strlen(c->body);
    return IB_E_OK;
}

/* scheme://host/path of url (no query), for logs and dead-letter descriptions. */
static char *redact_url(const char *url)
{
    size_t n = strcspn(url, "?#");
    return strndup(url, n);
}

ib_err_t rt_route_bind_http(const rt_route_t *r, const sb_msg_t *msg, const char *key,
                            const char *traceparent, rt_http_call_t *c, ib_error_t *err)
{
    const rt_http_spec_t *h = rt_route_http(r);
    rt_binding_t *b = &c->b;
    ib_err_t rc;
    memset(c, 0, sizeof(*c));
    b->traceparent = traceparent;
    c->headers = calloc(h->nheaders + 4, sizeof(*c->headers));
    if (!c->headers)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    if ((rc = rt_tpl_render(&h->url, msg, b, key, true, URL_MAX, "http.url", &c->url, err)) !=
        IB_E_OK)
        return rc;
    if (h->has_reconcile &&
        (rc = rt_tpl_render(&h->rec_url, msg, b, key, true, URL_MAX, "http.reconcile.url",
                            &c->reconcile_url, err)) != IB_E_OK)
        return rc;
    c->url_redacted = rt_binding_keep(b, redact_url(c->url));
    if (c->reconcile_url)
        c->reconcile_url_redacted = rt_binding_keep(b, redact_url(c->reconcile_url));
    if (!host_allowed(h, c->url, c->dest, sizeof c->dest) ||
        (c->reconcile_url && !host_allowed(h, c->reconcile_url, (char[FX_DEST_KEY_MAX]){0},
                                           FX_DEST_KEY_MAX)))
        return ib_error_set(err, IB_E_NOT_ALLOWED, IB_CLASS_PERMANENT,
                            "http.url: host of '%s' is not in http.allowed_hosts", c->url_redacted);
    if ((rc = bind_body(h, msg, b, c, err)) != IB_E_OK)
        return rc;
    for (size_t i = 0; i < h->nheaders; i++) {
        char *v = h->headers[i].secret;
        if (!v && (rc = rt_tpl_render(&h->headers[i].value, msg, b, key, false, HEADER_MAX,
                                      h->headers[i].name, &v, err)) != IB_E_OK)
            return rc;
        if ((rc = add_header(c, b, h->headers[i].name, v, err)) != IB_E_OK)
            return rc;
    }
    if (h->has_body && !h->has_content_type)
        add_header(c, b, "Content-Type",
                   msg->content_type && *msg->content_type ? msg->content_type : "application/json",
                   err);
    if (h->idem_header && (rc = add_header(c, b, h->idem_header, key, err)) != IB_E_OK)
        return rc;
    if (b->traceparent)
        add_header(c, b, "traceparent", b->traceparent, err);
    ib_error_clear(err);
    return IB_E_OK;
}

void rt_http_call_free(rt_http_call_t *c)
{
    rt_binding_free(&c->b);
    free(c->headers);
    memset(c, 0, sizeof(*c));
}

/*
 * The remote id read without building a tree (rt_json_find) from an
 * answer rt_json_checked accepts, as jansson would read it: a string, or
 * an integer printed back; any other value, or a missing one, none. False
 * leaves it to jansson (an answer the check does not prove, an integer
 * strtoll cannot hold).
 */
static bool remote_id_fast(const src_t *s, const fx_response_t *resp, char *buf, size_t size)
{
    rt_json_span_t v;
    if (!rt_json_checked(resp->body, resp->body_len))
        return false;
    if (!rt_json_find(resp->body, resp->body_len, s->steps, s->nsteps, &v))
        return true;
    if (v.kind == RT_JV_STRING && !v.escaped) {
        snprintf(buf, size, "%.*s", (int)v.len, v.at);
    } else if (v.kind == RT_JV_STRING) {
        char *t = rt_json_string(&v);
        if (!t)
            return false;
        snprintf(buf, size, "%s", t);
        free(t);
    } else if (v.kind == RT_JV_INTEGER) {
        char num[64]; /* rt_json_checked takes numbers shorter than this */
        memcpy(num, v.at, v.len);
        num[v.len] = '\0';
        errno = 0;
        long long i = strtoll(num, NULL, 10);
        if (errno == ERANGE)
            return false;
        snprintf(buf, size, "%lld", i);
    }
    return true;
}

void rt_route_remote_id(const rt_route_t *r, const fx_response_t *resp, char *buf, size_t size)
{
    const rt_http_spec_t *h = rt_route_http(r);
    buf[0] = '\0';
    if (!h || !h->has_remote_id)
        return;
    if (remote_id_fast(&h->remote_id, resp, buf, size))
        return;
    buf[0] = '\0';
    json_t *v = response_at(&h->remote_id, resp);
    if (v && json_is_string(v))
        snprintf(buf, size, "%s", json_string_value(v));
    else if (v && json_is_integer(v))
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
    json_decref(v);
}

/* {"a": {"b": remote_id}} for the path $.a.b; NULL when the path has an index. */
static json_t *stored_body(const src_t *path, const char *remote_id)
{
    json_t *v = json_string(remote_id);
    for (size_t i = path->nsteps; v && i-- > 0;) {
        json_t *o = path->steps[i].name ? json_object() : NULL;
        if (!o || json_object_set_new(o, path->steps[i].name, v) != 0) {
            json_decref(o ? o : v);
            return NULL;
        }
        v = o;
    }
    return v;
}

ib_err_t rt_route_stored_answer(const rt_route_t *r, long status, const char *remote_id,
                                fx_response_t *resp, ib_error_t *err)
{
    const rt_http_spec_t *h = rt_route_http(r);
    json_t *body = NULL;
    memset(resp, 0, sizeof(*resp));
    resp->cls = FX_APPLIED;
    resp->status = status;
    resp->retry_after_ms = -1;
    resp->sent = true;
    if (h && h->has_remote_id && remote_id && *remote_id)
        body = stored_body(&h->remote_id, remote_id);
    resp->body = body ? json_dumps(body, JSON_COMPACT) : strdup("");
    json_decref(body);
    if (!resp->body)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    resp->body_len = strlen(resp->body);
    return IB_E_OK;
}

void rt_route_scrub(const rt_route_t *r, char *text)
{
    const rt_http_spec_t *h = rt_route_http(r);
    for (size_t i = 0; h && i < h->nheaders; i++) {
        const char *s = h->headers[i].secret;
        size_t n = s ? strlen(s) : 0;
        char *at;
        if (n < SECRET_MIN)
            continue;
        while ((at = strstr(text, s)) != NULL) {
            memmove(at + 3, at + n, strlen(at + n) + 1);
            memcpy(at, "***", 3);
        }
    }
}
