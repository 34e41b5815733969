/*
 * sb_client.h - the peek-lock consumer of one Service Bus entity.
 *
 * One client owns one AMQP connection and one proactor thread; only that
 * thread touches Proton objects. Callbacks run on it and must return
 * quickly (hand the message to a queue). Every other function may be called
 * from any thread unless it says otherwise.
 *
 * Life of a message:
 *   on_message(msg)           the worker now holds msg (read-only)
 *   sb_client_settle(msg, d)  the worker hands msg back; it must not touch
 *                             msg again until on_settled
 *   on_settled(msg, d, res)   the broker's answer; msg is freed after return
 * Exactly one on_settled follows every on_message (also at shutdown, with
 * IB_E_SHUTDOWN, for messages never settled).
 *
 * A settlement the broker leaves unanswered for settle_timeout_ms does not
 * hold a worker's slot meanwhile (credit counts only the messages the
 * worker holds, plus settlements beyond a bound); when it times out the
 * receive link is recycled (closed and attached again), the settlement is
 * asked again through $management, and if that fails too on_settled gets
 * IB_E_SETTLE_UNKNOWN: the broker may have applied it. Never IB_E_LOCK_LOST
 * for that case.
 *
 * Credit: the client never holds more than prefetch + max_concurrent_calls
 * unsettled messages. At most max_concurrent_calls are handed to the worker
 * at once; the rest wait in the client's prefetch buffer. A buffered message
 * whose lock has expired (or is about to) is dropped, not handed out: the
 * broker delivers it again.
 *
 * Sessions: each held session has its own link. Credit is only ever granted
 * as a drain of session_prefetch: the broker sends what the session has (up
 * to that many) and answers at once with the rest of the credit consumed.
 * The messages are handed out as they arrive, in order (the caller keeps
 * a session's order: it may settle several of one session together): a
 * session's first one out at once, a later one beside it only while fewer
 * than max_concurrent_calls are handed out in all. The
 * next drain goes out as soon as one is answered, while at most
 * SB_SESSION_HELD_MAX of the session are held; a drain that comes back
 * short (fewer than it asked for) means the session is done, and it is given
 * back as soon as nothing is in flight. The moment a session is known to be
 * done the accept of the next one (next-available session filter) is sent,
 * so a slot switches without waiting: at most max_concurrent_sessions
 * sessions are being processed, and one replacement per finishing session
 * may be held besides. An abandon with later messages buffered gives the
 * session back (the broker keeps the order). A drain left unanswered for
 * session_idle_timeout_s gives the session back too. prefetch does not
 * apply; "no session available" answers are
 * routine and retried quietly. With session_park, a session's messages are
 * handed out one at a time (the next once the broker confirmed the previous
 * one's settlement), and the first one the worker dead-letters parks the
 * session: its session state
 * gets inboxd's parked record (com.microsoft:set-session-state), the dead
 * letter is sent only once the broker confirmed the record (when it never
 * does, the message is released instead and its settlement ends in error),
 * and the session is given back once the dead letter settled, its buffered
 * messages released untouched. Every accepted session's state is read first
 * (get-session-state); a parked one (or one whose state cannot be read) is
 * held without credit, taking no slot, and given back a quarter of its lock
 * before it ends, so the broker offers the other sessions meanwhile and the
 * parked one is looked at again once per lock duration, not in a loop.
 *
 * Lock renewal: automatic, for every unsettled message - buffered ones too,
 * so prefetch never lets a lock lapse unseen - until
 * max_auto_lock_renewal_s after receipt. A message is due when its lock
 * ends within max(10 s, lock duration / 3) (capped at half the lock
 * duration, so short test locks are not renewed continuously). Due tokens of
 * the entity go in one com.microsoft:renew-lock request on $management
 * (batches of up to 64); a failed batch is retried token by token, and a
 * token the broker answers 410 is lock-lost. Sessions: the session lock is
 * renewed instead (com.microsoft:renew-session-lock).
 *
 * Lock loss: on_lock_lost(msg) is called when a renewal is refused or the
 * link that delivered msg is gone (detach, reconnect). The worker still owns
 * msg and must still settle it: for a non-session entity the client then
 * settles through $management update-disposition (the broker decides; 410
 * becomes IB_E_LOCK_LOST); for a session message, or SB_RELEASE, settlement
 * reports IB_E_LOCK_LOST / IB_E_DETACHED without a request. Either way the
 * message comes back and the inbox catches the duplicate.
 *
 * Shutdown: sb_client_stop_receiving(), wait for the in-flight work to
 * settle (on_settled), then sb_client_stop() and sb_client_free().
 * sb_client_stop() releases buffered messages (they come back at once,
 * without a delivery count) and reports IB_E_SHUTDOWN for any message still
 * held by the worker; those are released too (the broker redelivers them
 * at once; a commit that still lands is caught by the inbox). After
 * sb_client_stop() begins, sb_client_settle() is ignored and must not be
 * given a message whose on_settled has run.
 *
 * Sending: sb_client_send_each puts messages on sender links that the
 * proactor thread owns, on the client's own connection (one per entity,
 * authorized and attached on first use and after a loss), and blocks the
 * calling thread - never the proactor - until the broker has answered each.
 * Sends may be queued before sb_client_start; they wait for the thread.
 * A client made with send_only has no receive links at all (inboxd
 * --relay-only): it is ready once connected.
 */
#ifndef SB_CLIENT_H
#define SB_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "ib_err.h"
#include "sb_msg.h"
#include "sb_out.h"
#include "sb_token.h"

typedef struct sb_client sb_client_t;

typedef struct sb_options {
    const char *connection_string; /* required */
    const char *entity;            /* "queue", "topic/Subscriptions/sub", "queue/$DeadLetterQueue";
                                      NULL: the connection string's EntityPath */
    bool send_only;                /* no receiving; entity and on_message/on_settled unused */
    bool sessions;                 /* accept next-available sessions */
    unsigned prefetch;             /* buffered beyond those in flight */
    unsigned max_concurrent_calls; /* handed to the worker at once; 0 = 1 */
    unsigned long long max_held_bytes; /* memory of received messages held (buffered, in
                                          flight, settling; each counts twice its encoded
                                          size: Proton's delivery buffer and the decoded
                                          message) before credit is withheld; one message
                                          is always allowed; 0 = no bound */
    const atomic_ullong *held_beside; /* bytes the caller holds for received messages
                                         (claim-checked blobs), counted in the same
                                         max_held_bytes; NULL = none */
    unsigned max_concurrent_sessions; /* 0 = 1 */
    unsigned max_auto_lock_renewal_s; /* 0 = no renewal */
    unsigned session_idle_timeout_s;  /* 0 = 60 */
    unsigned reconnect_max_ms;        /* backoff ceiling; 0 = 30000 */
    const char *ca_file;              /* PEM bundle for TLS; NULL = the system store */
    sb_token_get_fn token_get;        /* NULL = SAS from the connection string */
    void *token_ctx;
    unsigned sas_token_lifetime_s;    /* SAS tokens signed with the key; 0 = one hour */
    /* Tuning, 0 = default. */
    unsigned reconnect_min_ms; /* first backoff step; default 100 */
    unsigned op_timeout_ms;    /* $management/$cbs request timeout; default 30000 */
    unsigned session_wait_ms;  /* com.microsoft:timeout of a next-session attach;
                                  default 60000 */
    unsigned session_prefetch; /* messages of one session fetched per drain; 0 = 1 */
    bool session_park;         /* sessions: when a message of a session is dead-lettered,
                                  record the session as parked in its session state and
                                  give it back; a session accepted with that state is held
                                  without receiving and given back before its lock ends */
    unsigned renew_margin_ms;  /* overrides the renewal margin above */
    unsigned settle_timeout_ms; /* a disposition unanswered this long: outcome unknown,
                                   the link is recycled; default 10000 */
    unsigned stall_timeout_ms; /* a receive link with credit out and no transfer this long,
                                  while sb_client_set_backlog says the entity has messages
                                  no one of ours holds, is recycled (twice in a row: the
                                  connection); default 60000 */
} sb_options_t;

typedef struct sb_callbacks {
    /* A new message. thread: proactor; hand off quickly. */
    void (*on_message)(sb_msg_t *msg, void *ctx);
    /*
     * The broker's answer to sb_client_settle (or IB_E_SHUTDOWN at stop).
     * result->code: IB_E_OK, IB_E_LOCK_LOST, IB_E_DETACHED (link gone and no
     * $management path), IB_E_SETTLE_UNKNOWN (no answer: see above), IB_E_TIMEOUT,
     * IB_E_BROKER (other refusal, condition
     * filled). thread: proactor. msg is freed after return.
     */
    void (*on_settled)(sb_msg_t *msg, sb_disposition_t d, const ib_error_t *result, void *ctx);
    /* Optional. The lock of a message the worker holds is gone; see above. */
    void (*on_lock_lost)(sb_msg_t *msg, void *ctx);
    /*
     * Optional. Readiness: 1 once connected, authorized and the receive
     * link(s) attached; 0 with why on loss, and again with each new reason
     * while it stays down (entity not found, token refused, ...), at the
     * retry pace. thread: proactor.
     */
    void (*on_state)(int connected_and_attached, const ib_error_t *why, void *ctx);
    /*
     * Optional. A session slot moved on: seconds from the last message of
     * the session it gave back being settled to the slot holding the next
     * session (0 when the next one was accepted before). thread: proactor.
     */
    void (*on_session_switch)(double seconds, void *ctx);
    void *ctx;
    /*
     * Optional. The proactor has handled a batch of events (a read's worth
     * of transfers, say): the messages handed in it may be woken for
     * together. Called after every batch. thread: proactor.
     */
    void (*on_batch_end)(void *ctx);
} sb_callbacks_t;

typedef struct sb_stats {
    unsigned long long received; /* deliveries decoded */
    unsigned long long handed;   /* on_message calls */
    unsigned long long settled_ok;
    unsigned long long settle_failed;
    unsigned long long renewals_ok; /* lock tokens (or session locks) renewed */
    unsigned long long renewals_failed;
    unsigned long long renew_requests;  /* renew-lock requests sent (batches) */
    unsigned long long lock_lost;       /* on_lock_lost calls + buffered messages dropped */
    unsigned long long expired_dropped; /* buffered messages not handed: lock expired */
    unsigned long long reconnects;
    unsigned long long link_recycles; /* receive links closed and re-attached: unanswered
                                         settlements, stalls, the broker's idle close */
    unsigned long long stalls;        /* receive links found stalled (recycled) */
    unsigned long long stall_reconnects; /* connections recycled for a second stall in a row */
    unsigned long long server_busy;   /* operations answered com.microsoft:server-busy */
    unsigned long long throttled_ms;  /* time spent holding for server-busy */
    unsigned long long sessions_accepted;
    unsigned long long sessions_released;   /* given back or lost */
    unsigned long long sessions_given_back; /* by the client: done, idle or stopping */
    int connected;                          /* connected, authorized, links attached */
    unsigned links;                         /* receive links attached now */
    unsigned sessions_held;                 /* sessions locked now */
    unsigned in_flight;                     /* handed to the worker, not yet settled */
    unsigned buffered;                      /* waiting in the prefetch buffer */
    unsigned max_sessions_held;             /* high-water mark of sessions_held */
    unsigned sessions_parked; /* session_park: sessions this process saw parked (set or
                                 found so), not since seen unparked; at most 256 */
    long long loop_mono_ms; /* ib_mono_ms() when the proactor last finished an event batch;
                               it wakes at least every 100 ms, so an old value means a
                               stalled event loop (the /healthz heartbeat) */
} sb_stats_t;

/*
 * Validates opt and copies everything it needs (strings included); cb is
 * copied. Returns NULL with err filled (IB_E_CONFIG naming the option).
 * thread: any.
 */
sb_client_t *sb_client_new(const sb_options_t *opt, const sb_callbacks_t *cb, ib_error_t *err);
/* Starts the proactor thread, which connects (and reconnects) by itself. */
ib_err_t sb_client_start(sb_client_t *c);
/*
 * Queues the settlement of msg (which the worker holds) and wakes the
 * proactor. reason and description are copied (dead-letter only; truncated
 * to 4096 bytes each; NULL allowed). thread: any, including a callback.
 * Exactly once per message.
 */
void sb_client_settle(sb_client_t *c, sb_msg_t *msg, sb_disposition_t d, const char *reason,
                      const char *description);
/*
 * The same with application properties to modify on the broker's copy
 * (abandon, defer, dead-letter; ignored for complete and release): sent as
 * the modified outcome's message-annotations, as extra error info of a
 * dead-letter, or as properties-to-modify of update-disposition. props
 * (string keys; SB_PROP_STRING, INT64, DOUBLE, BOOL, NULL values) is copied.
 * thread: any.
 */
void sb_client_settle_props(sb_client_t *c, sb_msg_t *msg, sb_disposition_t d, const char *reason,
                            const char *description, const sb_prop_t *props, size_t nprops);
/*
 * pause true: like stop_receiving, but undone by pause false (the worker's
 * circuit breaker): no credit, buffered messages released (no delivery
 * counted), the messages the worker holds stay its own. thread: any.
 */
void sb_client_pause(sb_client_t *c, bool pause);
/* Stops granting credit, drains the links and releases buffered messages. thread: any. */
void sb_client_stop_receiving(sb_client_t *c);
/* Closes links and connection, reports leftovers (see above), joins the thread. thread: any
   but a callback. Idempotent. */
void sb_client_stop(sb_client_t *c);
/* Stops if needed and frees. thread: any but a callback. */
void sb_client_free(sb_client_t *c);
/*
 * Sends n messages to entity (a queue or topic) on the proactor's sender
 * link for it and waits until every one has the broker's answer, the link
 * or the connection is lost, or timeout_ms (0: 30000) passes. each[i] (n
 * entries) is cleared when the broker accepted message i, else holds its
 * failure, classified (sb_condition.h): IB_E_BROKER with the condition,
 * IB_E_NOTFOUND / IB_E_AUTH (permanent), IB_E_TIMEOUT, IB_E_DETACHED,
 * IB_E_CLOSED (transient: the message may or may not have reached the
 * broker), IB_E_SHUTDOWN once the client stops. Returns the first failure,
 * IB_E_OK when all were accepted. Messages of one call travel pipelined, in
 * order; concurrent calls to one entity queue behind each other. msgs are
 * encoded before the call queues them. thread: any but a callback.
 */
ib_err_t sb_client_send_each(sb_client_t *c, const char *entity, const sb_out_msg_t *msgs,
                             size_t n, unsigned timeout_ms, ib_error_t *each);
/*
 * The entity's active messages as just read from Service Bus (the entity
 * poller): what stall detection (stall_timeout_ms) compares with the
 * messages the client holds. thread: any.
 */
void sb_client_set_backlog(sb_client_t *c, long long active);
/* A snapshot of the counters. thread: any. */
void sb_client_stats(sb_client_t *c, sb_stats_t *out);
/*
 * The bytes of received messages held now as counted against
 * max_held_bytes (without held_beside). thread: any.
 */
unsigned long long sb_client_held_bytes(const sb_client_t *c);

#endif
