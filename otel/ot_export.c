/*
 * ot_export.c - the OTLP/HTTP trace exporter: settings (explicit, else the
 * standard OTEL_* variables), a bounded queue that any thread adds ended
 * spans to without blocking, and one thread that posts them in batches with
 * libcurl. A failed request drops its spans (counted); each kind of failure
 * is logged once until an export succeeds again. At stop the exporter gets
 * OT_STOP_MS to send what is queued (the request under way included, run on
 * a multi handle so that the stop can cut it short); what is left then is
 * dropped, counted: a collector that never answers cannot hold shutdown.
 * thread: the exporter's own, plus ot_exporter_queue from any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "ib_enc.h"
#include "ib_log.h"
#include "ib_time.h"
#include "ib_tls.h"
#include "ot_int.h"

#define OT_MAX_RES 32

struct ot_exporter {
    char *url;
    bool json;
    struct curl_slist *headers;
    ot_kv_t res[OT_MAX_RES];
    size_t nres;
    ot_sampler_t sampler;
    double ratio;
    unsigned queue_max, batch_max, interval_ms, timeout_ms;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* ib_cond_init: a batch is full, or stop */
    ot_buf_t q;        /* the queued spans, encoded, back to back after gap bytes */
    size_t *ends;      /* the end of each in q (queue_max of them) */
    size_t gap;        /* protobuf: room for a request's head before its spans */
    unsigned queued;
    bool stop;
    pthread_t thread;
    CURLM *multi;             /* runs the one request, so that a stop can wake it */
    atomic_llong stop_by_ms;  /* 0 until stopping; then the mono ms when sending ends */

    pthread_mutex_t pool_mu; /* guards the records below */
    ot_span_t *pool;         /* span records for reuse, linked by next */
    unsigned pooled;

    atomic_ullong exported, dropped;
    char last_error[256]; /* thread: exporter; "" while exports succeed */
    ot_buf_t body;        /* thread: exporter; a request's body, kept for the next */
    ot_buf_t taken;       /* thread: exporter; the spans taken from the queue (q's twin) */
    size_t *taken_ends;
};

/* ---- settings ------------------------------------------------------------ */

static const char *pick(const char *given, const char *var1, const char *var2)
{
    const char *v;
    if (given && *given)
        return given;
    if (var1 && (v = getenv(var1)) && *v)
        return v;
    if (var2 && (v = getenv(var2)) && *v)
        return v;
    return NULL;
}

static char *trim(char *s)
{
    char *e;
    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/*
 * Splits "k=v,k2=v2" and calls each(key, value) for each pair. Returns false
 * naming what is wrong in err (the pair's position, never its value: headers
 * carry secrets).
 */
static bool each_pair(const char *list, const char *what, ib_error_t *err,
                      bool (*each)(ot_exporter_t *, const char *, const char *),
                      ot_exporter_t *x)
{
    char *copy = strdup(list), *save = NULL;
    int n = 0;
    bool ok = copy != NULL;
    for (char *p = copy ? strtok_r(copy, ",", &save) : NULL; ok && p;
         p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        n++;
        if (!eq) {
            ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                         "%s: entry %d is not key=value", what, n);
            ok = false;
            break;
        }
        *eq = '\0';
        char *k = trim(p), *v = trim(eq + 1);
        ib_dec_pct(k); /* OTLP header and resource values may be encoded */
        ib_dec_pct(v);
        if (!*k || !each(x, k, v)) {
            ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "%s: entry %d is not usable",
                         what, n);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

static bool add_header(ot_exporter_t *x, const char *k, const char *v)
{
    char line[1024];
    struct curl_slist *h;
    if (snprintf(line, sizeof(line), "%s: %s", k, v) >= (int)sizeof(line))
        return false;
    if (!(h = curl_slist_append(x->headers, line)))
        return false;
    x->headers = h;
    return true;
}

static bool set_res(ot_exporter_t *x, const char *k, const char *v)
{
    for (size_t i = 0; i < x->nres; i++)
        if (strcmp(x->res[i].key, k) == 0) {
            char *nv = strdup(v);
            if (!nv)
                return false;
            free(x->res[i].value);
            x->res[i].value = nv;
            return true;
        }
    if (x->nres == OT_MAX_RES)
        return false;
    x->res[x->nres].key = strdup(k);
    x->res[x->nres].value = strdup(v);
    if (!x->res[x->nres].key || !x->res[x->nres].value)
        return false;
    x->nres++;
    return true;
}

static bool parse_sampler(ot_exporter_t *x, const ot_options_t *o, ib_error_t *err)
{
    static const struct {
        const char *name;
        ot_sampler_t s;
    } names[] = {{"always_on", OT_SAMPLE_ALWAYS_ON},
                 {"always_off", OT_SAMPLE_ALWAYS_OFF},
                 {"traceidratio", OT_SAMPLE_RATIO},
                 {"parentbased_always_on", OT_SAMPLE_PARENT_ALWAYS_ON},
                 {"parentbased_always_off", OT_SAMPLE_PARENT_ALWAYS_OFF},
                 {"parentbased_traceidratio", OT_SAMPLE_PARENT_RATIO}};
    const char *s = pick(o->sampler, "OTEL_TRACES_SAMPLER", NULL);
    const char *arg = pick(o->sampler_arg, "OTEL_TRACES_SAMPLER_ARG", NULL);
    size_t i;
    x->sampler = OT_SAMPLE_PARENT_RATIO;
    x->ratio = s ? 1.0 : OT_DEFAULT_ROOT_RATIO;
    for (i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0)
            break;
    if (s && i == sizeof(names) / sizeof(names[0])) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "otel.sampler (OTEL_TRACES_SAMPLER): '%s' is not one of always_on, "
                     "always_off, traceidratio, parentbased_always_on, "
                     "parentbased_always_off, parentbased_traceidratio", s);
        return false;
    }
    if (s)
        x->sampler = names[i].s;
    if (arg && (x->sampler == OT_SAMPLE_RATIO || x->sampler == OT_SAMPLE_PARENT_RATIO)) {
        char *end;
        errno = 0;
        x->ratio = strtod(arg, &end);
        if (errno || *end || end == arg || x->ratio < 0.0 || x->ratio > 1.0) {
            ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                         "otel.sampler_arg (OTEL_TRACES_SAMPLER_ARG): '%s' is not a ratio "
                         "from 0 to 1", arg);
            return false;
        }
    }
    return true;
}

/* The URL: the traces endpoint as it is, else the base endpoint + /v1/traces. */
static bool set_url(ot_exporter_t *x, const ot_options_t *o)
{
    const char *t = pick(o->traces_endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", NULL);
    const char *b = pick(o->endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT", NULL);
    if (t) {
        x->url = strdup(t);
    } else if (b) {
        size_t n = strlen(b);
        x->url = malloc(n + 12);
        if (x->url)
            snprintf(x->url, n + 12, "%.*s/v1/traces", (int)(n && b[n - 1] == '/' ? n - 1 : n),
                     b);
    }
    return x->url != NULL;
}

static bool configure(ot_exporter_t *x, const ot_options_t *o, ib_error_t *err)
{
    const char *proto = pick(o->protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                             "OTEL_EXPORTER_OTLP_PROTOCOL");
    const char *hdrs = pick(o->headers, "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                            "OTEL_EXPORTER_OTLP_HEADERS");
    const char *res = pick(o->resource_attributes, "OTEL_RESOURCE_ATTRIBUTES", NULL);
    const char *svc = pick(o->service_name, "OTEL_SERVICE_NAME", NULL);
    if (proto && strcmp(proto, "http/protobuf") != 0 && strcmp(proto, "http/json") != 0) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "otel.protocol (OTEL_EXPORTER_OTLP_PROTOCOL): '%s' is not http/protobuf "
                     "or http/json (grpc is not supported)", proto);
        return false;
    }
    x->json = proto && strcmp(proto, "http/json") == 0;
    x->headers = curl_slist_append(NULL, x->json ? "Content-Type: application/json"
                                                 : "Content-Type: application/x-protobuf");
    if (!x->headers || !set_res(x, "service.name", "inboxd") ||
        !set_res(x, "telemetry.sdk.name", "inboxd") || !set_res(x, "telemetry.sdk.language", "c"))
        return !ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: out of memory");
    if (hdrs && !each_pair(hdrs, "otel.headers (OTEL_EXPORTER_OTLP_HEADERS)", err, add_header, x))
        return false;
    if (res && !each_pair(res, "otel.resource_attributes (OTEL_RESOURCE_ATTRIBUTES)", err,
                          set_res, x))
        return false;
    if (svc && !set_res(x, "service.name", svc))
        return !ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: out of memory");
    return parse_sampler(x, o, err);
}

/* ---- queue --------------------------------------------------------------- */

void ot_exporter_sampler(const ot_exporter_t *x, ot_sampler_t *s, double *ratio)
{
    *s = x->sampler;
    *ratio = x->ratio;
}

/* Appends a span's bytes to the queue; false when it is full, stopping, or out of memory. */
static bool enqueue(ot_exporter_t *x, const unsigned char *p, size_t len)
{
    bool ok;
    pthread_mutex_lock(&x->mu);
    size_t at = x->queued ? x->q.len : x->gap;
    ok = x->queued < x->queue_max && !x->stop && ot_buf_reserve(&x->q, at + len - x->q.len);
    if (ok) {
        x->q.len = at;
        memcpy(x->q.p + x->q.len, p, len);
        x->q.len += len;
        x->ends[x->queued++] = x->q.len;
        if (x->queued == x->batch_max)
            pthread_cond_signal(&x->cv);
    }
    x->q.failed = false; /* out of memory drops this span, not the next */
    pthread_mutex_unlock(&x->mu);
    return ok;
}

/* A span's protobuf is built on the stack while it fits (all but a batch's with many links). */
#define OT_SPAN_STACK 2048

void ot_exporter_queue(ot_exporter_t *x, ot_span_t *s)
{
    unsigned char stack[OT_SPAN_STACK], *heap = NULL, *p;
    size_t len, inner = 0;
    if (x->json) {
        p = heap = (unsigned char *)ot_json_span(s);
        len = p ? strlen((const char *)p) : 0;
    } else {
        len = ot_pb_span_len(s, &inner);
        p = len <= sizeof(stack) ? stack : (heap = malloc(len));
        if (p)
            ot_pb_span_put(s, inner, p);
    }
    ot_span_free(s); /* encoded: the record is free again while still in this thread's cache */
    if (!p || !enqueue(x, p, len))
        atomic_fetch_add(&x->dropped, 1);
    free(heap);
}

ot_span_t *ot_exporter_span_get(ot_exporter_t *x)
{
    ot_span_t *s;
    pthread_mutex_lock(&x->pool_mu);
    if ((s = x->pool)) {
        x->pool = s->next;
        x->pooled--;
    }
    pthread_mutex_unlock(&x->pool_mu);
    if (!s && (s = malloc(sizeof(*s)))) {
        s->links = NULL;
        s->caplinks = 0;
    }
    return s;
}

static void free_records(ot_span_t *s)
{
    while (s) {
        ot_span_t *next = s->next;
        free(s->links);
        free(s);
        s = next;
    }
}

void ot_exporter_span_put(ot_exporter_t *x, ot_span_t *first)
{
    ot_span_t *last = first;
    unsigned n = 1;
    bool kept = false;
    if (!first)
        return;
    while (last->next) { /* counted outside the lock: span starts take it */
        last = last->next;
        n++;
    }
    pthread_mutex_lock(&x->pool_mu);
    if (x->pooled + n <= x->queue_max) {
        last->next = x->pool;
        x->pool = first;
        x->pooled += n;
        kept = true;
    }
    pthread_mutex_unlock(&x->pool_mu);
    if (!kept)
        free_records(first);
}

/*
 * Takes every queued span into x->taken (returns their count), waiting at
 * most interval_ms for a batch's worth: the queue and x->taken trade
 * places, so producers, who take the lock at every span's end, wait for no
 * copy.
 */
static unsigned take_all(ot_exporter_t *x, bool *stop)
{
    long long until = ib_mono_ms() + x->interval_ms;
    ot_buf_t q;
    size_t *ends;
    unsigned n;
    pthread_mutex_lock(&x->mu);
    while (!x->stop && x->queued < x->batch_max &&
           ib_cond_wait_until(&x->cv, &x->mu, until) == 0)
        ;
    *stop = x->stop;
    n = x->queued;
    q = x->q;
    ends = x->ends;
    x->q = x->taken;
    x->ends = x->taken_ends;
    x->queued = 0;
    pthread_mutex_unlock(&x->mu);
    x->taken = q;
    x->taken_ends = ends;
    return n;
}

/* ---- sending ------------------------------------------------------------- */

static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    (void)ctx;
    return size * n;
}

/* Logs a failure once per condition; a success after failures is logged once. */
static void note(ot_exporter_t *x, const char *problem, unsigned n)
{
    if (!problem) {
        if (x->last_error[0])
            IB_LOG(IB_LOG_INFO, "otel_export", IB_MSG("exporting spans again"),
                   IB_S("endpoint", x->url));
        x->last_error[0] = '\0';
        return;
    }
    if (strcmp(problem, x->last_error) != 0)
        IB_LOG(IB_LOG_WARN, "otel_export",
               IB_MSG("spans not exported; dropping them until the collector answers"),
               IB_S("endpoint", x->url), IB_S("error", problem), IB_I("spans", n));
    ib_strlcpy(x->last_error, problem, sizeof(x->last_error));
}

/* ms left before the stop's deadline; LLONG_MAX while not stopping. */
static long long stop_left(ot_exporter_t *x)
{
    long long by = atomic_load(&x->stop_by_ms);
    return by ? by - ib_mono_ms() : LLONG_MAX;
}

/* Runs h to its end, or aborts it when the stop's deadline passes. */
static CURLcode perform(ot_exporter_t *x, CURL *h)
{
    CURLcode rc = CURLE_FAILED_INIT;
    int running = 1, left;
    if (curl_multi_add_handle(x->multi, h) != CURLM_OK)
        return rc;
    while (curl_multi_perform(x->multi, &running) == CURLM_OK && running) {
        long long ms = stop_left(x);
        if (ms <= 0) {
            rc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        curl_multi_poll(x->multi, NULL, 0, ms < 1000 ? (int)ms : 1000, NULL);
    }
    for (CURLMsg *m; (m = curl_multi_info_read(x->multi, &left));)
        if (m->msg == CURLMSG_DONE)
            rc = m->data.result;
    curl_multi_remove_handle(x->multi, h);
    return rc;
}

/* A body this large is freed after its request rather than kept for the next. */
#define OT_BODY_KEEP (4u << 20)

/*
 * The request of sp's spans: protobuf, its head written in place before
 * them (over the gap, or over the spans of the batch before, already sent);
 * JSON, copied into x->body. NULL when memory runs out.
 */
static const unsigned char *request(ot_exporter_t *x, const ot_spans_t *sp, size_t *len)
{
    size_t bytes = sp->ends[sp->n - 1] - sp->start, head;
    unsigned char *p;
    if (x->json) {
        *len = 0;
        if (!ot_encode_request(x->res, x->nres, true, sp, &x->body))
            return NULL;
        *len = x->body.len;
        return x->body.p;
    }
    head = ot_pb_head(x->res, x->nres, bytes, NULL);
    if (head > sp->start) /* never: the gap holds the longest head */
        return NULL;
    p = x->taken.p + sp->start - head;
    ot_pb_head(x->res, x->nres, bytes, p);
    *len = head + bytes;
    return p;
}

/* Posts the request of sp's spans. */
static void post(ot_exporter_t *x, CURL *h, const ot_spans_t *sp)
{
    ot_buf_t body;
    char problem[200] = "";
    long status = 0;
    unsigned n = sp->n;
    size_t len;
    const unsigned char *data = request(x, sp, &len);
    if (!data) {
        snprintf(problem, sizeof(problem), "out of memory encoding the request");
    } else {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)data);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        CURLcode rc = perform(x, h);
        if (rc == CURLE_ABORTED_BY_CALLBACK)
            snprintf(problem, sizeof(problem),
                     "stopping: no answer within the %d ms traces get at shutdown", OT_STOP_MS);
        else if (rc != CURLE_OK)
            snprintf(problem, sizeof(problem), "%s", curl_easy_strerror(rc));
        else if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status), status / 100 != 2)
            snprintf(problem, sizeof(problem), "the collector answered HTTP %ld", status);
    }
    body = x->body;
    body.len = 0;
    body.failed = false;
    if (body.cap > OT_BODY_KEEP)
        ot_buf_free(&body);
    x->body = body;
    if (problem[0])
        atomic_fetch_add(&x->dropped, n);
    else
        atomic_fetch_add(&x->exported, n);
    note(x, problem[0] ? problem : NULL, n);
}

/* Posts a batch (h NULL: drops it). */
static void send_batch(ot_exporter_t *x, CURL *h, const ot_spans_t *sp)
{
    if (h)
        post(x, h, sp);
    else
        atomic_fetch_add(&x->dropped, sp->n);
}

/*
 * Sends the n spans taken, batch_max a request; stopping, the rest are
 * dropped once the collector has failed or the stop's time is up.
 */
static void send_taken(ot_exporter_t *x, CURL *h, unsigned n, bool stopping)
{
    for (unsigned i = 0; i < n; i += x->batch_max) {
        ot_spans_t sp = {x->taken.p, x->taken_ends + i, i ? x->taken_ends[i - 1] : x->gap,
                         n - i < x->batch_max ? n - i : x->batch_max};
        bool drop = stopping && (x->last_error[0] || stop_left(x) <= 0);
        send_batch(x, drop ? NULL : h, &sp);
    }
    x->taken.len = 0;
    x->taken.failed = false;
    if (x->taken.cap > OT_BODY_KEEP)
        ot_buf_free(&x->taken);
}

static void *export_main(void *arg)
{
    ot_exporter_t *x = arg;
    CURL *h = curl_easy_init();
    bool stop = false;
    unsigned n;
    if (h) {
        curl_easy_setopt(h, CURLOPT_URL, x->url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)x->timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)x->timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        ib_tls_curl_trust(h, NULL);
    }
    while (!stop) {
        n = take_all(x, &stop);
        send_taken(x, h, n, stop);
    }
    /* at stop, what is queued goes out while the collector answers, in time */
    while ((n = take_all(x, &stop)))
        send_taken(x, h, n, true);
    curl_easy_cleanup(h);
    return NULL;
}

/* ---- life ---------------------------------------------------------------- */

static void release(ot_exporter_t *x)
{
    ot_buf_free(&x->body);
    ot_buf_free(&x->q);
    ot_buf_free(&x->taken);
    free(x->ends);
    free(x->taken_ends);
    free_records(x->pool);
    pthread_mutex_destroy(&x->pool_mu);
    if (x->multi)
        curl_multi_cleanup(x->multi);
    free(x->url);
    curl_slist_free_all(x->headers);
    for (size_t i = 0; i < x->nres; i++) {
        free(x->res[i].key);
        free(x->res[i].value);
    }
    free(x);
}

static bool start_thread(ot_exporter_t *x)
{
    pthread_mutex_init(&x->mu, NULL);
    if (ib_cond_init(&x->cv) == 0) {
        if (pthread_create(&x->thread, NULL, export_main, x) == 0)
            return true;
        pthread_cond_destroy(&x->cv);
    }
    pthread_mutex_destroy(&x->mu);
    return false;
}

ot_exporter_t *ot_exporter_new(const ot_options_t *opt, ib_error_t *err)
{
    ot_options_t none = {0};
    const ot_options_t *o = opt ? opt : &none;
    ot_exporter_t *x = calloc(1, sizeof(*x));
    ib_error_clear(err);
    if (!x) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: out of memory");
        return NULL;
    }
    pthread_mutex_init(&x->pool_mu, NULL);
    if (!set_url(x, o)) { /* no endpoint: tracing is off */
        release(x);
        return NULL;
    }
    x->queue_max = o->queue_max ? o->queue_max : 2048;
    x->batch_max = o->batch_max ? o->batch_max : 512;
    x->interval_ms = o->interval_ms ? o->interval_ms : 1000;
    x->timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    x->ends = calloc(x->queue_max, sizeof(*x->ends));
    x->taken_ends = calloc(x->queue_max, sizeof(*x->taken_ends));
    atomic_init(&x->exported, 0);
    atomic_init(&x->dropped, 0);
    atomic_init(&x->stop_by_ms, 0);
    if (!x->ends || !x->taken_ends || !(x->multi = curl_multi_init())) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: out of memory");
        release(x);
        return NULL;
    }
    bool ok = configure(x, o, err);
    if (ok && !x->json) /* the longest head: every length's varint at its longest */
        x->gap = ot_pb_head(x->res, x->nres, (size_t)1 << 62, NULL);
    if (!ok || !start_thread(x)) {
        if (!err || !err->code)
            ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: cannot start the exporter");
        release(x);
        return NULL;
    }
    return x;
}

bool ot_options_check(const ot_options_t *opt, ib_error_t *err)
{
    ot_exporter_t *x = calloc(1, sizeof(*x));
    bool ok;
    ib_error_clear(err);
    if (!x)
        return !ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "otel: out of memory");
    pthread_mutex_init(&x->pool_mu, NULL);
    ok = !set_url(x, opt) || configure(x, opt, err);
    release(x);
    return ok;
}

void ot_exporter_free(ot_exporter_t *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    atomic_store(&x->stop_by_ms, ib_mono_ms() + OT_STOP_MS);
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
    curl_multi_wakeup(x->multi); /* a request under way sees the deadline now */
    pthread_join(x->thread, NULL);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    release(x);
}

bool ot_exporter_json(const ot_exporter_t *x)
{
    return x && x->json;
}

unsigned long long ot_exporter_exported(const ot_exporter_t *x)
{
    return x ? atomic_load(&x->exported) : 0;
}

unsigned long long ot_exporter_dropped(const ot_exporter_t *x)
{
    return x ? atomic_load(&x->dropped) : 0;
}
