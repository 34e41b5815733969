/*
 * emu_idle.c - the broker's idle close, as faults with short times. Service
 * Bus detaches an entity link that moved no message for a while
 * (amqp:link:detach-forced; the service's idle time is minutes) and closes
 * a connection that has been idle (amqp:connection:forced). Here a link is
 * idle when no message went either way on it and no settlement came for
 * idle_close_link_ms (credit alone is not activity: a receiver waiting on
 * an empty queue is idle); a connection when nothing (messages,
 * settlements, $cbs or $management requests) moved on any of its links for
 * idle_close_conn_ms. Receivers still waiting for a session are left alone.
 * Counted in the stats file's faults.links_idle_closed / conns_idle_closed.
 *
 * thread: proactor.
 */
#include "emu_broker.h"

#include "ib_log.h"

#include <stdio.h>

void emu_idle_touch(emu_link_t *l)
{
    int64_t now = emu_now_ms();
    l->active_ms = now;
    if (l->conn)
        l->conn->active_ms = now;
}

/* An entity link (receive or send) that can be idle-closed. */
static bool idle_kind(const emu_link_t *l)
{
    return (l->kind == EMU_LINK_CONSUMER || l->kind == EMU_LINK_SEND_IN) && !l->session_pending &&
           (pn_link_state(l->pl) & PN_LOCAL_ACTIVE);
}

static bool link_idle(const emu_broker_t *b, const emu_link_t *l, int64_t now)
{
    int ms = b->faults.idle_close_link_ms;
    return ms > 0 && idle_kind(l) && l->active_ms && now - l->active_ms >= ms;
}

static bool conn_idle(const emu_broker_t *b, const emu_conn_t *conn, int64_t now)
{
    int ms = b->faults.idle_close_conn_ms;
    return ms > 0 && !conn->closing && conn->active_ms && now - conn->active_ms >= ms;
}

bool emu_idle_due(const emu_broker_t *b, const emu_conn_t *conn, int64_t now)
{
    if (conn_idle(b, conn, now))
        return true;
    for (const emu_link_t *l = conn->links; l; l = l->next)
        if (link_idle(b, l, now))
            return true;
    return false;
}

static void detach_idle(emu_broker_t *b, emu_link_t *l)
{
    char desc[256];
    snprintf(desc, sizeof desc,
             "The link is force detached: it was idle for more than %d ms (sbemu "
             "--fault-idle-close-link-ms).",
             b->faults.idle_close_link_ms);
    IB_LOG(IB_LOG_INFO, "fault", IB_MSG("idle link detached"), IB_S("link", pn_link_name(l->pl)));
    emu_link_release(b, l); /* message locks outlive the link, as on the service */
    b->ns->links_idle_closed++;
    pn_condition_t *c = pn_link_condition(l->pl);
    pn_condition_set_name(c, "amqp:link:detach-forced");
    pn_condition_set_description(c, desc);
    pn_link_close(l->pl);
}

void emu_idle_close(emu_broker_t *b, emu_conn_t *conn)
{
    int64_t now = emu_now_ms();
    if (conn_idle(b, conn, now)) {
        char desc[256];
        snprintf(desc, sizeof desc,
                 "The connection was inactive for more than the allowed %d milliseconds and is "
                 "closed by container 'sbemu' (--fault-idle-close-conn-ms).",
                 b->faults.idle_close_conn_ms);
        b->ns->conns_idle_closed++;
        emu_conn_close(conn, "amqp:connection:forced", desc);
        return;
    }
    if (b->faults.idle_close_link_ms <= 0)
        return; /* no link is ever idle: not worth a walk per event */
    for (emu_link_t *l = conn->links; l; l = l->next)
        if (link_idle(b, l, now))
            detach_idle(b, l);
}
