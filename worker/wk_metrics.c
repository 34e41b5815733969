/*
 * wk_metrics.c - counters as relaxed atomics, rendered on demand.
 *
 * Nothing here orders one metric against another: a scrape may see a
 * message counted as applied before its histogram sample lands. Prometheus
 * tolerates that, and it keeps every update to one atomic add.
 */
#include "wk_metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_enc.h"
#include "ib_log.h"

#ifndef INBOXD_VERSION
#define INBOXD_VERSION "unknown"
#endif

const double wk_metrics_duration_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,    1,     2.5,  5,     10,   30};
const size_t wk_metrics_duration_bucket_count =
    sizeof wk_metrics_duration_buckets / sizeof wk_metrics_duration_buckets[0];
#define NBUCKETS (sizeof wk_metrics_duration_buckets / sizeof wk_metrics_duration_buckets[0])

/* Switches are sub-millisecond on loopback and seconds when something waits. */
const double wk_metrics_switch_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
const size_t wk_metrics_switch_bucket_count =
    sizeof wk_metrics_switch_buckets / sizeof wk_metrics_switch_buckets[0];
#define NSWITCH (sizeof wk_metrics_switch_buckets / sizeof wk_metrics_switch_buckets[0])

/* From a message that waited a moment to one that waited out a long outage. */
const double wk_metrics_age_buckets[] = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400};
const size_t wk_metrics_age_bucket_count =
    sizeof wk_metrics_age_buckets / sizeof wk_metrics_age_buckets[0];
#define NAGE (sizeof wk_metrics_age_buckets / sizeof wk_metrics_age_buckets[0])

/* Messages per inbox transaction: one alone up to db.batch_max's ceiling. */
const double wk_metrics_batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128};
#define NBATCH (sizeof wk_metrics_batch_buckets / sizeof wk_metrics_batch_buckets[0])

typedef _Atomic uint_least64_t wk_counter_t;

/* A dead-letter reason: name is written once, before count publishes it. */
typedef struct {
    char name[WK_METRICS_REASON_MAX + 1];
    ib_class_t cls; /* written with name, before n publishes both */
    wk_counter_t n;
} wk_reason_t;

/* ib_class_t values that label inboxd_retries_total. */
#define NCLASSES 5

static const char *const http_classes[] = {"2xx", "429", "4xx", "5xx", "timeout", "error"};
#define NHTTP (sizeof http_classes / sizeof http_classes[0])

struct wk_metrics {
    char version[64];
    wk_counter_t messages[WK_OUT__COUNT];
    wk_counter_t duplicates[WK_DUP__COUNT];
    wk_counter_t retries[NCLASSES];
    wk_counter_t lock_renewals[WK_RENEW__COUNT];
    wk_counter_t lock_lost;
    wk_counter_t reconnects;
    wk_counter_t batch_fallbacks;
    _Atomic long long in_flight;
    _Atomic long long oldest_since_ms;
    _Atomic int circuit_open;
    _Atomic long long held;
    const atomic_ullong *held_peak; /* bytes of messages and blobs, wk_claim.h; may be NULL */
    wk_counter_t held_expired;
    wk_counter_t retry_after_capped;
    wk_metrics_dest_fn dest_fn; /* set before serving; NULL: no HTTP destinations */
    void *dest_ctx;
    /* Per-bucket (not cumulative) counts; the last slot is above every bound. */
    wk_counter_t duration_buckets[NBUCKETS + 1];
    wk_counter_t duration_sum_us;
    _Atomic long long sessions_active;
    _Atomic long long sessions_parked;
    wk_counter_t session_switches;
    /* The broker's misbehaviour (the client's counters, set each tick). */
    wk_counter_t throttled_ms, server_busy, stalls, link_recycles;
    wk_counter_t switch_buckets[NSWITCH + 1]; /* per bucket, like duration_buckets */
    wk_counter_t switch_sum_us;
    /* HTTP routes: [route][class]; the last route row is "other". */
    wk_counter_t http_requests[WK_METRICS_HTTP_ROUTES + 1][NHTTP];
    wk_counter_t http_buckets[NBUCKETS + 1]; /* per bucket, like duration_buckets */
    wk_counter_t http_sum_us;
    wk_counter_t uncertain;
    wk_counter_t taken_over;
    _Atomic long long oldest_enqueued_ms;
    wk_counter_t age_buckets[NAGE + 1]; /* per bucket, like duration_buckets */
    wk_counter_t age_sum_us;
    wk_counter_t batch_buckets[NBATCH + 1]; /* per bucket, like duration_buckets */
    wk_counter_t batch_sum_us;              /* messages x 1e6: render_histogram's unit */
    double start_time_s;                    /* wall clock at wk_metrics_new */

    pthread_mutex_t reasons_lock; /* serialises adding a reason, never reading */
    _Atomic int nreasons;
    wk_reason_t reasons[WK_METRICS_MAX_REASONS];
    wk_counter_t reasons_other;

    wk_metrics_outbox_fn outbox_fn; /* set before serving; NULL: no outbox */
    void *outbox_ctx;

    _Atomic bool otel_on; /* tracing configured: the inboxd_otel_* series are shown */
    wk_counter_t otel_exported, otel_dropped;
    _Atomic(wk_metrics_entity_fn) entity_fn; /* wk_entity.c; NULL: not polled */
    void *_Atomic entity_ctx;
};

static const char *const renew_names[WK_RENEW__COUNT] = {"ok", "failed", "lost"};

static inline void bump(wk_counter_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static inline uint_least64_t load(wk_counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* Counts seconds into buckets (per bucket, last = above every bound) and a microsecond sum. */
static void observe(wk_counter_t *buckets, const double *bounds, size_t nb, wk_counter_t *sum_us,
                    double seconds)
{
    if (!(seconds > 0)) /* also catches NaN */
        seconds = 0;
    size_t b = 0;
    while (b < nb && seconds > bounds[b])
        b++;
    bump(&buckets[b]);
    /* 30 days in microseconds caps one sample so the sum cannot wrap. */
    double us = seconds * 1e6;
    atomic_fetch_add_explicit(
        sum_us, us > 2592000e6 ? (uint_least64_t)2592000e6 : (uint_least64_t)(us + 0.5),
        memory_order_relaxed);
}

wk_metrics_t *wk_metrics_new(const char *version)
{
    wk_metrics_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    ib_strlcpy(m->version, version ? version : INBOXD_VERSION, sizeof m->version);
    m->start_time_s = (double)ib_now_ms() / 1000.0;
    pthread_mutex_init(&m->reasons_lock, NULL);
    return m;
}

void wk_metrics_free(wk_metrics_t *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->reasons_lock);
    free(m);
}

const char *wk_renew_result_name(wk_renew_result_t result)
{
    return (unsigned)result < WK_RENEW__COUNT ? renew_names[result] : "unknown";
}

void wk_metrics_message(wk_metrics_t *m, wk_outcome_t outcome)
{
    if (!m || (unsigned)outcome >= WK_OUT__COUNT)
        return;
    bump(&m->messages[outcome]);
    if (outcome == WK_OUT_DUPLICATE)
        bump(&m->duplicates[WK_DUP_INBOX]);
    else if (outcome == WK_OUT_LOCK_LOST || outcome == WK_OUT_RELEASED)
        bump(&m->lock_lost); /* a counted release is one whose lock was lost first */
}

void wk_metrics_circuit_open_set(wk_metrics_t *m, bool open)
{
    if (m)
        atomic_store_explicit(&m->circuit_open, open ? 1 : 0, memory_order_relaxed);
}

void wk_metrics_batch_fallback(wk_metrics_t *m)
{
    if (m)
        bump(&m->batch_fallbacks);
}

void wk_metrics_business_key_duplicate(wk_metrics_t *m)
{
    if (!m)
        return;
    bump(&m->messages[WK_OUT_DUPLICATE]);
    bump(&m->duplicates[WK_DUP_BUSINESS_KEY]);
}

void wk_metrics_retry(wk_metrics_t *m, ib_class_t cls)
{
    if (!m)
        return;
    /* An unknown class still counts a retry; it shows as class="none". */
    bump(&m->retries[(unsigned)cls < NCLASSES ? (unsigned)cls : 0]);
}

/*
 * Copies reason into out as a label value of at most WK_METRICS_REASON_MAX
 * bytes: control characters become '_', and a cut never splits a UTF-8
 * sequence.
 */
static void reason_normalize(const char *reason, char *out)
{
    size_t n = 0;
    if (!reason || !*reason)
        reason = "unknown";
    for (; reason[n] && n < WK_METRICS_REASON_MAX; n++) {
        unsigned char c = (unsigned char)reason[n];
        out[n] = c < 0x20 || c == 0x7f ? '_' : (char)c;
    }
    if (reason[n]) {
        /* Truncated: drop the last character if the cut went through it. */
        size_t k = n;
        while (k > 0 && ((unsigned char)out[k - 1] & 0xC0) == 0x80)
            k--;
        if (k > 0 && ((unsigned char)out[k - 1] & 0xC0) == 0xC0) {
            unsigned char lead = (unsigned char)out[k - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
            if (n - (k - 1) < need)
                n = k - 1;
        }
    }
    out[n] = '\0';
}

void wk_metrics_dead_letter(wk_metrics_t *m, const char *reason, ib_class_t cls)
{
    char name[WK_METRICS_REASON_MAX + 1];
    if (!m)
        return;
    if ((unsigned)cls >= NCLASSES)
        cls = IB_CLASS_NONE;
    reason_normalize(reason, name);
    if (strcmp(name, "other") == 0) {
        bump(&m->reasons_other);
        return;
    }
    /* Fast path: reasons already published are immutable. */
    int n = atomic_load_explicit(&m->nreasons, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (m->reasons[i].cls == cls && strcmp(m->reasons[i].name, name) == 0) {
            bump(&m->reasons[i].n);
            return;
        }
    pthread_mutex_lock(&m->reasons_lock);
    n = atomic_load_explicit(&m->nreasons, memory_order_relaxed);
    int i;
    for (i = 0; i < n; i++)
        if (m->reasons[i].cls == cls && strcmp(m->reasons[i].name, name) == 0)
            break;
    if (i == n && n < WK_METRICS_MAX_REASONS) {
        memcpy(m->reasons[n].name, name, sizeof name);
        m->reasons[n].cls = cls;
        atomic_store_explicit(&m->reasons[n].n, 0, memory_order_relaxed);
        atomic_store_explicit(&m->nreasons, n + 1, memory_order_release);
    }
    if (i < WK_METRICS_MAX_REASONS)
        bump(&m->reasons[i].n);
    else
        bump(&m->reasons_other);
    pthread_mutex_unlock(&m->reasons_lock);
}

void wk_metrics_lock_renewal(wk_metrics_t *m, wk_renew_result_t result)
{
    if (m && (unsigned)result < WK_RENEW__COUNT)
        bump(&m->lock_renewals[result]);
}

void wk_metrics_reconnect(wk_metrics_t *m)
{
    if (m)
        bump(&m->reconnects);
}

void wk_metrics_handler_duration(wk_metrics_t *m, double seconds)
{
    if (m)
        observe(m->duration_buckets, wk_metrics_duration_buckets, NBUCKETS, &m->duration_sum_us,
                seconds);
}

void wk_metrics_batch(wk_metrics_t *m, size_t messages)
{
    if (m)
        observe(m->batch_buckets, wk_metrics_batch_buckets, NBATCH, &m->batch_sum_us,
                (double)messages);
}

void wk_metrics_http_request(wk_metrics_t *m, size_t route, const char *cls, double seconds)
{
    if (!m)
        return;
    size_t c = 0;
    while (c < NHTTP - 1 && strcmp(http_classes[c], cls) != 0)
        c++; /* an unknown class counts as "error", the last */
    bump(&m->http_requests[route < WK_METRICS_HTTP_ROUTES ? route : WK_METRICS_HTTP_ROUTES][c]);
    observe(m->http_buckets, wk_metrics_duration_buckets, NBUCKETS, &m->http_sum_us, seconds);
}

void wk_metrics_uncertain(wk_metrics_t *m)
{
    if (m)
        bump(&m->uncertain);
}

void wk_metrics_claim_taken_over(wk_metrics_t *m)
{
    if (m)
        bump(&m->taken_over);
}

void wk_metrics_message_age(wk_metrics_t *m, double seconds)
{
    if (m)
        observe(m->age_buckets, wk_metrics_age_buckets, NAGE, &m->age_sum_us, seconds);
}

void wk_metrics_oldest_enqueued_set(wk_metrics_t *m, long long enqueued_ms)
{
    if (m)
        atomic_store_explicit(&m->oldest_enqueued_ms, enqueued_ms < 0 ? 0 : enqueued_ms,
                              memory_order_relaxed);
}

void wk_metrics_sessions_active_set(wk_metrics_t *m, long long n)
{
    if (m)
        atomic_store_explicit(&m->sessions_active, n < 0 ? 0 : n, memory_order_relaxed);
}

void wk_metrics_sessions_parked_set(wk_metrics_t *m, long long n)
{
    if (m)
        atomic_store_explicit(&m->sessions_parked, n < 0 ? 0 : n, memory_order_relaxed);
}

void wk_metrics_session_switches_add(wk_metrics_t *m, unsigned long long n)
{
    if (m && n)
        atomic_fetch_add_explicit(&m->session_switches, n, memory_order_relaxed);
}

void wk_metrics_broker_set(wk_metrics_t *m, const wk_metrics_broker_t *v)
{
    if (!m)
        return;
    atomic_store_explicit(&m->throttled_ms, v->throttled_ms, memory_order_relaxed);
    atomic_store_explicit(&m->server_busy, v->server_busy, memory_order_relaxed);
    atomic_store_explicit(&m->stalls, v->stalls, memory_order_relaxed);
    atomic_store_explicit(&m->link_recycles, v->link_recycles, memory_order_relaxed);
}

void wk_metrics_session_switch(wk_metrics_t *m, double seconds)
{
    if (m)
        observe(m->switch_buckets, wk_metrics_switch_buckets, NSWITCH, &m->switch_sum_us, seconds);
}

void wk_metrics_in_flight_set(wk_metrics_t *m, long long n)
{
    if (m)
        atomic_store_explicit(&m->in_flight, n < 0 ? 0 : n, memory_order_relaxed);
}

void wk_metrics_in_flight_add(wk_metrics_t *m, long long delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->in_flight, delta, memory_order_relaxed);
}

void wk_metrics_oldest_in_flight_set(wk_metrics_t *m, long long since_mono_ms)
{
    if (m)
        atomic_store_explicit(&m->oldest_since_ms, since_mono_ms < 0 ? 0 : since_mono_ms,
                              memory_order_relaxed);
}

/* ---- reading ---- */

void wk_metrics_read(wk_metrics_t *m, wk_metrics_view_t *v)
{
    memset(v, 0, sizeof(*v));
    if (!m)
        return;
    for (int o = 0; o < WK_OUT__COUNT; o++)
        v->messages[o] = load(&m->messages[o]);
    for (int c = 0; c < NCLASSES; c++)
        v->retries += load(&m->retries[c]);
    for (int r = 0; r < WK_RENEW__COUNT; r++)
        v->lock_renewals[r] = load(&m->lock_renewals[r]);
    v->reconnects = load(&m->reconnects);
    v->in_flight = atomic_load_explicit(&m->in_flight, memory_order_relaxed);
    long long since = atomic_load_explicit(&m->oldest_since_ms, memory_order_relaxed);
    v->oldest_in_flight_ms = since > 0 ? ib_mono_ms() - since : 0;
}

/* Appends "name":n to buf at *off when it fits whole; reason names are JSON-escaped. */
static void reason_json(char *buf, size_t size, size_t *off, const char *name, unsigned long long n)
{
    char esc[6 * WK_METRICS_REASON_MAX + 1]; /* the longest escape, \u00XX, is 6 bytes */
    ib_enc_json(esc, sizeof esc, name, strlen(name), NULL);
    int w = snprintf(buf + *off, size - *off, "%s\"%s\":%llu", *off > 1 ? "," : "", esc, n);
    if (w > 0 && (size_t)w < size - *off - 1)
        *off += (size_t)w;
    else
        buf[*off] = '\0';
}

void wk_metrics_reasons_json(wk_metrics_t *m, char *buf, size_t size)
{
    size_t off = 1;
    if (size < 3) {
        if (size)
            buf[0] = '\0';
        return;
    }
    buf[0] = '{';
    buf[1] = '\0';
    int n = m ? atomic_load_explicit(&m->nreasons, memory_order_acquire) : 0;
    for (int i = 0; i < n; i++) {
        /* One key per reason: the classes of a reason are summed. */
        unsigned long long sum = 0;
        bool seen = false;
        for (int k = 0; k < i && !seen; k++)
            seen = strcmp(m->reasons[k].name, m->reasons[i].name) == 0;
        if (seen)
            continue;
        for (int k = i; k < n; k++)
            if (strcmp(m->reasons[k].name, m->reasons[i].name) == 0)
                sum += (unsigned long long)load(&m->reasons[k].n);
        reason_json(buf, size, &off, m->reasons[i].name, sum);
    }
    if (m && load(&m->reasons_other))
        reason_json(buf, size, &off, "other", (unsigned long long)load(&m->reasons_other));
    buf[off] = '}';
    buf[off + 1] = '\0';
}

/* ---- rendering ---- */

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} wk_buf_t;

static void buf_printf(wk_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void buf_printf(wk_buf_t *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Label value escaping of the text format: backslash, quote and newline. */
static void buf_label_value(wk_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            buf_printf(b, "\\\\");
        else if (*v == '"')
            buf_printf(b, "\\\"");
        else if (*v == '\n')
            buf_printf(b, "\\n");
        else
            buf_printf(b, "%c", *v);
    }
}

static void header(wk_buf_t *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram from per-bucket counts (the last above every bound) and a microsecond sum. */
static void render_histogram(wk_buf_t *b, const char *name, const char *help, wk_counter_t *buckets,
                             const double *bounds, size_t nb, wk_counter_t *sum_us)
{
    unsigned long long cum = 0;
    header(b, name, "histogram", help);
    for (size_t i = 0; i < nb; i++) {
        cum += load(&buckets[i]);
        buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], cum);
    }
    cum += load(&buckets[nb]);
    buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
    buf_printf(b, "%s_sum %.6f\n", name, (double)load(sum_us) / 1e6);
    buf_printf(b, "%s_count %llu\n", name, cum);
}

/* The HTTP routes' metrics; a route shows once it made a request. */
static void render_http(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_http_requests_total", "counter",
           "Requests of HTTP routes, by route index and class (2xx, 4xx, 5xx, timeout, error).");
    for (size_t r = 0; r <= WK_METRICS_HTTP_ROUTES; r++) {
        unsigned long long any = 0;
        for (size_t c = 0; c < NHTTP; c++)
            any += load(&m->http_requests[r][c]);
        if (!any)
            continue;
        for (size_t c = 0; c < NHTTP; c++) {
            if (r < WK_METRICS_HTTP_ROUTES)
                buf_printf(b, "inboxd_http_requests_total{route=\"%zu\",class=\"%s\"} %llu\n", r,
                           http_classes[c], (unsigned long long)load(&m->http_requests[r][c]));
            else
                buf_printf(b, "inboxd_http_requests_total{route=\"other\",class=\"%s\"} %llu\n",
                           http_classes[c], (unsigned long long)load(&m->http_requests[r][c]));
        }
    }
    render_histogram(b, "inboxd_http_duration_seconds", "Duration of HTTP route requests.",
                     m->http_buckets, wk_metrics_duration_buckets, NBUCKETS, &m->http_sum_us);
    header(b, "inboxd_uncertain_total", "counter",
           "Outcomes recorded uncertain (a call that may have acted; dead-lettered "
           "OutcomeUncertain).");
    buf_printf(b, "inboxd_uncertain_total %llu\n", (unsigned long long)load(&m->uncertain));
    header(b, "inboxd_claims_taken_over_total", "counter",
           "Expired HTTP claims taken over from a worker that stopped mid-call.");
    buf_printf(b, "inboxd_claims_taken_over_total %llu\n",
               (unsigned long long)load(&m->taken_over));
}

void wk_metrics_outbox_source(wk_metrics_t *m, wk_metrics_outbox_fn fn, void *ctx)
{
    m->outbox_fn = fn;
    m->outbox_ctx = ctx;
}

void wk_metrics_held_set(wk_metrics_t *m, long long n)
{
    if (m)
        atomic_store_explicit(&m->held, n, memory_order_relaxed);
}

void wk_metrics_held_peak(wk_metrics_t *m, const atomic_ullong *peak)
{
    if (m)
        m->held_peak = peak;
}

void wk_metrics_held_expired(wk_metrics_t *m)
{
    if (m)
        bump(&m->held_expired);
}

void wk_metrics_retry_after_capped(wk_metrics_t *m)
{
    if (m)
        bump(&m->retry_after_capped);
}

void wk_metrics_dest_source(wk_metrics_t *m, wk_metrics_dest_fn fn, void *ctx)
{
    m->dest_fn = fn;
    m->dest_ctx = ctx;
}

/* Messages held for their HTTP destination, and each destination's circuit. */
static void render_dests(wk_metrics_t *m, wk_buf_t *b)
{
    char lines[8192];
    header(b, "inboxd_held_messages", "gauge",
           "Messages held under renewed locks until their HTTP destination takes a call "
           "(open circuit, Retry-After, rate or concurrency limit).");
    buf_printf(b, "inboxd_held_messages %lld\n",
               atomic_load_explicit(&m->held, memory_order_relaxed));
    header(b, "inboxd_held_expired_total", "counter",
           "Held messages whose lock renewal (servicebus.max_auto_lock_renewal_s) ran out: "
           "abandoned, or dead-lettered RetryBudgetExhausted on their last delivery.");
    buf_printf(b, "inboxd_held_expired_total %llu\n", (unsigned long long)load(&m->held_expired));
    header(b, "inboxd_held_bytes_peak", "gauge",
           "The most bytes of received messages and claim-checked blobs held at once, as seen "
           "when each blob was admitted to their shared budget (servicebus.max_held_mb).");
    buf_printf(b, "inboxd_held_bytes_peak %llu\n",
               m->held_peak ? (unsigned long long)atomic_load(m->held_peak) : 0ULL);
    header(b, "inboxd_http_retry_after_capped_total", "counter",
           "Retry-After answers longer than the route's http.max_retry_after_s: the destination "
           "was held only that long.");
    buf_printf(b, "inboxd_http_retry_after_capped_total %llu\n",
               (unsigned long long)load(&m->retry_after_capped));
    if (!m->dest_fn)
        return;
    header(b, "inboxd_http_circuit_open", "gauge",
           "1 while calls to the destination (scheme://host:port) are held: it failed "
           "transiently several times in a row; one probe at a time.");
    m->dest_fn(m->dest_ctx, lines, sizeof lines);
    buf_printf(b, "%s", lines);
}

static void render_outbox(wk_metrics_t *m, wk_buf_t *b)
{
    rl_relay_stats_t o;
    memset(&o, 0, sizeof(o));
    m->outbox_fn(m->outbox_ctx, &o);
    header(b, "inboxd_outbox_pending", "gauge", "Outbox rows waiting to be published.");
    buf_printf(b, "inboxd_outbox_pending %lld\n", o.pending);
    header(b, "inboxd_outbox_oldest_pending_seconds", "gauge",
           "Age of the oldest pending outbox row (0 when none).");
    buf_printf(b, "inboxd_outbox_oldest_pending_seconds %lld\n", o.oldest_pending_s);
    header(b, "inboxd_outbox_blocked_sessions", "gauge",
           "Session ids whose pending outbox rows wait behind a failed row (retry or skip it).");
    buf_printf(b, "inboxd_outbox_blocked_sessions %lld\n", o.blocked_sessions);
    header(b, "inboxd_outbox_published_total", "counter",
           "Outbox rows this process published (the broker accepted them).");
    buf_printf(b, "inboxd_outbox_published_total %llu\n", o.published_total);
    header(b, "inboxd_outbox_claim_checked_total", "counter",
           "Outbox rows published with a blob reference instead of their body "
           "(outbox.claim_check_over_bytes).");
    buf_printf(b, "inboxd_outbox_claim_checked_total %llu\n", o.claim_checked_total);
    header(b, "inboxd_outbox_claim_check_upload_failures_total", "counter",
           "Uploads of a claim-checked row's body that failed (the row stays pending, retried).");
    buf_printf(b, "inboxd_outbox_claim_check_upload_failures_total %llu\n",
               o.claim_upload_failed_total);
    header(b, "inboxd_outbox_failed_total", "counter",
           "Outbox rows marked failed after a permanent send failure, by broker condition.");
    for (size_t i = 0; i < o.nfailed && i < RL_RELAY_CONDITIONS; i++) {
        buf_printf(b, "inboxd_outbox_failed_total{condition=\"");
        buf_label_value(b, o.failed[i].condition);
        buf_printf(b, "\"} %llu\n", o.failed[i].count);
    }
}

/* ---- the consumed entity as Service Bus reports it (wk_entity.c) ---- */

void wk_metrics_entity_source(wk_metrics_t *m, wk_metrics_entity_fn fn, void *ctx)
{
    atomic_store(&m->entity_ctx, ctx);
    atomic_store(&m->entity_fn, fn);
}

static void render_entity(wk_metrics_t *m, wk_buf_t *b)
{
    wk_metrics_entity_fn fn = atomic_load(&m->entity_fn);
    if (!fn)
        return;
    wk_metrics_entity_t e;
    memset(&e, 0, sizeof e);
    fn(atomic_load(&m->entity_ctx), &e);
    header(b, "inboxd_entity_messages", "gauge",
           "Messages in the entity by state, as Service Bus counts them (management endpoint).");
    if (e.counted) {
        const char *st[] = {"active", "scheduled", "dead_letter", "transfer_dead_letter"};
        long long v[] = {e.active, e.scheduled, e.dead_letter, e.transfer_dead_letter};
        for (int i = 0; i < 4; i++)
            buf_printf(b, "inboxd_entity_messages{state=\"%s\"} %lld\n", st[i], v[i]);
        header(b, "inboxd_entity_max_delivery_count", "gauge", "The entity's MaxDeliveryCount.");
        buf_printf(b, "inboxd_entity_max_delivery_count %lld\n", e.max_delivery_count);
        header(b, "inboxd_entity_lock_duration_seconds", "gauge", "The entity's LockDuration.");
        buf_printf(b, "inboxd_entity_lock_duration_seconds %.3f\n", e.lock_duration_ms / 1000.0);
    }
    header(b, "inboxd_entity_oldest_enqueued_age_seconds", "gauge",
           "Time since the oldest message in the entity was enqueued, by peek (0 when empty).");
    if (e.age_known)
        buf_printf(b, "inboxd_entity_oldest_enqueued_age_seconds %.3f\n", e.oldest_age_s);
    header(b, "inboxd_entity_poll_up", "gauge",
           "1 when the last read of the entity's management endpoint succeeded.");
    buf_printf(b, "inboxd_entity_poll_up %d\n", e.up ? 1 : 0);
    header(b, "inboxd_entity_poll_errors_total", "counter",
           "Failed reads of the entity: source=management (HTTPS counts) or peek (oldest age).");
    buf_printf(b, "inboxd_entity_poll_errors_total{source=\"management\"} %llu\n",
               e.errors_management);
    buf_printf(b, "inboxd_entity_poll_errors_total{source=\"peek\"} %llu\n", e.errors_peek);
}

/* Settled messages: outcomes, duplicates, retries, dead letters. */
static void render_outcomes(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_messages_total", "counter", "Messages settled, by outcome.");
    for (int o = 0; o < WK_OUT__COUNT; o++)
        buf_printf(b, "inboxd_messages_total{result=\"%s\"} %llu\n",
                   wk_outcome_name((wk_outcome_t)o), (unsigned long long)load(&m->messages[o]));

    header(b, "inboxd_duplicates_total", "counter",
           "Messages completed without a second effect: by=inbox (the inbox row existed) or "
           "by=business_key (a route's own unique key, on_unique_violation duplicate).");
    for (int k = 0; k < WK_DUP__COUNT; k++)
        buf_printf(b, "inboxd_duplicates_total{by=\"%s\"} %llu\n", k ? "business_key" : "inbox",
                   (unsigned long long)load(&m->duplicates[k]));

    header(b, "inboxd_retries_total", "counter", "In-process retries, by error class.");
    for (int c = 0; c < NCLASSES; c++)
        if (c == IB_CLASS_TRANSIENT || c == IB_CLASS_AMBIGUOUS || load(&m->retries[c]))
            buf_printf(b, "inboxd_retries_total{class=\"%s\"} %llu\n", ib_class_name((ib_class_t)c),
                       (unsigned long long)load(&m->retries[c]));

    header(b, "inboxd_dead_letters_total", "counter",
           "Messages dead-lettered by inboxd, by reason and error class.");
    int n = atomic_load_explicit(&m->nreasons, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        buf_printf(b, "inboxd_dead_letters_total{reason=\"");
        buf_label_value(b, m->reasons[i].name);
        buf_printf(b, "\",class=\"%s\"} %llu\n", ib_class_name(m->reasons[i].cls),
                   (unsigned long long)load(&m->reasons[i].n));
    }
    if (load(&m->reasons_other) || n == WK_METRICS_MAX_REASONS)
        buf_printf(b, "inboxd_dead_letters_total{reason=\"other\",class=\"other\"} %llu\n",
                   (unsigned long long)load(&m->reasons_other));
}

/* Locks, the breaker and what is in flight now. */
static void render_state(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_lock_renewals_total", "counter",
           "Message and session lock renewals, by result.");
    for (int r = 0; r < WK_RENEW__COUNT; r++)
        buf_printf(b, "inboxd_lock_renewals_total{result=\"%s\"} %llu\n", renew_names[r],
                   (unsigned long long)load(&m->lock_renewals[r]));

    header(b, "inboxd_lock_lost_total", "counter",
           "Messages whose lock was lost before settlement.");
    buf_printf(b, "inboxd_lock_lost_total %llu\n", (unsigned long long)load(&m->lock_lost));

    header(b, "inboxd_circuit_open", "gauge",
           "1 while the circuit breaker holds receiving: the database's setup fails every "
           "message (errors.circuit_breaker).");
    buf_printf(b, "inboxd_circuit_open %d\n",
               atomic_load_explicit(&m->circuit_open, memory_order_relaxed));

    header(b, "inboxd_in_flight", "gauge", "Messages received and not yet settled.");
    long long inflight = atomic_load_explicit(&m->in_flight, memory_order_relaxed);
    buf_printf(b, "inboxd_in_flight %lld\n", inflight < 0 ? 0 : inflight);

    header(b, "inboxd_oldest_in_flight_seconds", "gauge",
           "Age of the oldest message received and not yet settled (0 when none).");
    long long since = atomic_load_explicit(&m->oldest_since_ms, memory_order_relaxed);
    long long age_ms = since > 0 ? ib_mono_ms() - since : 0;
    buf_printf(b, "inboxd_oldest_in_flight_seconds %.3f\n", age_ms > 0 ? age_ms / 1000.0 : 0.0);

    header(b, "inboxd_oldest_unsettled_enqueued_seconds", "gauge",
           "Time since the oldest message in flight was enqueued (0 when none).");
    long long enq = atomic_load_explicit(&m->oldest_enqueued_ms, memory_order_relaxed);
    long long enq_age = enq > 0 ? ib_now_ms() - enq : 0;
    buf_printf(b, "inboxd_oldest_unsettled_enqueued_seconds %.3f\n",
               enq_age > 0 ? enq_age / 1000.0 : 0.0);
}

/* Throttling, stalls and recycles: what the broker did to the receiver. */
static void render_broker(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_throttled_seconds_total", "counter",
           "Time spent holding credit, settlements and sends because Service Bus answered "
           "com.microsoft:server-busy.");
    buf_printf(b, "inboxd_throttled_seconds_total %.3f\n", (double)load(&m->throttled_ms) / 1000.0);
    header(b, "inboxd_server_busy_total", "counter",
           "Operations Service Bus answered com.microsoft:server-busy (receive, settle, send, "
           "$management).");
    buf_printf(b, "inboxd_server_busy_total %llu\n", (unsigned long long)load(&m->server_busy));
    header(b, "inboxd_receive_stalls_total", "counter",
           "Receive links found with credit out and no transfer while the entity had messages "
           "(recycled; a second one in a row recycles the connection).");
    buf_printf(b, "inboxd_receive_stalls_total %llu\n", (unsigned long long)load(&m->stalls));
    header(b, "inboxd_link_recycles_total", "counter",
           "Receive links closed and attached again: unanswered settlements, stalls, the "
           "broker's idle close.");
    buf_printf(b, "inboxd_link_recycles_total %llu\n",
               (unsigned long long)load(&m->link_recycles));
}

/* Session slots: held now, given back, switch time. */
static void render_sessions(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_sessions_active", "gauge", "Sessions held now (session entities).");
    long long active = atomic_load_explicit(&m->sessions_active, memory_order_relaxed);
    buf_printf(b, "inboxd_sessions_active %lld\n", active < 0 ? 0 : active);

    header(b, "inboxd_sessions_parked", "gauge",
           "Sessions this process saw parked (session_on_dead_letter park) and not since unparked.");
    buf_printf(b, "inboxd_sessions_parked %lld\n",
               atomic_load_explicit(&m->sessions_parked, memory_order_relaxed));

    header(b, "inboxd_session_switches_total", "counter",
           "Sessions given back (done, idle or at shutdown), each freeing a slot for the next.");
    buf_printf(b, "inboxd_session_switches_total %llu\n",
               (unsigned long long)load(&m->session_switches));

    render_histogram(b, "inboxd_session_switch_seconds",
                     "Time from a session's last message settled to its slot holding the next "
                     "session (0 when the next was accepted before).",
                     m->switch_buckets, wk_metrics_switch_buckets, NSWITCH, &m->switch_sum_us);
}

void wk_metrics_otel_set(wk_metrics_t *m, unsigned long long exported,
                         unsigned long long dropped)
{
    atomic_store(&m->otel_exported, exported);
    atomic_store(&m->otel_dropped, dropped);
    atomic_store(&m->otel_on, true);
}

static void render_otel(wk_buf_t *b, wk_metrics_t *m)
{
    header(b, "inboxd_otel_spans_exported_total", "counter",
           "Spans the trace collector accepted.");
    buf_printf(b, "inboxd_otel_spans_exported_total %llu\n",
               (unsigned long long)load(&m->otel_exported));
    header(b, "inboxd_otel_spans_dropped_total", "counter",
           "Spans dropped: the export queue was full, or the collector failed or was slow.");
    buf_printf(b, "inboxd_otel_spans_dropped_total %llu\n",
               (unsigned long long)load(&m->otel_dropped));
}

char *wk_metrics_render(wk_metrics_t *m, size_t *len)
{
    wk_buf_t b = {malloc(4096), 0, 4096, false};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';

    render_outcomes(&b, m);
    render_state(&b, m);
    render_histogram(&b, "inboxd_handler_duration_seconds",
                     "Time from taking a message to the end of its inbox transaction.",
                     m->duration_buckets, wk_metrics_duration_buckets, NBUCKETS,
                     &m->duration_sum_us);
    render_histogram(&b, "inboxd_batch_messages", "Messages per inbox transaction (1: alone).",
                     m->batch_buckets, wk_metrics_batch_buckets, NBATCH, &m->batch_sum_us);
    render_http(&b, m);
    render_dests(m, &b);
    render_histogram(&b, "inboxd_message_age_seconds",
                     "Time from enqueue to leaving the entity (completed or dead-lettered).",
                     m->age_buckets, wk_metrics_age_buckets, NAGE, &m->age_sum_us);

    header(&b, "inboxd_reconnects_total", "counter", "AMQP connections re-established.");
    buf_printf(&b, "inboxd_reconnects_total %llu\n", (unsigned long long)load(&m->reconnects));

    render_sessions(&b, m);
    render_broker(&b, m);

    header(&b, "inboxd_batch_fallbacks_total", "counter",
           "Batches rolled back after a failure and applied one message per transaction.");
    buf_printf(&b, "inboxd_batch_fallbacks_total %llu\n",
               (unsigned long long)load(&m->batch_fallbacks));

    if (m->outbox_fn)
        render_outbox(m, &b);
    if (atomic_load(&m->otel_on))
        render_otel(&b, m);
    render_entity(m, &b);

    header(&b, "process_start_time_seconds", "gauge",
           "Start time of the process since the Unix epoch (a change is a restart).");
    buf_printf(&b, "process_start_time_seconds %.3f\n", m->start_time_s);

    header(&b, "inboxd_build_info", "gauge", "Always 1; the labels describe the build.");
    buf_printf(&b, "inboxd_build_info{version=\"");
    buf_label_value(&b, m->version);
    buf_printf(&b, "\"} 1\n");

    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
