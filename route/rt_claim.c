/*
 * rt_claim.c - a route's "claim_check" section: the body is a blob in
 * Azure Blob Storage that the message points at. Compiled once at start
 * (every key checked, the account key read from the environment), then
 * bound per message into the blob's URL (its host checked against
 * claim_check.allowed_hosts) and the SHA-256 / ETag the message expects.
 *
 *   "claim_check": {"url": "{$.data.url}", "allowed_hosts": ["acct.blob.core.windows.net"],
 *                   "max_bytes": 67108864, "sha256": "{prop:blob-sha256}",
 *                   "etag": "{$.data.eTag}", "auth": "shared_key", "account": "acct",
 *                   "account_key": {"env": "STORAGE_KEY"}}
 *
 * thread: compile on main; bind on any thread (the spec is read-only).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "rt_int.h"
#include "rt_keys.h"

#define CLAIM_URL_MAX 4096
#define CLAIM_VALUE_MAX 256
#define SECRET_MIN 4

struct rt_claim_spec {
    template_t url;
    bool has_sha, has_etag;
    template_t sha256, etag;
    char **hosts; /* lower case, "host" or "host:port" */
    size_t nhosts;
    long max_bytes;
    long timeout_ms;
    rt_claim_auth_t auth;
    char *account;
    char *account_key; /* shared_key: the base64 key from {"env": NAME} */
    char *ca_file;
};

static void compile_hosts(rt_claim_spec_t *c, const json_t *v, ib_problems_t *p)
{
    size_t i;
    json_t *e;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        ib_problem(p, "claim_check.allowed_hosts",
                   "required: a non-empty array of the storage hosts a message may name "
                   "(a message must never choose where inboxd's credentials go)");
        return;
    }
    c->hosts = calloc(json_array_size(v) + 1, sizeof(*c->hosts));
    json_array_foreach(v, i, e)
    {
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        if (!*t || strcspn(t, "/?#@{} ") != strlen(t)) {
            ib_problem(p, "claim_check.allowed_hosts", "each must be a host or host:port");
            continue;
        }
        char *h = strdup(t);
        for (char *q = h; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        c->hosts[c->nhosts++] = h;
    }
}

static void compile_auth(rt_claim_spec_t *c, const json_t *o, ib_problems_t *p)
{
    const json_t *a = json_object_get(o, "auth");
    const char *t = a ? (json_is_string(a) ? json_string_value(a) : "") : "sas";
    const json_t *k = json_object_get(o, "account_key");
    const json_t *acct = json_object_get(o, "account");
    if (strcmp(t, "sas") == 0)
        c->auth = RT_CLAIM_SAS;
    else if (strcmp(t, "shared_key") == 0)
        c->auth = RT_CLAIM_SHARED_KEY;
    else if (strcmp(t, "workload_identity") == 0)
        c->auth = RT_CLAIM_WORKLOAD_IDENTITY;
    else
        ib_problem(p, "claim_check.auth",
                   "must be \"sas\", \"shared_key\" or \"workload_identity\"");
    if (c->auth != RT_CLAIM_SHARED_KEY) {
        if (k || acct)
            ib_problem(p, k ? "claim_check.account_key" : "claim_check.account",
                       "only with auth \"shared_key\"");
        return;
    }
    if (!json_is_string(acct) || !*json_string_value(acct))
        ib_problem(p, "claim_check.account", "auth \"shared_key\" needs the storage account's name");
    else
        c->account = strdup(json_string_value(acct));
    if (!json_is_object(k) || json_object_size(k) != 1 ||
        !json_is_string(json_object_get(k, "env"))) {
        ib_problem(p, "claim_check.account_key", "auth \"shared_key\" needs {\"env\": NAME}");
        return;
    }
    const char *var = json_string_value(json_object_get(k, "env"));
    const char *val = getenv(var);
    if (!val || !*val) {
        ib_problem(p, "claim_check.account_key", "environment variable %s is not set", var);
        return;
    }
    c->account_key = strdup(val);
    if (strlen(val) >= SECRET_MIN)
        ib_log_add_secret(val);
}

static void compile_template(const json_t *o, const char *key, const char *field, template_t *tpl,
                             bool *has, bool *nj, ib_problems_t *p)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return;
    if (!json_is_string(v) || !*json_string_value(v)) {
        ib_problem(p, field, "must be a template string");
        return;
    }
    rt_tpl_compile(json_string_value(v), field, 0, tpl, nj, p);
    *has = true;
}

rt_claim_spec_t *rt_claim_compile(const json_t *o, bool *nj, ib_problems_t *p)
{
    bool has_url = false;
    const json_t *v;
    if (!json_is_object(o)) {
        ib_problem(p, "claim_check", "must be an object");
        return NULL;
    }
    rt_claim_spec_t *c = calloc(1, sizeof(*c));
    if (!c) {
        ib_problem(p, "claim_check", "out of memory");
        return NULL;
    }
    rt_keys_check(o, RT_SCOPE_CLAIM, "claim_check", p);
    if (!json_object_get(o, "url"))
        ib_problem(p, "claim_check.url", "missing (a template such as \"{$.data.url}\")");
    compile_template(o, "url", "claim_check.url", &c->url, &has_url, nj, p);
    compile_template(o, "sha256", "claim_check.sha256", &c->sha256, &c->has_sha, nj, p);
    compile_template(o, "etag", "claim_check.etag", &c->etag, &c->has_etag, nj, p);
    compile_hosts(c, json_object_get(o, "allowed_hosts"), p);
    c->max_bytes = rt_key_int(o, RT_SCOPE_CLAIM, "max_bytes", "claim_check.max_bytes", p);
    c->timeout_ms = rt_key_int(o, RT_SCOPE_CLAIM, "timeout_ms", "claim_check.timeout_ms", p);
    if ((v = json_object_get(o, "ca_file"))) {
        if (!json_is_string(v) || !*json_string_value(v))
            ib_problem(p, "claim_check.ca_file", "must be a path");
        else
            c->ca_file = strdup(json_string_value(v));
    }
    compile_auth(c, o, p);
    return c;
}

void rt_claim_free(rt_claim_spec_t *c)
{
    if (!c)
        return;
    rt_tpl_free(&c->url);
    rt_tpl_free(&c->sha256);
    rt_tpl_free(&c->etag);
    for (size_t i = 0; i < c->nhosts; i++)
        free(c->hosts[i]);
    free(c->hosts);
    free(c->account);
    free(c->account_key);
    free(c->ca_file);
    free(c);
}

long rt_claim_max_bytes(const rt_claim_spec_t *c) { return c->max_bytes; }
long rt_claim_timeout_ms(const rt_claim_spec_t *c) { return c->timeout_ms; }
rt_claim_auth_t rt_claim_auth(const rt_claim_spec_t *c) { return c->auth; }
const char *rt_claim_account(const rt_claim_spec_t *c) { return c->account; }
const char *rt_claim_account_key(const rt_claim_spec_t *c) { return c->account_key; }
const char *rt_claim_ca_file(const rt_claim_spec_t *c) { return c->ca_file; }

/* ---- bind -------------------------------------------------------------- */

/*
 * Whether url is an http(s) URL without userinfo whose host (and port) is
 * listed: a "host:port" entry as written, a bare "host" at the scheme's
 * default port. dest gets fx_dest_key's key.
 */
static bool host_allowed(const rt_claim_spec_t *c, const char *url, char *dest, size_t size)
{
    if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
        return false;
    const char *a = strstr(url, "://") + 3;
    size_t alen = strcspn(a, "/?#");
    if (memchr(a, '@', alen) || memchr(a, '%', alen) || memchr(a, '\\', alen) ||
        !fx_dest_key(url, dest, size))
        return false;
    const char *hp = strstr(dest, "://") + 3;
    const char *colon = strrchr(hp, ':');
    size_t hlen = (size_t)(colon - hp);
    bool default_port = strcmp(colon + 1, strncmp(dest, "https", 5) == 0 ? "443" : "80") == 0;
    for (size_t i = 0; i < c->nhosts; i++) {
        const char *e = c->hosts[i];
        const char *ec = strrchr(e, ':');
        bool has_port = ec && !strchr(ec, ']') && (e[0] != '[' || ec > strchr(e, ']'));
        if (has_port ? strcmp(e, hp) == 0
                     : default_port && strlen(e) == hlen && strncmp(e, hp, hlen) == 0)
            return true;
    }
    return false;
}

/* A URL's bytes: printable ASCII only (a message must not smuggle a line into the request). */
static bool url_chars_ok(const char *u)
{
    for (const unsigned char *q = (const unsigned char *)u; *q; q++)
        if (*q <= 0x20 || *q >= 0x7f)
            return false;
    return true;
}

/*
 * An expectation the message may carry (sha256, etag): NULL when the route
 * has none or the message's source is absent (nothing to check then).
 */
static ib_err_t optional(const template_t *tpl, bool has, const sb_msg_t *msg, rt_binding_t *b,
                         const char *what, char **out, ib_error_t *err)
{
    *out = NULL;
    if (!has)
        return IB_E_OK;
    ib_err_t rc = rt_tpl_render(tpl, msg, b, NULL, false, CLAIM_VALUE_MAX, what, out, err);
    if (rc == IB_E_MISSING_FIELD) {
        *out = NULL;
        ib_error_clear(err);
        return IB_E_OK;
    }
    return rc;
}

ib_err_t rt_route_bind_claim(const rt_route_t *r, const sb_msg_t *msg, rt_claim_ref_t *ref,
                             ib_error_t *err)
{
    const rt_claim_spec_t *c = rt_route_claim(r);
    rt_binding_t *b = &ref->b;
    ib_err_t rc;
    memset(ref, 0, sizeof(*ref));
    if ((rc = rt_tpl_render(&c->url, msg, b, NULL, false, CLAIM_URL_MAX, "claim_check.url",
                            &ref->url, err)) != IB_E_OK)
        return rc;
    if (!(ref->url_redacted = rt_binding_keep(b, strndup(ref->url, strcspn(ref->url, "?#")))))
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    if (!url_chars_ok(ref->url) || !host_allowed(c, ref->url, ref->dest, sizeof ref->dest))
        return ib_error_set(err, IB_E_NOT_ALLOWED, IB_CLASS_PERMANENT,
                            "claim_check.url: '%s' is not an http(s) URL on a host in "
                            "claim_check.allowed_hosts",
                            ref->url_redacted);
    if ((rc = optional(&c->sha256, c->has_sha, msg, b, "claim_check.sha256", &ref->sha256,
                       err)) != IB_E_OK ||
        (rc = optional(&c->etag, c->has_etag, msg, b, "claim_check.etag", &ref->etag, err)) !=
            IB_E_OK)
        return rc;
    ib_error_clear(err);
    return IB_E_OK;
}

void rt_claim_ref_free(rt_claim_ref_t *ref)
{
    rt_binding_free(&ref->b);
    memset(ref, 0, sizeof(*ref));
}
