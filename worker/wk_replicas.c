/*
 * wk_replicas.c - the heartbeat thread of what is set for the cluster
 * (see wk_replicas.h). thread: its own, plus wk_replicas_share and
 * wk_replicas_alive from any thread (atomics).
 */
#include "wk_replicas.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db_replicas.h"
#include "ib_backoff.h"
#include "ib_log.h"
#include "ib_time.h"

#define REPLICA_NAME_MAX 200

struct wk_replicas {
    db_options_t opt;
    char *table, *consumer;
    char name[REPLICA_NAME_MAX]; /* host-pid-random: unique, and the order of ranks */
    db_conn_t *dbc;
    atomic_long alive, rank;
    atomic_llong demand_now;  /* the messages this replica holds (wk_replicas_demand) */
    atomic_llong demand_mine; /* as the last heartbeat wrote it */
    atomic_llong demand_all;  /* the sum over the replicas alive, as it read them */
    bool failing;             /* the last heartbeat failed (logged once per run of failures) */
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* under mu */
};

/* One heartbeat; false when the database could not be written. thread: replicas. */
static bool beat(wk_replicas_t *rp)
{
    ib_error_t err;
    db_replica_t me = {rp->consumer, rp->name, ib_now_ms(), atomic_load(&rp->demand_now)};
    db_replicas_seen_t seen = {1, 0, 0};
    if (!rp->dbc)
        rp->dbc = db_conn_new(&rp->opt, &err);
    if (!rp->dbc ||
        db_replicas_beat(rp->dbc, rp->table, &me, WK_REPLICAS_WINDOW_MS, &seen, &err) != IB_E_OK) {
        if (!rp->failing)
            IB_LOG(IB_LOG_WARN, "replicas", IB_MSG("heartbeat failed; the last count holds"),
                   IB_S("table", rp->table), IB_S("sqlstate", err.sqlstate),
                   IB_S("error", err.text), IB_I("replicas", atomic_load(&rp->alive)));
        rp->failing = true;
        return false;
    }
    long was = atomic_exchange(&rp->alive, seen.alive);
    atomic_store(&rp->rank, seen.rank);
    atomic_store(&rp->demand_mine, me.demand);
    atomic_store(&rp->demand_all, seen.demand > me.demand ? seen.demand : me.demand);
    if (was != seen.alive || rp->failing)
        IB_LOG(IB_LOG_INFO, "replicas", IB_MSG("replicas alive"), IB_I("replicas", seen.alive),
               IB_I("rank", seen.rank), IB_S("replica", rp->name));
    rp->failing = false;
    return true;
}

/* Waits wait_ms or until stopped; true when stopped. thread: replicas. */
static bool wait_or_stop(wk_replicas_t *rp, long long wait_ms)
{
    long long until = ib_mono_ms() + wait_ms;
    pthread_mutex_lock(&rp->mu);
    while (!rp->stop && ib_cond_wait_until(&rp->cv, &rp->mu, until) != ETIMEDOUT)
        ;
    bool stop = rp->stop;
    pthread_mutex_unlock(&rp->mu);
    return stop;
}

/*
 * Beats every WK_REPLICAS_BEAT_MS, the first few four times as often:
 * replicas started together (a scale-out) count each other within half a
 * second rather than two. thread: replicas.
 */
static void *replicas_main(void *arg)
{
    wk_replicas_t *rp = arg;
    for (int n = 0; !wait_or_stop(rp, n < 4 ? WK_REPLICAS_BEAT_MS / 4 : WK_REPLICAS_BEAT_MS); n++)
        beat(rp);
    return NULL;
}

static void replicas_free(wk_replicas_t *rp)
{
    db_conn_free(rp->dbc);
    free(rp->table);
    free(rp->consumer);
    free(rp);
}

/* host-pid-random, so that two processes on one host differ too. */
static void make_name(wk_replicas_t *rp)
{
    char host[64] = "host";
    ib_rand_t seed = 0;
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "host");
    host[sizeof host - 1] = '\0';
    snprintf(rp->name, sizeof rp->name, "%s-%ld-%08llx", host, (long)getpid(),
             ib_rand_range(&seed, 0, 0xffffffffLL));
}

wk_replicas_t *wk_replicas_start(const db_options_t *opt, const char *table, const char *consumer,
                                 bool migrate, ib_error_t *err)
{
    wk_replicas_t *rp = calloc(1, sizeof(*rp));
    if (!rp || !(rp->table = strdup(table)) || !(rp->consumer = strdup(consumer))) {
        if (rp)
            replicas_free(rp);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    rp->opt = *opt;
    atomic_init(&rp->alive, 1);
    atomic_init(&rp->rank, 0);
    atomic_init(&rp->demand_now, 0);
    atomic_init(&rp->demand_mine, 0);
    atomic_init(&rp->demand_all, 0);
    make_name(rp);
    if (!(rp->dbc = db_conn_new(&rp->opt, err)) ||
        db_replicas_migrate(rp->dbc, table, migrate, err) != IB_E_OK) {
        replicas_free(rp);
        return NULL;
    }
    beat(rp);
    pthread_mutex_init(&rp->mu, NULL);
    ib_cond_init(&rp->cv);
    if (pthread_create(&rp->tid, NULL, replicas_main, rp) != 0) {
        pthread_mutex_destroy(&rp->mu);
        pthread_cond_destroy(&rp->cv);
        replicas_free(rp);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "cannot start the replicas thread");
        return NULL;
    }
    return rp;
}

void wk_replicas_stop(wk_replicas_t *rp)
{
    ib_error_t err;
    if (!rp)
        return;
    pthread_mutex_lock(&rp->mu);
    rp->stop = true;
    pthread_cond_signal(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    pthread_join(rp->tid, NULL);
    if (rp->dbc && db_replicas_leave(rp->dbc, rp->table, rp->consumer, rp->name, &err) != IB_E_OK)
        IB_LOG(IB_LOG_WARN, "replicas", IB_MSG("could not delete this replica's row"),
               IB_S("error", err.text));
    pthread_mutex_destroy(&rp->mu);
    pthread_cond_destroy(&rp->cv);
    replicas_free(rp);
}

long wk_replicas_alive(const wk_replicas_t *rp)
{
    return rp ? atomic_load(&rp->alive) : 1;
}

/* rank's part of total among n (n > 1): the first total % n ranks take one more. */
static long part_of(long total, long n, long rank)
{
    return total / n + (rank < total % n ? 1 : 0);
}

long wk_replicas_part(const wk_replicas_t *rp, long total)
{
    long n = rp ? atomic_load(&rp->alive) : 1;
    return n <= 1 ? total : part_of(total, n, atomic_load(&rp->rank));
}

void wk_replicas_demand(wk_replicas_t *rp, long long held)
{
    if (rp)
        atomic_store_explicit(&rp->demand_now, held, memory_order_relaxed);
}

double wk_replicas_weight(long n, long long mine, long long all)
{
    if (n <= 1)
        return 1.0;
    if (mine < 0)
        mine = 0;
    if (all < mine)
        all = mine;
    return (double)(mine + 1) / (double)(all + n);
}

void wk_replicas_share(const wk_replicas_t *rp, wk_dest_limits_t *lim)
{
    long n = wk_replicas_alive(rp);
    if (n <= 1)
        return;
    if (lim->rate_per_s > 0)
        lim->rate_per_s *=
            wk_replicas_weight(n, atomic_load(&rp->demand_mine), atomic_load(&rp->demand_all));
    if (lim->max_concurrent > 0) { /* the same count of replicas as the rate's */
        long share = part_of(lim->max_concurrent, n, atomic_load(&rp->rank));
        lim->max_concurrent = share > 0 ? share : -1;
    }
}
