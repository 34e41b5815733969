/*
 * sb_stall.c - receive links that stop receiving without a word. A plain
 * receive link whose credit has been out for stall_ms with no transfer,
 * while the entity's last count (sb_client_set_backlog, read after that
 * credit went out) shows more active messages than the client holds, is
 * recycled (sb_rcv_recycle); a second stall with no transfer in between
 * recycles the connection. Locked messages of other consumers count as
 * active too: a recycle they cause costs one attach, nothing else.
 *
 * thread: proactor.
 */
#include "ib_log.h"
#include "sb_client_int.h"

/* Whether the entity, as last counted, has messages r should have been given. */
static bool backlog_waits(sb_client_t *c, const sb_rcv_t *r, long long *active)
{
    long long at;
    pthread_mutex_lock(&c->lock);
    *active = c->backlog;
    at = c->backlog_at;
    pthread_mutex_unlock(&c->lock);
    return at > r->credit_since &&
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

void sb_stall_tick(sb_client_t *c)
{
    long long now = ib_mono_ms(), active;
    if (c->sessions || c->stopping || c->paused || c->receiving_stopped || sb_throttle_on(c))
        return;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->state != RCV_OPEN || !r->link || r->recycling || !r->credit_since ||
            pn_link_credit(r->link) <= 0 || now - r->credit_since < (long long)c->stall_ms)
            continue;
        if (!backlog_waits(c, r, &active))
            continue;
        long long idle_ms = now - r->credit_since;
        r->credit_since = now; /* one finding per stall_ms */
        stalled(c, r, active, idle_ms);
        return;
    }
}
