/*
 * emu_broker.c - connection-level event handling of sbemu: accept, SASL,
 * open/begin/attach routing, wake-ups, timers, fault-injected drops.
 */
#include "emu_broker.h"

#include "emu_stats.h"
#include "ib_log.h"

#include <proton/listener.h>
#include <proton/netaddr.h>
#include <proton/sasl.h>
#include <proton/transport.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#define EMU_TICK_MS 50

static void log_condition(const char *event, pn_condition_t *cond)
{
    if (cond && pn_condition_is_set(cond))
        IB_LOG(IB_LOG_INFO, event, IB_S("condition", pn_condition_get_name(cond)),
               IB_S("description", pn_condition_get_description(cond)));
}

/* thread: proactor */
void emu_conn_close(emu_conn_t *conn, const char *cond, const char *desc)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (strcmp(cond, "amqp:connection:forced") == 0)
        conn->b->ns->conn_forced++;
    IB_LOG(IB_LOG_INFO, "disconnect", IB_S("condition", cond), IB_S("description", desc));
    pn_condition_t *c = pn_connection_condition(conn->pc);
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_connection_close(conn->pc);
}

/* thread: proactor */
void emu_conn_poke(emu_broker_t *b, emu_conn_t *conn)
{
    if (conn == b->current) {
        conn->dirty = true;
    } else if (!conn->wake_pending) {
        conn->wake_pending = true;
        pn_connection_wake(conn->pc);
    }
}

/* thread: proactor */
void emu_broker_on_ready(void *ctx, emu_entity_t *ent)
{
    emu_broker_t *b = ctx;
    emu_link_assign_waiting(b, ent);
    for (emu_link_t *l = ent->consumers; l; l = l->cnext)
        emu_conn_poke(b, l->conn);
}

/* thread: proactor */
void emu_broker_on_session_lost(void *ctx, emu_entity_t *ent, emu_session_t *s, void *holder)
{
    emu_broker_t *b = ctx;
    emu_link_t *l = holder;
    (void)ent;
    (void)s;
    /* The namespace releases the session; the link is detached from its own connection. */
    l->session = NULL;
    l->session_lost = true;
    emu_conn_poke(b, l->conn);
}

static emu_conn_t *conn_of(pn_connection_t *pc)
{
    return pc ? pn_connection_get_context(pc) : NULL;
}

static void link_free(emu_broker_t *b, emu_link_t *l)
{
    emu_link_release(b, l);
    emu_conn_t *conn = l->conn;
    for (emu_link_t **pp = &conn->links; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    if (l->pl)
        pn_link_set_context(l->pl, NULL);
    free(l);
}

static void conn_free(emu_broker_t *b, emu_conn_t *conn)
{
    while (conn->links)
        link_free(b, conn->links);
    emu_grant_t *g = conn->grants;
    while (g) {
        emu_grant_t *n = g->next;
        free(g);
        g = n;
    }
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        b->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    if (conn->pc)
        pn_connection_set_context(conn->pc, NULL);
    if (b->current == conn)
        b->current = NULL;
    free(conn);
}

/* thread: main, after pn_proactor_free */
void emu_broker_free_conns(emu_broker_t *b)
{
    while (b->conns) {
        emu_conn_t *c = b->conns;
        for (emu_link_t *l = c->links; l; l = l->next) {
            l->pl = NULL;
            /* Deliveries were freed with the proactor. */
            emu_reply_t *r = l->replies;
            while (r) {
                emu_reply_t *n = r->next;
                free(r);
                r = n;
            }
            l->replies = NULL;
        }
        c->pc = NULL;
        conn_free(b, c);
    }
}

static const char *term_addr(pn_terminus_t *t)
{
    const char *a = pn_terminus_get_address(t);
    return a ? a : "";
}

/* Strips one leading '/'; true (and the entity part) when path ends in /$management. */
static bool is_mgmt(const char *addr, size_t *entlen)
{
    size_t n = strlen(addr);
    const char *suffix = "/$management";
    size_t sl = strlen(suffix);
    if (n < sl || !emu_ieq(addr + n - sl, sl, suffix, sl))
        return false;
    *entlen = n - sl;
    return true;
}

/* thread: proactor */
void emu_link_refuse(emu_link_t *l, const char *cond, const char *desc)
{
    l->kind = EMU_LINK_REFUSED;
    pn_link_t *pl = l->pl;
    pn_terminus_set_type(pn_link_source(pl), PN_UNSPECIFIED);
    pn_terminus_set_type(pn_link_target(pl), PN_UNSPECIFIED);
    pn_link_open(pl);
    pn_condition_t *c = pn_link_condition(pl);
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_link_close(pl);
}

/* A read-only namespace refuses entity and $management links. */
static bool refuse_read_only(emu_broker_t *b, emu_link_t *l)
{
    if (!b->read_only)
        return false;
    b->ns->links_read_only++;
    emu_link_refuse(l, EMU_READ_ONLY_COND, EMU_READ_ONLY_DESC);
    return true;
}

static void mirror_terminus(pn_link_t *pl)
{
    pn_terminus_copy(pn_link_source(pl), pn_link_remote_source(pl));
    pn_terminus_copy(pn_link_target(pl), pn_link_remote_target(pl));
    pn_link_set_snd_settle_mode(pl, pn_link_remote_snd_settle_mode(pl));
    pn_link_set_rcv_settle_mode(pl, pn_link_remote_rcv_settle_mode(pl));
}

static void not_found(emu_link_t *l, const char *addr)
{
    char desc[600];
    pn_connection_t *pc = l->conn->pc;
    const char *host = pn_connection_remote_hostname(pc);
    snprintf(desc, sizeof desc,
             "The messaging entity 'sb://%s/%s' could not be found. To know more visit "
             "https://aka.ms/sbResourceMgrExceptions.",
             host ? host : "localhost", addr[0] == '/' ? addr + 1 : addr);
    emu_link_refuse(l, "amqp:not-found", desc);
}

static void on_link_remote_open(emu_broker_t *b, emu_conn_t *conn, pn_link_t *pl)
{
    emu_link_t *l = calloc(1, sizeof *l);
    if (!l) {
        pn_link_close(pl);
        return;
    }
    l->pl = pl;
    l->conn = conn;
    l->active_ms = emu_now_ms(); /* an attach starts the link's idle time, not the connection's */
    l->next = conn->links;
    conn->links = l;
    pn_link_set_context(pl, l);
    bool client_sends = pn_link_is_receiver(pl); /* our end receives */
    const char *addr =
        client_sends ? term_addr(pn_link_remote_target(pl)) : term_addr(pn_link_remote_source(pl));
    const char *bare = addr[0] == '/' ? addr + 1 : addr;
    size_t entlen;
    IB_LOG(IB_LOG_DEBUG, "attach", IB_S("link", pn_link_name(pl)), IB_S("address", addr),
           IB_B("client_sends", client_sends));
    if (strcmp(bare, "$cbs") == 0) {
        mirror_terminus(pl);
        pn_link_open(pl);
        if (client_sends) {
            l->kind = EMU_LINK_CBS_IN;
            pn_link_flow(pl, 100);
        } else {
            l->kind = EMU_LINK_REPLY;
        }
        return;
    }
    if (is_mgmt(bare, &entlen)) {
        emu_entity_t *ent = emu_ns_find(b->ns, bare, entlen);
        if (!ent) {
            not_found(l, addr);
            return;
        }
        if (refuse_read_only(b, l))
            return;
        if (!emu_cbs_authorized(b, conn, bare)) {
            emu_link_refuse(
                l, "amqp:unauthorized-access",
                "Unauthorized access. A valid token is required for the '$management' node.");
            return;
        }
        mirror_terminus(pl);
        l->ent = ent;
        pn_link_open(pl);
        if (client_sends) {
            l->kind = EMU_LINK_MGMT_IN;
            pn_link_flow(pl, 100);
        } else {
            l->kind = EMU_LINK_REPLY;
        }
        return;
    }
    emu_entity_t *ent = emu_ns_find(b->ns, bare, strlen(bare));
    if (!ent) {
        not_found(l, addr);
        return;
    }
    if (refuse_read_only(b, l))
        return;
    if (!emu_cbs_authorized(b, conn, bare)) {
        emu_link_refuse(l, "amqp:unauthorized-access",
                        "Unauthorized access. 'Send' or 'Listen' claim(s) are required for this "
                        "operation; put a valid token with $cbs first.");
        return;
    }
    emu_link_attach_entity(b, l, ent);
}

/* thread: proactor */
bool emu_broker_handle(emu_broker_t *b, pn_event_t *e)
{
    pn_connection_t *pc = pn_event_connection(e);
    emu_conn_t *conn = conn_of(pc);
    b->current = conn;
    bool keep = true;
    switch (pn_event_type(e)) {
    case PN_LISTENER_OPEN: {
        const struct sockaddr *sa = pn_netaddr_sockaddr(pn_listener_addr(pn_event_listener(e)));
        int port = 0;
        if (sa && sa->sa_family == AF_INET)
            port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
        else if (sa && sa->sa_family == AF_INET6)
            port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
        b->amqp_port = port;
        printf("{\"event\":\"listening\",\"port\":%d", port);
        if (b->http_port)
            printf(",\"http_port\":%d", b->http_port);
        if (b->ws_port)
            printf(",\"ws_port\":%d", b->ws_port);
        printf("}\n");
        fflush(stdout);
        break;
    }
    case PN_LISTENER_ACCEPT: {
        pn_connection_t *c = pn_connection();
        pn_transport_t *t = pn_transport();
        pn_transport_set_server(t);
        if (b->tls)
            pn_ssl_init(pn_ssl(t), b->tls, NULL);
        pn_sasl_t *sasl = pn_sasl(t);
        pn_sasl_set_allow_insecure_mechs(sasl, true);
        emu_conn_t *nc = calloc(1, sizeof *nc);
        emu_sasl_install(t, nc);
        b->ns->conn_accepted++;
        b->ns->conn_open++;
        if (nc) {
            nc->pc = c;
            nc->b = b;
            nc->active_ms = emu_now_ms();
            nc->next = b->conns;
            if (b->conns)
                b->conns->prev = nc;
            b->conns = nc;
            pn_connection_set_context(c, nc);
        }
        pn_connection_set_container(c, "sbemu");
        pn_listener_accept2(pn_event_listener(e), c, t);
        break;
    }
    case PN_LISTENER_CLOSE: {
        pn_condition_t *cond = pn_listener_condition(pn_event_listener(e));
        if (pn_condition_is_set(cond)) {
            fprintf(stderr, "sbemu: listen failed: %s\n", pn_condition_get_description(cond));
            keep = false;
        }
        break;
    }
    case PN_PROACTOR_INTERRUPT:
        b->stopping = true;
        keep = false;
        break;
    case PN_PROACTOR_TIMEOUT:
        emu_broker_tick(b);
        break;
    case PN_CONNECTION_REMOTE_OPEN:
        pn_connection_open(pc);
        break;
    case PN_CONNECTION_WAKE:
        if (conn) {
            conn->wake_pending = false;
            if (conn->drop)
                emu_conn_close(conn, "amqp:connection:forced",
                               "The connection was closed by fault injection (drop-every-ms).");
            conn->dirty = true;
        }
        break;
    case PN_SESSION_REMOTE_OPEN: {
        pn_session_t *s = pn_event_session(e);
        pn_session_set_incoming_capacity(s, 64u << 20);
        pn_session_open(s);
        break;
    }
    case PN_SESSION_REMOTE_CLOSE:
        log_condition("end", pn_session_remote_condition(pn_event_session(e)));
        pn_session_close(pn_event_session(e));
        /* Freed now, not with the connection: clients begin a session per link, all day. */
        pn_session_free(pn_event_session(e));
        break;
    case PN_LINK_REMOTE_OPEN: {
        pn_link_t *pl = pn_event_link(e);
        if (conn && pn_link_state(pl) & PN_LOCAL_UNINIT)
            on_link_remote_open(b, conn, pl);
        break;
    }
    case PN_LINK_FLOW: {
        emu_link_t *l = pn_link_get_context(pn_event_link(e));
        if (l && l->kind == EMU_LINK_CONSUMER && conn)
            conn->dirty = true;
        break;
    }
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        emu_link_t *l = pn_link_get_context(pn_delivery_link(d));
        if (!l)
            break;
        if (pn_link_is_receiver(l->pl))
            emu_link_on_incoming(b, l, d);
        else if (l->kind == EMU_LINK_CONSUMER)
            emu_link_on_settle(b, l, d);
        else if (pn_delivery_updated(d) && pn_delivery_settled(d))
            pn_delivery_settle(d); /* replies we sent pre-settled */
        break;
    }
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH: {
        pn_link_t *pl = pn_event_link(e);
        log_condition("detach", pn_link_remote_condition(pl));
        emu_link_t *l = pn_link_get_context(pl);
        if (l)
            emu_link_release(b, l);
        if (pn_link_state(pl) & PN_LOCAL_UNINIT) {
            /* Detached while we held its attach (a session wait): answer both. */
            pn_terminus_set_type(pn_link_source(pl), PN_UNSPECIFIED);
            pn_terminus_set_type(pn_link_target(pl), PN_UNSPECIFIED);
            pn_link_open(pl);
        }
        if (!(pn_link_state(pl) & PN_LOCAL_CLOSED))
            pn_link_close(pl);
        /*
         * Freed now (PN_LINK_FINAL frees its context once Proton is done
         * with it): a connection that attached 10,000 session receivers
         * must not keep 10,000 dead links that every event walks.
         */
        pn_link_free(pl);
        break;
    }
    case PN_LINK_FINAL: {
        emu_link_t *l = pn_link_get_context(pn_event_link(e));
        if (l && conn)
            link_free(b, l);
        break;
    }
    case PN_CONNECTION_REMOTE_CLOSE:
        log_condition("disconnect", pn_connection_remote_condition(pc));
        pn_connection_close(pc);
        break;
    case PN_TRANSPORT_CLOSED:
        log_condition("disconnect", pn_transport_condition(pn_event_transport(e)));
        b->ns->conn_open--;
        if (conn)
            conn_free(b, conn);
        conn = NULL;
        b->current = NULL;
        break;
    default:
        break;
    }
    if (conn && b->current == conn && conn->dirty && !conn->closing) {
        conn->dirty = false;
        if (conn->grants_lapsed || b->read_only)
            emu_cbs_expire_links(b, conn, true);
        emu_idle_close(b, conn);
        if (!conn->closing)
            emu_link_pump_conn(b, conn);
    }
    return keep;
}

/* thread: proactor */
void emu_broker_tick(emu_broker_t *b)
{
    int64_t now = emu_now_ms();
    b->current = NULL;
    emu_ns_tick(b->ns, now);
    for (emu_conn_t *c = b->conns; c; c = c->next) {
        bool due = false;
        for (emu_link_t *l = c->links; l && !due; l = l->next) {
            if (l->replies && l->replies->due_ms <= now)
                due = true;
            if (l->session_pending && l->session_deadline_ms <= now)
                due = true;
            if (l->session_lost || l->stream_d)
                due = true; /* a large delivery also goes on as the peer takes it */
        }
        if (due || emu_cbs_expire_links(b, c, false) || emu_idle_due(b, c, now))
            emu_conn_poke(b, c);
    }
    if (b->faults.drop_every_ms > 0) {
        if (!b->next_drop_ms)
            b->next_drop_ms = now + b->faults.drop_every_ms;
        if (now >= b->next_drop_ms) {
            b->next_drop_ms = now + b->faults.drop_every_ms;
            for (emu_conn_t *c = b->conns; c; c = c->next) {
                c->drop = true;
                emu_conn_poke(b, c);
            }
        }
    }
    if (b->stats_file && now >= b->next_stats_ms) {
        b->next_stats_ms = now + (b->stats_every_ms > 0 ? b->stats_every_ms : 1000);
        if (emu_stats_write(b->ns, b->stats_file) != 0)
            IB_LOG(IB_LOG_WARN, "stats", IB_MSG("cannot write stats file"),
                   IB_S("path", b->stats_file));
    }
    pn_proactor_set_timeout(b->proactor, EMU_TICK_MS);
}
