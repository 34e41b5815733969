/*
 * The daemon: one proactor thread (inside the sb client), pool_size db
 * worker threads, and the main thread, which waits for signals, writes the
 * stats line and runs the drain.
 *
 * Life of a job (who holds it in each state):
 *   queued    in the job queue; the client counts it as in flight
 *   running   a db worker runs its inbox transaction
 *   settling  sb_client_settle was called; the proactor owns it and frees it
 *             in on_settled, after logging msg_done
 */
#include "wk_daemon.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db_inbox.h"
#include "ib_log.h"
#include "sb_aad.h"
#include "sb_client.h"
#include "wk_http.h"
#include "wk_metrics.h"
#include "wk_pipeline.h"
#include "wk_route.h"

#define STATS_INTERVAL_MS 30000
#define REASONS_MAX 32

typedef struct job {
    sb_msg_t *msg;
    long long received_mono;
    atomic_bool lock_lost;
    wk_decision_t d;
    struct job *prev, *next; /* in-flight list, arrival order */
    struct job *qnext;       /* job queue */
} job_t;

typedef struct daemon {
    const wk_config_t *cfg;
    wk_routes_t routes;
    wk_metrics_t *metrics;
    wk_http_t *http;
    sb_client_t *client;
    sb_aad_t *aad; /* servicebus.auth workload_identity */
    wk_pipeline_t pipe;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* job queue non-empty, or stop */
    job_t *qhead, *qtail;
    size_t queued;
    job_t *oldest, *newest; /* in-flight list */
    size_t in_flight;
    bool stop_workers;
    size_t busy_workers;

    atomic_bool stopping; /* draining: no new retries */
    atomic_llong retry_deadline_ms;

    /* counters for the stats line */
    atomic_ullong n_outcome[WK_OUT_RELEASED + 1];
    atomic_ullong n_lock_lost;
    struct {
        char name[64];
        unsigned long long n;
    } reasons[REASONS_MAX];
    size_t nreasons;
} daemon_t;

/* ---- job queue and in-flight list (mu held) --------------------------- */

static void inflight_add(daemon_t *dm, job_t *j)
{
    j->prev = dm->newest;
    j->next = NULL;
    if (dm->newest)
        dm->newest->next = j;
    else
        dm->oldest = j;
    dm->newest = j;
    dm->in_flight++;
}

static void inflight_remove(daemon_t *dm, job_t *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        dm->oldest = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        dm->newest = j->prev;
    dm->in_flight--;
}

static job_t *inflight_find(daemon_t *dm, const sb_msg_t *msg)
{
    for (job_t *j = dm->oldest; j; j = j->next)
        if (j->msg == msg)
            return j;
    return NULL;
}

static void publish_in_flight(daemon_t *dm)
{
    wk_metrics_in_flight_set(dm->metrics, (long long)dm->in_flight);
    wk_metrics_oldest_in_flight_set(dm->metrics, dm->oldest ? dm->oldest->received_mono : 0);
}

/* ---- client callbacks (thread: proactor) ------------------------------ */

static void on_message(sb_msg_t *msg, void *ctx)
{
    daemon_t *dm = ctx;
    job_t *j = calloc(1, sizeof(*j));

    wk_http_heartbeat(dm->http);
    if (!j) {
        /* Cannot track it: hand it back at once, it will be redelivered. */
        sb_client_settle(dm->client, msg, SB_RELEASE, NULL, NULL);
        return;
    }
    j->msg = msg;
    j->received_mono = ib_mono_ms();
    atomic_init(&j->lock_lost, false);
    pthread_mutex_lock(&dm->mu);
    inflight_add(dm, j);
    publish_in_flight(dm);
    if (dm->qtail)
        dm->qtail->qnext = j;
    else
        dm->qhead = j;
    dm->qtail = j;
    dm->queued++;
    pthread_cond_signal(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
}

static void count_reason(daemon_t *dm, const char *reason)
{
    size_t i;
    for (i = 0; i < dm->nreasons; i++)
        if (strcmp(dm->reasons[i].name, reason) == 0)
            break;
    if (i == dm->nreasons) {
        if (dm->nreasons == REASONS_MAX) {
            reason = "other";
            for (i = 0; i < dm->nreasons && strcmp(dm->reasons[i].name, "other") != 0; i++)
                ;
            if (i == dm->nreasons)
                i = REASONS_MAX - 1;
        } else {
            dm->nreasons++;
        }
        ib_strlcpy(dm->reasons[i].name, reason, sizeof(dm->reasons[i].name));
    }
    dm->reasons[i].n++;
}

static wk_result_t metric_result(wk_outcome_t o)
{
    switch (o) {
    case WK_OUT_DUPLICATE:
        return WK_RESULT_DUPLICATE;
    case WK_OUT_CONFLICT:
        return WK_RESULT_CONFLICT;
    case WK_OUT_DEAD_LETTERED:
        return WK_RESULT_DEAD_LETTERED;
    case WK_OUT_ABANDONED:
        return WK_RESULT_ABANDONED;
    case WK_OUT_RELEASED:
        return WK_RESULT_LOCK_LOST;
    default:
        return WK_RESULT_APPLIED; /* applied, skipped, recorded: completed */
    }
}

static void on_settled(sb_msg_t *msg, sb_disposition_t disp, const ib_error_t *res, void *ctx)
{
    daemon_t *dm = ctx;
    job_t *j;
    char enq[32];
    const char *result;
    bool lost = res->code != IB_E_OK;
    wk_decision_t none;

    wk_http_heartbeat(dm->http);
    pthread_mutex_lock(&dm->mu);
    j = inflight_find(dm, msg);
    if (j) {
        inflight_remove(dm, j);
        publish_in_flight(dm);
    }
    pthread_mutex_unlock(&dm->mu);
    if (!j) {
        memset(&none, 0, sizeof(none));
        none.outcome = WK_OUT_RELEASED;
    }
    const wk_decision_t *d = j ? &j->d : &none;

    /* A message released at drain was never processed: not an outcome. */
    if (res->code == IB_E_OK && d->outcome == WK_OUT_RELEASED && disp == SB_RELEASE &&
        !(j && atomic_load(&j->lock_lost))) {
        free(j);
        return;
    }
    if (lost) {
        result = "lock_lost";
        atomic_fetch_add(&dm->n_lock_lost, 1);
        wk_metrics_message(dm->metrics, WK_RESULT_LOCK_LOST);
    } else {
        result = wk_outcome_name(d->outcome);
        atomic_fetch_add(&dm->n_outcome[d->outcome], 1);
        wk_metrics_message(dm->metrics, metric_result(d->outcome));
        if (d->disposition == SB_DEADLETTER) {
            wk_metrics_dead_letter(dm->metrics, d->reason);
            pthread_mutex_lock(&dm->mu);
            count_reason(dm, d->reason);
            pthread_mutex_unlock(&dm->mu);
        }
    }
    ib_time_rfc3339(enq, sizeof(enq), msg->enqueued_ms);
    IB_LOG(lost || d->disposition == SB_DEADLETTER ? IB_LOG_WARN : IB_LOG_INFO, "msg_done",
           IB_MSG(lost ? "settlement failed; the broker will redeliver" : "message settled"),
           IB_S("consumer", dm->cfg->consumer), IB_S("entity", dm->cfg->servicebus.entity),
           IB_S("message_id", msg->message_id), IB_S("correlation_id", msg->correlation_id),
           IB_S("session_id", msg->session_id), IB_S("subject", msg->subject),
           IB_I("delivery_count", msg->delivery_count),
           IB_I("sequence_number", msg->sequence_number),
           IB_S("enqueued_at", msg->enqueued_ms ? enq : NULL), IB_S("lock_token", msg->lock_token),
           IB_S("result", result), IB_S("disposition", sb_disposition_name(disp)),
           IB_S("reason", d->disposition == SB_DEADLETTER ? d->reason : NULL),
           IB_S("error_class", d->err.code ? ib_class_name(d->err.cls) : NULL),
           IB_S("sqlstate", d->err.sqlstate[0] ? d->err.sqlstate : NULL),
           IB_I("native_error", d->err.native),
           IB_S("error", d->err.code ? d->err.text : (lost ? res->text : NULL)),
           IB_I("duration_ms", d->duration_ms), IB_I("attempt", d->attempts),
           IB_B("duplicate", d->outcome == WK_OUT_DUPLICATE));
    free(j);
}

static void on_lock_lost(sb_msg_t *msg, void *ctx)
{
    daemon_t *dm = ctx;
    pthread_mutex_lock(&dm->mu);
    job_t *j = inflight_find(dm, msg);
    if (j)
        atomic_store(&j->lock_lost, true);
    pthread_mutex_unlock(&dm->mu);
    IB_LOG(IB_LOG_WARN, "lock_lost", IB_MSG("message lock lost; its settlement will fail"),
           IB_S("message_id", msg->message_id), IB_S("lock_token", msg->lock_token));
}

static void on_state(int up, const ib_error_t *why, void *ctx)
{
    daemon_t *dm = ctx;
    wk_http_heartbeat(dm->http);
    wk_http_set_condition(dm->http, WK_HTTP_AMQP_CONNECTED, up);
    wk_http_set_condition(dm->http, WK_HTTP_LINKS_ATTACHED, up);
    if (up)
        IB_LOG(IB_LOG_INFO, "connected", IB_MSG("receiving"),
               IB_S("entity", dm->cfg->servicebus.entity));
    else
        IB_LOG(IB_LOG_WARN, "disconnected", IB_MSG(why && why->text[0] ? why->text : "link down"),
               IB_S("condition", why ? why->condition : NULL));
}

/* ---- db workers -------------------------------------------------------- */

typedef struct worker {
    daemon_t *dm;
    pthread_t tid;
    int id;
    db_options_t opt;
} worker_t;

static job_t *pop_job(daemon_t *dm)
{
    job_t *j;
    pthread_mutex_lock(&dm->mu);
    while (!dm->qhead && !dm->stop_workers)
        pthread_cond_wait(&dm->cv, &dm->mu);
    j = dm->qhead;
    if (j) {
        dm->qhead = j->qnext;
        if (!dm->qhead)
            dm->qtail = NULL;
        dm->queued--;
        dm->busy_workers++;
    }
    pthread_mutex_unlock(&dm->mu);
    return j;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    daemon_t *dm = w->dm;
    db_conn_t *dbc = NULL;
    job_t *j;
    int fails = 0;

    while ((j = pop_job(dm)) != NULL) {
        sb_msg_t *msg = j->msg;
        while (!dbc && !atomic_load(&dm->stopping) && !atomic_load(&j->lock_lost)) {
            ib_error_t err;
            dbc = db_conn_new(&w->opt, &err);
            if (!dbc) {
                atomic_store(&dm->pipe.db_reachable, false);
                if (fails++ % 10 == 0)
                    IB_LOG(IB_LOG_ERROR, "db_connect", IB_MSG(err.text),
                           IB_S("sqlstate", err.sqlstate), IB_I("worker", w->id));
                usleep(200000 + (useconds_t)(rand() % 800000));
            }
        }
        if (!dbc) {
            /* Draining, or the lock is gone, and no database: give the
             * message back untouched. */
            j->d.outcome = WK_OUT_RELEASED;
            j->d.disposition = SB_RELEASE;
        } else {
            fails = 0;
            wk_pipeline_process(&dm->pipe, dbc, msg, &j->lock_lost, &j->d);
        }
        pthread_mutex_lock(&dm->mu);
        dm->busy_workers--;
        pthread_mutex_unlock(&dm->mu);
        /* After this call the proactor owns j. */
        sb_client_settle(dm->client, msg, j->d.disposition,
                         j->d.disposition == SB_DEADLETTER ? j->d.reason : NULL,
                         j->d.disposition == SB_DEADLETTER ? j->d.description : NULL);
    }
    db_conn_free(dbc);
    return NULL;
}

/* ---- retention sweeper ------------------------------------------------- */

#define SWEEP_INTERVAL_MS (10 * 60 * 1000)
#define SWEEP_BATCH 500

typedef struct sweeper {
    daemon_t *dm;
    db_options_t opt;
    pthread_t tid;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
} sweeper_t;

/*
 * Deletes inbox rows older than db.inbox_retention_days in small batches,
 * five seconds after start and then every ten minutes, on a connection of
 * its own. db_inbox_sweep lets one replica sweep at a time.
 * thread: sweeper.
 */
static void *sweeper_main(void *arg)
{
    sweeper_t *sw = arg;
    long long wait_ms = 5000; /* first sweep soon after start */

    for (;;) {
        struct timespec ts;
        ib_error_t err;
        db_conn_t *dbc;
        long long n;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(wait_ms / 1000);
        pthread_mutex_lock(&sw->mu);
        while (!sw->stop && pthread_cond_timedwait(&sw->cv, &sw->mu, &ts) != ETIMEDOUT)
            ;
        bool stop = sw->stop;
        pthread_mutex_unlock(&sw->mu);
        if (stop)
            break;
        wait_ms = SWEEP_INTERVAL_MS;
        dbc = db_conn_new(&sw->opt, &err);
        n = dbc ? db_inbox_sweep(dbc, (long)sw->dm->cfg->db.inbox_retention_days, SWEEP_BATCH, &err)
                : -1;
        if (n < 0)
            IB_LOG(IB_LOG_WARN, "retention", IB_MSG(err.text), IB_S("sqlstate", err.sqlstate));
        else if (n > 0)
            IB_LOG(IB_LOG_INFO, "retention", IB_MSG("old inbox rows deleted"), IB_I("rows", n),
                   IB_I("older_than_days", sw->dm->cfg->db.inbox_retention_days));
        db_conn_free(dbc);
    }
    return NULL;
}

static void sweeper_stop(sweeper_t *sw)
{
    if (!sw->started)
        return;
    pthread_mutex_lock(&sw->mu);
    sw->stop = true;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    pthread_join(sw->tid, NULL);
    sw->started = false;
}

/* ---- main thread ------------------------------------------------------- */

static void log_stats(daemon_t *dm)
{
    sb_stats_t st;
    char reasons[2048];
    size_t off = 0;
    long long oldest_ms = 0;

    sb_client_stats(dm->client, &st);
    pthread_mutex_lock(&dm->mu);
    off += (size_t)snprintf(reasons, sizeof(reasons), "{");
    for (size_t i = 0; i < dm->nreasons && off < sizeof(reasons) - 80; i++)
        off += (size_t)snprintf(reasons + off, sizeof(reasons) - off, "%s\"%s\":%llu", i ? "," : "",
                                dm->reasons[i].name, dm->reasons[i].n);
    snprintf(reasons + off, sizeof(reasons) - off, "}");
    if (dm->oldest)
        oldest_ms = ib_mono_ms() - dm->oldest->received_mono;
    size_t in_flight = dm->in_flight;
    pthread_mutex_unlock(&dm->mu);
    IB_LOG(IB_LOG_INFO, "stats", IB_MSG("periodic statistics"), IB_S("consumer", dm->cfg->consumer),
           IB_I("processed", atomic_load(&dm->n_outcome[WK_OUT_APPLIED]) +
                                 atomic_load(&dm->n_outcome[WK_OUT_SKIPPED]) +
                                 atomic_load(&dm->n_outcome[WK_OUT_RECORDED])),
           IB_I("applied", atomic_load(&dm->n_outcome[WK_OUT_APPLIED])),
           IB_I("duplicates", atomic_load(&dm->n_outcome[WK_OUT_DUPLICATE])),
           IB_I("conflicts", atomic_load(&dm->n_outcome[WK_OUT_CONFLICT])),
           IB_I("retries", atomic_load(&dm->pipe.retries)),
           IB_I("abandons", atomic_load(&dm->n_outcome[WK_OUT_ABANDONED])),
           IB_J("dead_letters", reasons), IB_I("lock_renewals", st.renewals_ok),
           IB_I("lock_renewal_failures", st.renewals_failed),
           IB_I("lock_losses", atomic_load(&dm->n_lock_lost)), IB_I("in_flight", in_flight),
           IB_I("oldest_in_flight_ms", oldest_ms), IB_I("reconnects", st.reconnects),
           IB_I("sessions_held", st.sessions_held));
}

/* Feeds the broker-side counters of the client into the metrics registry. */
static void sync_client_metrics(daemon_t *dm, sb_stats_t *prev)
{
    sb_stats_t st;
    sb_client_stats(dm->client, &st);
    for (unsigned long long i = prev->renewals_ok; i < st.renewals_ok; i++)
        wk_metrics_lock_renewal(dm->metrics, WK_RENEW_OK);
    for (unsigned long long i = prev->renewals_failed; i < st.renewals_failed; i++)
        wk_metrics_lock_renewal(dm->metrics, WK_RENEW_FAILED);
    for (unsigned long long i = prev->reconnects; i < st.reconnects; i++)
        wk_metrics_reconnect(dm->metrics);
    *prev = st;
}

/* Opens one connection, migrates or checks the schema; retries transient failures. */
static int prepare_db(daemon_t *dm, db_options_t *opt, sigset_t *sigs)
{
    for (int attempt = 1;; attempt++) {
        ib_error_t err;
        db_conn_t *dbc = db_conn_new(opt, &err);
        if (dbc && db_migrate(dbc, dm->cfg->db.migrate, &err) == IB_E_OK) {
            IB_LOG(IB_LOG_INFO, "db_ready",
                   IB_MSG(dm->cfg->db.migrate ? "inbox table ready" : "inbox table checked"),
                   IB_S("dialect", db_dialect_name(db_conn_dialect(dbc))),
                   IB_S("table", dm->cfg->db.inbox_table));
            db_conn_free(dbc);
            return 0;
        }
        db_conn_free(dbc);
        IB_LOG(IB_LOG_ERROR, "db_connect", IB_MSG(err.text), IB_S("sqlstate", err.sqlstate),
               IB_I("native_error", err.native), IB_S("error_class", ib_class_name(err.cls)),
               IB_I("attempt", attempt));
        if (err.cls != IB_CLASS_TRANSIENT)
            return 1;
        wk_http_heartbeat(dm->http); /* alive, waiting for the database */
        struct timespec ts = {attempt < 5 ? 1 : 5, 0};
        if (sigtimedwait(sigs, NULL, &ts) > 0)
            return 1;
    }
}

static void drain_queue(daemon_t *dm)
{
    job_t *list;
    pthread_mutex_lock(&dm->mu);
    list = dm->qhead;
    dm->qhead = dm->qtail = NULL;
    dm->queued = 0;
    pthread_mutex_unlock(&dm->mu);
    while (list) {
        job_t *next = list->qnext;
        list->d.outcome = WK_OUT_RELEASED;
        list->d.disposition = SB_RELEASE;
        sb_client_settle(dm->client, list->msg, SB_RELEASE, NULL, NULL);
        list = next;
    }
}

int wk_daemon_run(const wk_config_t *cfg)
{
    daemon_t *dm = calloc(1, sizeof(*dm));
    worker_t *workers = NULL;
    db_options_t dbopt;
    sigset_t sigs;
    ib_error_t err;
    int rc = 1, nworkers = (int)cfg->db.pool_size, started = 0;
    sb_stats_t prev;
    bool draining = false, clean = true;
    sweeper_t sweeper = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    long long next_stats, drain_deadline = 0;

    if (!dm)
        return 1;
    memset(&prev, 0, sizeof(prev));
    memset(&dbopt, 0, sizeof(dbopt));
    dm->cfg = cfg;
    pthread_mutex_init(&dm->mu, NULL);
    pthread_cond_init(&dm->cv, NULL);

    /* Signals go to this thread alone, through sigtimedwait. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (wk_routes_compile(cfg->routes, &dm->routes, stderr) != 0) {
        rc = 2;
        goto out;
    }
    dm->metrics = wk_metrics_new(NULL);
    dm->http =
        wk_http_start(&(wk_http_opts_t){.listen = cfg->http.listen, .metrics = dm->metrics}, &err);
    if (!dm->http) {
        IB_LOG(IB_LOG_ERROR, "http", IB_MSG(err.text), IB_S("listen", cfg->http.listen));
        rc = err.code == IB_E_CONFIG ? 2 : 1;
        goto out;
    }

    dbopt.connection_string = cfg->db.connection_string;
    dbopt.dialect = (db_dialect_t)db_dialect_parse(cfg->db.dialect);
    dbopt.inbox_table = cfg->db.inbox_table;
    dbopt.statement_timeout_s = (long)cfg->db.statement_timeout_s;
    if (db_codes_from_json(cfg->errors.transient_native, "errors.transient_native",
                           &dbopt.transient_native, &err) != IB_E_OK ||
        db_codes_from_json(cfg->errors.permanent_native, "errors.permanent_native",
                           &dbopt.permanent_native, &err) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "config", IB_MSG(err.text));
        rc = 2;
        goto out;
    }
    if (prepare_db(dm, &dbopt, &sigs) != 0)
        goto out;
    wk_http_set_condition(dm->http, WK_HTTP_DB_REACHABLE, true);

    dm->pipe.cfg = cfg;
    dm->pipe.routes = &dm->routes;
    dm->pipe.metrics = dm->metrics;
    dm->pipe.stopping = &dm->stopping;
    dm->pipe.retry_deadline_ms = &dm->retry_deadline_ms;
    atomic_init(&dm->pipe.db_reachable, true);

    sb_options_t so = {
        .connection_string = cfg->servicebus.connection_string,
        .entity = cfg->servicebus.entity,
        .sessions = cfg->servicebus.sessions,
        .prefetch = (unsigned)cfg->servicebus.prefetch,
        .max_concurrent_calls = (unsigned)cfg->servicebus.max_concurrent_calls,
        .max_concurrent_sessions = (unsigned)cfg->servicebus.max_concurrent_sessions,
        .max_auto_lock_renewal_s = (unsigned)cfg->servicebus.max_auto_lock_renewal_s,
        .session_idle_timeout_s = (unsigned)cfg->servicebus.session_idle_timeout_s,
        .reconnect_max_ms = (unsigned)cfg->servicebus.reconnect_max_ms,
        .ca_file = cfg->servicebus.ca_file[0] ? cfg->servicebus.ca_file : NULL,
    };
    if (strcmp(cfg->servicebus.auth, "workload_identity") == 0) {
        /* Azure AD workload identity: the token comes from the federated
         * credential the kubelet projects; fail fast when it cannot. */
        dm->aad = sb_aad_new(NULL, &err);
        if (!dm->aad || sb_aad_wait(dm->aad, 30000, &err) != IB_E_OK) {
            IB_LOG(IB_LOG_ERROR, "aad_token", IB_MSG(err.text));
            rc = err.code == IB_E_CONFIG ? 2 : 1;
            goto out;
        }
        so.token_get = sb_aad_token_get;
        so.token_ctx = dm->aad;
    }
    sb_callbacks_t cb = {on_message, on_settled, on_lock_lost, on_state, dm};
    dm->client = sb_client_new(&so, &cb, &err);
    if (!dm->client) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG(err.text));
        rc = err.code == IB_E_CONFIG ? 2 : 1;
        goto out;
    }

    workers = calloc((size_t)nworkers, sizeof(*workers));
    for (started = 0; workers && started < nworkers; started++) {
        workers[started] = (worker_t){.dm = dm, .id = started, .opt = dbopt};
        if (pthread_create(&workers[started].tid, NULL, worker_main, &workers[started]) != 0)
            break;
    }
    if (started < nworkers) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG("cannot start the db worker threads"));
        goto stop_workers;
    }
    if (sb_client_start(dm->client) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG("cannot start the AMQP client"));
        goto stop_workers;
    }
    if (cfg->db.inbox_retention_days > 0) {
        sweeper.dm = dm;
        sweeper.opt = dbopt;
        sweeper.started = pthread_create(&sweeper.tid, NULL, sweeper_main, &sweeper) == 0;
    }
    IB_LOG(IB_LOG_INFO, "start", IB_MSG("inboxd running"), IB_S("consumer", cfg->consumer),
           IB_S("entity", cfg->servicebus.entity), IB_I("db_workers", nworkers),
           IB_B("sessions", cfg->servicebus.sessions), IB_S("version", INBOXD_VERSION));

    next_stats = ib_mono_ms() + STATS_INTERVAL_MS;
    for (;;) {
        struct timespec ts = {0, 250 * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        long long now = ib_mono_ms();

        wk_http_set_condition(dm->http, WK_HTTP_DB_REACHABLE, atomic_load(&dm->pipe.db_reachable));
        sync_client_metrics(dm, &prev);
        /* Live while the proactor keeps turning (it wakes every 100 ms). */
        if (prev.loop_mono_ms && now - prev.loop_mono_ms < 5000)
            wk_http_heartbeat(dm->http);
        if (sig > 0 && draining) {
            IB_LOG(IB_LOG_WARN, "shutdown", IB_MSG("second signal: exiting at once"));
            fflush(stdout);
            _exit(128 + sig);
        }
        if (sig > 0) {
            draining = true;
            drain_deadline = now + cfg->shutdown.drain_timeout_s * 1000;
            atomic_store(&dm->retry_deadline_ms, drain_deadline);
            wk_http_set_draining(dm->http, true);
            IB_LOG(IB_LOG_INFO, "shutdown", IB_MSG("draining"), IB_S("signal", strsignal(sig)),
                   IB_I("drain_timeout_s", cfg->shutdown.drain_timeout_s));
            sb_client_stop_receiving(dm->client);
            drain_queue(dm);
        }
        if (now >= next_stats) {
            log_stats(dm);
            next_stats = now + STATS_INTERVAL_MS;
        }
        if (draining) {
            size_t busy, inflight;
            drain_queue(dm); /* anything that arrived before credit stopped */
            pthread_mutex_lock(&dm->mu);
            busy = dm->busy_workers;
            inflight = dm->in_flight;
            pthread_mutex_unlock(&dm->mu);
            if (busy == 0 && inflight == 0) {
                rc = 0;
                break;
            }
            if (now >= drain_deadline) {
                IB_LOG(IB_LOG_WARN, "shutdown",
                       IB_MSG("drain timeout: leaving unfinished messages to their locks"),
                       IB_I("busy_workers", busy), IB_I("in_flight", inflight));
                clean = busy == 0;
                rc = 0;
                break;
            }
        }
    }
    atomic_store(&dm->stopping, true);

stop_workers:
    sweeper_stop(&sweeper);
    if (dm->client)
        sb_client_stop(dm->client);
    log_stats(dm);
    IB_LOG(IB_LOG_INFO, "shutdown", IB_MSG("stopped"), IB_I("exit_status", rc));
    if (!clean) {
        /* A worker is still inside the database: its transaction dies with
         * the process (never committed-and-completed), so exit now. */
        fflush(stdout);
        _exit(rc);
    }
    pthread_mutex_lock(&dm->mu);
    dm->stop_workers = true;
    pthread_cond_broadcast(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
    for (int i = 0; i < started; i++)
        pthread_join(workers[i].tid, NULL);
    free(workers);
out:
    sb_client_free(dm->client);
    sb_aad_free(dm->aad);
    wk_http_stop(dm->http);
    wk_metrics_free(dm->metrics);
    db_codes_free(&dbopt.transient_native);
    db_codes_free(&dbopt.permanent_native);
    wk_routes_free(&dm->routes);
    pthread_mutex_destroy(&dm->mu);
    pthread_cond_destroy(&dm->cv);
    free(dm);
    return rc;
}
