/*
 * sb_core.h - internal to amqp/: one AMQP connection to Service Bus with its
 * $cbs authorization and $management request/response links. Used by the
 * client (sb_client.c, which runs it on its own thread) and by the blocking
 * sender (sb_send.c, which runs it on the caller's thread).
 *
 * thread: everything here runs on the thread that drives the proactor,
 * except sb_core_wake and sb_core_interrupt.
 */
#ifndef SB_CORE_H
#define SB_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/ssl.h>

#include "ib_err.h"
#include "sb_connstr.h"
#include "sb_msg.h"
#include "sb_token.h"

/* Every link's context starts with one of these, so events find their owner. */
enum { SB_KIND_RR = 0x5b001, SB_KIND_RECEIVER, SB_KIND_SENDER };
typedef struct sb_link_tag {
    int kind;
} sb_link_tag_t;

typedef struct sb_core sb_core_t;
typedef struct sb_rr sb_rr_t;

/*
 * Answer to a request: status is the response's statusCode / status-code, or
 * -1 when the request failed locally (timeout, connection lost: err says
 * which). resp is valid during the call only (NULL when status is -1).
 */
typedef void (*sb_rr_cb)(void *ctx, int status, pn_message_t *resp, const ib_error_t *err);
/* Authorization of an audience finished (err->code IB_E_OK or not). */
typedef void (*sb_cbs_cb)(void *ctx, const ib_error_t *err);

typedef struct sb_core_hooks {
    void (*on_up)(void *owner);                          /* connection open */
    void (*on_down)(void *owner, const ib_error_t *why); /* transport closed; every Proton
                                                            object of the connection is gone */
    void (*on_link_event)(void *owner, pn_event_t *e, pn_link_t *link); /* owner's links */
    void (*on_wake)(void *owner);
    void (*on_tick)(void *owner);
    void (*on_interrupt)(void *owner);
    void *owner;
} sb_core_hooks_t;

typedef struct sb_aud sb_aud_t;

/* The largest frame the broker may send where the bytes held are bounded
 * (a byte budget, a kept answer): sb_core_t.max_frame. */
#define SB_MAX_FRAME 16384

struct sb_core {
    pn_proactor_t *proactor;
    pn_connection_t *conn;     /* NULL while disconnected */
    bool up;                   /* remote open seen */
    bool tick_due;             /* the timeout fired; tick in the next wake */
    long long connect_started; /* mono ms of the current attempt */
    sb_connstr_t cs;
    sb_token_get_fn token_get;
    void *token_ctx;
    unsigned op_timeout_ms;
    unsigned tick_ms;
    pn_ssl_domain_t *ssl; /* NULL for the emulator (plain TCP) */
    uint32_t max_frame;   /* largest frame the broker may send; 0 = any (then sessions have
                             no byte window, see sb_core_session) */
    size_t answer_keep;   /* bytes kept of a $management answer, its bodies cut to fit
                             (sb_peek_answer_cut); 0 = all */
    sb_core_hooks_t hooks;
    sb_rr_t *cbs;
    sb_rr_t *rrs; /* $management pairs, one per entity */
    sb_aud_t *auds;
    uint64_t next_id;
    unsigned link_seq;
    char container[48];
    pthread_mutex_t wake_lock;
    pn_connection_t *wake_conn; /* conn, readable by other threads under wake_lock */
    ib_error_t last_err;        /* why the last connection ended */
    struct sb_wsb *wsb;         /* the WebSocket bridge, made on the first attempt over it */
    bool via_ws;                /* the current attempt goes over WebSockets (sb_transport.h) */
    unsigned attempts;          /* connection attempts so far (auto takes turns) */
    char ca_file[512];          /* servicebus.ca_file, for the bridge's TLS */
    char amqp_why[256];         /* why the last attempt over AMQP failed (auto's log line) */
};

ib_err_t sb_core_init(sb_core_t *core, const char *connstr, const char *ca_file,
                      sb_token_get_fn token_get, void *token_ctx, unsigned op_timeout_ms,
                      const sb_core_hooks_t *hooks, ib_error_t *err);
void sb_core_fini(sb_core_t *core);
/* Starts a connection attempt (no-op when one exists). */
void sb_core_connect(sb_core_t *core);
/* Closes the connection gracefully; on_down follows. */
void sb_core_close(sb_core_t *core);
/* Handles one event. Returns false once the proactor is inactive. */
bool sb_core_handle(sb_core_t *core, pn_event_t *e);
/*
 * thread: any. Wakes the connection: work done outside one of its event
 * batches (the blocking sender) is written out only after this.
 */
void sb_core_wake(sb_core_t *core);
void sb_core_interrupt(sb_core_t *core);

/*
 * A session on the connection whose unread incoming bytes stay within
 * window (rounded down to whole frames of max_frame): the broker sends no
 * more until some are read. window 0 = no bound. Only with max_frame set.
 */
pn_session_t *sb_core_session(sb_core_t *core, size_t window);
/* A fresh unique name for a link or node address. */
void sb_core_name(sb_core_t *core, const char *prefix, char *buf, size_t size);
/* "sb://host[:port]/path" into a malloc'd string. */
char *sb_core_audience(sb_core_t *core, const char *path);

/*
 * sb_cbs.c: puts a token for audience (once, then kept fresh while connected); cb when done.
 * A first put-token refused is put again a few times (a new token each time) before cb hears
 * of it; cb is not called when the connection goes meanwhile (the owner's on_down is).
 */
void sb_cbs_authorize(sb_core_t *core, const char *audience, sb_cbs_cb cb, void *ctx);

/* sb_rr.c: the $management pair of entity (created on first use, attached lazily). */
sb_rr_t *sb_rr_mgmt(sb_core_t *core, const char *entity);
/*
 * Sends req (takes ownership) on rr and calls cb with the answer. Sets
 * message-id and reply-to. associated_link may be NULL.
 */
void sb_rr_request(sb_rr_t *rr, pn_message_t *req, sb_rr_cb cb, void *ctx);
/* Drops every callback that would go to ctx (its owner is going away). */
void sb_rr_forget(sb_core_t *core, void *ctx);

/* Helpers for building and reading management messages. */
pn_message_t *sb_mgmt_message(const char *operation, const char *associated_link);
int sb_resp_status(pn_message_t *resp);
/* Fills err from a failed response: description, errorCondition. */
void sb_resp_error(pn_message_t *resp, int status, ib_error_t *err);
/* The answer is the broker throttling: 503, com.microsoft:server-busy (or no condition). */
bool sb_resp_busy(pn_message_t *resp, int status);
/* Moves the body cursor onto the value of key in a string-keyed map body. */
bool sb_body_find(pn_data_t *body, const char *key);
void sb_put_str(pn_data_t *d, const char *s);
void sb_put_sym(pn_data_t *d, const char *s);
/* sb_msg_state.c: appends key/value pairs (the caller has entered a map). */
void sb_props_put(pn_data_t *d, const sb_prop_t *props, size_t n, bool symbol_keys);

/* Called by sb_core.c only: the request/response links (sb_rr.c) and CBS (sb_cbs.c). */
bool sb_rr_handle(sb_core_t *core, pn_event_t *e, pn_link_t *link);
void sb_rr_tick(sb_core_t *core);
void sb_rr_reset_all(sb_core_t *core, const ib_error_t *why);
void sb_rr_free_all(sb_core_t *core);
void sb_cbs_tick(sb_core_t *core);
void sb_cbs_reset(sb_core_t *core);
/* The broker detached a link unauthorized-access: no token held is trusted any
 * more; the next sb_cbs_authorize of each audience puts a new one. */
void sb_cbs_invalidate(sb_core_t *core);
void sb_cbs_free(sb_core_t *core);

/*
 * Logs a condition under event tag ev. When err is given and the condition
 * is set, err gets the condition's name and text; its code and class stay
 * what the caller set (IB_E_BROKER, transient, when err held no error), so
 * the code the caller decided on is not replaced by the one logged.
 */
void sb_log_condition(const char *ev, const char *what, pn_condition_t *cond, ib_error_t *err);

#endif
