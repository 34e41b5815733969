/*
 * fx_multi.c - several HTTP exchanges at once over libcurl's multi
 * interface, each set up, timed and classified exactly as fx_client_call
 * does (fx_exchange_begin / fx_exchange_end in fx_client.c), so a call
 * made in a batch means what it would mean alone.
 *
 * The multi handle keeps the connection cache shared by its easy handles,
 * so connections to a destination are reused from batch to batch.
 *
 * thread: a multi client is used by one worker thread at a time.
 */
#include "fx_multi.h"

#include <stdlib.h>
#include <string.h>

#include "fx_int.h"

struct fx_multi {
    CURLM *multi;
    CURL **easy; /* one per concurrent exchange, kept from call to call */
    size_t neasy;
    /* The requests under way, from fx_multi_start to the fx_multi_next that returns 0. */
    exchange_t *xs;
    bool *live;  /* its transfer is added to the multi handle */
    bool *ended; /* its outcome is in resps and not yet returned */
    size_t n;
};

fx_multi_t *fx_multi_new(void)
{
    fx_multi_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->multi = curl_multi_init();
    if (!m->multi) {
        free(m);
        return NULL;
    }
    return m;
}

static void calls_free(fx_multi_t *m)
{
    free(m->xs);
    free(m->live);
    free(m->ended);
    m->xs = NULL;
    m->live = m->ended = NULL;
    m->n = 0;
}

void fx_multi_free(fx_multi_t *m)
{
    if (!m)
        return;
    calls_free(m);
    for (size_t i = 0; i < m->neasy; i++)
        curl_easy_cleanup(m->easy[i]);
    free(m->easy);
    curl_multi_cleanup(m->multi);
    free(m);
}

/* At least n easy handles; false when out of memory. */
static bool ensure_easy(fx_multi_t *m, size_t n)
{
    if (n <= m->neasy)
        return true;
    CURL **e = realloc(m->easy, n * sizeof(*e));
    if (!e)
        return false;
    m->easy = e;
    while (m->neasy < n) {
        if (!(m->easy[m->neasy] = curl_easy_init()))
            return false;
        m->neasy++;
    }
    /*
     * libcurl's cache otherwise keeps 4 connections per handle still added:
     * as a batch's last transfers finish it closes the others, and the next
     * batch connects again. Keep one per handle instead.
     */
    curl_multi_setopt(m->multi, CURLMOPT_MAXCONNECTS, (long)m->neasy);
    return true;
}

/* Every request classified transient (nothing was sent): out of memory. */
static void all_oom(fx_response_t *resps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memset(&resps[i], 0, sizeof(resps[i]));
        resps[i].retry_after_ms = -1;
        resps[i].body = calloc(1, 1);
        resps[i].cls = FX_TRANSIENT;
        ib_error_set(&resps[i].err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
}

/* Ends each finished transfer; true when one did. */
static bool reap(fx_multi_t *m)
{
    CURLMsg *msg;
    int left;
    bool any = false;
    while ((msg = curl_multi_info_read(m->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        size_t i = 0;
        while (i < m->n && m->easy[i] != msg->easy_handle)
            i++;
        if (i == m->n || !m->live[i])
            continue;
        CURLcode cc = msg->data.result;
        curl_multi_remove_handle(m->multi, msg->easy_handle);
        fx_exchange_end(msg->easy_handle, cc, &m->xs[i]);
        m->live[i] = false;
        m->ended[i] = true;
        any = true;
    }
    return any;
}

/* The multi failed under the transfers still running: each ends as a failed call. */
static void fail_live(fx_multi_t *m)
{
    for (size_t i = 0; i < m->n; i++) {
        if (!m->live[i])
            continue;
        curl_multi_remove_handle(m->multi, m->easy[i]);
        fx_exchange_end(m->easy[i], CURLE_RECV_ERROR, &m->xs[i]);
        m->live[i] = false;
        m->ended[i] = true;
    }
}

/* Moves the ended, unreturned indices into done; returns how many. */
static size_t take_ended(fx_multi_t *m, size_t *done)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->ended[i]) {
            m->ended[i] = false;
            done[k++] = i;
        }
    return k;
}

void fx_multi_start(fx_multi_t *m, const fx_request_t *reqs, fx_response_t *resps, size_t n)
{
    calls_free(m);
    m->xs = calloc(n ? n : 1, sizeof(*m->xs));
    m->live = calloc(n ? n : 1, sizeof(*m->live));
    m->ended = calloc(n ? n : 1, sizeof(*m->ended));
    if (!m->xs || !m->live || !m->ended || !ensure_easy(m, n)) {
        calls_free(m);
        all_oom(resps, n);
        return; /* fx_multi_next returns 0: every outcome is already in resps */
    }
    m->n = n;
    for (size_t i = 0; i < n; i++) {
        m->ended[i] = true;
        if (!fx_exchange_begin(m->easy[i], &reqs[i], &resps[i], &m->xs[i]))
            continue;
        if (curl_multi_add_handle(m->multi, m->easy[i]) != CURLM_OK) {
            fx_exchange_end(m->easy[i], CURLE_OUT_OF_MEMORY, &m->xs[i]);
            continue;
        }
        m->live[i] = true;
        m->ended[i] = false;
    }
}

size_t fx_multi_next(fx_multi_t *m, size_t *done)
{
    size_t k;
    int running = 1;
    if (!m->xs)
        return 0;
    while ((k = take_ended(m, done)) == 0 && running > 0) {
        if (curl_multi_perform(m->multi, &running) != CURLM_OK) {
            fail_live(m);
            continue;
        }
        if (reap(m))
            continue;
        if (running > 0 && curl_multi_poll(m->multi, NULL, 0, 1000, NULL) != CURLM_OK)
            fail_live(m);
    }
    if (k == 0) {
        fail_live(m); /* none running, yet not every transfer reported done */
        k = take_ended(m, done);
    }
    if (k == 0)
        calls_free(m);
    return k;
}

void fx_multi_call(fx_multi_t *m, const fx_request_t *reqs, fx_response_t *resps, size_t n)
{
    size_t *done = calloc(n ? n : 1, sizeof(*done));
    if (!done) {
        all_oom(resps, n);
        return;
    }
    fx_multi_start(m, reqs, resps, n);
    while (fx_multi_next(m, done) > 0)
        ;
    free(done);
}
