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
 */
ib_err_t sb_sender_peek(sb_sender_t *s, const char *entity, long long from_seq, int max,
                        sb_msg_t ***out, size_t *n, ib_error_t *err);
void sb_peek_free(sb_msg_t **msgs, size_t n);

/* Closes the connection and frees. thread: the caller's. */
void sb_sender_close(sb_sender_t *s);

#endif
