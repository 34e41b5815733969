/*
 * sb_aad.c - the workload identity token provider: one refresh thread doing
 * blocking libcurl requests, one mutex-protected cached token.
 *
 * thread: fetch_token and its helpers run on the refresh thread only; the
 * public functions take the mutex and never call libcurl.
 */
#include "sb_aad.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "ib_backoff.h"
#include "ib_enc.h"
#include "ib_log.h"
#include "ib_tls.h"

#define MAX_RESPONSE (64 * 1024)
#define MAX_ASSERTION (64 * 1024)
#define DEFAULT_AUTHORITY "https://login.microsoftonline.com"

struct sb_aad {
    char *client_id, *tenant_id, *token_file, *scope, *ca_file;
    char *url; /* {authority}/{tenant}/oauth2/v2.0/token */
    long http_timeout_ms;
    long long retry_min_ms, retry_max_ms;

    pthread_t thread;
    bool running;
    bool curl_inited;     /* curl_global_init succeeded; sb_aad_free pairs it */
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;  /* signalled on a new token, a failure, or stop */
    bool stop;
    bool want_now; /* token_get found nothing: refresh without waiting */
    char *token;   /* the cached access token, or NULL */
    long long expires_at_ms;
    bool failed;         /* the last attempt failed */
    ib_error_t last_err; /* its error, for callers */
    long fetches;
};

static char *opt_or_env(const char *v, const char *env)
{
    if (!v || !*v)
        v = getenv(env);
    return v && *v ? strdup(v) : NULL;
}

/* ---- one token request ---- */

typedef struct {
    char *p;
    size_t len;
    bool overflow;
} wk_body_t;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    wk_body_t *b = arg;
    size_t k = size * n;
    if (b->len + k > MAX_RESPONSE) {
        b->overflow = true;
        return 0; /* makes curl fail the transfer */
    }
    char *p = realloc(b->p, b->len + k + 1);
    if (!p)
        return 0;
    memcpy(p + b->len, data, k);
    b->p = p;
    b->len += k;
    b->p[b->len] = '\0';
    return k;
}

/* Reads the federated token; the kubelet rotates the file, so every request re-reads it. */
static char *read_assertion(const char *path, ib_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT, "federated token file %s: %s", path,
                     strerror(errno));
        return NULL;
    }
    char *buf = malloc(MAX_ASSERTION + 1);
    size_t n = buf ? fread(buf, 1, MAX_ASSERTION, f) : 0;
    fclose(f);
    if (!buf) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    if (n == 0) {
        free(buf);
        ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT, "federated token file %s is empty", path);
        return NULL;
    }
    return buf;
}

/* Appends "&name=escaped(value)" (no '&' first) to a malloc'd form. */
static bool form_add(char **form, const char *name, const char *value)
{
    char *esc = ib_enc_pct_dup(value);
    if (!esc)
        return false;
    size_t old = *form ? strlen(*form) : 0;
    size_t need = old + strlen(name) + strlen(esc) + 3;
    char *p = realloc(*form, need);
    if (!p) {
        free(esc);
        return false;
    }
    snprintf(p + old, need - old, "%s%s=%s", old ? "&" : "", name, esc);
    free(esc);
    *form = p;
    return true;
}

/*
 * Describes an error response: OAuth "error", the first of "error_codes"
 * as AADSTS<n>, and the start of "error_description" (Azure AD descriptions
 * name the issuer and subject, never the assertion).
 */
static void describe_failure(long status, const char *body, ib_error_t *err)
{
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    const char *oauth = j ? json_string_value(json_object_get(j, "error")) : NULL;
    const char *desc = j ? json_string_value(json_object_get(j, "error_description")) : NULL;
    json_t *codes = j ? json_object_get(j, "error_codes") : NULL;
    long long code = json_is_array(codes) ? json_integer_value(json_array_get(codes, 0)) : 0;
    char aadsts[32] = "";
    if (code > 0)
        snprintf(aadsts, sizeof aadsts, "AADSTS%lld", code);
    else if (desc && strncmp(desc, "AADSTS", 6) == 0)
        snprintf(aadsts, sizeof aadsts, "%.*s", (int)strcspn(desc, ": "), desc);
    ib_error_set(
        err, IB_E_AUTH, status >= 500 || status == 429 ? IB_CLASS_TRANSIENT : IB_CLASS_PERMANENT,
        "token endpoint answered %ld: %s%s%s%s%.200s", status, oauth ? oauth : "no OAuth error",
        aadsts[0] ? " " : "", aadsts, desc ? ": " : "", desc ? desc : "");
    ib_strlcpy(err->condition, aadsts[0] ? aadsts : (oauth ? oauth : ""), sizeof err->condition);
    json_decref(j);
}

/*
 * Performs one client-credentials request. On success returns the access
 * token (malloc'd) and sets *expires_at_ms. thread: refresh.
 */
static char *fetch_token(sb_aad_t *aad, long long *expires_at_ms, ib_error_t *err)
{
    char *assertion = read_assertion(aad->token_file, err);
    if (!assertion)
        return NULL;
    CURL *c = curl_easy_init();
    char *form = NULL, *token = NULL;
    wk_body_t body = {0};
    if (!c) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "curl_easy_init failed");
        goto out;
    }
    if (!form_add(&form, "grant_type", "client_credentials") ||
        !form_add(&form, "client_id", aad->client_id) || !form_add(&form, "scope", aad->scope) ||
        !form_add(&form, "client_assertion_type",
                  "urn:ietf:params:oauth:client-assertion-type:jwt-bearer") ||
        !form_add(&form, "client_assertion", assertion)) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        goto out;
    }
    curl_easy_setopt(c, CURLOPT_URL, aad->url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, form);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, aad->http_timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, aad->http_timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    ib_tls_curl_trust(c, aad->ca_file);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT, "token endpoint %s: %s", aad->url,
                     body.overflow ? "response too large" : curl_easy_strerror(rc));
        goto out;
    }
    if (status != 200) {
        describe_failure(status, body.p, err);
        goto out;
    }
    json_t *j = json_loads(body.p ? body.p : "", 0, NULL);
    const char *at = j ? json_string_value(json_object_get(j, "access_token")) : NULL;
    json_t *exp = j ? json_object_get(j, "expires_in") : NULL;
    /* expires_in is a number in v2.0 responses; some proxies send a string. */
    long long expires_in = json_is_integer(exp)  ? json_integer_value(exp)
                           : json_is_string(exp) ? atoll(json_string_value(exp))
                                                 : 0;
    if (!at || !*at || expires_in <= 0) {
        ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT,
                     "token endpoint answered 200 without access_token and expires_in");
    } else {
        token = strdup(at);
        *expires_at_ms = ib_now_ms() + expires_in * 1000;
        if (!token)
            ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    json_decref(j);
out:
    if (c)
        curl_easy_cleanup(c);
    free(form); /* holds the assertion: wipe is not worth it, it is a short-lived token */
    free(body.p);
    free(assertion);
    return token;
}

/* ---- the refresh thread ---- */

/* thread: refresh (sb_aad's own). */
static void *refresh_main(void *arg)
{
    sb_aad_t *aad = arg;
    int failures = 0;   /* in a row: the backoff step */
    ib_rand_t seed = 0; /* the backoff's state, seeded on first use */
    pthread_mutex_lock(&aad->lock);
    while (!aad->stop) {
        pthread_mutex_unlock(&aad->lock);
        ib_error_t err;
        ib_error_clear(&err);
        long long expires_at = 0;
        char *tok = fetch_token(aad, &expires_at, &err);
        long long wait_ms;
        pthread_mutex_lock(&aad->lock);
        aad->want_now = false;
        if (tok) {
            free(aad->token);
            aad->token = tok;
            aad->expires_at_ms = expires_at;
            aad->failed = false;
            aad->fetches++;
            failures = 0;
            long long now = ib_now_ms();
            wait_ms = sb_token_refresh_at(now, expires_at) - now;
            if (wait_ms < 1000)
                wait_ms = 1000;
            IB_LOG(IB_LOG_INFO, "aad_token", IB_MSG("access token acquired"),
                   IB_S("client_id", aad->client_id),
                   IB_I("expires_in_s", (expires_at - now) / 1000),
                   IB_I("refresh_in_s", wait_ms / 1000));
        } else {
            aad->failed = true;
            aad->last_err = err;
            /* Never sooner than retry_min_ms: a refused client must not hammer the endpoint. */
            wait_ms = ib_backoff_ms(aad->retry_min_ms, aad->retry_max_ms, ++failures, &seed);
            if (wait_ms < aad->retry_min_ms)
                wait_ms = aad->retry_min_ms;
            IB_LOG(IB_LOG_ERROR, "aad_token", IB_MSG("could not get an access token"),
                   IB_S("client_id", aad->client_id), IB_S("aad_error", err.condition),
                   IB_S("error", err.text), IB_I("retry_in_ms", wait_ms));
        }
        pthread_cond_broadcast(&aad->cond);
        long long until = ib_mono_ms() + wait_ms;
        while (!aad->stop && !aad->want_now)
            if (ib_cond_wait_until(&aad->cond, &aad->lock, until) == ETIMEDOUT)
                break;
    }
    pthread_mutex_unlock(&aad->lock);
    return NULL;
}

/* ---- public ---- */

sb_aad_t *sb_aad_new(const sb_aad_opts_t *opts, ib_error_t *err)
{
    sb_aad_opts_t none = {0};
    if (!opts)
        opts = &none;
    sb_aad_t *aad = calloc(1, sizeof *aad);
    if (!aad) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_PERMANENT, "out of memory");
        return NULL;
    }
    aad->client_id = opt_or_env(opts->client_id, "AZURE_CLIENT_ID");
    aad->tenant_id = opt_or_env(opts->tenant_id, "AZURE_TENANT_ID");
    aad->token_file = opt_or_env(opts->federated_token_file, "AZURE_FEDERATED_TOKEN_FILE");
    char *authority = opt_or_env(opts->authority_host, "AZURE_AUTHORITY_HOST");
    aad->scope = strdup(opts->scope && *opts->scope ? opts->scope : SB_AAD_SCOPE_SERVICEBUS);
    aad->ca_file = opts->ca_file && *opts->ca_file ? strdup(opts->ca_file) : NULL;
    aad->http_timeout_ms = opts->http_timeout_ms > 0 ? opts->http_timeout_ms : 10000;
    aad->retry_min_ms = opts->retry_min_ms > 0 ? opts->retry_min_ms : 1000;
    aad->retry_max_ms = opts->retry_max_ms > 0 ? opts->retry_max_ms : 60000;
    if (aad->retry_max_ms < aad->retry_min_ms)
        aad->retry_max_ms = aad->retry_min_ms;
    pthread_mutex_init(&aad->lock, NULL);
    ib_cond_init(&aad->cond);

    const char *missing = !aad->client_id    ? "AZURE_CLIENT_ID"
                          : !aad->tenant_id  ? "AZURE_TENANT_ID"
                          : !aad->token_file ? "AZURE_FEDERATED_TOKEN_FILE"
                                             : NULL;
    if (missing) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "servicebus.auth=workload_identity: %s is not set (is the pod labelled "
                     "azure.workload.identity/use=true?)",
                     missing);
        free(authority);
        sb_aad_free(aad);
        return NULL;
    }
    if (strspn(aad->tenant_id,
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") !=
        strlen(aad->tenant_id)) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "AZURE_TENANT_ID is not a tenant id or domain");
        free(authority);
        sb_aad_free(aad);
        return NULL;
    }
    const char *base = authority ? authority : DEFAULT_AUTHORITY;
    size_t blen = strlen(base);
    while (blen > 0 && base[blen - 1] == '/')
        blen--;
    size_t need = blen + strlen(aad->tenant_id) + 32;
    aad->url = malloc(need);
    if (aad->url)
        snprintf(aad->url, need, "%.*s/%s/oauth2/v2.0/token", (int)blen, base, aad->tenant_id);
    free(authority);
    if (!aad->url || !aad->scope) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_PERMANENT, "out of memory");
        sb_aad_free(aad);
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "curl_global_init failed");
        sb_aad_free(aad);
        return NULL;
    }
    aad->curl_inited = true;
    int rc = pthread_create(&aad->thread, NULL, refresh_main, aad);
    if (rc != 0) {
        ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "aad: thread: %s", strerror(rc));
        sb_aad_free(aad);
        return NULL;
    }
    aad->running = true;
    return aad;
}

void sb_aad_free(sb_aad_t *aad)
{
    if (!aad)
        return;
    if (aad->running) {
        pthread_mutex_lock(&aad->lock);
        aad->stop = true;
        pthread_cond_broadcast(&aad->cond);
        pthread_mutex_unlock(&aad->lock);
        pthread_join(aad->thread, NULL);
    }
    pthread_cond_destroy(&aad->cond);
    pthread_mutex_destroy(&aad->lock);
    free(aad->client_id);
    free(aad->tenant_id);
    free(aad->token_file);
    free(aad->scope);
    free(aad->ca_file);
    free(aad->url);
    free(aad->token);
    if (aad->curl_inited)
        curl_global_cleanup(); /* reference-counted by libcurl */
    free(aad);
}

ib_err_t sb_aad_wait(sb_aad_t *aad, long timeout_ms, ib_error_t *err)
{
    long long until = ib_mono_ms() + timeout_ms;
    ib_err_t rc = IB_E_TIMEOUT;
    pthread_mutex_lock(&aad->lock);
    for (;;) {
        if (aad->token) {
            rc = IB_E_OK;
            break;
        }
        if (aad->failed) {
            if (err)
                *err = aad->last_err;
            rc = IB_E_AUTH;
            break;
        }
        if (ib_cond_wait_until(&aad->cond, &aad->lock, until) == ETIMEDOUT) {
            ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                         "no answer from the token endpoint within %ld ms", timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&aad->lock);
    return rc;
}

ib_err_t sb_aad_token_get(void *ctx, const char *audience, sb_token_t *out, ib_error_t *err)
{
    sb_aad_t *aad = ctx;
    ib_err_t rc;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&aad->lock);
    if (aad->token && aad->expires_at_ms > ib_now_ms()) {
        out->token = strdup(aad->token);
        out->type = SB_TOKEN_TYPE_JWT;
        out->expires_at_ms = aad->expires_at_ms;
        rc = out->token ? IB_E_OK
                        : ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    } else {
        /* After a failure the backoff decides; otherwise make a late refresh happen now. */
        if (!aad->failed) {
            aad->want_now = true;
            pthread_cond_broadcast(&aad->cond);
        }
        if (aad->failed) {
            if (err)
                *err = aad->last_err;
            rc = IB_E_AUTH;
        } else {
            rc = ib_error_set(err, IB_E_AGAIN, IB_CLASS_TRANSIENT,
                              "Azure AD token not acquired yet");
        }
    }
    pthread_mutex_unlock(&aad->lock);
    return rc;
}

long sb_aad_fetch_count(sb_aad_t *aad)
{
    pthread_mutex_lock(&aad->lock);
    long n = aad->fetches;
    pthread_mutex_unlock(&aad->lock);
    return n;
}
