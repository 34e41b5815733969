/*
 * The daemon: one proactor thread (inside the sb client), pool_size db
 * worker threads, the retention sweeper (wk_sweeper.c), the HTTP thread
 * (wk_health.c), and the main thread, which runs wk_daemon_run: start, run
 * until a signal, drain, stop.
 *
 * Life of a job (who holds it in each state):
 *   queued    in the job queue; the client counts it as in flight
 *   running   a db worker runs its inbox transaction
 *   settling  sb_client_settle was called; the proactor owns it and frees it
 *             in on_settled, after logging msg_done
 */
#include "wk_daemon.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "db_effect.h"
#include "db_inbox.h"
#include "ib_backoff.h"
#include "ib_log.h"
#include "sb_aad.h"
#include "sb_client.h"
#include "wk_claim.h"
#include "wk_dbopt.h"
#include "wk_entity.h"
#include "wk_limits.h"
#include "wk_health.h"
#include "wk_metrics.h"
#include "wk_outbox.h"
#include "wk_pipeline.h"
#include "rt_route.h"
#include "wk_replicas.h"
#include "wk_sweeper.h"
#include "wk_trace.h"

#define STATS_INTERVAL_MS 30000
#define TICK_MS 250
/* A message's part of its batch's time below which a worker takes every queued job (batch_share). */
#define WK_BATCH_CHEAP_US 2000

typedef struct job {
    sb_msg_t *msg;
    long long received_mono;
    atomic_bool lock_lost;
    wk_decision_t d;
    wk_trace_t trace; /* its consumer span (tracing on); msg->user points here */
    struct job *prev, *next; /* in-flight list, arrival order */
    struct job *qnext;       /* job queue, or the held list */
    long long hold_until;    /* held: mono ms before which it is not offered again */
    /* Its session's jobs in flight, in arrival order (the session's order). */
    struct job *sprev, *snext;
    unsigned shash;          /* of msg->session_id */
    unsigned long take_gen;  /* the take_jobs call that took it last */
    bool stopped;            /* settled so that its session cannot go on past it */
    bool passed;             /* committed (or skipped) and being completed: later ones may go */
} job_t;

typedef struct daemon daemon_t;

typedef struct worker {
    daemon_t *dm;
    pthread_t tid;
    int id;
    ib_rand_t seed; /* the reconnect backoff's state */
} worker_t;

struct daemon {
    const wk_config_t *cfg;
    sigset_t sigs; /* SIGTERM, SIGINT: taken by the main thread alone */
    rt_routes_t routes;
    wk_dbopt_t db; /* database options, db.auth's token source */
    wk_metrics_t *metrics;
    wk_health_t *http;
    sb_aad_t *aad;    /* servicebus.auth workload_identity */
    sb_client_t *client;
    wk_pipeline_t pipe;
    wk_sweeper_t *sweeper;
    wk_entity_t *entity; /* servicebus.entity_poll_s; NULL when off */
    bool entity_checked; /* the settings were held against its first read (thread: main) */
    bool curl_inited;    /* start_entity's curl_global_init, paired at stop */
    bool relay_only;         /* inboxd --relay-only: no receiver, no db workers */
    wk_outbox_plan_t outbox; /* whether the outbox table is used and relayed here */
    rl_relay_t *relay;
    worker_t *workers;
    int nworkers; /* started */

    pthread_mutex_t mu;
    pthread_cond_t cv; /* job queue non-empty, or stop */
    pthread_cond_t gate_cv; /* workers beyond this replica's part of the pool wait here */
    bool pool_shared;       /* db.pool_scope "cluster" with the heartbeat running */
    job_t *qhead, *qtail;
    size_t queued;
    size_t unwoken; /* queued by on_message since the proactor's batch ended (on_batch_end) */
    long long msg_cost_us; /* a message's part of its batch's time, averaged; < 0: none yet */
    job_t *held;            /* held for their HTTP destination (wk_dest.h), any order */
    size_t nheld;
    job_t *oldest, *newest; /* in-flight list */
    size_t in_flight;
    unsigned long take_gen; /* take_jobs calls so far */
    long long oldest_enqueued_ms; /* as last published (publish_in_flight, the tick) */
    bool stop_workers;
    size_t busy_workers;
    size_t refused_workers; /* waiting in connect_first after the database refused them */
    size_t connected_workers; /* workers holding a database connection */
    atomic_bool pool_limit_told; /* the db_pool_limited warning was logged */

    atomic_bool stopping; /* draining: no new retries */
    atomic_llong retry_deadline_ms;

    wk_breaker_t *breaker; /* shared with the pipeline */
    ot_exporter_t *otel;   /* NULL: tracing off */
    wk_dests_t *dests;     /* shared with the pipeline */

    /* thread: proactor (the client callbacks); freed after the client stops */
    job_t *spare;  /* settled jobs kept for the next messages, through qnext */
    size_t nspare;

    /* thread: main */
    bool circuit_open;      /* as last applied to the client, metrics and logs */
    sb_stats_t client_seen; /* the client's counters already fed into metrics */
    long long next_stats;
};

/* ---- job queue and in-flight list (mu held) --------------------------- */

/* Appends j to the job queue (the caller wakes a worker). */
static void queue_push(daemon_t *dm, job_t *j)
{
    j->qnext = NULL;
    if (dm->qtail)
        dm->qtail->qnext = j;
    else
        dm->qhead = j;
    dm->qtail = j;
    dm->queued++;
}

static unsigned session_hash(const char *sid)
{
    unsigned h = 2166136261u;
    for (; *sid; sid++)
        h = (h ^ (unsigned char)*sid) * 16777619u;
    return h;
}

/*
 * Of one session under one lock. Under a new lock the broker delivers again
 * from the session's first unsettled message, so the new link's jobs keep
 * the order among themselves; jobs left from the lock before meet them only
 * in the inbox (a duplicate, or a claim waiting on the other's commit). Its
 * jobs going back must not send back the new lock's: they would be
 * delivered again and sent back again for as long as one is in flight.
 */
static bool same_session(const job_t *a, const job_t *b)
{
    return a->shash == b->shash && a->msg->link_seq == b->msg->link_seq &&
           strcmp(a->msg->session_id, b->msg->session_id) == 0;
}

/* Links j behind the latest job of its session (and lock) in flight (none: the first). */
static void session_link(daemon_t *dm, job_t *j)
{
    if (!j->msg->session_id)
        return;
    j->shash = session_hash(j->msg->session_id);
    for (job_t *k = dm->newest; k; k = k->prev)
        if (k->msg->session_id && same_session(k, j)) {
            j->sprev = k;
            k->snext = j;
            return;
        }
}

static void inflight_add(daemon_t *dm, job_t *j)
{
    session_link(dm, j);
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
    if (j->sprev)
        j->sprev->snext = j->snext;
    if (j->snext)
        j->snext->sprev = j->sprev;
    j->sprev = j->snext = NULL;
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

/* Rescans the in-flight list for the oldest enqueued time (under dm->mu; from the tick). */
static void publish_oldest_enqueued(daemon_t *dm)
{
    long long enq = 0;
    /* The first received is not always the first enqueued (redeliveries, sessions). */
    for (job_t *j = dm->oldest; j; j = j->next)
        if (j->msg->enqueued_ms > 0 && (enq == 0 || j->msg->enqueued_ms < enq))
            enq = j->msg->enqueued_ms;
    dm->oldest_enqueued_ms = enq;
    wk_metrics_oldest_enqueued_set(dm->metrics, enq);
}

/*
 * Under dm->mu, after added joined (or a job left, added NULL). The oldest
 * enqueued time is lowered here at once and zeroed when nothing is left;
 * when it rises (its job left) the tick's rescan catches up within TICK_MS:
 * a rescan per message would cost O(in flight) each time.
 */
static void publish_in_flight(daemon_t *dm, const job_t *added)
{
    long long enq = added ? added->msg->enqueued_ms : 0;

    wk_metrics_in_flight_set(dm->metrics, (long long)dm->in_flight);
    wk_replicas_demand(dm->pipe.replicas, (long long)dm->in_flight);
    wk_metrics_oldest_in_flight_set(dm->metrics, dm->oldest ? dm->oldest->received_mono : 0);
    if (!dm->oldest) {
        dm->oldest_enqueued_ms = 0;
        wk_metrics_oldest_enqueued_set(dm->metrics, 0);
    } else if (enq > 0 && (dm->oldest_enqueued_ms == 0 || enq < dm->oldest_enqueued_ms)) {
        dm->oldest_enqueued_ms = enq;
        wk_metrics_oldest_enqueued_set(dm->metrics, enq);
    }
}

/* ---- client callbacks (thread: proactor) ------------------------------ */

/*
 * Settled jobs kept for reuse, up to JOB_SPARE_MAX: a job is some 3 KB, and
 * a new one per message cost a malloc that first merged glibc's small free
 * chunks (malloc_consolidate) every time.
 */
#define JOB_SPARE_MAX 256

/* A zeroed job: a spare one, else a new one; NULL when out of memory. */
static job_t *job_new(daemon_t *dm)
{
    job_t *j = dm->spare;
    if (!j)
        return calloc(1, sizeof(*j));
    dm->spare = j->qnext;
    dm->nspare--;
    memset(j, 0, sizeof(*j));
    return j;
}

static void job_free(daemon_t *dm, job_t *j)
{
    if (!j)
        return;
    if (dm->nspare >= JOB_SPARE_MAX) {
        free(j);
        return;
    }
    j->qnext = dm->spare;
    dm->spare = j;
    dm->nspare++;
}

/* The spare jobs, once the client (whose callbacks take and give them) has stopped. */
static void jobs_spare_free(daemon_t *dm)
{
    while (dm->spare) {
        job_t *j = dm->spare;
        dm->spare = j->qnext;
        free(j);
    }
    dm->nspare = 0;
}

static void on_message(sb_msg_t *msg, void *ctx)
{
    daemon_t *dm = ctx;
    job_t *j = job_new(dm);

    wk_health_heartbeat(dm->http);
    if (!j) {
        /* Cannot track it: hand it back at once, it will be redelivered. */
        sb_client_settle(dm->client, msg, SB_RELEASE, NULL, NULL);
        return;
    }
    j->msg = msg;
    j->received_mono = ib_mono_ms();
    wk_trace_begin(dm->otel, dm->cfg, msg, &j->trace);
    atomic_init(&j->lock_lost, false);
    pthread_mutex_lock(&dm->mu);
    inflight_add(dm, j);
    publish_in_flight(dm, j);
    /* Behind one of its session that went back: it goes back too, after it. */
    bool stopped = j->sprev && j->sprev->stopped;
    j->stopped = stopped;
    if (!stopped) {
        queue_push(dm, j);
        dm->unwoken++; /* workers are woken at the batch's end, for all its messages */
    }
    pthread_mutex_unlock(&dm->mu);
    /* Not j->stopped: once queued, j is a worker's (which may stop and settle it). */
    if (stopped) {
        wk_decide(&j->d, WK_OUT_RELEASED);
        sb_client_settle(dm->client, msg, SB_RELEASE, NULL, NULL);
    }
}

/*
 * The proactor's batch of events is over: the jobs on_message queued in it
 * wake a worker for each db.batch_max of them, so that a worker takes the
 * messages of one read together instead of one worker waking per message.
 * thread: proactor.
 */
static void on_batch_end(void *ctx)
{
    daemon_t *dm = ctx;
    size_t max = dm->cfg->db.batch_max > 0 ? (size_t)dm->cfg->db.batch_max : 1;
    pthread_mutex_lock(&dm->mu);
    for (size_t n = dm->unwoken; n > 0; n = n > max ? n - max : 0)
        pthread_cond_signal(&dm->cv);
    dm->unwoken = 0;
    pthread_mutex_unlock(&dm->mu);
}

/* Takes msg's job off the in-flight list; NULL when it has none. */
static job_t *inflight_take(daemon_t *dm, const sb_msg_t *msg)
{
    pthread_mutex_lock(&dm->mu);
    job_t *j = inflight_find(dm, msg);
    if (j) {
        bool frees = j->snext && dm->qhead; /* a later job of its session may go now */
        inflight_remove(dm, j);
        publish_in_flight(dm, NULL);
        if (frees)
            pthread_cond_broadcast(&dm->cv);
    }
    pthread_mutex_unlock(&dm->mu);
    return j;
}

/* The incoming message's causation-id property (the message that caused it); NULL when none. */
static const char *causation_of(const sb_msg_t *msg)
{
    const sb_prop_t *pr = sb_msg_prop(msg, "causation-id");
    return pr && pr->type == SB_PROP_STRING ? pr->str : NULL;
}

/* The msg_done line: one per message outcome. */
static void log_done(daemon_t *dm, const sb_msg_t *msg, sb_disposition_t disp,
                     const ib_error_t *res, const wk_decision_t *d, wk_outcome_t o,
                     const wk_trace_t *t)
{
    char enq[32], trace[WK_TRACE_ID_MAX];
    bool lost = o == WK_OUT_LOCK_LOST || o == WK_OUT_SETTLEMENT_UNKNOWN;
    bool dl = !lost && d->disposition == SB_DEADLETTER;
    bool dup = d->outcome == WK_OUT_DUPLICATE;
    ib_log_level_t lvl = lost || dl ? IB_LOG_WARN : IB_LOG_INFO;

    if (!ib_log_enabled(lvl))
        return; /* the line's fields are not worth formatting for nobody */
    ib_time_rfc3339(enq, sizeof(enq), msg->enqueued_ms);
    IB_LOG(lvl, "msg_done",
           IB_MSG(o == WK_OUT_LOCK_LOST ? "settlement failed; the broker will redeliver"
                  : lost                ? "settlement never answered; a redelivery meets the inbox"
                                        : "message settled"),
           IB_S("consumer", dm->cfg->consumer), IB_S("entity", dm->cfg->servicebus.entity),
           IB_S("message_id", msg->message_id), IB_S("correlation_id", msg->correlation_id),
           IB_S("session_id", msg->session_id), IB_S("subject", msg->subject),
           IB_I("delivery_count", msg->delivery_count),
           IB_I("sequence_number", msg->sequence_number),
           IB_S("enqueued_at", msg->enqueued_ms ? enq : NULL), IB_S("lock_token", msg->lock_token),
           IB_S("result", wk_outcome_name(o)), IB_S("disposition", sb_disposition_name(disp)),
           IB_S("reason", d->disposition == SB_DEADLETTER ? d->reason : NULL),
           IB_S("error_class", d->err.code ? ib_class_name(d->err.cls) : NULL),
           IB_S("sqlstate", d->err.sqlstate[0] ? d->err.sqlstate : NULL),
           IB_I("native_error", d->err.native),
           IB_S("error", d->err.code ? d->err.text : (lost ? res->text : NULL)),
           IB_I("duration_ms", d->duration_ms), IB_I("attempt", d->attempts),
           IB_B("duplicate", dup), IB_I("http_status", d->http_status),
           IB_S("remote_id", d->remote_id[0] ? d->remote_id : NULL),
           IB_S("duplicate_by", dup ? (d->business_key ? "business_key" : "inbox") : NULL),
           IB_S("constraint", d->business_key ? d->constraint : NULL),
           IB_S("trace_id", t && t->trace_id[0]         ? t->trace_id
                            : wk_trace_id(msg, trace) ? trace
                                                      : NULL),
           IB_S("span_id", t && t->span_id[0] ? t->span_id : NULL),
           IB_S("causation_id", causation_of(msg)));
}

/* Counts and logs the outcome of one settled message, then frees its job. */
static void on_settled(sb_msg_t *msg, sb_disposition_t disp, const ib_error_t *res, void *ctx)
{
    daemon_t *dm = ctx;
    job_t *j;
    wk_decision_t none = {.outcome = WK_OUT_RELEASED, .disposition = SB_RELEASE};

    wk_health_heartbeat(dm->http);
    j = inflight_take(dm, msg);
    const wk_decision_t *d = j ? &j->d : &none;

    /* A message released at drain was never processed: not an outcome. */
    if (res->code == IB_E_OK && d->outcome == WK_OUT_RELEASED && disp == SB_RELEASE &&
        !(j && atomic_load(&j->lock_lost))) {
        job_free(dm, j);
        return;
    }
    wk_outcome_t o = res->code == IB_E_OK               ? d->outcome
                     : res->code == IB_E_SETTLE_UNKNOWN ? WK_OUT_SETTLEMENT_UNKNOWN
                                                        : WK_OUT_LOCK_LOST;
    if (o == WK_OUT_DUPLICATE && d->business_key)
        wk_metrics_business_key_duplicate(dm->metrics);
    else
        wk_metrics_message(dm->metrics, o);
    if (res->code == IB_E_OK && d->disposition == SB_DEADLETTER)
        wk_metrics_dead_letter(dm->metrics, d->reason, d->reason_class);
    /* Completed or dead-lettered: the message has left the entity. */
    if (res->code == IB_E_OK && msg->enqueued_ms > 0 &&
        (disp == SB_COMPLETE || disp == SB_DEADLETTER))
        wk_metrics_message_age(dm->metrics, (double)(ib_now_ms() - msg->enqueued_ms) / 1000.0);
    if (j)
        wk_trace_end(&j->trace, msg, disp, o, d);
    log_done(dm, msg, disp, res, d, o, j ? &j->trace : NULL);
    job_free(dm, j);
}

/* The amqp client has logged the loss; the job only learns to stop retrying. */
static void on_lock_lost(sb_msg_t *msg, void *ctx)
{
    daemon_t *dm = ctx;
    pthread_mutex_lock(&dm->mu);
    job_t *j = inflight_find(dm, msg);
    if (j)
        atomic_store(&j->lock_lost, true);
    pthread_mutex_unlock(&dm->mu);
}

/* Readiness follows the client (which logs each change as "ready"). */
static void on_state(int up, const ib_error_t *why, void *ctx)
{
    daemon_t *dm = ctx;
    (void)why;
    wk_health_heartbeat(dm->http);
    wk_health_set_condition(dm->http, WK_HEALTH_AMQP_CONNECTED, up);
    wk_health_set_condition(dm->http, WK_HEALTH_LINKS_ATTACHED, up);
}

/* A session slot moved on to the next session. thread: proactor. */
static void on_session_switch(double seconds, void *ctx)
{
    daemon_t *dm = ctx;
    wk_metrics_session_switch(dm->metrics, seconds);
}

/* ---- db workers -------------------------------------------------------- */

/*
 * Whether j must wait: an earlier job of its session is in flight outside
 * the batch being taken (call gen): queued behind, in another worker's
 * batch, held, or going back. One already applied and being completed does
 * not hold it (a lost completion meets the inbox row on redelivery). mu held.
 */
static bool session_waits(const job_t *j, unsigned long gen)
{
    return j->sprev && j->sprev->take_gen != gen && !j->sprev->passed;
}

/*
 * Moves up to max queued jobs into batch, in queue order; several of one
 * session only in its order, and only while no earlier one of it is in
 * flight elsewhere (db_inbox_apply_batch_ordered keeps them in order). A batch holds either jobs of one HTTP route only or none
 * of an HTTP route: the first job taken decides (their claims, calls and
 * finishes are shared in wk_effect.c, the others' inbox transaction in
 * db_batch.c). One route a batch: the calls of a batch are answered
 * together, so a route with a long timeout never holds another route's
 * answers back. Returns how many. mu held.
 */
static size_t take_jobs(daemon_t *dm, job_t **batch, size_t max)
{
    size_t n = 0;
    const rt_route_t *http = NULL;
    job_t *prev = NULL, *j = dm->qhead;
    unsigned long gen = ++dm->take_gen;

    while (j && n < max) {
        job_t *next = j->qnext;
        const rt_route_t *route = max > 1 ? wk_pipeline_http(&dm->pipe, j->msg) : NULL;
        if (session_waits(j, gen) || (n > 0 && route != http)) {
            prev = j;
        } else {
            http = route;
            if (prev)
                prev->qnext = next;
            else
                dm->qhead = next;
            if (dm->qtail == j)
                dm->qtail = prev;
            j->qnext = NULL;
            j->take_gen = gen;
            dm->queued--;
            batch[n++] = j;
        }
        j = next;
    }
    return n;
}

/*
 * How many queued jobs this worker may take: a batch only takes jobs that
 * would otherwise wait, so while other workers are idle each of them is left
 * one job before this batch grows (never slower than one transaction per
 * message). Workers busy with a batch count as not idle. mu held.
 */
/*
 * The db workers that take jobs: all of them, or under db.pool_scope
 * "cluster" this replica's part of the pool among the replicas alive (at
 * least one), so that N replicas keep pool_size transactions at once in
 * all, not N times it: fewer, larger batches on the database they share.
 * mu held (refused_workers).
 */
static size_t workers_on(const daemon_t *dm)
{
    long part;
    size_t on;
    if (!dm->pool_shared)
        return (size_t)dm->nworkers;
    part = wk_replicas_part(dm->pipe.replicas, dm->nworkers);
    /* One the database refused (connect_first) takes no job: the next one takes its turn. */
    on = (part > 0 ? (size_t)part : 1) + dm->refused_workers;
    return on < (size_t)dm->nworkers ? on : (size_t)dm->nworkers;
}

/* Whether worker id is beyond workers_on: it takes no job now. mu held. */
static bool off_turn(const daemon_t *dm, int id)
{
    return !dm->stop_workers && (size_t)id >= workers_on(dm);
}

/*
 * How many jobs a waking worker takes. While a message's part of its
 * batch's time stays below WK_BATCH_CHEAP_US (a batch costs about what one
 * message does: a commit, a few round trips), all that are queued, up to
 * max: fewer, larger transactions. Until that is known, and while messages
 * are dear (a slow statement, a slow call), it leaves one job for each idle
 * worker that could take it, so that slow messages run side by side rather
 * than one after another in one batch.
 */
static size_t batch_share(const daemon_t *dm, size_t max)
{
    size_t share = dm->queued > 0 ? dm->queued : 1;
    if (dm->msg_cost_us < 0 || dm->msg_cost_us > WK_BATCH_CHEAP_US) {
        /* Workers the database refused wait for a connection and take no job;
         * those still connecting at start will take theirs in a moment. */
        size_t on = workers_on(dm);
        size_t able = on > dm->refused_workers ? on - dm->refused_workers : 1;
        size_t others = able > dm->busy_workers + 1 ? able - dm->busy_workers - 1 : 0;
        share = dm->queued > others ? dm->queued - others : 1;
    }
    return share < max ? share : max;
}

/* A monotonic clock in microseconds. */
static long long mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A batch of n took took_us: its messages' part goes into the average (1/8 weight). mu held. */
static void batch_cost(daemon_t *dm, size_t n, long long took_us)
{
    long long us = took_us / (long long)(n ? n : 1);
    dm->msg_cost_us = dm->msg_cost_us < 0 ? us : dm->msg_cost_us + (us - dm->msg_cost_us) / 8;
}

/*
 * Waits for work and takes a batch of ready jobs (db.batch_max; 1 = one
 * job). A lone job is taken at once unless db.batch_linger_ms asks to wait
 * that long for company. Returns 0 when the workers stop, or when worker
 * id is off its turn in a shared pool (wait_turn).
 * thread: a db worker.
 */
static size_t pop_jobs(daemon_t *dm, int id, job_t **batch, size_t max)
{
    long long linger = dm->cfg->db.batch_linger_ms;
    size_t n;

    pthread_mutex_lock(&dm->mu);
    for (;;) {
        if (off_turn(dm, id)) {
            n = 0; /* the caller waits for its turn; a wake-up for jobs goes on (below) */
            break;
        }
        if (!dm->qhead && !dm->stop_workers) {
            pthread_cond_wait(&dm->cv, &dm->mu);
            continue;
        }
        if (linger > 0 && max > 1 && dm->qhead && dm->queued < max) {
            long long until = ib_mono_ms() + linger;
            while (dm->qhead && dm->queued < max && !dm->stop_workers &&
                   ib_cond_wait_until(&dm->cv, &dm->mu, until) == 0)
                ;
        }
        n = take_jobs(dm, batch, batch_share(dm, max));
        if (n || !dm->qhead || dm->stop_workers)
            break;
        /* Every queued job waits behind an earlier one of its session: until one leaves. */
        pthread_cond_wait(&dm->cv, &dm->mu);
    }
    if (n)
        dm->busy_workers++;
    if (dm->qhead)
        pthread_cond_signal(&dm->cv); /* what is left goes to an idle worker */
    pthread_mutex_unlock(&dm->mu);
    return n;
}

/* True when some job of the batch is still worth a database (lock not lost). */
static bool batch_wanted(job_t *const *batch, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!atomic_load(&batch[i]->lock_lost))
            return true;
    return false;
}

/* Counts a worker in or out of those holding a connection; returns how many others hold one. */
static size_t count_connected(daemon_t *dm, int delta)
{
    size_t others;
    pthread_mutex_lock(&dm->mu);
    if (delta > 0)
        dm->connected_workers++;
    else if (delta < 0 && dm->connected_workers > 0)
        dm->connected_workers--;
    others = dm->connected_workers - (delta > 0 ? 1 : 0);
    pthread_mutex_unlock(&dm->mu);
    return others;
}

/*
 * The database refused this worker a connection while others hold one
 * (PostgreSQL "too many clients", a role's connection limit, Azure SQL's
 * worker limit): the pool is larger than the database accepts. Said once.
 */
static void tell_pool_limited(worker_t *w, const ib_error_t *err, size_t others)
{
    daemon_t *dm = w->dm;
    if (atomic_exchange(&dm->pool_limit_told, true))
        return;
    IB_LOG(IB_LOG_WARN, "db_pool_limited",
           IB_MSG("the database refuses more connections than some workers hold: workers without "
                  "one take no messages and try again now and then; lower db.pool_size to what "
                  "the database accepts"),
           IB_I("pool_size", (long long)dm->nworkers), IB_I("connected", (long long)others),
           IB_S("sqlstate", err->sqlstate), IB_S("error", err->text));
}

/*
 * Connects before the worker takes any job. While other workers hold a
 * connection, a refused one is waited out here, holding no message (up to
 * 5 s between tries): the messages go to the connected workers. Returns
 * NULL when no worker is connected (the database is down: the worker takes
 * jobs and connect_for decides them as before) or the daemon stops.
 * thread: a db worker.
 */
/*
 * Worker id off its turn closes its connection (a shared pool holds no
 * more connections than it uses) and waits until its turn comes again
 * (re-read each heartbeat). False once the workers stop. thread: a db worker.
 */
static bool wait_turn(daemon_t *dm, int id, db_conn_t **dbc)
{
    bool off, stop;
    pthread_mutex_lock(&dm->mu);
    off = off_turn(dm, id);
    pthread_mutex_unlock(&dm->mu);
    if (off && *dbc) {
        db_conn_free(*dbc);
        *dbc = NULL;
        count_connected(dm, -1);
    }
    pthread_mutex_lock(&dm->mu);
    while (off_turn(dm, id))
        ib_cond_wait_until(&dm->gate_cv, &dm->mu, ib_mono_ms() + WK_REPLICAS_BEAT_MS);
    stop = dm->stop_workers;
    pthread_mutex_unlock(&dm->mu);
    return !stop;
}

/* Marks this worker as refused by the database (or no longer). mu not held. */
static void set_refused(daemon_t *dm, bool *refused, bool now)
{
    if (*refused == now)
        return;
    pthread_mutex_lock(&dm->mu);
    if (now)
        dm->refused_workers++;
    else
        dm->refused_workers--;
    pthread_cond_broadcast(&dm->gate_cv); /* workers_on counts it */
    pthread_mutex_unlock(&dm->mu);
    *refused = now;
}

static db_conn_t *connect_first(worker_t *w, int *fails)
{
    daemon_t *dm = w->dm;
    bool refused = false;
    db_conn_t *dbc = NULL;
    while (!dbc && !atomic_load(&dm->stopping)) {
        ib_error_t err;
        size_t others;
        if ((dbc = db_conn_new(&dm->db.opt, &err)) != NULL) {
            count_connected(dm, +1);
            *fails = 0;
            break;
        }
        if ((others = count_connected(dm, 0)) == 0)
            break;
        tell_pool_limited(w, &err, others);
        set_refused(dm, &refused, true);
        pthread_mutex_lock(&dm->mu);
        bool stop = dm->stop_workers;
        pthread_mutex_unlock(&dm->mu);
        if (stop)
            break;
        ib_sleep_ms(ib_backoff_ms(1000, 5000, ++*fails, &w->seed), NULL);
    }
    set_refused(dm, &refused, false);
    return dbc;
}

/* Puts jobs a worker took back at the head of the queue, in order (mu not held). */
static void requeue_jobs(daemon_t *dm, job_t *const *batch, size_t n)
{
    pthread_mutex_lock(&dm->mu);
    for (size_t i = n; i-- > 0;) {
        batch[i]->qnext = dm->qhead;
        dm->qhead = batch[i];
        if (!dm->qtail)
            dm->qtail = batch[i];
        dm->queued++;
    }
    dm->busy_workers--;
    pthread_cond_broadcast(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
}

/*
 * Connects when there is no connection, retrying while the batch is worth
 * it (not draining, some lock not lost). Returns NULL when it gave up, or
 * with *hand_back set when another worker now holds a connection (the
 * caller gives the jobs back to the queue for it). thread: a db worker.
 */
static db_conn_t *connect_for(worker_t *w, db_conn_t *dbc, job_t *const *batch, size_t n,
                              int *fails, bool *hand_back)
{
    daemon_t *dm = w->dm;
    *hand_back = false;
    while (!dbc && !atomic_load(&dm->stopping) && batch_wanted(batch, n)) {
        ib_error_t err;
        dbc = db_conn_new(&dm->db.opt, &err);
        if (dbc) {
            count_connected(dm, +1);
            break;
        }
        if (count_connected(dm, 0) > 0) {
            *hand_back = true;
            return NULL;
        }
        atomic_store(&dm->pipe.db_reachable, false);
        if ((*fails)++ % 10 == 0)
            IB_LOG(IB_LOG_ERROR, "db_connect", IB_MSG(err.text), IB_S("sqlstate", err.sqlstate),
                   IB_I("worker", w->id));
        ib_sleep_ms(ib_backoff_ms(200, 1000, *fails, &w->seed), NULL);
    }
    if (dbc)
        *fails = 0;
    return dbc;
}

/* Decides the n jobs of a batch (n == 1: one message, as it always was). */
static void process_jobs(daemon_t *dm, db_conn_t *dbc, job_t *const *batch, size_t n,
                         wk_batch_msg_t *bm, bool *early)
{
    for (size_t i = 0; i < n; i++)
        early[i] = false;
    if (!dbc) {
        /* Draining, or every lock is gone, and no database: give the
         * messages back untouched. */
        for (size_t i = 0; i < n; i++)
            wk_decide(&batch[i]->d, WK_OUT_RELEASED);
        return;
    }
    for (size_t i = 0; i < n; i++)
        bm[i] = (wk_batch_msg_t){batch[i]->msg, &batch[i]->lock_lost, &batch[i]->d, &early[i]};
    wk_pipeline_process_batch(&dm->pipe, dbc, bm, n);
}

/*
 * j's session cannot go on past j (abandoned, released, dead-lettered):
 * the later jobs of its session still queued go back too, and any handed
 * out before the client learns of j's settlement (on_message). Those in
 * j's own batch were decided by the pipeline. thread: a db worker, main.
 */
static void release_followers(daemon_t *dm, job_t *j)
{
    job_t *back = NULL, **tail = &back;
    pthread_mutex_lock(&dm->mu);
    j->stopped = true;
    for (job_t **pp = &dm->qhead, *prev = NULL; *pp;) {
        job_t *k = *pp;
        if (!k->msg->session_id || !same_session(k, j) || k->take_gen == j->take_gen) {
            prev = k;
            pp = &k->qnext;
            continue;
        }
        *pp = k->qnext;
        if (dm->qtail == k)
            dm->qtail = prev;
        dm->queued--;
        k->stopped = true;
        k->qnext = NULL;
        *tail = k;
        tail = &k->qnext;
    }
    pthread_mutex_unlock(&dm->mu);
    while (back) {
        job_t *next = back->qnext;
        wk_decide(&back->d, WK_OUT_RELEASED);
        sb_client_settle(dm->client, back->msg, SB_RELEASE, NULL, NULL);
        back = next;
    }
}

/* j went on (applied, duplicate, skipped): the later jobs of its session may be taken. */
static void pass_followers(daemon_t *dm, job_t *j)
{
    pthread_mutex_lock(&dm->mu);
    j->passed = true;
    if (j->snext && dm->qhead)
        pthread_cond_broadcast(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
}

/*
 * Hands the decision to the client. A dead letter carries its context as
 * properties to modify (wk_dl_props). After this call the proactor owns j.
 * thread: a db worker.
 */
static void settle(daemon_t *dm, job_t *j)
{
    sb_prop_t props[WK_DL_PROPS];
    char at[32];
    size_t n = 0;
    sb_disposition_t disp = wk_decide_settlement(&j->d); /* never complete an undecided one */
    if (j->msg->session_id && !wk_pipeline_goes_on(&j->d))
        release_followers(dm, j);
    else if (j->msg->session_id)
        pass_followers(dm, j);
    if (disp == SB_DEADLETTER) {
        wk_dl_context_t c = {dm->cfg->consumer, &j->d.err, j->d.attempts, j->d.route_index,
                             ib_now_ms()};
        n = wk_dl_props(&c, props, at);
    }
    wk_trace_settling(&j->trace, j->msg, disp);
    sb_client_settle_props(dm->client, j->msg, disp, n ? j->d.reason : NULL,
                           n ? j->d.description : NULL, props, n);
}

/* ---- messages held for their HTTP destination -------------------------- */

/* A held message is settled this long before its lock renewal runs out. */
#define HOLD_MARGIN_MS 1500

/* Between the first signal and the end: held messages are released, not abandoned. */
static bool draining(daemon_t *dm)
{
    return atomic_load(&dm->stopping) || atomic_load(&dm->retry_deadline_ms) != 0;
}

/* Whether j's lock renewal (servicebus.max_auto_lock_renewal_s) has run out, or nearly. */
static bool hold_spent(const daemon_t *dm, const job_t *j, long long now)
{
    return now - j->received_mono >= dm->cfg->servicebus.max_auto_lock_renewal_s * 1000 -
                                         HOLD_MARGIN_MS;
}

/* Puts j back at the head of the job queue (mu not held). */
static void queue_push_front(daemon_t *dm, job_t *j)
{
    pthread_mutex_lock(&dm->mu);
    j->qnext = dm->qhead;
    dm->qhead = j;
    if (!dm->qtail)
        dm->qtail = j;
    dm->queued++;
    pthread_cond_signal(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
}

/*
 * A held message that cannot be held longer: released when its lock is
 * lost or the worker drains; after its lock renewal ran out, abandoned
 * (counted), or, when its retry budget ends with this delivery
 * (retry.max_deliveries, retry.max_age_s), put back at the head of the
 * job queue marked carry.spent: a worker decides it without another call,
 * before the broker's MaxDeliveryCount does without context (its row
 * uncertain and OutcomeUncertain when its call may have acted, else
 * RetryBudgetExhausted with the last error). thread: any.
 */
static void unhold(daemon_t *dm, job_t *j)
{
    wk_decision_t *d = &j->d;
    d->held = false;
    if (atomic_load(&j->lock_lost) || draining(dm)) {
        wk_decide(d, WK_OUT_RELEASED);
    } else if (wk_pipeline_budget_ends(&dm->pipe, j->msg)) {
        wk_metrics_held_expired(dm->metrics);
        d->carry.spent = true;
        queue_push_front(dm, j);
        return;
    } else {
        wk_metrics_held_expired(dm->metrics);
        wk_decide(d, WK_OUT_ABANDONED);
    }
    settle(dm, j);
}

/* Keeps j (its claim given back) until the tick offers it again. thread: a db worker. */
static void hold_job(daemon_t *dm, job_t *j)
{
    long long now = ib_mono_ms();
    if (atomic_load(&j->lock_lost) || draining(dm) || hold_spent(dm, j, now)) {
        unhold(dm, j);
        return;
    }
    j->hold_until = now + (j->d.hold_ms > 0 ? j->d.hold_ms : 0);
    pthread_mutex_lock(&dm->mu);
    j->qnext = dm->held;
    dm->held = j;
    wk_metrics_held_set(dm->metrics, (long long)++dm->nheld);
    pthread_mutex_unlock(&dm->mu);
}

/*
 * Offers again the held messages whose destination may take a call (back
 * on the job queue), and ends the hold of those that cannot wait longer.
 * thread: main (the tick), and the drain with all.
 */
static void offer_held(daemon_t *dm, bool all)
{
    long long now = ib_mono_ms();
    job_t *done = NULL, **pp;
    bool woke = false;
    pthread_mutex_lock(&dm->mu);
    for (pp = &dm->held; *pp;) {
        job_t *j = *pp;
        bool end = all || atomic_load(&j->lock_lost) || hold_spent(dm, j, now);
        if (!end && (now < j->hold_until || !wk_dest_ready(dm->dests, j->d.dest, now))) {
            pp = &j->qnext;
            continue;
        }
        *pp = j->qnext;
        dm->nheld--;
        if (end) {
            j->qnext = done;
            done = j;
            continue;
        }
        queue_push(dm, j);
        woke = true;
    }
    wk_metrics_held_set(dm->metrics, (long long)dm->nheld);
    if (woke)
        pthread_cond_broadcast(&dm->cv);
    pthread_mutex_unlock(&dm->mu);
    while (done) {
        job_t *next = done->qnext;
        unhold(dm, done);
        done = next;
    }
}

static size_t dest_metrics(void *ctx, char *buf, size_t size)
{
    return wk_dest_metrics(ctx, buf, size);
}

/* A decided job to the broker, or held for its destination. thread: a db worker. */
static void settle_or_hold(daemon_t *dm, job_t *j)
{
    if (j->d.held)
        hold_job(dm, j);
    else
        settle(dm, j);
}

/* wk_pipeline_t.settle_now: the job of decision d, before its batch ends. */
static void settle_early(void *ctx, wk_decision_t *d)
{
    settle_or_hold(ctx, (job_t *)(void *)((char *)d - offsetof(job_t, d)));
}

/* thread: a db worker. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    daemon_t *dm = w->dm;
    size_t max = (size_t)dm->cfg->db.batch_max;
    db_conn_t *dbc = NULL;
    job_t **batch = calloc(max, sizeof(*batch));
    wk_batch_msg_t *bm = calloc(max, sizeof(*bm));
    bool *early = calloc(max, sizeof(*early));
    size_t n;
    int fails = 0;

    if (!batch || !bm || !early) {
        max = 1; /* out of memory: one job at a time, on the stack */
        free(batch);
        free(bm);
        free(early);
        batch = NULL;
        bm = NULL;
        early = NULL;
    }
    job_t *one[1];
    wk_batch_msg_t bm_one[1];
    bool early_one[1];
    for (;;) {
        job_t **b = batch ? batch : one;
        bool hand_back;
        if (!wait_turn(dm, w->id, &dbc))
            break;
        if (!dbc)
            dbc = connect_first(w, &fails);
        if ((n = pop_jobs(dm, w->id, b, max)) == 0)
            continue; /* stopping, or off its turn: wait_turn tells */
        dbc = connect_for(w, dbc, b, n, &fails, &hand_back);
        if (hand_back) {
            requeue_jobs(dm, b, n);
            continue;
        }
        bool *settled = early ? early : early_one;
        long long t0 = mono_us();
        process_jobs(dm, dbc, b, n, bm ? bm : bm_one, settled);
        pthread_mutex_lock(&dm->mu);
        dm->busy_workers--;
        batch_cost(dm, n, mono_us() - t0);
        pthread_mutex_unlock(&dm->mu);
        /*
         * Only now, after the COMMIT, are the messages settled, one after
         * another so that the proactor sends their dispositions together.
         * After each call the proactor owns that job; one settled early
         * (an HTTP call answered while its batch's others were under way)
         * is no longer this worker's.
         */
        for (size_t i = 0; i < n; i++)
            if (!settled[i])
                settle_or_hold(dm, b[i]);
    }
    db_conn_free(dbc);
    free(batch);
    free(bm);
    free(early);
    return NULL;
}

/* Hands every job still queued back to the broker (drain). thread: main. */
static void release_queued(daemon_t *dm)
{
    job_t *list;
    pthread_mutex_lock(&dm->mu);
    list = dm->qhead;
    dm->qhead = dm->qtail = NULL;
    dm->queued = 0;
    pthread_mutex_unlock(&dm->mu);
    while (list) {
        job_t *next = list->qnext;
        wk_decide(&list->d, WK_OUT_RELEASED);
        sb_client_settle(dm->client, list->msg, SB_RELEASE, NULL, NULL);
        list = next;
    }
}

/* ---- housekeeping (thread: main) --------------------------------------- */

/* Feeds the client's counters into the metrics registry: one set of counters. */
static void sync_client_metrics(daemon_t *dm)
{
    sb_stats_t now;
    sb_stats_t *prev = &dm->client_seen;
    sb_client_stats(dm->client, &now);
    for (unsigned long long i = prev->renewals_ok; i < now.renewals_ok; i++)
        wk_metrics_lock_renewal(dm->metrics, WK_RENEW_OK);
    for (unsigned long long i = prev->renewals_failed; i < now.renewals_failed; i++)
        wk_metrics_lock_renewal(dm->metrics, WK_RENEW_FAILED);
    for (unsigned long long i = prev->reconnects; i < now.reconnects; i++)
        wk_metrics_reconnect(dm->metrics);
    wk_metrics_sessions_active_set(dm->metrics, now.sessions_held);
    wk_metrics_sessions_parked_set(dm->metrics, now.sessions_parked);
    wk_metrics_session_switches_add(dm->metrics,
                                    now.sessions_given_back - prev->sessions_given_back);
    wk_metrics_broker_set(dm->metrics,
                          &(wk_metrics_broker_t){now.throttled_ms, now.server_busy, now.stalls,
                                                 now.link_recycles});
    if (dm->otel)
        wk_metrics_otel_set(dm->metrics, ot_exporter_exported(dm->otel),
                            ot_exporter_dropped(dm->otel));
    *prev = now;
}

/* The stats line, rendered from the metrics registry. */
static void log_stats(daemon_t *dm)
{
    wk_metrics_view_t v;
    char messages[64 * WK_OUT__COUNT], reasons[2048];
    size_t off = 0;

    sync_client_metrics(dm);
    wk_metrics_read(dm->metrics, &v);
    wk_metrics_reasons_json(dm->metrics, reasons, sizeof(reasons));
    for (int o = 0; o < WK_OUT__COUNT; o++)
        off += (size_t)snprintf(messages + off, sizeof(messages) - off, "%s\"%s\":%llu",
                                o ? "," : "{", wk_outcome_name((wk_outcome_t)o), v.messages[o]);
    snprintf(messages + off, sizeof(messages) - off, "}");
    IB_LOG(IB_LOG_INFO, "stats", IB_MSG("periodic statistics"), IB_S("consumer", dm->cfg->consumer),
           IB_J("messages", messages), IB_I("retries", v.retries), IB_J("dead_letters", reasons),
           IB_I("lock_renewals", v.lock_renewals[WK_RENEW_OK]),
           IB_I("lock_renewal_failures", v.lock_renewals[WK_RENEW_FAILED]),
           IB_I("in_flight", v.in_flight), IB_I("oldest_in_flight_ms", v.oldest_in_flight_ms),
           IB_I("reconnects", v.reconnects), IB_I("sessions_held", dm->client_seen.sessions_held));
}

/*
 * The circuit breaker's state, applied: receiving paused while it is open
 * (held messages stay, under renewed locks), the inboxd_circuit_open gauge,
 * and /readyz, which follows the database's health with hysteresis
 * (wk_breaker.h): a lone slow or failed statement does not flap it.
 */
static void apply_breaker(daemon_t *dm)
{
    bool open = wk_breaker_is_open(dm->breaker);
    bool healthy = wk_breaker_db_healthy(dm->breaker);
    wk_health_set_condition(dm->http, WK_HEALTH_DB_REACHABLE,
                          atomic_load(&dm->pipe.db_reachable) && healthy);
    if (open == dm->circuit_open)
        return;
    dm->circuit_open = open;
    wk_metrics_circuit_open_set(dm->metrics, open);
    if (dm->client)
        sb_client_pause(dm->client, open);
    if (!open)
        IB_LOG(IB_LOG_INFO, "circuit_closed", IB_MSG("a probe passed: receiving resumed"));
}

/* Findings of wk_limits ("config: warning: ..." lines) as warn log lines (event "config"). */
static void log_limits(char *text)
{
    for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        if (end)
            *end = '\0';
        const char *msg = strncmp(line, "config: warning: ", 17) == 0 ? line + 17 : line;
        IB_LOG(IB_LOG_WARN, "config", IB_MSG(msg));
    }
}

/* db.pool_size (and the relay and sweeper) against the connections the server accepts. */
static void check_pool_limit(daemon_t *dm, db_conn_t *dbc)
{
    long long limit = 0;
    ib_error_t e;
    char *text = NULL;
    size_t len = 0;
    if (db_conn_max_connections(dbc, &limit, &e) != IB_E_OK) {
        IB_LOG(IB_LOG_WARN, "config", IB_MSG(e.text));
        return;
    }
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return;
    wk_limits_check_pool(dm->cfg, dm->relay_only, dm->outbox.relay, limit, out);
    fclose(out);
    log_limits(text);
    free(text);
}

/* Once the poller has read the entity: the settings against its real figures. */
static void check_entity_limits(daemon_t *dm)
{
    wk_entity_info_t e;
    char *text = NULL;
    size_t len = 0;
    if (dm->entity_checked || !wk_entity_last(dm->entity, &e))
        return;
    dm->entity_checked = true;
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return;
    wk_limits_check_entity(dm->cfg, &dm->routes, &e, out);
    fclose(out);
    log_limits(text);
    free(text);
    IB_LOG(IB_LOG_INFO, "retry_budget", IB_MSG("the entity's MaxDeliveryCount read from Service Bus"),
           IB_I("max_delivery_count", e.max_delivery_count),
           IB_I("retry_max_deliveries",
                wk_limits_max_deliveries(dm->cfg, e.max_delivery_count)),
           IB_I("lock_duration_ms", e.lock_duration_ms));
}

/*
 * Waits up to TICK_MS for a signal, then refreshes health, metrics and, when
 * due, the stats line. Returns the signal, or 0.
 */
static int tick(daemon_t *dm)
{
    struct timespec ts = {0, TICK_MS * 1000000L};
    int sig = sigtimedwait(&dm->sigs, NULL, &ts);
    long long now = ib_mono_ms();

    apply_breaker(dm);
    offer_held(dm, false);
    check_entity_limits(dm);
    pthread_mutex_lock(&dm->mu);
    publish_oldest_enqueued(dm);
    pthread_mutex_unlock(&dm->mu);
    if (dm->client)
        sync_client_metrics(dm);
    /* Live while the proactor keeps turning (it wakes every 100 ms); relay only: while this loop does. */
    if (!dm->client || (dm->client_seen.loop_mono_ms && now - dm->client_seen.loop_mono_ms < 5000))
        wk_health_heartbeat(dm->http);
    if (now >= dm->next_stats && dm->client && !dm->relay_only) {
        log_stats(dm);
        dm->next_stats = now + STATS_INTERVAL_MS;
    }
    return sig > 0 ? sig : 0;
}

/* ---- start (thread: main) ---------------------------------------------- */

static ib_err_t compile_routes(daemon_t *dm, ib_error_t *err)
{
    /* rt_routes_compile and wk_outbox_plan have already named every bad key on stderr. */
    if (rt_routes_compile(dm->cfg->routes, &dm->routes, stderr) != 0 ||
        rt_routes_check_limits(&dm->routes, dm->cfg->servicebus.max_auto_lock_renewal_s, stderr))
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "routes: invalid");
    if (wk_outbox_plan(dm->cfg, &dm->routes, dm->relay_only, &dm->outbox, stderr) != 0 ||
        !rt_routes_set_outbox(&dm->routes, dm->cfg->outbox.table))
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "outbox: invalid");
    /* Claim-checked blobs share the received messages' byte budget (wk_claim.h). */
    if (!(dm->pipe.claims = wk_claims_new(
              &dm->routes, (unsigned long long)dm->cfg->servicebus.max_held_mb << 20, err)))
        return err->code;
    return IB_E_OK;
}

/* The trace exporter, when otel.* or OTEL_* name a collector. */
static ib_err_t start_otel(daemon_t *dm, ib_error_t *err)
{
    dm->otel = wk_trace_exporter(dm->cfg, err);
    if (!dm->otel && err->code) {
        IB_LOG(IB_LOG_ERROR, "otel", IB_MSG(err->text));
        return err->code;
    }
    if (dm->otel)
        wk_metrics_otel_set(dm->metrics, 0, 0);
    return IB_E_OK;
}

static ib_err_t start_http(daemon_t *dm, ib_error_t *err)
{
    dm->metrics = wk_metrics_new(NULL);
    dm->pipe.metrics = dm->metrics;
    if (dm->metrics && rt_routes_have_http(&dm->routes))
        wk_metrics_dest_source(dm->metrics, dest_metrics, dm->dests);
    wk_metrics_held_peak(dm->metrics, wk_claims_peak(dm->pipe.claims));
    dm->http = wk_health_start(
        &(wk_health_opts_t){.listen = dm->cfg->http.listen, .metrics = dm->metrics}, err);
    if (!dm->http) {
        IB_LOG(IB_LOG_ERROR, "http", IB_MSG(err->text), IB_S("listen", dm->cfg->http.listen));
        return err->code;
    }
    return IB_E_OK;
}

/* The database options from the config, db.auth's token source included (wk_dbopt.c). */
static ib_err_t set_db_options(daemon_t *dm, ib_error_t *err)
{
    ib_err_t rc = wk_dbopt_init(&dm->db, dm->cfg, 30000, err);
    if (rc != IB_E_OK)
        IB_LOG(IB_LOG_ERROR, rc == IB_E_CONFIG ? "config" : "aad_token", IB_MSG(err->text));
    return rc;
}

/* Opens one connection, migrates or checks the schema; retries transient failures. */
static ib_err_t prepare_db(daemon_t *dm, ib_error_t *err)
{
    for (int attempt = 1;; attempt++) {
        db_conn_t *dbc = db_conn_new(&dm->db.opt, err);
        /* A relay-only process never touches the inbox table. HTTP routes need the claim
         * columns (db.migrate adds them; else they are checked). */
        if (dbc &&
            (dm->relay_only ||
             (db_migrate(dbc, dm->cfg->db.migrate, err) == IB_E_OK &&
              rt_routes_check_unique(&dm->routes, dbc, err) == IB_E_OK &&
              (!rt_routes_have_http(&dm->routes) || db_effect_migrate(dbc, false, err) == IB_E_OK))) &&
            (!dm->outbox.enabled || wk_outbox_prepare(dm->cfg, dbc, err) == IB_E_OK)) {
            if (!dm->relay_only)
                IB_LOG(IB_LOG_INFO, "db_ready",
                       IB_MSG(dm->cfg->db.migrate ? "inbox table ready" : "inbox table checked"),
                       IB_S("dialect", db_dialect_name(db_conn_dialect(dbc))),
                       IB_S("table", dm->cfg->db.inbox_table));
            check_pool_limit(dm, dbc);
            db_conn_free(dbc);
            wk_health_set_condition(dm->http, WK_HEALTH_DB_REACHABLE, true);
            return IB_E_OK;
        }
        db_conn_free(dbc);
        IB_LOG(IB_LOG_ERROR, "db_connect", IB_MSG(err->text), IB_S("sqlstate", err->sqlstate),
               IB_I("native_error", err->native), IB_S("error_class", ib_class_name(err->cls)),
               IB_I("attempt", attempt));
        if (err->cls != IB_CLASS_TRANSIENT)
            return err->code;
        wk_health_heartbeat(dm->http); /* alive, waiting for the database */
        struct timespec ts = {attempt < 5 ? 1 : 5, 0};
        if (sigtimedwait(&dm->sigs, NULL, &ts) > 0)
            return ib_error_set(err, IB_E_SHUTDOWN, IB_CLASS_PERMANENT,
                                "signalled while waiting for the database");
    }
}

/* The Azure AD token source for servicebus.auth workload_identity (client and relay). */
static ib_err_t start_aad(daemon_t *dm, ib_error_t *err)
{
    if (strcmp(dm->cfg->servicebus.auth, "workload_identity") != 0)
        return IB_E_OK;
    /* The token comes from the federated credential the kubelet projects;
     * fail fast when it cannot. */
    dm->aad = sb_aad_new(NULL, err);
    if (!dm->aad || sb_aad_wait(dm->aad, 30000, err) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "aad_token", IB_MSG(err->text));
        return err->code ? err->code : IB_E_AUTH;
    }
    return IB_E_OK;
}

/* The entity's active count, for the client's stall detection. thread: the poller. */
static void entity_active(void *ctx, long long active)
{
    sb_client_set_backlog(ctx, active);
}

/*
 * The entity poller (wk_entity.h): counts, MaxDeliveryCount and the oldest
 * message from Service Bus itself. It failing to start is logged, not
 * fatal: receiving never depends on it.
 */
static void start_entity(daemon_t *dm)
{
    const wk_config_t *cfg = dm->cfg;
    if (cfg->servicebus.entity_poll_s <= 0 || dm->relay_only)
        return;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        IB_LOG(IB_LOG_WARN, "entity_poll", IB_MSG("curl_global_init failed: not polling"));
        return;
    }
    dm->curl_inited = true;
    wk_entity_opts_t eo = {
        .connection_string = cfg->servicebus.connection_string,
        .entity = cfg->servicebus.entity,
        .endpoint = cfg->servicebus.management_endpoint,
        .ca_file = cfg->servicebus.ca_file[0] ? cfg->servicebus.ca_file : NULL,
        .token_get = dm->aad ? sb_aad_token_get : NULL,
        .token_ctx = dm->aad,
        .poll_s = (long)cfg->servicebus.entity_poll_s,
        .sas_token_lifetime_s = (unsigned)cfg->servicebus.sas_token_lifetime_s,
        .metrics = dm->metrics,
        .on_active = entity_active,
        .active_ctx = dm->client,
    };
    ib_error_t err;
    dm->entity = wk_entity_start(&eo, &err);
    if (!dm->entity)
        IB_LOG(IB_LOG_WARN, "entity_poll", IB_MSG(err.text));
}

/* The AMQP client, with the Azure AD token source when there is one. */
static ib_err_t new_client(daemon_t *dm, ib_error_t *err)
{
    const wk_config_t *cfg = dm->cfg;
    sb_options_t so = {
        .connection_string = cfg->servicebus.connection_string,
        .entity = cfg->servicebus.entity,
        .sessions = cfg->servicebus.sessions,
        .prefetch = (unsigned)cfg->servicebus.prefetch,
        .max_concurrent_calls = (unsigned)cfg->servicebus.max_concurrent_calls,
        .max_held_bytes = (unsigned long long)cfg->servicebus.max_held_mb << 20,
        .held_beside = wk_claims_counter(dm->pipe.claims),
        .max_concurrent_sessions = (unsigned)cfg->servicebus.max_concurrent_sessions,
        .max_auto_lock_renewal_s = (unsigned)cfg->servicebus.max_auto_lock_renewal_s,
        .session_idle_timeout_s = (unsigned)cfg->servicebus.session_idle_timeout_s,
        .session_prefetch = (unsigned)cfg->servicebus.session_prefetch,
        .session_park = strcmp(cfg->servicebus.session_on_dead_letter, "park") == 0,
        .reconnect_max_ms = (unsigned)cfg->servicebus.reconnect_max_ms,
        .settle_timeout_ms = (unsigned)cfg->servicebus.settle_timeout_ms,
        .stall_timeout_ms = (unsigned)cfg->servicebus.stall_timeout_ms,
        .ca_file = cfg->servicebus.ca_file[0] ? cfg->servicebus.ca_file : NULL,
        .sas_token_lifetime_s = (unsigned)cfg->servicebus.sas_token_lifetime_s,
    };
    if (dm->aad) {
        so.token_get = sb_aad_token_get;
        so.token_ctx = dm->aad;
    }
    sb_callbacks_t cb = {on_message,        on_settled, on_lock_lost, on_state,
                         on_session_switch, dm,         on_batch_end};
    if (dm->relay_only) {
        /* Only the relay's sender links; readiness does not wait for the broker. */
        so.send_only = true;
        cb = (sb_callbacks_t){.ctx = dm};
    }
    dm->client = sb_client_new(&so, &cb, err);
    if (!dm->client) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG(err->text));
        return err->code;
    }
    wk_claims_share(dm->pipe.claims, dm->client); /* one byte budget */
    return IB_E_OK;
}

static ib_err_t start_client(daemon_t *dm, ib_error_t *err)
{
    if (sb_client_start(dm->client) != IB_E_OK) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG("cannot start the AMQP client"));
        return ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT, "cannot start the AMQP client");
    }
    return IB_E_OK;
}

/*
 * The relay (when this process relays; it sends on the client, whose sends
 * wait for its start), then the entity poller, the db workers, the client,
 * the sweeper.
 */
static ib_err_t start_threads(daemon_t *dm, ib_error_t *err)
{
    int n = (int)dm->cfg->db.pool_size;
    if (dm->outbox.relay) {
        dm->relay = wk_outbox_relay_start(dm->cfg, &dm->db.opt, dm->otel, dm->client,
                                          dm->metrics, err);
        if (!dm->relay)
            return err->code;
        dm->pipe.relay = dm->relay;
    }
    if (dm->relay_only)
        return start_client(dm, err);
    /* Before the workers, which read its MaxDeliveryCount (the retry budget default). */
    start_entity(dm);
    dm->pipe.entity = dm->entity;
    dm->workers = calloc((size_t)n, sizeof(*dm->workers));
    for (dm->nworkers = 0; dm->workers && dm->nworkers < n; dm->nworkers++) {
        worker_t *w = &dm->workers[dm->nworkers];
        *w = (worker_t){.dm = dm, .id = dm->nworkers};
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0)
            break;
    }
    if (dm->nworkers < n) {
        IB_LOG(IB_LOG_ERROR, "start", IB_MSG("cannot start the db worker threads"));
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "cannot start the db workers");
    }
    if (start_client(dm, err) != IB_E_OK)
        return err->code;
    dm->sweeper = wk_sweeper_start(&dm->db.opt, (long)dm->cfg->db.inbox_retention_days);
    return IB_E_OK;
}

/*
 * The heartbeat of what is set for the cluster (wk_replicas.c): a route's
 * limits (without it they would not hold: its failure stops the start) and
 * the pool under db.pool_scope "cluster" (without it each replica uses the
 * whole pool, as before: a warning).
 */
static ib_err_t start_replicas(daemon_t *dm, ib_error_t *err)
{
    bool limits = rt_routes_have_cluster_limits(&dm->routes);
    bool pool = strcmp(dm->cfg->db.pool_scope, "cluster") == 0 && dm->cfg->db.pool_size > 1;
    if (dm->relay_only || (!limits && !pool))
        return IB_E_OK;
    dm->pipe.replicas = wk_replicas_start(&dm->db.opt, dm->cfg->db.replicas_table,
                                          dm->cfg->consumer, dm->cfg->db.migrate, err);
    if (!dm->pipe.replicas && limits) {
        IB_LOG(IB_LOG_ERROR, "replicas", IB_MSG(err->text), IB_S("sqlstate", err->sqlstate),
               IB_S("table", dm->cfg->db.replicas_table));
        return err->code ? err->code : IB_E_DB;
    }
    if (!dm->pipe.replicas) {
        IB_LOG(IB_LOG_WARN, "replicas",
               IB_MSG("db.pool_scope cluster: no heartbeat, so this replica uses all of "
                      "db.pool_size"),
               IB_S("error", err->text), IB_S("sqlstate", err->sqlstate),
               IB_S("table", dm->cfg->db.replicas_table));
        ib_error_clear(err);
        return IB_E_OK;
    }
    dm->pool_shared = pool;
    return IB_E_OK;
}

/* Everything up to "inboxd running"; each step logs its own failure. */
static ib_err_t daemon_start(daemon_t *dm, ib_error_t *err)
{
    const wk_config_t *cfg = dm->cfg;
    ib_err_t rc;

    wk_config_transport_apply(cfg);
    if ((rc = compile_routes(dm, err)) != IB_E_OK || (rc = start_http(dm, err)) != IB_E_OK ||
        (rc = start_otel(dm, err)) != IB_E_OK ||
        (rc = set_db_options(dm, err)) != IB_E_OK || (rc = prepare_db(dm, err)) != IB_E_OK ||
        (rc = start_replicas(dm, err)) != IB_E_OK || (rc = start_aad(dm, err)) != IB_E_OK ||
        (rc = new_client(dm, err)) != IB_E_OK ||
        (rc = start_threads(dm, err)) != IB_E_OK)
        return rc;
    if (dm->relay_only) {
        /* Nothing to receive: ready once the outbox table is there. */
        wk_health_set_condition(dm->http, WK_HEALTH_AMQP_CONNECTED, true);
        wk_health_set_condition(dm->http, WK_HEALTH_LINKS_ATTACHED, true);
        IB_LOG(IB_LOG_INFO, "start", IB_MSG("inboxd running (relay only)"),
               IB_S("table", cfg->outbox.table), IB_S("version", INBOXD_VERSION));
        return IB_E_OK;
    }
    IB_LOG(IB_LOG_INFO, "start", IB_MSG("inboxd running"), IB_S("consumer", cfg->consumer),
           IB_S("entity", cfg->servicebus.entity), IB_I("db_workers", dm->nworkers),
           IB_B("sessions", cfg->servicebus.sessions), IB_S("version", INBOXD_VERSION));
    return IB_E_OK;
}

/* ---- run, drain, stop (thread: main) ----------------------------------- */

/* Until the first SIGTERM or SIGINT, which it returns. */
static int daemon_run(daemon_t *dm)
{
    int sig;
    dm->next_stats = ib_mono_ms() + STATS_INTERVAL_MS;
    while ((sig = tick(dm)) == 0)
        ;
    return sig;
}

/*
 * Stops receiving, hands queued messages back, and waits for the running
 * ones to settle, up to shutdown.drain_timeout_s. A second signal exits at
 * once. Returns false when a worker is still inside the database.
 */
static bool daemon_drain(daemon_t *dm, int sig)
{
    long long deadline = ib_mono_ms() + dm->cfg->shutdown.drain_timeout_s * 1000;

    atomic_store(&dm->retry_deadline_ms, deadline);
    wk_health_set_draining(dm->http, true);
    IB_LOG(IB_LOG_INFO, "shutdown", IB_MSG("draining"), IB_S("signal", strsignal(sig)),
           IB_I("drain_timeout_s", dm->cfg->shutdown.drain_timeout_s));
    if (dm->client)
        sb_client_stop_receiving(dm->client);
    for (;;) {
        release_queued(dm); /* anything that arrived before credit stopped */
        offer_held(dm, true); /* held messages: released (stopping is set) */
        pthread_mutex_lock(&dm->mu);
        size_t busy = dm->busy_workers, inflight = dm->in_flight;
        pthread_mutex_unlock(&dm->mu);
        if (busy == 0 && inflight == 0)
            return true;
        if (ib_mono_ms() >= deadline) {
            IB_LOG(IB_LOG_WARN, "shutdown",
                   IB_MSG("drain timeout: leaving unfinished messages to their locks"),
                   IB_I("busy_workers", busy), IB_I("in_flight", inflight));
            return busy == 0;
        }
        if ((sig = tick(dm)) != 0) {
            IB_LOG(IB_LOG_WARN, "shutdown", IB_MSG("second signal: exiting at once"));
            fflush(stdout);
            _exit(128 + sig);
        }
    }
}

/*
 * Stops every thread that started and frees everything. When a worker is
 * still inside the database (!clean), its transaction must die with the
 * process (never committed-and-completed), so this exits at once.
 */
static void daemon_stop(daemon_t *dm, int rc, bool clean)
{
    atomic_store(&dm->stopping, true);
    wk_sweeper_stop(dm->sweeper);
    rl_relay_halt(dm->relay); /* its last round's sends still get their answers */
    if (dm->client && !dm->relay_only) {
        sb_client_stop(dm->client);
        log_stats(dm);
        IB_LOG(IB_LOG_INFO, "shutdown", IB_MSG("stopped"), IB_I("exit_status", rc));
    }
    if (!clean) {
        fflush(stdout);
        _exit(rc);
    }
    pthread_mutex_lock(&dm->mu);
    dm->stop_workers = true;
    pthread_cond_broadcast(&dm->cv);
    pthread_cond_broadcast(&dm->gate_cv);
    pthread_mutex_unlock(&dm->mu);
    for (int i = 0; i < dm->nworkers; i++)
        pthread_join(dm->workers[i].tid, NULL);
    free(dm->workers);
    wk_entity_stop(dm->entity); /* before its token source, and the client it tells */
    sb_client_free(dm->client);
    jobs_spare_free(dm);
    ot_exporter_free(dm->otel); /* after the client: its callbacks end spans */
    sb_aad_free(dm->aad);
    wk_health_stop(dm->http);
    rl_relay_stop(dm->relay); /* after the http thread: /metrics reads the relay */
    wk_entity_free(dm->entity); /* likewise */
    if (dm->curl_inited)
        curl_global_cleanup();
    wk_metrics_free(dm->metrics);
    wk_breaker_free(dm->breaker);
    wk_dests_free(dm->dests);
    wk_claims_free(dm->pipe.claims); /* after the workers */
    wk_replicas_stop(dm->pipe.replicas); /* after the workers: they read its share */
    wk_dbopt_free(&dm->db); /* after the workers, the sweeper and the relay: its callers */
    rt_routes_free(&dm->routes);
    pthread_mutex_destroy(&dm->mu);
    pthread_cond_destroy(&dm->cv);
    pthread_cond_destroy(&dm->gate_cv);
    free(dm);
}

static daemon_t *daemon_new(const wk_config_t *cfg)
{
    daemon_t *dm = calloc(1, sizeof(*dm));
    if (!dm)
        return NULL;
    dm->msg_cost_us = -1; /* no batch yet: batch_share spreads */
    dm->breaker = wk_breaker_new();
    dm->dests = wk_dests_new();
    if (!dm->breaker || !dm->dests) {
        wk_breaker_free(dm->breaker);
        wk_dests_free(dm->dests);
        free(dm);
        return NULL;
    }
    dm->cfg = cfg;
    pthread_mutex_init(&dm->mu, NULL);
    ib_cond_init(&dm->cv);
    ib_cond_init(&dm->gate_cv);
    dm->pipe = (wk_pipeline_t){.cfg = cfg,
                               .routes = &dm->routes,
                               .stopping = &dm->stopping,
                               .retry_deadline_ms = &dm->retry_deadline_ms,
                               .breaker = dm->breaker,
                               .dests = dm->dests,
                               .settle_now = settle_early,
                               .settle_ctx = dm};
    atomic_init(&dm->pipe.db_reachable, true);
    /* Signals go to the main thread alone, through sigtimedwait. */
    sigemptyset(&dm->sigs);
    sigaddset(&dm->sigs, SIGTERM);
    sigaddset(&dm->sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &dm->sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return dm;
}

/* The one place a failure becomes an exit status: 2 for configuration, else 1. */
static int exit_status(const ib_error_t *err)
{
    return err->code == IB_E_CONFIG ? 2 : 1;
}

int wk_daemon_run(const wk_config_t *cfg, bool relay_only)
{
    daemon_t *dm = daemon_new(cfg);
    ib_error_t err;
    bool clean = true;
    int rc;

    if (!dm)
        return 1;
    dm->relay_only = relay_only;
    if (daemon_start(dm, &err) != IB_E_OK) {
        rc = exit_status(&err);
    } else {
        int sig = daemon_run(dm);
        clean = daemon_drain(dm, sig);
        rc = 0;
    }
    daemon_stop(dm, rc, clean);
    return rc;
}
