/*
 * sb_outlink.h - internal to amqp/: the sender links of one connection core
 * and the sends waiting on them. The client (sb_client.c) runs them on its
 * proactor thread for sb_client_send_each; the blocking sender (sb_send.c)
 * on the caller's thread inside each call.
 *
 * A send (sb_out_req_t) holds n encoded messages for one entity. It joins
 * the queue of that entity's link: the link is authorized ($cbs put-token)
 * and attached when first needed (and again after it was closed), the
 * messages go out as the broker grants credit, in queue order, and the send
 * is done when every message has the broker's answer, or the link or the
 * connection is lost, or its deadline passes. A message without an answer
 * may or may not have reached the broker. Then done_cb runs (on the thread
 * driving the core) and the submitter owns the send again.
 *
 * thread: the thread driving the core, except sb_out_req_new/_free (any).
 */
#ifndef SB_OUTLINK_H
#define SB_OUTLINK_H

#include <stdbool.h>
#include <stddef.h>

#include "sb_core.h"
#include "sb_out.h"

typedef struct sb_out_link sb_out_link_t;
typedef struct sb_out_req sb_out_req_t;

struct sb_out_req {
    /* set by sb_out_req_new */
    char *entity;
    size_t n;
    char **enc; /* n encoded messages */
    size_t *enc_len;
    ib_error_t *each;     /* n results: cleared once accepted */
    unsigned timeout_ms;  /* from submission to the last answer */
    void (*done_cb)(sb_out_req_t *req, void *ctx); /* optional */
    void *ctx;
    /* kept by sb_outlink.c */
    long long deadline; /* mono ms */
    size_t sent, answered;
    unsigned char *got; /* n flags: answered */
    unsigned long long tag0; /* the delivery tag of message 0 */
    bool done;
    bool back; /* the submitter's own flag (its done_cb sets it under its lock) */
    sb_out_link_t *link;
    sb_out_req_t *next;
};

/* The sender links of one core. */
typedef struct sb_out {
    sb_core_t *core;
    sb_out_link_t *links;
} sb_out_t;

/*
 * Encodes msgs (sb_out_encode) into a new send; NULL with err filled when
 * one does not encode or memory is short. thread: any.
 */
sb_out_req_t *sb_out_req_new(const char *entity, const sb_out_msg_t *msgs, size_t n,
                             unsigned timeout_ms, ib_error_t *err);
/* Frees a send that is done (or was never submitted). thread: any. */
void sb_out_req_free(sb_out_req_t *req);
/* The send's failure: the first message's error that is not cleared (err cleared: all accepted). */
ib_err_t sb_out_req_result(const sb_out_req_t *req, ib_error_t *err);

void sb_out_init(sb_out_t *o, sb_core_t *core);
/* Ends req at once, unsent, every message failing with why (done_cb runs). */
void sb_out_refuse(sb_out_req_t *req, const ib_error_t *why);
/* Queues req on its entity's link and sends what it can. */
void sb_out_submit(sb_out_t *o, sb_out_req_t *req);
/* A link event; false when the link is not a sender link. */
bool sb_out_event(sb_out_t *o, pn_event_t *e, pn_link_t *link);
/* The connection is open: links with waiting sends authorize and attach. */
void sb_out_up(sb_out_t *o);
/* Ends req now as if its deadline had passed (its late answers are ignored). */
void sb_out_cancel(sb_out_t *o, sb_out_req_t *req);
/* Ends sends past their deadline. */
void sb_out_tick(sb_out_t *o);
/*
 * The connection is gone (every Proton object with it), or the owner stops:
 * every send ends now, its unanswered messages failing with why.
 */
void sb_out_down(sb_out_t *o, const ib_error_t *why);
/* Closes the open links (before the connection closes). */
void sb_out_close(sb_out_t *o);
/* Frees the links; ends any send left with IB_E_SHUTDOWN. */
void sb_out_fini(sb_out_t *o);

#endif
