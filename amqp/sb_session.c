/*
 * sb_session.c - next-available sessions: the session filter on attach,
 * reading the granted session from the broker's attach, the per-session
 * buffer handed out as it arrives within max_concurrent_calls (the worker
 * keeps a session's order; one at a time under park), drains that tell
 * when a session is done (one that comes back short), giving sessions
 * back, keeping the accept pipeline full, the switch-latency bookkeeping,
 * and session-lock renewal.
 * thread: proactor (everything here).
 */
#include <stdlib.h>
#include <string.h>

#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_client_int.h"

#define TICKS_AT_EPOCH 621355968000000000LL

static void switch_accepted(sb_client_t *c, long long now);

void sb_session_prepare(sb_rcv_t *r)
{
    pn_data_t *f = pn_terminus_filter(pn_link_source(r->link));
    pn_data_t *p = pn_link_properties(r->link);
    pn_data_put_map(f);
    pn_data_enter(f);
    sb_put_sym(f, "com.microsoft:session-filter");
    pn_data_put_null(f); /* null: any available session */
    pn_data_exit(f);
    pn_data_put_map(p);
    pn_data_enter(p);
    sb_put_sym(p, "com.microsoft:timeout");
    pn_data_put_uint(p, r->c->session_wait_ms);
    pn_data_exit(p);
}

/* Finds key in the map at the top of d; leaves the cursor on its value. */
static bool map_find(pn_data_t *d, const char *key)
{
    size_t kl = strlen(key);
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return false;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t k = {0, NULL};
        if (pn_data_type(d) == PN_SYMBOL)
            k = pn_data_get_symbol(d);
        else if (pn_data_type(d) == PN_STRING)
            k = pn_data_get_string(d);
        if (!pn_data_next(d))
            break;
        if (k.start && k.size == kl && memcmp(k.start, key, kl) == 0)
            return true;
    }
    return false;
}

bool sb_session_opened(sb_rcv_t *r)
{
    pn_terminus_t *src = pn_link_remote_source(r->link);
    pn_data_t *f = src ? pn_terminus_filter(src) : NULL;
    pn_data_t *p = pn_link_remote_properties(r->link);
    long long now = ib_now_ms();

    if (!f || !map_find(f, "com.microsoft:session-filter") || pn_data_type(f) != PN_STRING)
        return false;
    {
        pn_bytes_t b = pn_data_get_string(f);
        free(r->session_id);
        r->session_id = strndup(b.start, b.size);
    }
    r->session_locked_until = now + 30000;
    if (p && map_find(p, "com.microsoft:locked-until-utc")) {
        if (pn_data_type(p) == PN_LONG)
            r->session_locked_until = (pn_data_get_long(p) - TICKS_AT_EPOCH) / 10000;
        else if (pn_data_type(p) == PN_TIMESTAMP)
            r->session_locked_until = pn_data_get_timestamp(p);
    }
    r->session_lock_dur = r->session_locked_until - now;
    if (r->session_lock_dur < 1000)
        r->session_lock_dur = 1000;
    r->c->stats.sessions_accepted++;
    /* A drain sent with the attach is still out: it counts from now (the broker's answer). */
    r->drain_at = r->drain_with_attach ? ib_mono_ms() : 0;
    r->drain_got = r->done_msgs = 0;
    r->filled_short = false;
    r->give_back = false;
    r->state_pending = r->parked_hold = r->parking = r->park_setting = false;
    sb_sstate_forget(r);
    if (r->session_id)
        switch_accepted(r->c, ib_mono_ms());
    if (r->session_id && r->c->park)
        sb_sstate_check(r);
    return r->session_id != NULL;
}

/* ---- switch latency ---- */

int sb_session_fifo_init(sb_client_t *c)
{
    unsigned cap = c->max_sessions * 2 + 1;
    c->sw_done.v = calloc(cap, sizeof(long long));
    c->sw_ahead.v = calloc(cap, sizeof(long long));
    c->sw_done.cap = c->sw_ahead.cap = cap;
    return c->sw_done.v && c->sw_ahead.v ? 0 : -1;
}

void sb_session_fifo_free(sb_client_t *c)
{
    free(c->sw_done.v);
    free(c->sw_ahead.v);
    c->sw_done.v = c->sw_ahead.v = NULL;
}

/* Appends t; when full, the oldest entry makes room (bounded memory). */
static void fifo_push(sb_ms_fifo_t *f, long long t)
{
    if (!f->cap)
        return;
    if (f->n == f->cap) {
        f->head = (f->head + 1) % f->cap;
        f->n--;
    }
    f->v[(f->head + f->n) % f->cap] = t;
    f->n++;
}

static bool fifo_pop(sb_ms_fifo_t *f, long long *t)
{
    if (!f->n)
        return false;
    *t = f->v[f->head];
    f->head = (f->head + 1) % f->cap;
    f->n--;
    return true;
}

static void switch_observe(sb_client_t *c, long long ms)
{
    if (c->cb.on_session_switch)
        c->cb.on_session_switch(ms > 0 ? ms / 1000.0 : 0.0, c->cb.ctx);
}

/*
 * Whether r's last drain is answered and came back with fewer messages than
 * it asked for: the session had no more then. A drain is answered only
 * after the broker sent what it had (an empty drain tells no more).
 */
static bool drained_short(const sb_rcv_t *r)
{
    /*
     * One sent with the attach that brought nothing may have been answered
     * before the broker looked at the session it then granted: it tells
     * nothing, and a drain after the attach asks again.
     */
    if (r->drain_with_attach && r->drain_got == 0)
        return false;
    return r->drain_at && r->drain_got < r->drain_ask && r->link && pn_link_credit(r->link) == 0;
}

/*
 * Whether r holds a session known to be done: its last drain came back
 * short (usually while its last message is still being processed).
 */
static bool finishing(const sb_rcv_t *r)
{
    return r->state == RCV_OPEN && r->session_id && r->nbuf == 0 && drained_short(r);
}

/* A session was accepted at mono ms now: the replacement of a finished one, or ahead of one. */
static void switch_accepted(sb_client_t *c, long long now)
{
    long long t0;
    bool any_finishing = false;
    if (fifo_pop(&c->sw_done, &t0)) {
        switch_observe(c, now - t0);
        return;
    }
    for (sb_rcv_t *r = c->rcvs; r && !any_finishing; r = r->next)
        any_finishing = finishing(r);
    if (any_finishing)
        fifo_push(&c->sw_ahead, now);
}

/* A done session was given back at mono ms now (its last message had just settled). */
static void switch_released(sb_client_t *c, long long now)
{
    long long ahead;
    if (fifo_pop(&c->sw_ahead, &ahead))
        switch_observe(c, 0); /* the next session was held already */
    else
        fifo_push(&c->sw_done, now);
}

/* No session was available for a while: slots idle for lack of work, not switching. */
void sb_session_none(sb_client_t *c)
{
    c->sw_done.n = c->sw_done.head = 0;
}

/* ---- the per-session flow ---- */

/* A parked session held without credit does not count: it takes no slot. */
static bool busy(const sb_rcv_t *r)
{
    if (r->state == RCV_AUTH || r->state == RCV_ATTACHING)
        return true;
    return r->state == RCV_OPEN && !finishing(r) && !r->parked_hold;
}

void sb_session_fill(sb_client_t *c)
{
    unsigned n = 0, idle = 0, holds = 0, all = 0;
    long long now = ib_mono_ms();
    if (!c->sessions || !c->core.up || c->stopping || c->receiving_stopped)
        return;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        n += busy(r);
        idle += r->state == RCV_IDLE;
        holds += r->state == RCV_OPEN && r->parked_hold;
        all++;
    }
    /* Parked sessions hold receivers: one more, so a slot still takes other sessions. */
    if (holds && !idle && n < c->max_sessions && all < 2 * c->max_sessions + SB_PARK_HOLD_MAX)
        sb_rcv_new(c, true);
    for (sb_rcv_t *r = c->rcvs; r && n < c->max_sessions; r = r->next)
        if (r->state == RCV_IDLE && now >= r->retry_at && now >= r->cool_until) {
            sb_rcv_start(r);
            n++;
        }
}

/* Closes r's link: the broker frees the session and everything still locked in it. */
void sb_session_give_back(sb_rcv_t *r, const char *why)
{
    sb_client_t *c = r->c;
    bool done = strcmp(why, "done") == 0;
    /*
     * A done session took no slot since its drain came back short (see
     * finishing), nor does its closing link: a fill run since then would
     * find what it found.
     */
    bool refill = !done || !r->filled_short;
    if (r->state != RCV_OPEN)
        return;
    IB_LOG(IB_LOG_DEBUG, "session_release", IB_MSG("session given back"),
           IB_S("session_id", r->session_id), IB_S("reason", why), IB_I("messages", r->done_msgs));
    c->stats.sessions_given_back++;
    sb_rcv_close(r);
    if (done)
        switch_released(c, ib_mono_ms());
    if (refill)
        sb_session_fill(c);
}

void sb_session_unbuffer(sb_rcv_t *r, sb_msg_t *msg)
{
    sb_msg_t **pp = &r->sbuf_head, *prev = NULL;
    while (*pp && *pp != msg) {
        prev = *pp;
        pp = &(*pp)->st->bnext;
    }
    if (!*pp)
        return;
    *pp = msg->st->bnext;
    if (r->sbuf_tail == msg)
        r->sbuf_tail = prev;
    msg->st->bnext = NULL;
    r->nbuf--;
}

void sb_session_delivered(sb_rcv_t *r, sb_msg_t *msg)
{
    sb_client_t *c = r->c;
    msg->st->bnext = NULL;
    if (r->sbuf_tail)
        r->sbuf_tail->st->bnext = msg;
    else
        r->sbuf_head = msg;
    r->sbuf_tail = msg;
    r->nbuf++;
    r->drain_got++;
    sb_msg_set_state(c, msg, SB_MS_BUFFERED);
    sb_session_step(r);
}

/*
 * Whether r may hand out its next buffered message. With none of its
 * session in flight, always: each session in progress has one out. A later
 * one beside earlier ones in flight only while the client has fewer than
 * max_concurrent_calls handed out (a lost connection turns every message
 * out into a lock lost the worker must get through), and never under park:
 * an earlier one may yet park the session, and then its later ones must
 * not have been handed out.
 */
static bool may_hand(const sb_rcv_t *r)
{
    const sb_client_t *c = r->c;
    if (r->held == r->nbuf)
        return true;
    return !c->park && c->n_inflight < c->mcc;
}

/* Hands buffered messages out, in order, while may_hand: a batch may take several of a session. */
static void hand_all(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    while (r->nbuf > 0 && r->state == RCV_OPEN && !r->give_back && may_hand(r)) {
        sb_msg_t *msg = r->sbuf_head;
        sb_session_unbuffer(r, msg);
        sb_msg_set_state(c, msg, SB_MS_HANDED);
        c->stats.handed++;
        c->cb.on_message(msg, c->cb.ctx);
    }
}

/*
 * Credit a drain asks for: the session's prefetch, no more than keeps its
 * messages held (handed and buffered) within SB_SESSION_HELD_MAX.
 */
static unsigned drain_credit(const sb_rcv_t *r)
{
    unsigned room = r->held < SB_SESSION_HELD_MAX ? SB_SESSION_HELD_MAX - r->held : 0;
    return r->c->session_prefetch < room ? r->c->session_prefetch : room;
}

void sb_session_step(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    unsigned inflight, ask;
    /* Paused (the circuit breaker) or recycling: nothing handed out, no credit. */
    if (r->state != RCV_OPEN || !r->link || !r->session_id || c->stopping || c->paused ||
        r->recycling)
        return;
    if (sb_throttle_on(c))
        return; /* the broker is busy: no drain; the hold's end steps every receiver again */
    inflight = r->held - r->nbuf;
    if (c->receiving_stopped) {
        /*
         * Nothing more is handed out. Closing the link returns the buffered
         * messages in order without counting a delivery, as Service Bus
         * documents for a session closed with messages locked.
         */
        if (inflight == 0)
            sb_session_give_back(r, "stopping");
        return;
    }
    if (r->parked_hold || r->state_pending)
        return; /* nothing of a parked (or not yet checked) session is received */
    if (r->parking) {
        if (inflight == 0 && !r->park_setting)
            sb_session_give_back(r, "parked");
        return;
    }
    if (r->give_back) {
        /* One went back to the head of the session: the later ones go back with it. */
        if (inflight == 0)
            sb_session_give_back(r, "abandoned");
        return;
    }
    hand_all(r);
    if (r->state != RCV_OPEN || r->give_back || pn_link_credit(r->link) > 0)
        return; /* a drain is out */
    inflight = r->held - r->nbuf;
    if (drained_short(r)) {
        /* The last drain came back short: done once those in flight settle. */
        if (inflight == 0) {
            sb_session_give_back(r, "done");
        } else if (!r->filled_short) {
            /* Its slot is free from now: once per drain, not on every step after it. */
            r->filled_short = true;
            sb_session_fill(c);
        }
        return;
    }
    if ((ask = drain_credit(r)) == 0)
        return; /* enough in flight: a settlement steps again */
    r->drain_at = ib_mono_ms();
    r->drain_got = 0;
    r->drain_ask = ask;
    r->drain_with_attach = r->filled_short = false;
    pn_link_drain(r->link, (int)ask);
}

void sb_session_drain_with_attach(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    r->drain_with_attach = false;
    /*
     * Not under park (a session's state is read before anything of it is
     * received), nor while nothing may be received. Proton sends the flow
     * right behind the attach; the broker applies it once it grants a
     * session, and a broker with no session to grant detaches as before.
     */
    if (c->park || c->stopping || c->paused || c->receiving_stopped || sb_throttle_on(c))
        return;
    r->drain_ask = drain_credit(r);
    if (r->drain_ask == 0)
        return;
    r->drain_at = ib_mono_ms();
    r->drain_got = 0;
    r->drain_with_attach = true;
    r->filled_short = false;
    pn_link_drain(r->link, (int)r->drain_ask);
}

/*
 * A settlement freed one of max_concurrent_calls: sessions whose messages
 * wait for one hand them out, in the receivers' order. Not while the
 * connection is down: their links are being lost, their messages with them.
 */
void sb_session_hand_more(sb_client_t *c)
{
    if (!c->sessions || c->park || !c->core.up)
        return;
    for (sb_rcv_t *r = c->rcvs; r && c->n_inflight < c->mcc; r = r->next)
        if (r->session && r->nbuf > 0)
            sb_session_step(r);
}

typedef struct sess_renew {
    sb_rcv_t *r;
    unsigned gen;
} sess_renew_t;

static void on_session_renewed(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sess_renew_t *sr = ctx;
    sb_rcv_t *r = sr->r;
    sb_client_t *c = r->c;
    bool current = r->gen == sr->gen && r->state == RCV_OPEN;
    free(sr);
    if (!current)
        return;
    r->session_renewing = false;
    if (status == 200) {
        pn_data_t *body = pn_message_body(resp);
        if (sb_body_find(body, "expiration") && pn_data_type(body) == PN_TIMESTAMP) {
            r->session_locked_until = pn_data_get_timestamp(body);
            c->stats.renewals_ok++;
            for (sb_msg_t *msg = c->held; msg; msg = msg->st->next)
                if (msg->st->rcv == r)
                    msg->st->locked_until = r->session_locked_until;
        }
        return;
    }
    c->stats.renewals_failed++;
    if (sb_resp_busy(resp, status))
        sb_throttle_note(c, "renew-session-lock");
    IB_LOG(IB_LOG_WARN, "lock_renew", IB_MSG("renew-session-lock failed"),
           IB_S("session_id", r->session_id), IB_I("status", status),
           IB_S("error", status < 0 ? err->text : NULL));
    if (status == 410) {
        ib_error_t why;
        ib_error_set(&why, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT, "session lock lost");
        sb_rcv_lost(r, &why, true);
        r->retry_at = ib_mono_ms() + 200;
    }
}

static void renew_session(sb_client_t *c, sb_rcv_t *r)
{
    sess_renew_t *sr = malloc(sizeof(*sr));
    pn_message_t *req;
    pn_data_t *body;
    if (!sr)
        return;
    sr->r = r;
    sr->gen = r->gen;
    req = sb_mgmt_message("com.microsoft:renew-session-lock", r->name);
    body = pn_message_body(req);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "session-id");
    sb_put_str(body, r->session_id);
    pn_data_exit(body);
    r->session_renewing = true;
    sb_rr_request(sb_rr_mgmt(&c->core, c->entity), req, on_session_renewed, sr);
}

void sb_session_tick(sb_client_t *c)
{
    long long mono = ib_mono_ms(), now = ib_now_ms();
    if (!c->sessions || !c->core.up || c->stopping)
        return;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->state != RCV_OPEN || !r->session_id || r->parked_hold)
            continue;
        /* The upper bound for a drain the broker does not answer. */
        if (r->held == 0 && r->drain_at && pn_link_credit(r->link) > 0 &&
            mono - r->drain_at > (long long)c->idle_s * 1000) {
            IB_LOG(IB_LOG_INFO, "session_release", IB_MSG("drain unanswered, session given back"),
                   IB_S("session_id", r->session_id), IB_I("idle_s", c->idle_s));
            sb_session_give_back(r, "idle");
            continue;
        }
        if (c->renew_max_s && !r->session_renewing) {
            bool stale = false;
            for (sb_msg_t *msg = c->held; msg; msg = msg->st->next)
                if (msg->st->rcv == r && now >= msg->st->renew_until)
                    stale = true;
            if (!stale && r->session_locked_until - now <= sb_renew_margin(c, r->session_lock_dur))
                renew_session(c, r);
        }
    }
    sb_sstate_tick(c);
    sb_session_fill(c);
}
