/*
 * emu_broker.h - the Proton side of sbemu: connections, links, $cbs,
 * $management, delivery and settlement. One proactor thread owns every
 * Proton object and the namespace.
 *
 * thread: proactor, unless a comment says otherwise.
 */
#ifndef EMU_BROKER_H
#define EMU_BROKER_H

#include "emu_entity.h"
#include "emu_topo.h"

#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/ssl.h>
#include <proton/terminus.h>
#include <proton/transport.h>

typedef enum {
    EMU_LINK_CBS_IN,   /* client sender to $cbs: put-token requests */
    EMU_LINK_MGMT_IN,  /* client sender to E/$management: requests */
    EMU_LINK_REPLY,    /* our sender to a $cbs / $management response receiver */
    EMU_LINK_SEND_IN,  /* client sender to a queue or topic */
    EMU_LINK_CONSUMER, /* our sender to a client receiver on an entity */
    EMU_LINK_REFUSED,  /* attached and closed at once with an error */
} emu_link_kind_t;

typedef struct emu_conn emu_conn_t;

/* A delayed settlement reply (fault injection). */
typedef struct emu_reply {
    struct emu_reply *next;
    pn_delivery_t *dlv;
    int64_t due_ms;
    bool lost; /* reply rejected message-lock-lost */
} emu_reply_t;

typedef struct emu_link {
    emu_link_kind_t kind;
    pn_link_t *pl;
    emu_conn_t *conn;
    struct emu_link *next;          /* in conn->links */
    emu_entity_t *ent;              /* entity links and $management */
    struct emu_link *cnext, *cprev; /* in ent->consumers */
    struct emu_link *wnext, *wprev; /* in ent->waiting while waiting */
    bool waiting;                   /* in ent->waiting (accept-next, no session yet) */
    bool peek_lock;
    bool wants_session;   /* receiver on a session entity */
    bool session_pending; /* attach not answered yet: waiting, or a session assigned */
    bool session_lost;    /* to be detached: session-lock-lost */
    bool drain_ignored;   /* fault: a drain of this link is left unanswered for good */
    bool stalled;         /* fault (stall_link): credit taken, never a transfer */
    int64_t active_ms;    /* a message or settlement moved on it last (emu_idle.c) */
    int64_t session_deadline_ms;
    emu_session_t *session;
    emu_buf_t rx;         /* a transfer being received */
    emu_reply_t *replies; /* delayed settlement replies */
    uint64_t tag_counter;
    /* A large delivery being sent in pieces (emu_link.c, EMU_STREAM_CHUNK). */
    pn_delivery_t *stream_d; /* NULL: none */
    emu_buf_t stream;        /* its encoded bytes */
    size_t stream_off;       /* how many were handed to Proton */
    bool stream_settle;      /* receive-and-delete: settled once it is all sent */
} emu_link_t;

/* An audience granted by put-token on this connection. */
typedef struct emu_grant {
    struct emu_grant *next;
    int64_t expiry_s;
    char audience[];
} emu_grant_t;

struct emu_conn {
    pn_connection_t *pc;
    struct emu_broker *b;
    emu_conn_t *next, *prev;
    emu_link_t *links;
    emu_grant_t *grants;
    size_t ngrants;
    bool wake_pending, dirty, drop;
    bool grants_lapsed; /* a grant expired: links are checked (emu_cbs_expire_links) */
    bool closing;
    uint64_t deliveries;
    int64_t active_ms;    /* a message, settlement or request moved on it last (emu_idle.c) */
    unsigned put_tokens;  /* put-token requests on it (refuse_first_put_token) */
};

typedef struct emu_broker {
    pn_proactor_t *proactor;
    pn_listener_t *listener;
    emu_ns_t *ns;
    emu_faults_t faults;
    const char *key_name, *key; /* NULL: accept any token */
    const char *jwt_issuer, *jwt_secret;
    const char *stats_file;
    int64_t stats_every_ms; /* how often stats_file is rewritten (default 1000) */
    size_t max_message_bytes; /* largest message accepted; 0 = 262144 (the Standard tier) */
    pn_ssl_domain_t *tls; /* NULL: plain TCP only */
    emu_conn_t *conns;
    emu_conn_t *current; /* connection of the event being handled */
    emu_buf_t scratch;
    int64_t next_stats_ms, next_drop_ms;
    uint64_t deliveries;        /* transfers to consumers, all connections */
    uint64_t consumer_attaches; /* receive links attached (stall_link counts them) */
    int64_t busy_until_ms;      /* the server-busy window's end; 0 = not begun */
    bool stopping;
    volatile bool read_only; /* SIGUSR1 toggles it: a Geo-Replication promotion window */
    int token_lifetime_s; /* a grant lasts at most this long; 0 = as the token says */
    int refuse_put_token; /* fault: answer the next K renewals (put-token of an audience
                             the connection holds) 401 */
    int refuse_first_put_token; /* fault: answer the first K put-tokens of each connection 401 */
    int http_port; /* the management endpoint's port (emu_http.c); 0 = none */
    int ws_port;   /* the AMQP over WebSockets port (emu_ws.c); 0 = none */
    _Atomic int amqp_port; /* the AMQP listener's port once open (read by emu_ws.c) */
} emu_broker_t;

/* emu_broker.c */
/* Handles one proactor event. Returns false when the broker should stop. */
bool emu_broker_handle(emu_broker_t *b, pn_event_t *e);
/* Periodic work (tick, stats, faults, timers); rearms the proactor timeout. */
void emu_broker_tick(emu_broker_t *b);
/* Frees connection contexts left after the proactor is gone. */
void emu_broker_free_conns(emu_broker_t *b);
/* Asks for conn's consumers to be pumped: now if current, else by wake. */
void emu_conn_poke(emu_broker_t *b, emu_conn_t *conn);
/* Closes a connection with a condition. */
void emu_conn_close(emu_conn_t *conn, const char *cond, const char *desc);
/* Namespace hooks. */
void emu_broker_on_ready(void *ctx, emu_entity_t *ent);
void emu_broker_on_session_lost(void *ctx, emu_entity_t *ent, emu_session_t *s, void *holder);

/* emu_link.c */
/* Attach of a link to an entity (not $cbs / $management). */
void emu_link_attach_entity(emu_broker_t *b, emu_link_t *l, emu_entity_t *ent);
/*
 * Hands sessions with available messages to the accept-next receivers of
 * ent that wait for one, oldest waiter first; each is answered by its own
 * connection's next pump.
 */
void emu_link_assign_waiting(emu_broker_t *b, emu_entity_t *ent);
/* Sends what credit allows on every consumer link of conn; handles session waits. */
void emu_link_pump_conn(emu_broker_t *b, emu_conn_t *conn);
/* A transfer arrived on a client sender link (SEND_IN, CBS_IN, MGMT_IN). */
void emu_link_on_incoming(emu_broker_t *b, emu_link_t *l, pn_delivery_t *d);
/* The client updated a delivery we sent (settlement). */
void emu_link_on_settle(emu_broker_t *b, emu_link_t *l, pn_delivery_t *d);
/* Sends due delayed settlement replies of conn. */
void emu_link_flush_replies(emu_broker_t *b, emu_conn_t *conn, bool all);
/* Detaches l from its entity and session; frees what it owns (not l). */
void emu_link_release(emu_broker_t *b, emu_link_t *l);
/* Closes l with an error condition. */
void emu_link_refuse(emu_link_t *l, const char *cond, const char *desc);
/*
 * Fault server_busy_for_ms: true while the window lasts (it begins with
 * the server_busy_after-th delivery); each true answer is counted as one
 * operation answered busy (ns->server_busy).
 */
bool emu_server_busy(emu_broker_t *b);
#define EMU_BUSY_COND "com.microsoft:server-busy"
#define EMU_BUSY_TEXT "The server is busy. Please retry the operation."

/* emu_cbs.c */
void emu_cbs_request(emu_broker_t *b, emu_link_t *l, pn_message_t *req);
/* True when conn may attach to path (token covers it, or no key configured). */
bool emu_cbs_authorized(emu_broker_t *b, emu_conn_t *conn, const char *path);
/* What a read-only namespace (a Geo-Replication promotion) answers links with. */
#define EMU_READ_ONLY_COND "com.microsoft:server-busy"
#define EMU_READ_ONLY_DESC                                                                         \
    "The namespace is read-only while a Geo-Replication promotion is in progress; try again "     \
    "once its name points at the new primary."
/*
 * Whether a link of conn on an entity or its $management node is no longer
 * covered by an unexpired grant (or the namespace is read-only); with detach, every such link is detached
 * amqp:unauthorized-access. The tick asks (cheap unless a grant expired);
 * the connection's own event batch detaches.
 */
bool emu_cbs_expire_links(emu_broker_t *b, emu_conn_t *conn, bool detach);

/* Grants conn access to audience until expiry_s ("" = whole namespace). */
void emu_cbs_grant(emu_conn_t *conn, const char *audience, int64_t expiry_s);

/* emu_idle.c: the broker's idle close (faults idle_close_link_ms, idle_close_conn_ms) */
/* A message, settlement or request moved on l: l and its connection are not idle. */
void emu_idle_touch(emu_link_t *l);
/* Whether conn or one of its entity links has been idle past its fault's time (the tick asks). */
bool emu_idle_due(const emu_broker_t *b, const emu_conn_t *conn, int64_t now);
/* In conn's own event batch: detaches its idle entity links, or closes it if idle itself. */
void emu_idle_close(emu_broker_t *b, emu_conn_t *conn);

/* emu_sasl.c: installs the server SASL plug-in on an accepted transport. */
void emu_sasl_install(pn_transport_t *t, emu_conn_t *conn);

/* emu_mgmt.c */
void emu_mgmt_request(emu_broker_t *b, emu_link_t *l, pn_message_t *req);

/* emu_amqpval.c: request/response helpers */
/* Finds the reply link of conn for reply_to (target address, then link name). */
emu_link_t *emu_reply_link(emu_conn_t *conn, const char *reply_to);
/* Sends msg pre-settled on link l. */
void emu_send_message(emu_link_t *l, pn_message_t *msg);
/* Positions data (a map with string or symbol keys) at key's value. */
bool emu_map_find(pn_data_t *data, const char *key);
/* String (or symbol) application property of m, or NULL. */
const char *emu_app_prop_str(pn_message_t *m, const char *key, char *buf, size_t size);

#endif
