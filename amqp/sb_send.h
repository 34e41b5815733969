/*
 * sb_send.h - a small blocking sender and peeker (inboxctl, dlq replay,
 * tests). Each sb_sender_t owns one connection and its own proactor, driven
 * by the calling thread inside each call; it has no thread of its own. One
 * sb_sender_t must not be used by two threads at once. A long-running
 * process that already has a client sends on the client's connection
 * instead (sb_client_send_each).
 */
#ifndef SB_SEND_H
#define SB_SEND_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"
#include "sb_msg.h"
#include "sb_out.h"
#include "sb_token.h"

typedef struct sb_sender sb_sender_t;

typedef struct sb_sender_options {
    const char *connection_string; /* required */
    const char *ca_file;           /* NULL = the system store */
    sb_token_get_fn token_get;     /* NULL = SAS from the connection string */
    void *token_ctx;
    unsigned timeout_ms; /* per call; 0 = 30000 */
    /* Bytes kept of a peek's answer, 0 = all. Past them the peeked
     * messages' bodies are cut short (their properties stay whole): a
     * large message is never held to learn its properties. */
    size_t answer_keep;
    unsigned sas_token_lifetime_s; /* SAS tokens signed with the key; 0 = one hour */
} sb_sender_options_t;

/* Connects and authorizes; NULL with err filled. thread: the caller's. */
sb_sender_t *sb_sender_open(const sb_sender_options_t *opt, ib_error_t *err);

/*
 * Sends n messages to entity (a queue or topic) and waits until the broker
 * has accepted every one. Returns IB_E_OK, or the first failure: IB_E_BROKER
 * (rejected/released/modified, condition filled), IB_E_NOTFOUND,
 * IB_E_TIMEOUT, IB_E_CLOSED; err->cls says whether sending again can work
 * (sb_condition.h: transient) or not (entity not found, unauthorized, too
 * large: permanent). Messages are sent one transfer each: Proton
 * 0.37 cannot set the transfer's message-format, so the batch format
 * (0x80013700) is not offered.
 */
ib_err_t sb_sender_send(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs, size_t n,
                        ib_error_t *err);

/*
 * Like sb_sender_send, but every message gets its own result in each[i]
 * (n entries; cleared when the broker accepted it, else its error,
 * classified): the messages travel pipelined on one link and the caller
 * learns which were accepted. A message without an answer (connection
 * lost, timeout) gets that failure; it may or may not have reached the
 * broker. Returns IB_E_OK when all were accepted.
 */
ib_err_t sb_sender_send_each(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs,
                             size_t n, ib_error_t *each);

/*
 * Peeks up to max messages of entity (a queue, "topic/Subscriptions/sub", or
 * either with "/$DeadLetterQueue") starting at sequence number from_seq
 * (1 = the start) through $management com.microsoft:peek-message. Fills
 * *out with a malloc'd array of *n messages the caller frees with
 * sb_peek_free. Dead-lettered messages carry dead_letter_reason and
 * dead_letter_description. No message is an empty result, not an error.
 * An entry that cannot be decoded is left out (sb_sender_peek_each counts
 * and pages past such entries).
 */
ib_err_t sb_sender_peek(sb_sender_t *s, const char *entity, long long from_seq, int max,
                        sb_msg_t ***out, size_t *n, ib_error_t *err);
void sb_peek_free(sb_msg_t **msgs, size_t n);

/* Called by sb_sender_peek_each for each peeked message; false ends the walk. */
typedef bool (*sb_peek_each_fn)(const sb_msg_t *m, void *arg);

/*
 * Walks entity (as for sb_sender_peek) from sequence number from_seq, page
 * messages (at least 1) a peek, handing each message to each(m, arg) in the
 * order peeked; m is only valid during the call. Each next page starts past
 * the highest sequence number seen so far.
 *  - An empty page ends the walk with IB_E_OK. A short page does not: the
 *    service answers at most the count asked, not necessarily all that
 *    follow.
 *  - An entry that cannot be decoded (no message, or no sequence number in
 *    it) is never handed out and never ends the walk: it is counted once
 *    in *unreadable and paged past by the sequence numbers of the entries
 *    after it; a page of such entries only is asked again with a larger
 *    count (up to 1,000) to find one. Callers report *unreadable.
 *  - each returning false ends it at once with IB_E_OK: the rest of that
 *    page is not handed out and no further page is asked for.
 *  - A failed peek ends it with that failure in err (as sb_sender_peek);
 *    so does a page that does not get past the highest sequence number
 *    seen, or 1,000 unreadable entries in a row (IB_E_BROKER, permanent),
 *    which would otherwise come back again and again. Messages handed out
 *    (and *unreadable counted) before a failure stay so.
 * page < 1, no each or no unreadable: IB_E_INVAL. thread: the caller's.
 */
ib_err_t sb_sender_peek_each(sb_sender_t *s, const char *entity, long long from_seq, int page,
                             sb_peek_each_fn each, void *arg, long long *unreadable,
                             ib_error_t *err);

/*
 * Accepts session session_id of entity (a session-filtered receive link that
 * is given no credit: no message is received, none is touched), reads its
 * session state (com.microsoft:get-session-state) into *before (malloc'd,
 * NUL added, *before_len without it; NULL when the session has none), then,
 * when unpark and that state is inboxd's parked record (and only then),
 * clears it (com.microsoft:set-session-state, null), and gives the session
 * back. A session locked by another receiver fails with IB_E_BROKER,
 * condition com.microsoft:session-cannot-be-locked in err->text (transient).
 */
ib_err_t sb_sender_session_state(sb_sender_t *s, const char *entity, const char *session_id,
                                 bool unpark, char **before, size_t *before_len, ib_error_t *err);
/* Whether a session state is inboxd's parked record. */
bool sb_session_state_parked(const char *state, size_t len);

/* Closes the connection and frees. thread: the caller's. */
void sb_sender_close(sb_sender_t *s);

#endif
