/*
 * sb_stall.c - receive links that stop receiving without a word. A plain
 * receive link whose credit has been out for stall_ms with no transfer,
 * while the entity's last count (sb_client_set_backlog, read after that
 * credit went out) shows more active messages than the client holds, is
 * recycled (sb_rcv_recycle); a second stall with no transfer in between
 * recycles the connection. Locked messages of other consumers count as
 * active too: a recycle they cause costs one attach, nothing else.
 * A session link takes credit only as drains, which the broker must answer
 * at once: one holding a session whose drain stays unanswered, with no
 * transfer since, for stall_ms while the entity's count (read after the
 * drain) shows more active messages than the client holds, is stalled the
 * same way; its recycle gives the session back (sb_rcv_recycle).
 *
 * thread: proactor.
 */
#include "ib_log.h"
#include "sb_client_int.h"

/* Whether the entity, as counted after since (mono ms), has messages r should have been given. */
static bool backlog_waits(sb_client_t *c, long long since, long long *active)
{
    long long at;
    pthread_mutex_lock(&c->lock);
    *active = c->backlog;
    at = c->backlog_at;
    pthread_mutex_unlock(&c->lock);
    return at > since &&
           *active > (long long)(c->n_inflight + c->n_buffered + c->n_settling);
}

static void stalled(sb_client_t *c, sb_rcv_t *r, long long active, long long idle_ms)
{
    c->stats.stalls++;
    c->stalls_in_row++;
    IB_LOG(IB_LOG_WARN, "receive_stall",
           IB_MSG(c->stalls_in_row > 1 ? "no transfer again: recycling the connection"
                                       : "no transfer while the entity has messages: recycling "
                                         "the link"),
           IB_S("entity", c->entity), IB_S("link", r->name), IB_I("credit_out_ms", idle_ms),
           IB_I("active", active), IB_I("credit", pn_link_credit(r->link)));
    if (c->stalls_in_row > 1) {
        c->stalls_in_row = 0;
        c->stats.stall_reconnects++;
        sb_core_close(&c->core); /* the close brings c_on_down: reconnect, attach again */
        return;
    }
    sb_rcv_recycle(r, "no transfer while the entity has messages");
}

/* Since when (mono ms) r's session drain has gone unanswered with no transfer; 0 = it has not. */
static long long session_waiting_since(const sb_rcv_t *r)
{
    if (r->state != RCV_OPEN || !r->link || r->recycling || !r->session_id || r->parked_hold ||
        r->state_pending || !r->drain_at || pn_link_credit(r->link) <= 0)
        return 0;
    return r->drain_at > r->last_activity ? r->drain_at : r->last_activity;
}

static void session_tick(sb_client_t *c, long long now)
{
    long long since, active;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        since = session_waiting_since(r);
        if (!since || now - since < (long long)c->stall_ms || !backlog_waits(c, since, &active))
            continue;
        stalled(c, r, active, now - since);
        return;
    }
}

void sb_stall_tick(sb_client_t *c)
{
    long long now = ib_mono_ms(), active;
    if (c->stopping || c->paused || c->receiving_stopped || sb_throttle_on(c))
        return;
    if (c->sessions) {
        session_tick(c, now);
        return;
    }
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->state != RCV_OPEN || !r->link || r->recycling || !r->credit_since ||
            pn_link_credit(r->link) <= 0 || now - r->credit_since < (long long)c->stall_ms)
            continue;
        if (!backlog_waits(c, r->credit_since, &active))
            continue;
        long long idle_ms = now - r->credit_since;
        r->credit_since = now; /* one finding per stall_ms */
        stalled(c, r, active, idle_ms);
        return;
    }
}
