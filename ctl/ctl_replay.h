/*
 * ctl_replay.h - `inboxctl dlq replay`: moves dead-lettered messages back to
 * their entity, safely.
 *
 * What is replayed is decided once, at the start, from a peek of the
 * dead-letter queue (the filters: reasons, message ids, max): a message
 * that comes back to the DLQ during the run has a new sequence number and
 * is never replayed twice by one run. Each chosen message is received from
 * the DLQ in peek-lock, re-sent with its message id, body, subject, session
 * id, correlation id, content type and application properties, plus
 * inboxd-replay-count (previous value + 1) and inboxd-replayed-at (RFC 3339,
 * UTC); its DLQ copy is completed only after the broker accepted the
 * re-send. A crash in between leaves both copies; the next replay re-sends
 * the same message id, which the consumer's inbox turns into a duplicate.
 *
 * Messages of the DLQ that were not chosen but are delivered to the replay
 * receiver are held locked (at most CTL_REPLAY_HOLD of them) and released,
 * unchanged and without a delivery count, when the run ends.
 *
 * Output: one JSON object per message on out, then a summary object.
 * thread: the caller's (inboxctl's main thread); the Service Bus client's
 * callbacks run on its proactor thread and only queue.
 */
#ifndef CTL_REPLAY_H
#define CTL_REPLAY_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sb_msg.h"

/* Unchosen messages held locked at once (the receiver's window). */
#define CTL_REPLAY_HOLD 200

/* Exit statuses of a run (beside 0 and 2 for usage). */
enum {
    CTL_REPLAY_OK = 0,
    CTL_REPLAY_FAILED = 1,        /* broker or I/O failure, or chosen messages left behind */
    CTL_REPLAY_CANARY_FAILED = 3, /* a canary came back to the DLQ (or was not consumed in time) */
    CTL_REPLAY_INTERRUPTED = 130, /* SIGINT: stopped after the current message */
};

typedef struct ctl_replay_opts {
    const char *connection_string; /* required */
    const char *ca_file;           /* NULL: the system store */
    const char *entity;     /* required: a queue or "topic/Subscriptions/sub" whose DLQ is read */
    const char *to;         /* where to re-send; NULL: entity (required for a subscription) */
    const char **reasons;   /* DeadLetterReason values to replay; none = any */
    size_t nreasons;
    const char **message_ids; /* message ids to replay; none = any */
    size_t nmessage_ids;
    bool (*filter)(void *ctx, const sb_msg_t *msg); /* also required; NULL = any */
    void *filter_ctx;
    long max;              /* at most this many; 0 = all */
    double rate;           /* messages per second; 0 = as fast as the broker accepts */
    long canary;           /* replay this many first and watch them; 0 = no canary */
    unsigned canary_wait_s; /* how long the canaries may take to leave the entity; 0 = 60 */
    unsigned idle_s;        /* give up when no chosen message arrives for this long; 0 = 30 */
    bool dry_run;           /* only list what would move */
    FILE *out;              /* JSON lines; NULL = stdout */
    volatile sig_atomic_t *interrupted; /* set by the caller's SIGINT handler; may be NULL */
} ctl_replay_opts_t;

/*
 * Checks the options; returns NULL when they are usable, else a sentence
 * naming the bad one (for a usage error, exit status 2). thread: any.
 */
const char *ctl_replay_check(const ctl_replay_opts_t *o);

/* Runs the replay; returns one of the WK_REPLAY_* statuses. thread: the caller's. */
int ctl_replay_run(const ctl_replay_opts_t *o);

#endif
