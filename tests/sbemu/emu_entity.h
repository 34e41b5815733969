/*
 * emu_entity.h - the emulator's namespace: queues, topics, subscriptions and
 * their dead-letter sub-queues, with the message state machine (peek-lock,
 * lock tokens and expiry, delivery counts, MaxDeliveryCount, TTL, deferral,
 * scheduling, duplicate detection) and message sessions.
 *
 * Nothing here knows Proton: the broker layer asks for messages, locks them
 * on behalf of an opaque holder (its link), and reports settlements. The
 * namespace calls back when an entity gains available messages or a session
 * lock expires.
 *
 * thread: proactor (single owner); nothing here is thread-safe.
 */
#ifndef EMU_ENTITY_H
#define EMU_ENTITY_H

#include "emu_codec.h"
#include "emu_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct emu_entity_opts {
    int lock_duration_s;        /* default 60 */
    int max_delivery_count;     /* default 10; 0 = unlimited */
    bool requires_session;      /* default false */
    int dup_window_s;           /* duplicate detection window; 0 = off */
    int default_ttl_s;          /* 0 = unlimited */
    bool dead_letter_on_expiry; /* move expired messages to the DLQ */
} emu_entity_opts_t;

/* Fills opts with the Azure defaults listed above. */
void emu_entity_opts_default(emu_entity_opts_t *opts);

typedef enum { EMU_KIND_QUEUE, EMU_KIND_TOPIC, EMU_KIND_SUBSCRIPTION, EMU_KIND_DLQ } emu_kind_t;

/* Message states; each comment says who holds the message. */
typedef enum {
    EMU_MSG_ACTIVE,    /* the entity's avail list, waiting for a receiver */
    EMU_MSG_LOCKED,    /* the locked list, held by a peek-lock receiver (msg->holder) */
    EMU_MSG_DEFERRED,  /* the deferred list, reachable by sequence number only */
    EMU_MSG_SCHEDULED, /* the scheduled list, until its enqueue time */
} emu_msg_state_t;

/* One stored message body, shared by every subscription it fans out to. */
typedef struct emu_blob {
    unsigned refs;
    uint32_t len;
    emu_sections_t sec;
    emu_msg_info_t info;
    uint8_t data[];
} emu_blob_t;

typedef struct emu_session emu_session_t;
typedef struct emu_entity emu_entity_t;

typedef struct emu_msg {
    struct emu_msg *prev, *next; /* in the list of its state */
    emu_entity_t *entity;
    emu_blob_t *blob;
    emu_session_t *session; /* NULL unless the entity requires sessions */
    int64_t seq;
    int64_t enqueued_ms;
    int64_t expires_ms;      /* 0 = never */
    int64_t visible_ms;      /* scheduled enqueue time */
    int64_t locked_until_ms; /* what the receiver is told */
    int64_t lock_expiry_ms;  /* when the lock really ends (fault: earlier) */
    uint32_t delivery_count;
    emu_msg_state_t state;
    uint8_t lock[16]; /* canonical byte order */
    void *holder;
    uint8_t *app; /* replacement application-properties section */
    uint32_t app_len;
} emu_msg_t;

typedef struct emu_list {
    emu_msg_t *head, *tail;
    size_t count;
} emu_list_t;

struct emu_session {
    char *id;
    void *holder; /* the receiver link that holds the session, or NULL */
    int64_t locked_until_ms;
    int64_t lock_expiry_ms;
    uint8_t *state;
    size_t state_len;
    bool has_state;
    size_t n_msgs;  /* messages of this session in the entity, any state */
    size_t n_avail; /* of those, available (in the entity's avail list) */
    emu_session_t *held_prev, *held_next; /* in the entity's held list while holder is set */
};

#define EMU_REASONS_MAX 16

typedef struct emu_stats {
    uint64_t sent, delivered, completed, abandoned, dead_lettered, deferred, released;
    uint64_t duplicate_detected, expired;
    uint64_t
        session_state_sets; /* set-session-state requests by the session's holder, any answer */
    struct {
        char reason[64];
        uint64_t n;
    } by_reason[EMU_REASONS_MAX];
} emu_stats_t;

typedef struct emu_ns emu_ns_t;

struct emu_entity {
    char *path;
    emu_kind_t kind;
    emu_entity_opts_t opts;
    emu_ns_t *ns;
    emu_entity_t *dlq;    /* queues and subscriptions */
    emu_entity_t *parent; /* DLQ: its entity; subscription: its topic */
    emu_entity_t **subs;  /* topics */
    size_t nsubs;
    int64_t next_seq;
    emu_list_t avail, locked, deferred, scheduled;
    emu_map_t *sessions; /* id -> emu_session_t */
    emu_session_t *held; /* the sessions a receiver holds: lock expiry looks at these only */
    size_t n_held;
    emu_map_t *dedup;    /* message-id bytes -> emu_dedup_t */
    void *dedup_head, *dedup_tail;
    emu_stats_t st;
    void *consumers; /* owned by the broker layer */
    void *waiting;   /* accept-next receivers waiting for a session, oldest first (broker layer) */
};

typedef struct emu_ns_hooks {
    /* An entity has newly available messages (or a session freed up). */
    void (*ready)(void *ctx, emu_entity_t *ent);
    /* A session lock expired; the holder must be detached (session-lock-lost). */
    void (*session_lost)(void *ctx, emu_entity_t *ent, emu_session_t *s, void *holder);
    void *ctx;
} emu_ns_hooks_t;

struct emu_ns {
    emu_entity_t **ents;
    size_t n;
    emu_map_t *locks;      /* canonical lock token -> emu_msg_t */
    int64_t lock_early_ms; /* fault: locks end this much before locked-until */
    /* Connection counters kept here so the stats file has one source. */
    uint64_t conn_accepted, conn_open, conn_forced;
    uint64_t server_busy;   /* operations answered com.microsoft:server-busy (fault) */
    uint64_t links_stalled; /* receive links left without transfers (fault) */
    uint64_t tokens_refused, links_expired; /* put-token 401s; links detached, token expired */
    uint64_t links_read_only; /* links detached or refused while read-only */
    uint64_t links_idle_closed, conns_idle_closed; /* the broker's idle close (fault) */
    uint64_t stats_seq; /* stats file renderings so far: its "seq" */
    int64_t next_ttl_scan_ms; /* TTL walks whole lists: at most every 250 ms */
    emu_ns_hooks_t hooks;
};

emu_ns_t *emu_ns_new(void);
/* Frees every entity, message and session. NULL is a no-op. */
void emu_ns_free(emu_ns_t *ns);
/* Adds a queue (and its DLQ); NULL when the name exists or out of memory. */
emu_entity_t *emu_ns_add_queue(emu_ns_t *ns, const char *name, const emu_entity_opts_t *opts);
emu_entity_t *emu_ns_add_topic(emu_ns_t *ns, const char *name, const emu_entity_opts_t *opts);
emu_entity_t *emu_ns_add_subscription(emu_ns_t *ns, emu_entity_t *topic, const char *name,
                                      const emu_entity_opts_t *opts);
/*
 * Finds the entity of a link address: one leading '/' ignored, compared
 * case-insensitively ("Subscriptions", "$DeadLetterQueue" in any case).
 */
emu_entity_t *emu_ns_find(emu_ns_t *ns, const char *address, size_t len);

/* Send results. */
typedef enum {
    EMU_SEND_OK = 0,
    EMU_SEND_MALFORMED,
    EMU_SEND_NOMEM,
    EMU_SEND_NOT_ALLOWED
} emu_send_t;

/*
 * Stores one transfer sent to a queue or topic: unpacks batch envelopes,
 * drops duplicates inside the window, fans out to subscriptions.
 */
emu_send_t emu_entity_send(emu_entity_t *ent, const uint8_t *bytes, size_t len, int64_t now);

/*
 * Takes the first available message (of session s, or any when s is NULL)
 * off the avail list. The caller then locks or consumes it.
 */
emu_msg_t *emu_entity_take(emu_entity_t *ent, emu_session_t *s);
/* Peek-lock: new lock token, locked-until, into the locked list. */
void emu_msg_lock(emu_msg_t *msg, void *holder, int64_t now);
/* Receive-and-delete: the message is gone once sent. Frees msg. */
void emu_msg_consume(emu_msg_t *msg);

typedef enum {
    EMU_COMPLETE,
    EMU_ABANDON, /* delivery count +1, available again (or DLQ at the limit) */
    EMU_DEAD_LETTER,
    EMU_DEFER,
    EMU_RELEASE, /* unlock without counting a delivery */
} emu_outcome_t;

/* Looks up a live lock (NULL when unknown or expired). */
emu_msg_t *emu_ns_locked(emu_ns_t *ns, const uint8_t lock[16], int64_t now);
/*
 * Applies an outcome to the message holding lock. Returns 0, or -1 when the
 * lock is unknown or expired (message-lock-lost).
 */
int emu_ns_settle(emu_ns_t *ns, const uint8_t lock[16], emu_outcome_t outcome, const char *reason,
                  const char *description, int64_t now);
/* Extends a lock; stores the new locked-until. -1 when lost. */
int emu_ns_renew(emu_ns_t *ns, const uint8_t lock[16], int64_t now, int64_t *until_ms);

/* Moves msg to its entity's DLQ with reason and description; frees msg. */
void emu_msg_dead_letter(emu_msg_t *msg, const char *reason, const char *description, int64_t now);

/*
 * Periodic work: lock expiry, TTL expiry, scheduled messages becoming
 * active, duplicate-detection window, session lock expiry.
 */
void emu_ns_tick(emu_ns_t *ns, int64_t now);

/* Sessions. */
emu_session_t *emu_session_get(emu_entity_t *ent, const char *id, bool create);
/*
 * Locks a session for holder: the named one, or (id NULL) the first session
 * with an available message that nobody holds. NULL when busy or none.
 * *busy is set when the named session is held by someone else.
 */
emu_session_t *emu_session_acquire(emu_entity_t *ent, const char *id, void *holder, int64_t now,
                                   bool *busy);
/*
 * Releases a session held by holder. Its locked messages return to the
 * entity, with delivery count +1 when count_delivery (lock expiry) and
 * unchanged otherwise (receiver closed).
 */
void emu_session_release(emu_entity_t *ent, emu_session_t *s, bool count_delivery, int64_t now);
/* Extends a session lock (and its messages' locks). -1 when not held. */
int emu_session_renew(emu_entity_t *ent, const char *id, int64_t now, int64_t *until_ms);
/* Stores session state (NULL clears). -1 on out of memory. */
int emu_session_set_state(emu_entity_t *ent, const char *id, const uint8_t *state, size_t len);

/*
 * Calls fn for up to max messages with seq >= from in sequence order
 * (active, locked, deferred, scheduled; of session sid when not NULL).
 * Returns how many were visited.
 */
size_t emu_entity_peek(emu_entity_t *ent, int64_t from, size_t max, const char *sid,
                       void (*fn)(void *ctx, const emu_msg_t *msg), void *ctx);

/* Finds a deferred message by sequence number (NULL when none). */
emu_msg_t *emu_entity_deferred(emu_entity_t *ent, int64_t seq);

/* Replaces msg's application-properties section (copied). 0 or -1. */
int emu_msg_set_app(emu_msg_t *msg, const uint8_t *app, size_t len);

/* Moves a deferred message to locked (receive-by-sequence-number). */
void emu_msg_undefer_lock(emu_msg_t *msg, int64_t now);
/* Drops a scheduled message by sequence number; 0, or -1 when none. */
int emu_entity_cancel_scheduled(emu_entity_t *ent, int64_t seq);

/* Counts a dead-letter reason in st (bounded; the rest go under "other"). */
void emu_stats_reason(emu_stats_t *st, const char *reason);

#endif
