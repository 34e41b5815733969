/*
 * sb_client_int.h - internal to the client (sb_client.c, sb_receiver.c,
 * sb_msg_state.c, sb_session.c, sb_settle.c, sb_renew.c). thread: proactor for everything
 * except the fields marked "under lock".
 */
#ifndef SB_CLIENT_INT_H
#define SB_CLIENT_INT_H

#include <pthread.h>

#include "ib_backoff.h"
#include "sb_client.h"
#include "sb_core.h"
#include "sb_outlink.h"

/*
 * Where a message is and who holds it. sb_msg_set_state is the one place a
 * state changes, and keeps n_buffered / n_inflight in step. BUFFERED means
 * "in the buffer list" (the list itself is kept by sb_receiver.c).
 */
typedef enum {
    SB_MS_NEW,      /* the client: being decoded, in no list */
    SB_MS_BUFFERED, /* the client: prefetch buffer, not yet handed out */
    SB_MS_HANDED,   /* the worker: on_message called, settlement not started
                       (a settle request may sit in the settle queue) */
    SB_MS_SETTLING, /* the broker: disposition or update-disposition sent */
    SB_MS_DONE      /* nobody: on_settled called or dropped; freed next */
} sb_msg_state_t;

typedef struct sb_rcv sb_rcv_t;

/*
 * With a byte budget the broker's frames are at most SB_MAX_FRAME (sb_core.h)
 * and a receive link's session reads no further than its window ahead of
 * inboxd (sb_client_t.rcv_window: a 64th of the budget, from SB_RCV_WINDOW_MIN
 * to SB_RCV_WINDOW_MAX): what Proton holds of a message not yet read is
 * bounded, and a delivery's buffer (kept in Proton's pool for the
 * connection's life) never grows past the window.
 */
#define SB_RCV_WINDOW_MIN (256u << 10)
#define SB_RCV_WINDOW_MAX (1u << 20)

/* Sessions remembered as parked; parked sessions held at once besides the working ones. */
#define SB_PARKED_MAX 256
#define SB_PARK_HOLD_MAX 16
/* A session's messages held at once (handed out and buffered): drains stop there. */
#define SB_SESSION_HELD_MAX 32
typedef struct sb_renew_batch sb_renew_batch_t;

struct sb_msg_state {
    sb_msg_state_t state;
    size_t bytes;              /* encoded size as received */
    bool bytes_counted;        /* bytes are in c->held_bytes (from the first state change
                                  until DONE) */
    sb_client_t *client;
    sb_rcv_t *rcv;             /* the link that delivered it; NULL once that link is gone */
    pn_delivery_t *dlv;        /* NULL once the link is gone */
    bool lock_lost;            /* on_lock_lost reported (or the lock is known gone) */
    bool session;              /* came from a session link */
    long long locked_until;    /* wall ms, renewals update it */
    long long lock_dur;        /* ms, as first seen */
    long long renew_until;     /* wall ms: auto-renewal stops here */
    long long settle_deadline; /* mono ms */
    bool settling_on_link;     /* SETTLING by a disposition on the receive link (not
                                  $management): does not count as in flight */
    bool answer_lost;          /* a disposition went out and its answer never will come:
                                  a later failure means "outcome unknown", not lock lost */
    sb_renew_batch_t *batch;   /* renewal in flight, slot batch_ix */
    unsigned batch_ix;
    bool renew_alone;      /* a batch failed: renew this one by itself */
    long long renew_after; /* mono ms: no renewal before (after a failure) */
    bool mgmt_pending;     /* an update-disposition request carries msg as ctx */
    bool park_wait;        /* SETTLING, its dead letter not sent: it waits for its session's
                              parked record (sb_settle_park_done sends or releases it) */
    sb_msg_t *prev, *next; /* c->held */
    sb_msg_t *bnext;       /* c->buf_head FIFO */
    /* under lock: written by sb_client_settle */
    sb_disposition_t d;
    char *reason, *desc;
    sb_prop_t *mod; /* properties to modify, copied */
    size_t nmod;
    sb_msg_t *qnext;
};

typedef enum { RCV_IDLE, RCV_AUTH, RCV_ATTACHING, RCV_OPEN, RCV_CLOSING } sb_rcv_state_t;

struct sb_rcv {
    sb_link_tag_t tag;
    sb_client_t *c;
    sb_rcv_state_t state;
    bool session;
    pn_session_t *ssn;
    pn_link_t *link;
    char name[128];
    char *session_id;               /* accepted session */
    long long session_locked_until; /* wall ms */
    long long session_lock_dur;     /* ms, as granted at attach */
    bool session_renewing;
    long long last_activity; /* mono ms */
    long long retry_at;      /* mono ms: earliest next attach */
    unsigned gen;            /* +1 per attach, to spot stale answers */
    unsigned long link_seq;  /* this attach's number across the client (msg->link_seq) */
    unsigned held;           /* unsettled messages of this link */
    /* Sessions (sb_session.c): delivered messages wait here until handed out. */
    sb_msg_t *sbuf_head, *sbuf_tail; /* delivered, not yet handed out (bnext) */
    unsigned nbuf;
    long long drain_at;  /* mono ms the last drain was sent; 0 = none since the attach */
    unsigned drain_got;  /* deliveries since that drain */
    unsigned drain_ask;  /* the credit that drain asked for */
    bool drain_with_attach; /* that drain went out with the attach, before the broker's answer */
    bool filled_short;      /* sb_session_fill ran since that drain came back short */
    unsigned done_msgs;  /* messages of this session finished since the attach */
    bool give_back;      /* close once nothing is in flight (abandon with later ones held) */
    long long attach_at; /* mono ms of the attach */
    /* Parking (sb_sstate.c, servicebus.session_on_dead_letter "park"). */
    bool state_pending; /* get-session-state sent after the accept: nothing handed out yet */
    bool parked_hold;   /* the session is parked: held without credit, given back before its
                           lock ends (the broker offers the other sessions meanwhile) */
    bool parking;       /* one of its messages was dead-lettered: give it back once settled */
    bool park_setting;  /* set-session-state of the parked record awaits its answer */
    char *park_record;       /* that record, kept while a failed set is tried again */
    unsigned park_tries;     /* set-session-state requests sent for it */
    long long park_retry_at; /* mono ms: send it again (0 = not waiting) */
    long long cool_until; /* mono ms: no accept before (it was handed a cooling parked session) */
    bool recycling;          /* sb_rcv_recycle: draining, then closed and attached again */
    long long recycle_close_at; /* mono ms: close even without the drain's answer */
    /* The delivery being read (sb_receiver.c), frame by frame as it arrives. */
    char *acc;            /* its bytes so far, counted twice in c->arriving_bytes */
    size_t acc_len, acc_cap;
    bool stalled;         /* reading waits for the byte budget (the session window closes) */
    long long credit_since; /* mono ms credit went out with no transfer since; 0 = none out */
    bool reading;         /* in rcv_read: no reentry from a settlement it causes */
    sb_rcv_t *next;
};

/* A FIFO of mono ms instants (switch-latency bookkeeping, sb_session.c). */
typedef struct sb_ms_fifo {
    long long *v;
    unsigned cap, head, n;
} sb_ms_fifo_t;

struct sb_client {
    sb_core_t core;
    sb_callbacks_t cb;
    char *entity, *ca_file, *audience;
    bool sessions;
    bool send_only; /* no receive links: sb_client_send_each only */
    unsigned prefetch, mcc, max_sessions, renew_max_s, idle_s, reconnect_max_ms, reconnect_min_ms;
    unsigned session_wait_ms, renew_margin_ms, session_prefetch, settle_timeout_ms;
    bool park; /* sessions: park a session when one of its messages is dead-lettered */
    struct sb_parked {
        char *id;
        long long seen;      /* mono ms */
        long long cool_until; /* mono ms: given back, left free for an operator till then */
    } parked[SB_PARKED_MAX]; /* sessions seen parked (the gauge), most recent kept */
    unsigned n_parked;
    sb_ms_fifo_t sw_done;  /* sessions given back, not yet replaced: when */
    sb_ms_fifo_t sw_ahead; /* replacements accepted before the session they replace ended */

    pthread_t thread;
    bool started, joined;

    pthread_mutex_t lock;
    sb_msg_t *sq_head, *sq_tail; /* under lock: settle queue */
    bool stop_receiving;         /* under lock */
    bool pause;                  /* under lock: sb_client_pause */
    bool stop_requested;         /* under lock */
    sb_out_req_t *oq_head, *oq_tail; /* under lock: sends for the proactor (sb_client_send_each) */
    pthread_cond_t sent_cv;      /* with lock: a send came back to its caller */
    sb_stats_t stats_pub;        /* under lock: the copy sb_client_stats reads */

    /* thread: proactor */
    sb_stats_t stats; /* counted here, copied to stats_pub after each event batch */
    sb_out_t out;     /* the sender links (sb_client_send_each) */
    sb_rcv_t *rcvs;
    unsigned long attaches; /* receive-link attaches so far (sb_rcv_t.link_seq) */
    sb_msg_t *held;
    sb_msg_t *buf_head, *buf_tail;
    unsigned n_buffered, n_inflight, n_settling;
    unsigned long long held_bytes;    /* sum of st->bytes of messages past NEW, not DONE */
    unsigned long long max_held_bytes; /* 0 = no bound */
    size_t rcv_window;                 /* a receive link's session window (see SB_RCV_WINDOW_MIN) */
    size_t largest_bytes;             /* the largest message received: credit's unit */
    unsigned long long arriving_bytes; /* twice the bytes read of deliveries not yet whole */
    const atomic_ullong *held_beside; /* the caller's bytes in the same budget; may be NULL */
    atomic_ullong held_pub;           /* held_bytes + arriving_bytes, for other threads */
    sb_rcv_t *overdraft;    /* the receiver reading a message past the budget (alone) */
    bool receiving_stopped; /* the proactor has applied stop_receiving */
    bool paused;            /* the proactor has applied pause */
    bool stopping, done, ready;
    long long stop_deadline;
    long long reconnect_at;
    unsigned attempt;
    ib_rand_t seed; /* reconnect, re-attach and park retry jitter (proactor thread) */
    /* server-busy (sb_throttle.c) */
    long long busy_until; /* mono ms: holding until then */
    long long busy_since; /* mono ms the hold began; 0 = not holding */
    long long busy_ended; /* mono ms the last hold ended */
    unsigned busy_streak; /* holds in a row: the backoff step */
    /* stalls (sb_stall.c) */
    unsigned stall_ms;      /* credit out this long with no transfer while the entity has some */
    unsigned stalls_in_row; /* stalls with no transfer between them: 2 recycle the connection */
    long long backlog;      /* under lock: the entity's active messages, as last read */
    long long backlog_at;   /* under lock: mono ms of that read; 0 = never */
};

/* sb_client.c */
void sb_client_publish_stats(sb_client_t *c);
/* Hands the sends queued by sb_client_send_each to the sender links; at stop, ends them. */
void sb_client_take_sends(sb_client_t *c);
void sb_client_set_ready(sb_client_t *c, int ready, const ib_error_t *why);

/* sb_receiver.c */
sb_rcv_t *sb_rcv_new(sb_client_t *c, bool session);
void sb_rcv_start(sb_rcv_t *r);
void sb_rcv_event(sb_client_t *c, pn_event_t *e, pn_link_t *link);
void sb_rcv_lost(sb_rcv_t *r, const ib_error_t *why, bool proton_alive);
void sb_rcv_grant(sb_rcv_t *r);
void sb_rcv_pump(sb_client_t *c);
void sb_rcv_release_buffered(sb_client_t *c);
void sb_rcv_close(sb_rcv_t *r);
/*
 * Closes r and attaches it again, because the broker stopped answering on
 * it: first drains its credit (sb_rcv_recycle), then (drain answered, or
 * after RECYCLE_DRAIN_MS: sb_rcv_recycle_finish from the tick) releases its
 * buffered messages and closes it. The worker keeps the messages it holds
 * (a non-session lock outlives the link: they settle through $management);
 * settlements awaiting an answer are sent again through $management and,
 * failing that, end as IB_E_SETTLE_UNKNOWN.
 */
#define RECYCLE_DRAIN_MS 1000
void sb_rcv_recycle(sb_rcv_t *r, const char *why);
void sb_rcv_recycle_finish(sb_rcv_t *r, bool drained);

/* sb_msg_state.c */
/* The one place a message changes state; keeps n_buffered / n_inflight / n_settling in step. */
void sb_msg_set_state(sb_client_t *c, sb_msg_t *msg, sb_msg_state_t to);
/* Takes msg off c->held and forgets its pending renewal and management request. */
void sb_msg_unlink(sb_client_t *c, sb_msg_t *msg);
/* Frees msg with its state (it must be unlinked). */
void sb_msg_destroy(sb_msg_t *msg);
/* Ends a message the worker never saw: settles its delivery with outcome, then frees it. */
void sb_msg_drop(sb_client_t *c, sb_msg_t *msg, uint64_t outcome);
/* Marks the lock lost (logged once, here); drops it if buffered, tells the worker if handed. */
void sb_msg_lock_lost(sb_client_t *c, sb_msg_t *msg, const char *why);
/* Settles dlv locally with outcome (0: none); NULL is a no-op. */
void sb_dlv_release(pn_delivery_t *dlv, uint64_t outcome);
void sb_props_free(sb_prop_t *props, size_t n);

/* sb_session.c */
void sb_session_prepare(sb_rcv_t *r);
/*
 * Right after the attach: the session's first drain goes out with it, so a
 * session's messages come with the broker's answer (one round trip, not two).
 */
void sb_session_drain_with_attach(sb_rcv_t *r);
bool sb_session_opened(sb_rcv_t *r);
void sb_session_tick(sb_client_t *c);
/* Hands out, drains, or gives back a session receiver as its state asks. */
void sb_session_step(sb_rcv_t *r);
/* A delivery on a session link: buffered, then stepped. */
void sb_session_delivered(sb_rcv_t *r, sb_msg_t *msg);
/* A settlement freed a slot among max_concurrent_calls: waiting sessions hand out more. */
void sb_session_hand_more(sb_client_t *c);
/* Starts idle session receivers until max_concurrent_sessions are busy. */
void sb_session_fill(sb_client_t *c);
/* Removes msg (BUFFERED) from its session receiver's buffer. */
void sb_session_unbuffer(sb_rcv_t *r, sb_msg_t *msg);
/*
 * Closes r's link (why: done, idle, stopping, abandoned, parked, busy); the
 * broker frees the session.
 */
void sb_session_give_back(sb_rcv_t *r, const char *why);
/* A session receiver's attach ended without a session (timeout, refused). */
void sb_session_none(sb_client_t *c);
int sb_session_fifo_init(sb_client_t *c);
void sb_session_fifo_free(sb_client_t *c);

/* sb_settle.c */
void sb_settle_drain_queue(sb_client_t *c);
void sb_settle_reply(sb_client_t *c, sb_msg_t *msg, pn_delivery_t *dlv);
void sb_settle_finish(sb_client_t *c, sb_msg_t *msg, const ib_error_t *result);
void sb_settle_tick(sb_client_t *c);
void sb_settle_shutdown(sb_client_t *c);
/* Puts a message back at the head of the settle queue (its settlement is retried). */
void sb_settle_requeue(sb_client_t *c, sb_msg_t *msg);
/*
 * The park of r's session is over: parked, its waiting dead letter
 * (park_wait) is sent; not parked, it is released instead (back at the head
 * of its session, uncounted) and ends IB_E_BROKER, so that the session
 * stops at it all the same.
 */
void sb_settle_park_done(sb_client_t *c, sb_rcv_t *r, bool parked);

/* sb_sstate.c: parking (servicebus.session_on_dead_letter "park") */
/* A session was accepted: reads its state; the session waits for the answer. */
void sb_sstate_check(sb_rcv_t *r);
/*
 * A message of r's session is to be dead-lettered (it waits, park_wait):
 * records the session as parked first. A set-session-state that fails for
 * want of the broker (no answer, 5xx) is sent again, SB_PARK_TRIES in all,
 * the session held meanwhile; before try n+1 it waits ib_backoff_ms
 * (SB_PARK_RETRY_MS, doubling per try, full jitter, so receivers that failed
 * together do not send together). The answer, or the last failure, ends in
 * sb_settle_park_done: no crash can leave the dead letter sent and the
 * session not parked.
 */
#define SB_PARK_TRIES 4
#define SB_PARK_RETRY_MS 500
#define SB_PARK_RETRY_MAX_MS 2000 /* the third wait's ceiling: 3.5 s at most in all */
void sb_sstate_park(sb_rcv_t *r, sb_msg_t *msg);
/* Gives back parked sessions held long enough (before their lock ends); sends parks again. */
void sb_sstate_tick(sb_client_t *c);
/* Drops r's pending park record (its link closed or it accepted another session). */
void sb_sstate_forget(sb_rcv_t *r);
void sb_sstate_free(sb_client_t *c);

/* sb_throttle.c: com.microsoft:server-busy */
#define SB_BUSY_MIN_MS 100
#define SB_BUSY_BASE_MS 250
#define SB_BUSY_MAX_MS 2000
/* An operation was answered server-busy (what names it for the log): hold. */
void sb_throttle_note(sb_client_t *c, const char *what);
/* Holding: no credit (nor a session's drain), attach, settlement or send goes out. */
bool sb_throttle_on(const sb_client_t *c);
/* Ends the hold once its wait is over and lets everything go on. */
void sb_throttle_tick(sb_client_t *c);
/* Milliseconds spent holding since start, the current hold included. */
unsigned long long sb_throttle_ms(const sb_client_t *c);

/* sb_stall.c: receive links that get nothing while the entity has messages */
void sb_stall_tick(sb_client_t *c);

/* The bytes held, and those the caller holds beside them, against max_held_bytes. */
static inline unsigned long long sb_held_used(const sb_client_t *c)
{
    return c->held_bytes + c->arriving_bytes + (c->held_beside ? atomic_load(c->held_beside) : 0);
}

/* Publishes held_bytes + arriving_bytes for sb_client_held_bytes. */
static inline void sb_held_publish(sb_client_t *c)
{
    atomic_store_explicit(&c->held_pub, c->held_bytes + c->arriving_bytes, memory_order_relaxed);
}

/* sb_renew.c */
void sb_renew_tick(sb_client_t *c);
void sb_renew_forget(sb_msg_t *msg);
long long sb_renew_margin(const sb_client_t *c, long long lock_dur);

#endif
