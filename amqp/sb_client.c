/*
 * sb_client.c - the client's life: options, the proactor thread, reconnect
 * with backoff, stop, the cross-thread settle queue and stats.
 */
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sb_client_int.h"
#include "sb_condition.h"

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

/* ---- hooks from the core (thread: proactor) ---- */

static void c_on_up(void *owner)
{
    sb_client_t *c = owner;
    if (c->stopping)
        return;
    sb_out_up(&c->out);
    if (c->send_only) {
        sb_client_set_ready(c, 1, NULL);
        return;
    }
    if (c->sessions) {
        sb_session_fill(c);
        return;
    }
    for (sb_rcv_t *r = c->rcvs; r; r = r->next)
        if (r->state == RCV_IDLE)
            sb_rcv_start(r);
}

static void c_on_down(void *owner, const ib_error_t *why)
{
    sb_client_t *c = owner;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next)
        sb_rcv_lost(r, why, false);
    sb_out_down(&c->out, why);
    sb_client_set_ready(c, 0, why);
    c->stats.connected = 0;
    if (c->stopping) {
        c->done = true;
        return;
    }
    {
        long long delay = ib_backoff_ms(c->reconnect_min_ms, c->reconnect_max_ms,
                                        (int)c->attempt + 1, &c->seed);
        c->reconnect_at = ib_mono_ms() + delay;
        c->attempt++;
        IB_LOG(IB_LOG_WARN, "reconnect", IB_MSG("connection lost, reconnecting"),
               IB_S("error", why->text), IB_I("delay_ms", delay), IB_I("attempt", c->attempt));
    }
}

static void c_on_link_event(void *owner, pn_event_t *e, pn_link_t *link)
{
    sb_client_t *c = owner;
    if (!sb_out_event(&c->out, e, link))
        sb_rcv_event(c, e, link);
}

/*
 * sb_client_pause: no credit and buffered messages handed back (released:
 * no delivery counted); messages the worker holds stay its own, under
 * renewed locks. Resuming grants credit again. thread: proactor.
 */
static void apply_pause(sb_client_t *c, bool pause)
{
    if (pause == c->paused)
        return;
    c->paused = pause;
    IB_LOG(IB_LOG_INFO, "pause", IB_MSG(pause ? "receiving paused" : "receiving resumed"),
           IB_I("in_flight", c->n_inflight), IB_I("buffered", c->n_buffered));
    if (pause) {
        sb_rcv_release_buffered(c);
        for (sb_rcv_t *r = c->rcvs; r; r = r->next)
            if (r->state == RCV_OPEN && r->link && !r->session)
                pn_link_drain(r->link, 0);
        return;
    }
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->link && !r->session)
            pn_link_set_drain(r->link, false); /* new credit is plain credit again */
        sb_rcv_grant(r);
    }
    sb_rcv_pump(c);
}

static void apply_flags(sb_client_t *c)
{
    bool stop_rcv, stop, pause;
    pthread_mutex_lock(&c->lock);
    stop_rcv = c->stop_receiving;
    stop = c->stop_requested;
    pause = c->pause;
    pthread_mutex_unlock(&c->lock);
    if (!stop && !stop_rcv)
        apply_pause(c, pause);
    if ((stop_rcv || stop) && !c->receiving_stopped) {
        c->receiving_stopped = true;
        if (!c->send_only)
            IB_LOG(IB_LOG_INFO, "drain", IB_MSG("receiving stopped"),
                   IB_I("in_flight", c->n_inflight), IB_I("buffered", c->n_buffered));
        sb_rcv_release_buffered(c);
        for (sb_rcv_t *r = c->rcvs; r; r = r->next)
            if (r->state == RCV_OPEN && r->link) {
                if (!r->session)
                    pn_link_drain(r->link, 0);
                else
                    sb_session_step(r); /* given back once nothing is in flight */
            }
    }
    if (stop && !c->stopping) {
        c->stopping = true;
        c->stop_deadline = ib_mono_ms() + 3000;
        sb_settle_shutdown(c);
        sb_out_close(&c->out);
        sb_client_take_sends(c); /* ends them: stopping */
        for (sb_rcv_t *r = c->rcvs; r; r = r->next)
            if (r->link)
                sb_rcv_close(r);
        if (c->core.conn)
            sb_core_close(&c->core);
        else
            c->done = true;
    }
}

static void c_on_wake(void *owner)
{
    sb_client_t *c = owner;
    apply_flags(c);
    sb_settle_drain_queue(c);
    sb_client_take_sends(c);
}

static void c_on_tick(void *owner)
{
    sb_client_t *c = owner;
    long long now = ib_mono_ms();
    apply_flags(c);
    sb_settle_drain_queue(c);
    sb_client_take_sends(c);
    sb_out_tick(&c->out);
    if (c->stopping) {
        if (now >= c->stop_deadline)
            c->done = true;
        return;
    }
    if (!c->core.conn && now >= c->reconnect_at) {
        c->stats.reconnects += c->attempt > 0;
        sb_core_connect(&c->core);
    }
    sb_throttle_tick(c);
    if (c->core.up && !c->sessions && !sb_throttle_on(c))
        for (sb_rcv_t *r = c->rcvs; r; r = r->next)
            if (r->state == RCV_IDLE && now >= r->retry_at && !c->receiving_stopped)
                sb_rcv_start(r);
    sb_stall_tick(c);
    for (sb_rcv_t *r = c->rcvs; r; r = r->next)
        sb_rcv_recycle_finish(r, false);
    sb_settle_tick(c);
    sb_renew_tick(c);
    sb_session_tick(c);
    sb_rcv_pump(c);
}

static void c_on_interrupt(void *owner)
{
    apply_flags(owner);
}

/* ---- thread ---- */

void sb_client_publish_stats(sb_client_t *c)
{
    unsigned links = 0, held = 0;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next)
        if (r->state == RCV_OPEN) {
            links++;
            held += r->session && r->session_id;
        }
    c->stats.links = links;
    c->stats.sessions_held = held;
    if (held > c->stats.max_sessions_held)
        c->stats.max_sessions_held = held;
    c->stats.in_flight = c->n_inflight;
    c->stats.buffered = c->n_buffered;
    c->stats.connected = c->ready;
    c->stats.loop_mono_ms = ib_mono_ms();
    pthread_mutex_lock(&c->lock);
    c->stats_pub = c->stats;
    c->stats_pub.throttled_ms = sb_throttle_ms(c); /* the hold under way counts as it goes */
    pthread_mutex_unlock(&c->lock);
}

void sb_client_set_ready(sb_client_t *c, int ready, const ib_error_t *why)
{
    /* Transitions, and every new reason for staying down (an attach refused again). */
    if (c->ready == (ready != 0) && (ready || !why))
        return;
    c->ready = ready != 0;
    if (ready)
        c->attempt = 0;
    IB_LOG(ready || c->stopping ? IB_LOG_INFO : IB_LOG_WARN, "ready",
           IB_MSG(c->send_only ? (ready ? "connected (sending only)" : "not connected")
                               : (ready ? "receiving" : "not receiving")),
           IB_S("entity", c->entity),
           IB_S("error", why ? why->text : NULL),
           IB_S("condition", why && why->condition[0] ? why->condition : NULL));
    if (c->cb.on_state)
        c->cb.on_state(ready, why, c->cb.ctx);
}

static void *client_thread(void *arg)
{
    sb_client_t *c = arg;
    sb_core_connect(&c->core);
    while (!c->done) {
        pn_event_batch_t *b = pn_proactor_wait(c->core.proactor);
        pn_event_t *e;
        while ((e = pn_event_batch_next(b)) != NULL)
            sb_core_handle(&c->core, e);
        pn_proactor_done(c->core.proactor, b);
        if (c->cb.on_batch_end)
            c->cb.on_batch_end(c->cb.ctx);
        sb_client_publish_stats(c);
    }
    /* Anything left (a stop that could not close in time) is reported and freed. */
    sb_settle_shutdown(c);
    sb_out_close(&c->out);
    sb_client_take_sends(c);
    sb_client_publish_stats(c);
    return NULL;
}

/* ---- public API ---- */

/* The rest of sb_client_new for a client that only sends: no entity, no receivers. */
static sb_client_t *finish_send_only(sb_client_t *c, const sb_options_t *opt, ib_error_t *err)
{
    c->ca_file = dup_or_null(opt->ca_file);
    c->reconnect_max_ms = opt->reconnect_max_ms ? opt->reconnect_max_ms : 30000;
    c->reconnect_min_ms = opt->reconnect_min_ms ? opt->reconnect_min_ms : 100;
    if (c->reconnect_min_ms > c->reconnect_max_ms)
        c->reconnect_min_ms = c->reconnect_max_ms;
    if (opt->ca_file && !c->ca_file) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        sb_client_free(c);
        return NULL;
    }
    return c;
}

sb_client_t *sb_client_new(const sb_options_t *opt, const sb_callbacks_t *cb, ib_error_t *err)
{
    sb_client_t *c;
    sb_core_hooks_t hooks = {c_on_up,        c_on_down, c_on_link_event, c_on_wake, c_on_tick,
                             c_on_interrupt, NULL};
    const char *entity;

    if (!opt || !cb || (!opt->send_only && (!cb->on_message || !cb->on_settled))) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "servicebus: options and the on_message/on_settled callbacks are required");
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    hooks.owner = c;
    pthread_mutex_init(&c->lock, NULL);
    ib_cond_init(&c->sent_cv);
    c->cb = *cb;
    c->send_only = opt->send_only;
    if (sb_core_init(&c->core, opt->connection_string, opt->ca_file, opt->token_get, opt->token_ctx,
                     opt->op_timeout_ms, &hooks, err) != IB_E_OK) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->sent_cv);
        free(c);
        return NULL;
    }
    c->core.cs.sas_lifetime_s = opt->sas_token_lifetime_s;
    sb_out_init(&c->out, &c->core);
    if (c->send_only)
        return finish_send_only(c, opt, err);
    entity = opt->entity && *opt->entity ? opt->entity : c->core.cs.entity_path;
    if (!entity) {
        ib_error_set(
            err, IB_E_CONFIG, IB_CLASS_PERMANENT,
            "servicebus.entity: no entity given and the connection string has no EntityPath");
        sb_client_free(c);
        return NULL;
    }
    if (opt->entity && *opt->entity && c->core.cs.entity_path &&
        strcasecmp(opt->entity, c->core.cs.entity_path) != 0) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "servicebus.entity: '%s' differs from the connection string's EntityPath",
                     opt->entity);
        sb_client_free(c);
        return NULL;
    }
    c->entity = strdup(entity[0] == '/' ? entity + 1 : entity);
    c->audience = c->entity ? sb_core_audience(&c->core, c->entity) : NULL;
    c->ca_file = dup_or_null(opt->ca_file);
    c->sessions = opt->sessions;
    c->prefetch = opt->prefetch;
    c->mcc = opt->max_concurrent_calls ? opt->max_concurrent_calls : 1;
    c->max_held_bytes = opt->max_held_bytes;
    c->held_beside = opt->held_beside;
    atomic_init(&c->held_pub, 0);
    c->core.max_frame = c->max_held_bytes ? SB_MAX_FRAME : 0;
    c->rcv_window = c->max_held_bytes / 64 < SB_RCV_WINDOW_MIN   ? SB_RCV_WINDOW_MIN
                    : c->max_held_bytes / 64 > SB_RCV_WINDOW_MAX ? SB_RCV_WINDOW_MAX
                                                                 : (size_t)(c->max_held_bytes / 64);
    c->max_sessions = opt->max_concurrent_sessions ? opt->max_concurrent_sessions : 1;
    c->renew_max_s = opt->max_auto_lock_renewal_s;
    c->idle_s = opt->session_idle_timeout_s ? opt->session_idle_timeout_s : 60;
    c->reconnect_max_ms = opt->reconnect_max_ms ? opt->reconnect_max_ms : 30000;
    c->reconnect_min_ms = opt->reconnect_min_ms ? opt->reconnect_min_ms : 100;
    if (c->reconnect_min_ms > c->reconnect_max_ms)
        c->reconnect_min_ms = c->reconnect_max_ms;
    c->session_wait_ms = opt->session_wait_ms ? opt->session_wait_ms : 60000;
    c->renew_margin_ms = opt->renew_margin_ms;
    c->session_prefetch = opt->session_prefetch ? opt->session_prefetch : 1;
    c->park = opt->session_park && c->sessions;
    c->settle_timeout_ms = opt->settle_timeout_ms ? opt->settle_timeout_ms : 10000;
    c->stall_ms = opt->stall_timeout_ms ? opt->stall_timeout_ms : 60000;
    if (!c->entity || !c->audience || (c->sessions && sb_session_fifo_init(c) != 0)) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        sb_client_free(c);
        return NULL;
    }
    /* Sessions: one replacement per finishing session may be attaching besides. */
    for (unsigned k = 0; k < (c->sessions ? 2 * c->max_sessions : 1); k++) {
        sb_rcv_t *r = sb_rcv_new(c, c->sessions);
        if (!r) {
            ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            sb_client_free(c);
            return NULL;
        }
    }
    return c;
}

ib_err_t sb_client_start(sb_client_t *c)
{
    if (c->started)
        return IB_E_INVAL;
    if (pthread_create(&c->thread, NULL, client_thread, c) != 0)
        return IB_E_NOMEM;
    c->started = true;
    return IB_E_OK;
}

static char *dup_capped(const char *s)
{
    size_t n;
    char *out;
    if (!s)
        return NULL;
    n = sb_utf8_cap(s, SB_REASON_MAX);
    out = malloc(n + 1);
    if (out) {
        memcpy(out, s, n);
        out[n] = '\0';
    }
    return out;
}

static sb_prop_t *copy_props(const sb_prop_t *props, size_t n)
{
    sb_prop_t *out = calloc(n, sizeof(*out));
    if (!out)
        return NULL;
    for (size_t k = 0; k < n; k++) {
        out[k] = props[k];
        out[k].key = strdup(props[k].key ? props[k].key : "");
        out[k].str = props[k].str ? strdup(props[k].str) : NULL;
    }
    return out;
}

void sb_client_settle(sb_client_t *c, sb_msg_t *msg, sb_disposition_t d, const char *reason,
                      const char *description)
{
    sb_client_settle_props(c, msg, d, reason, description, NULL, 0);
}

void sb_client_settle_props(sb_client_t *c, sb_msg_t *msg, sb_disposition_t d, const char *reason,
                            const char *description, const sb_prop_t *props, size_t nprops)
{
    struct sb_msg_state *st;
    bool modifies = d == SB_ABANDON || d == SB_DEFER || d == SB_DEADLETTER;
    sb_prop_t *mod = modifies && nprops ? copy_props(props, nprops) : NULL;
    pthread_mutex_lock(&c->lock);
    if (c->stop_requested) {
        /* Stop reports every held message with IB_E_SHUTDOWN; do not touch msg. */
        pthread_mutex_unlock(&c->lock);
        sb_props_free(mod, mod ? nprops : 0);
        return;
    }
    st = msg->st;
    st->d = d;
    st->reason = d == SB_DEADLETTER ? dup_capped(reason) : NULL;
    st->desc = d == SB_DEADLETTER ? dup_capped(description) : NULL;
    st->mod = mod;
    st->nmod = mod ? nprops : 0;
    st->qnext = NULL;
    if (c->sq_tail)
        c->sq_tail->st->qnext = msg;
    else
        c->sq_head = msg;
    c->sq_tail = msg;
    pthread_mutex_unlock(&c->lock);
    sb_core_wake(&c->core);
}

void sb_client_pause(sb_client_t *c, bool pause)
{
    pthread_mutex_lock(&c->lock);
    c->pause = pause;
    pthread_mutex_unlock(&c->lock);
    sb_core_wake(&c->core);
}

void sb_client_stop_receiving(sb_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->stop_receiving = true;
    pthread_mutex_unlock(&c->lock);
    sb_core_interrupt(&c->core);
}

void sb_client_stop(sb_client_t *c)
{
    if (!c->started) {
        /* No proactor ever ran: end the sends queued for it here. */
        pthread_mutex_lock(&c->lock);
        c->stop_requested = true;
        pthread_mutex_unlock(&c->lock);
        c->stopping = true;
        sb_client_take_sends(c);
        return;
    }
    if (c->joined)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop_requested = true;
    pthread_mutex_unlock(&c->lock);
    sb_core_interrupt(&c->core);
    pthread_join(c->thread, NULL);
    c->joined = true;
}

void sb_client_free(sb_client_t *c)
{
    if (!c)
        return;
    sb_client_stop(c);
    while (c->held) {
        sb_msg_t *msg = c->held;
        sb_msg_unlink(c, msg);
        sb_msg_destroy(msg);
    }
    while (c->rcvs) {
        sb_rcv_t *r = c->rcvs;
        c->rcvs = r->next;
        free(r->acc);
        free(r->session_id);
        sb_sstate_forget(r);
        free(r);
    }
    sb_out_fini(&c->out);
    sb_core_fini(&c->core);
    sb_session_fifo_free(c);
    sb_sstate_free(c);
    free(c->entity);
    free(c->audience);
    free(c->ca_file);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->sent_cv);
    free(c);
}

/* ---- sending ---- */

/* thread: proactor. The send is the caller's again: wake it. */
static void send_back(sb_out_req_t *req, void *ctx)
{
    sb_client_t *c = ctx;
    for (size_t k = 0; k < req->n; k++)
        if (sb_condition_busy(req->each[k].condition)) {
            sb_throttle_note(c, "send");
            break;
        }
    pthread_mutex_lock(&c->lock);
    req->back = true;
    pthread_cond_broadcast(&c->sent_cv);
    pthread_mutex_unlock(&c->lock);
}

void sb_client_take_sends(sb_client_t *c)
{
    sb_out_req_t *req;
    ib_error_t why;
    ib_error_set(&why, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "the client is stopping");
    if (sb_throttle_on(c))
        return; /* held in the queue until the broker is no longer busy */
    pthread_mutex_lock(&c->lock);
    req = c->oq_head;
    c->oq_head = c->oq_tail = NULL;
    pthread_mutex_unlock(&c->lock);
    while (req) {
        sb_out_req_t *next = req->next;
        req->next = NULL;
        if (c->stopping)
            sb_out_refuse(req, &why);
        else
            sb_out_submit(&c->out, req);
        req = next;
    }
    if (c->stopping)
        sb_out_down(&c->out, &why); /* its links are closed already: ends every send */
}

ib_err_t sb_client_send_each(sb_client_t *c, const char *entity, const sb_out_msg_t *msgs,
                             size_t n, unsigned timeout_ms, ib_error_t *each)
{
    ib_error_t err;
    sb_out_req_t *req;
    ib_err_t rc;
    ib_error_clear(&err);
    req = sb_out_req_new(entity, msgs, n, timeout_ms, &err);
    if (req) {
        req->done_cb = send_back;
        req->ctx = c;
        pthread_mutex_lock(&c->lock);
        if (c->stop_requested) {
            ib_error_set(&err, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "the client is stopping");
        } else {
            if (c->oq_tail)
                c->oq_tail->next = req;
            else
                c->oq_head = req;
            c->oq_tail = req;
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (!req || err.code == IB_E_SHUTDOWN) {
        for (size_t k = 0; k < n; k++)
            each[k] = err;
        sb_out_req_free(req);
        return err.code;
    }
    sb_core_wake(&c->core);
    pthread_mutex_lock(&c->lock);
    while (!req->back)
        pthread_cond_wait(&c->sent_cv, &c->lock);
    pthread_mutex_unlock(&c->lock);
    rc = sb_out_req_result(req, &err);
    memcpy(each, req->each, n * sizeof(*each));
    sb_out_req_free(req);
    return rc;
}

void sb_client_set_backlog(sb_client_t *c, long long active)
{
    pthread_mutex_lock(&c->lock);
    c->backlog = active;
    c->backlog_at = ib_mono_ms();
    pthread_mutex_unlock(&c->lock);
}

unsigned long long sb_client_held_bytes(const sb_client_t *c)
{
    return atomic_load_explicit(&((sb_client_t *)c)->held_pub, memory_order_relaxed);
}

void sb_client_stats(sb_client_t *c, sb_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats_pub;
    pthread_mutex_unlock(&c->lock);
}
