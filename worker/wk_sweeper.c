/*
 * wk_sweeper.c - the retention sweeper thread (see wk_sweeper.h).
 * db_inbox_sweep lets one replica sweep at a time.
 */
#include "wk_sweeper.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "db_inbox.h"
#include "ib_log.h"

#define SWEEP_FIRST_MS 5000
#define SWEEP_INTERVAL_MS (10 * 60 * 1000)
#define SWEEP_BATCH 500

struct wk_sweeper {
    db_options_t opt;
    long days;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* under mu */
};

/* Waits wait_ms or until stopped; returns true when stopped. thread: sweeper. */
static bool wait_or_stop(wk_sweeper_t *sw, long long wait_ms)
{
    long long until = ib_mono_ms() + wait_ms;
    pthread_mutex_lock(&sw->mu);
    while (!sw->stop && ib_cond_wait_until(&sw->cv, &sw->mu, until) != ETIMEDOUT)
        ;
    bool stop = sw->stop;
    pthread_mutex_unlock(&sw->mu);
    return stop;
}

/* One sweep on a fresh connection. thread: sweeper. */
static void sweep_once(wk_sweeper_t *sw)
{
    ib_error_t err;
    db_conn_t *dbc = db_conn_new(&sw->opt, &err);
    long long n = dbc ? db_inbox_sweep(dbc, sw->days, SWEEP_BATCH, &err) : -1;
    if (n < 0)
        IB_LOG(IB_LOG_WARN, "retention", IB_MSG(err.text), IB_S("sqlstate", err.sqlstate));
    else if (n > 0)
        IB_LOG(IB_LOG_INFO, "retention", IB_MSG("old inbox rows deleted"), IB_I("rows", n),
               IB_I("older_than_days", sw->days));
    db_conn_free(dbc);
}

static void *sweeper_main(void *arg)
{
    wk_sweeper_t *sw = arg;
    for (long long wait_ms = SWEEP_FIRST_MS; !wait_or_stop(sw, wait_ms); wait_ms = SWEEP_INTERVAL_MS)
        sweep_once(sw);
    return NULL;
}

wk_sweeper_t *wk_sweeper_start(const db_options_t *opt, long days)
{
    wk_sweeper_t *sw;
    if (days <= 0 || !(sw = calloc(1, sizeof(*sw))))
        return NULL;
    sw->opt = *opt;
    sw->days = days;
    pthread_mutex_init(&sw->mu, NULL);
    ib_cond_init(&sw->cv);
    if (pthread_create(&sw->tid, NULL, sweeper_main, sw) != 0) {
        pthread_mutex_destroy(&sw->mu);
        pthread_cond_destroy(&sw->cv);
        free(sw);
        return NULL;
    }
    return sw;
}

void wk_sweeper_stop(wk_sweeper_t *sw)
{
    if (!sw)
        return;
    pthread_mutex_lock(&sw->mu);
    sw->stop = true;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    pthread_join(sw->tid, NULL);
    pthread_mutex_destroy(&sw->mu);
    pthread_cond_destroy(&sw->cv);
    free(sw);
}
