/*
 * sb_peek.h - the inside of peeking (amqp/sb_peek.c): one answer of
 * com.microsoft:peek-message read into messages, and the walk's step from
 * one page to the next, so that an entry that cannot be decoded is counted
 * and paged past instead of ending a walk that reads it as "no more".
 *
 * thread: any (no Proton object but the answer's body, owned by the caller).
 */
#ifndef SB_PEEK_H
#define SB_PEEK_H

#include <stdbool.h>
#include <stddef.h>

#include <proton/codec.h>

#include "ib_err.h"
#include "sb_msg.h"

/* The most entries one peek asks for while looking past undecodable ones. */
#define SB_PEEK_COUNT_MAX 1000

/*
 * One answer. An entry is readable when it holds an encoded message whose
 * sequence number decodes (the message may still carry a decode_err about
 * another part); any other entry is unreadable: not a map, no "message"
 * binary, or no sequence number in it.
 */
typedef struct sb_peek_page {
    sb_msg_t **msgs; /* the readable entries in the order answered; owned */
    size_t n;
    size_t entries; /* entries in the answer, readable or not */
    size_t lead;    /* unreadable entries before the last readable one */
    size_t tail;    /* unreadable entries after it (every entry when n == 0) */
} sb_peek_page_t;

/*
 * Reads the "messages" list of a peek answer's body (a map) into pg, which
 * it zeroes first. A body without the list is a page of no entries.
 * IB_E_NOMEM (pg cleared) when a message cannot be held.
 */
ib_err_t sb_peek_page_read(pn_data_t *body, sb_peek_page_t *pg, ib_error_t *err);

/* Frees pg's messages and zeroes it. */
void sb_peek_page_clear(sb_peek_page_t *pg);

/*
 * An encoded answer (a message's sections) of which only the first len
 * bytes were kept, made whole again in place: whole sections are kept; in
 * the one cut, lists and maps keep the elements that fit (whole map
 * entries), a binary keeps the bytes there are (the peeked message inside
 * cut the same way: its properties and annotations whole, its body
 * shortened) and anything else is left out. Sizes and counts are rewritten,
 * so the result decodes. Returns its length (<= len). For an answer read
 * only in part (sb_sender_options_t.answer_keep): enough to learn a
 * message's properties without holding its body.
 */
size_t sb_peek_answer_cut(unsigned char *buf, size_t len);

/* Where a walk stands between two peeks. */
typedef struct sb_peek_walk {
    long long from;       /* the next peek's from-sequence-number */
    int page;             /* the count the caller asked pages of */
    int count;            /* the next peek's message-count (grows past unreadable entries) */
    long long unreadable; /* unreadable entries counted so far, each once */
    size_t again;         /* entries of the last answer when it is asked again (else 0) */
} sb_peek_walk_t;

typedef enum {
    SB_PEEK_MORE,  /* peek again from w->from, w->count entries */
    SB_PEEK_END,   /* nothing follows */
    SB_PEEK_STUCK, /* the answer does not get past w->from: an error */
} sb_peek_step_t;

/*
 * After the messages of pg (answered from w->from) were handed out and
 * top_seq is the highest sequence number among them (-1 when none):
 *  - readable entries: lead unreadable ones are counted, the next peek
 *    starts past top_seq (the tail comes first in it), count back to page;
 *  - no entry: the end;
 *  - unreadable entries only: asked again from the same point with twice
 *    the count (at most SB_PEEK_COUNT_MAX), so that a readable entry past
 *    them gives the next starting point. They are counted and the walk
 *    ends when a larger count brought no more entries (nothing follows
 *    them), or is stuck at SB_PEEK_COUNT_MAX entries all unreadable.
 * A page whose top_seq does not reach w->from is stuck.
 */
sb_peek_step_t sb_peek_walk_step(sb_peek_walk_t *w, const sb_peek_page_t *pg, long long top_seq);

#endif
