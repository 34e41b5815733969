/*
 * wk_dest.c - per-destination circuit, Retry-After, rate and concurrency
 * (see wk_dest.h). thread: any; every function takes the one mutex.
 */
#include "wk_dest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_breaker.h"

typedef struct dest {
    char key[FX_DEST_KEY_MAX];
    ib_breaker_t br;         /* the circuit: its count is transient failures in a row */
    bool probing;            /* a probe is under way (of the circuit or of a hold) */
    long long offered_ms;    /* start of wk_dest_ready's current window */
    int offered;             /* held messages let go in that window */
    double rate;             /* rate_per_s, as the last caller gave it */
    long long not_before_ms; /* Retry-After */
    long long hold_probe_ms; /* while a Retry-After holds: when the next probe may start */
    double tokens;           /* rate_per_s bucket */
    long long refilled_ms;
    long in_flight;
    long ok_streak; /* answers in a row that were not transient (the batch window) */
} dest_t;

struct wk_dests {
    pthread_mutex_t mu;
    dest_t *v;
    size_t n;
};

wk_dests_t *wk_dests_new(void)
{
    wk_dests_t *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return NULL;
    ds->v = calloc(WK_DEST_MAX, sizeof(*ds->v));
    if (!ds->v) {
        free(ds);
        return NULL;
    }
    pthread_mutex_init(&ds->mu, NULL);
    return ds;
}

void wk_dests_free(wk_dests_t *ds)
{
    if (!ds)
        return;
    pthread_mutex_destroy(&ds->mu);
    free(ds->v);
    free(ds);
}

/* key's entry, made when new; NULL when the table is full. mu held. */
static dest_t *find(wk_dests_t *ds, const char *key, bool make)
{
    for (size_t i = 0; i < ds->n; i++)
        if (strcmp(ds->v[i].key, key) == 0)
            return &ds->v[i];
    if (!make || ds->n >= WK_DEST_MAX || strlen(key) >= FX_DEST_KEY_MAX)
        return NULL;
    dest_t *d = &ds->v[ds->n++];
    memset(d, 0, sizeof(*d));
    strcpy(d->key, key);
    d->tokens = -1; /* filled on first use */
    return d;
}

/* Refills the bucket; true when a token is there (taken when take). mu held. */
static bool token(dest_t *d, double rate, long long now, bool take, long long *wait_ms)
{
    if (rate <= 0)
        return true;
    if (d->tokens < 0) {
        d->tokens = 1;
        d->refilled_ms = now;
    }
    d->tokens += (double)(now - d->refilled_ms) * rate / 1000.0;
    if (d->tokens > (rate > 1 ? rate : 1))
        d->tokens = rate > 1 ? rate : 1;
    d->refilled_ms = now;
    if (d->tokens >= 1) {
        if (take)
            d->tokens -= 1;
        return true;
    }
    *wait_ms = (long long)((1 - d->tokens) * 1000.0 / rate) + 1;
    return false;
}

/* Whether calls to d wait for a probe: its circuit is open or a Retry-After holds. mu held. */
static bool gated(const dest_t *d, long long now)
{
    return d->br.open || now < d->not_before_ms;
}

/*
 * For a gated destination: whether a probe may start now; if not, *wait_ms
 * is when asking again is worth it. The circuit's schedule and the hold's
 * both apply (the later one). mu held.
 */
static bool probe_due(const dest_t *d, long long now, long long *wait_ms)
{
    long long due = d->br.open ? d->br.next_probe_ms : 0;
    if (now < d->not_before_ms && d->hold_probe_ms > due)
        due = d->hold_probe_ms;
    if (d->probing) {
        *wait_ms = d->br.open ? d->br.interval_ms : WK_DEST_HOLD_PROBE_MS;
        return false;
    }
    *wait_ms = due - now;
    return now >= due;
}

bool wk_dest_admit(wk_dests_t *ds, const char *key, const wk_dest_limits_t *lim, long long now_ms,
                   long long *wait_ms)
{
    bool ok = false;
    *wait_ms = 0;
    pthread_mutex_lock(&ds->mu);
    dest_t *d = find(ds, key, true);
    if (!d) {
        ok = true; /* over WK_DEST_MAX: not governed */
    } else if (gated(d, now_ms) && !probe_due(d, now_ms, wait_ms)) {
        ;
    } else if (lim->max_concurrent < 0) {
        *wait_ms = 500; /* this replica's share of a cluster's slots is none */
    } else if (lim->max_concurrent > 0 && d->in_flight >= lim->max_concurrent) {
        *wait_ms = 50;
    } else if (lim->ramp && d->in_flight >= IB_BREAKER_THRESHOLD + d->ok_streak) {
        *wait_ms = 50;
    } else if ((d->rate = lim->rate_per_s, token(d, lim->rate_per_s, now_ms, true, wait_ms))) {
        ok = true;
        d->in_flight++;
        if (gated(d, now_ms))
            d->probing = true;
    }
    pthread_mutex_unlock(&ds->mu);
    return ok;
}

void wk_dest_cancel(wk_dests_t *ds, const char *key)
{
    pthread_mutex_lock(&ds->mu);
    dest_t *d = find(ds, key, false);
    if (d) {
        if (d->in_flight > 0)
            d->in_flight--;
        d->probing = false;
        if (d->rate > 0 && d->tokens >= 0)
            d->tokens = d->tokens + 1 > (d->rate > 1 ? d->rate : 1) ? (d->rate > 1 ? d->rate : 1)
                                                                   : d->tokens + 1;
    }
    pthread_mutex_unlock(&ds->mu);
}

/*
 * A Retry-After of ms: every call waits until then, but a hold longer than
 * WK_DEST_HOLD_PROBE_MS lets a probe through after that much. mu held.
 */
static void hold(dest_t *d, long long ms, long long now)
{
    if (now + ms > d->not_before_ms)
        d->not_before_ms = now + ms;
    d->hold_probe_ms = now + (ms < WK_DEST_HOLD_PROBE_MS ? ms : WK_DEST_HOLD_PROBE_MS);
}

bool wk_dest_done(wk_dests_t *ds, const char *key, wk_dest_result_t res, long long retry_after_ms,
                  long long now_ms)
{
    bool opened = false;
    pthread_mutex_lock(&ds->mu);
    dest_t *d = find(ds, key, false);
    if (!d) {
        pthread_mutex_unlock(&ds->mu);
        return false;
    }
    if (d->in_flight > 0)
        d->in_flight--;
    if (res == WK_DEST_OK && d->probing)
        d->not_before_ms = 0; /* the probe was answered: the hold is over */
    else if (d->probing && now_ms < d->not_before_ms)
        d->hold_probe_ms = now_ms + WK_DEST_HOLD_PROBE_MS; /* still held: probe again later */
    if (retry_after_ms >= 0)
        hold(d, retry_after_ms, now_ms);
    if (res == WK_DEST_OK) {
        if (d->ok_streak < WK_DEST_WINDOW_MAX)
            d->ok_streak++;
        ib_breaker_pass(&d->br);
    } else if (res == WK_DEST_TRANSIENT) {
        d->ok_streak = 0;
        opened = ib_breaker_fail(&d->br, now_ms);
    } else {
        ib_breaker_unsure(&d->br, now_ms); /* no answer: the next probe says more */
    }
    d->probing = false;
    pthread_mutex_unlock(&ds->mu);
    return opened;
}

bool wk_dest_ready(wk_dests_t *ds, const char *key, long long now_ms)
{
    bool ok = true;
    long long wait;
    pthread_mutex_lock(&ds->mu);
    dest_t *d = find(ds, key, false);
    if (d && (gated(d, now_ms) || d->rate > 0)) {
        /* Gated: one held message per probe, given a second to take it. Rate-limited:
         * about half a second's worth of calls per quarter second (headroom for a late
         * tick), so that held messages are seldom claimed only to be held again. */
        bool gate = gated(d, now_ms);
        long long window = gate ? 1000 : 250;
        int most = gate ? 1 : (int)(d->rate / 2) + 2;
        if (now_ms - d->offered_ms >= window) {
            d->offered_ms = now_ms;
            d->offered = 0;
        }
        ok = d->offered < most && (!gate || probe_due(d, now_ms, &wait));
        if (ok)
            d->offered++;
    }
    pthread_mutex_unlock(&ds->mu);
    return ok;
}

size_t wk_dest_metrics(wk_dests_t *ds, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    pthread_mutex_lock(&ds->mu);
    for (size_t i = 0; i < ds->n && len < size; i++) {
        int n = snprintf(buf + len, size - len, "inboxd_http_circuit_open{destination=\"%s\"} %d\n",
                         ds->v[i].key, ds->v[i].br.open ? 1 : 0);
        if (n < 0 || (size_t)n >= size - len) {
            buf[len] = '\0';
            break;
        }
        len += (size_t)n;
    }
    pthread_mutex_unlock(&ds->mu);
    return len;
}

int wk_dest_open_count(wk_dests_t *ds)
{
    int n = 0;
    pthread_mutex_lock(&ds->mu);
    for (size_t i = 0; i < ds->n; i++)
        n += ds->v[i].br.open;
    pthread_mutex_unlock(&ds->mu);
    return n;
}
