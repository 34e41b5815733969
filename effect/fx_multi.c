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

void fx_multi_free(fx_multi_t *m)
{
    if (!m)
        return;
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

/* Drives the added transfers until none runs; ends each as it finishes. */
static void run(fx_multi_t *m, exchange_t *xs, bool *live, size_t n)
{
    int running = 1;
    while (running > 0) {
        if (curl_multi_perform(m->multi, &running) != CURLM_OK)
            break;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m->multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            size_t i = 0;
            while (i < n && m->easy[i] != msg->easy_handle)
                i++;
            if (i == n)
                continue;
            CURLcode cc = msg->data.result;
            curl_multi_remove_handle(m->multi, msg->easy_handle);
            fx_exchange_end(msg->easy_handle, cc, &xs[i]);
            live[i] = false;
        }
        if (running > 0 && curl_multi_poll(m->multi, NULL, 0, 1000, NULL) != CURLM_OK)
            break;
    }
}

void fx_multi_call(fx_multi_t *m, const fx_request_t *reqs, fx_response_t *resps, size_t n)
{
    exchange_t *xs = calloc(n ? n : 1, sizeof(*xs));
    bool *live = calloc(n ? n : 1, sizeof(*live));
    if (!xs || !live || !ensure_easy(m, n)) {
        free(xs);
        free(live);
        all_oom(resps, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!fx_exchange_begin(m->easy[i], &reqs[i], &resps[i], &xs[i]))
            continue;
        if (curl_multi_add_handle(m->multi, m->easy[i]) != CURLM_OK) {
            fx_exchange_end(m->easy[i], CURLE_OUT_OF_MEMORY, &xs[i]);
            continue;
        }
        live[i] = true;
    }
    run(m, xs, live, n);
    for (size_t i = 0; i < n; i++) {
        if (!live[i])
            continue;
        /* The multi failed under a transfer: it ends as a failed call. */
        curl_multi_remove_handle(m->multi, m->easy[i]);
        fx_exchange_end(m->easy[i], CURLE_RECV_ERROR, &xs[i]);
    }
    free(xs);
    free(live);
}
