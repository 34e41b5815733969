/*
 * Peek answers and the peek walk (amqp/sb_peek.c): entries that cannot be
 * decoded (not a map, no message, bytes that are not AMQP, no sequence
 * number) are counted where they stand and never handed out; the walk
 * pages past them by the sequence numbers around them, asks again with a
 * larger count when a page holds nothing else, counts each once, and ends
 * or reports itself stuck instead of reading them as the end.
 */
#include <proton/codec.h>
#include <proton/message.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "sb_peek.h"

static char enc[4096];

static void put_str(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

/* Puts {message: <an encoded message>} with sequence number seq (none when < 0). */
static void put_entry(pn_data_t *out, long long seq)
{
    pn_data_t *m = pn_data(8);
    ssize_t n;
    if (seq >= 0) {
        pn_data_put_described(m);
        pn_data_enter(m);
        pn_data_put_ulong(m, 0x72); /* message-annotations */
        pn_data_put_map(m);
        pn_data_enter(m);
        pn_data_put_symbol(m, pn_bytes(21, "x-opt-sequence-number"));
        pn_data_put_long(m, seq);
        pn_data_exit(m);
        pn_data_exit(m);
    }
    pn_data_put_described(m);
    pn_data_enter(m);
    pn_data_put_ulong(m, 0x75); /* data */
    pn_data_put_binary(m, pn_bytes(2, "{}"));
    pn_data_exit(m);
    n = pn_data_encode(m, enc, sizeof enc);
    pn_data_free(m);
    pn_data_put_map(out);
    pn_data_enter(out);
    put_str(out, "message");
    pn_data_put_binary(out, pn_bytes(n > 0 ? (size_t)n : 0, enc));
    pn_data_exit(out);
}

static void put_garbage(pn_data_t *out)
{
    pn_data_put_map(out);
    pn_data_enter(out);
    put_str(out, "message");
    pn_data_put_binary(out, pn_bytes(3, "\xff\xfe\x01"));
    pn_data_exit(out);
}

/* A peek answer's body: readable entries for seqs >= 0, and -1 no seq, -2 garbage, -3 no map. */
static pn_data_t *answer(const long long *v, size_t n)
{
    pn_data_t *d = pn_data(64);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "messages");
    pn_data_put_list(d);
    pn_data_enter(d);
    for (size_t i = 0; i < n; i++) {
        if (v[i] >= -1)
            put_entry(d, v[i]);
        else if (v[i] == -2)
            put_garbage(d);
        else
            pn_data_put_int(d, 17);
    }
    pn_data_exit(d);
    pn_data_exit(d);
    return d;
}

static void read_answer(const long long *v, size_t n, sb_peek_page_t *pg)
{
    ib_error_t err;
    pn_data_t *d = answer(v, n);
    ASSERT_EQ(sb_peek_page_read(d, pg, &err), IB_E_OK);
    pn_data_free(d);
}

static void test_page_read(void)
{
    static const long long v[] = {-3, 5, -1, -2, 9, -2};
    sb_peek_page_t pg;
    read_answer(v, 6, &pg);
    ASSERT_EQ(pg.entries, 6);
    ASSERT_EQ(pg.n, 2);
    ASSERT_EQ(pg.msgs[0]->sequence_number, 5);
    ASSERT_EQ(pg.msgs[1]->sequence_number, 9);
    ASSERT_EQ(pg.lead, 3); /* the int before 5, and the two between 5 and 9 */
    ASSERT_EQ(pg.tail, 1);
    sb_peek_page_clear(&pg);
    ASSERT_EQ(pg.n, 0);

    /* Only unreadable entries: all of them tail. No list at all: no entry. */
    static const long long bad[] = {-1, -2};
    read_answer(bad, 2, &pg);
    ASSERT_EQ(pg.entries, 2);
    ASSERT_EQ(pg.n, 0);
    ASSERT_EQ(pg.tail, 2);
    sb_peek_page_clear(&pg);
    pn_data_t *d = pn_data(4);
    ib_error_t err;
    pn_data_put_map(d);
    ASSERT_EQ(sb_peek_page_read(d, &pg, &err), IB_E_OK);
    ASSERT_EQ(pg.entries, 0);
    pn_data_free(d);
}

/*
 * A whole peek answer message (status, then the amqp-value body) with one
 * entry: sequence number 7, enqueued 1700000000123, a body of body_len
 * bytes 'a'..'z': *out (malloc'd), *len.
 */
static void answer_message(size_t body_len, char **out, size_t *len)
{
    pn_data_t *m = pn_data(16), *d = pn_data(16);
    char *body = malloc(body_len), *inner = malloc(body_len + 256);
    size_t cap = body_len + 512;
    ssize_t n;
    for (size_t i = 0; i < body_len; i++)
        body[i] = (char)('a' + i % 26);
    pn_data_put_described(m);
    pn_data_enter(m);
    pn_data_put_ulong(m, 0x72);
    pn_data_put_map(m);
    pn_data_enter(m);
    pn_data_put_symbol(m, pn_bytes(21, "x-opt-sequence-number"));
    pn_data_put_long(m, 7);
    pn_data_put_symbol(m, pn_bytes(19, "x-opt-enqueued-time"));
    pn_data_put_timestamp(m, 1700000000123LL);
    pn_data_exit(m);
    pn_data_exit(m);
    pn_data_put_described(m);
    pn_data_enter(m);
    pn_data_put_ulong(m, 0x75);
    pn_data_put_binary(m, pn_bytes(body_len, body));
    pn_data_exit(m);
    n = pn_data_encode(m, inner, body_len + 256);
    ASSERT_TRUE(n > 0);

    pn_data_put_described(d); /* application-properties: the status */
    pn_data_enter(d);
    pn_data_put_ulong(d, 0x74);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "statusCode");
    pn_data_put_int(d, 200);
    pn_data_exit(d);
    pn_data_exit(d);
    pn_data_put_described(d); /* amqp-value: {messages: [{message: <inner>}]} */
    pn_data_enter(d);
    pn_data_put_ulong(d, 0x77);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "messages");
    pn_data_put_list(d);
    pn_data_enter(d);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "message");
    pn_data_put_binary(d, pn_bytes((size_t)n, inner));
    put_str(d, "lock-token");
    put_str(d, "after the message");
    pn_data_exit(d);
    pn_data_exit(d);
    pn_data_exit(d);
    pn_data_exit(d);
    *out = malloc(cap);
    n = pn_data_encode(d, *out, cap);
    ASSERT_TRUE(n > 0);
    pn_data_free(m);
    pn_data_free(d);
    free(body);
    free(inner);
    *len = (size_t)n;
}

/* The first keep bytes of an answer, cut: they decode; the entry once the body began. */
static void check_cut(const char *whole, size_t len, size_t keep, size_t body_at)
{
    unsigned char *b = malloc(keep ? keep : 1);
    pn_message_t *msg = pn_message();
    sb_peek_page_t pg;
    ib_error_t err;
    size_t m;
    memcpy(b, whole, keep);
    m = sb_peek_answer_cut(b, keep);
    ASSERT_TRUE(m <= keep);
    ASSERT_EQ(keep == len, m == len);
    if (m > 0)
        ASSERT_EQ(pn_message_decode(msg, (const char *)b, m), 0);
    if (keep >= body_at) {
        ASSERT_EQ(sb_peek_page_read(pn_message_body(msg), &pg, &err), IB_E_OK);
        ASSERT_EQ(pg.n, 1);
        ASSERT_EQ(pg.msgs[0]->sequence_number, 7);
        ASSERT_EQ(pg.msgs[0]->enqueued_ms, 1700000000123LL);
        ASSERT_TRUE(pg.msgs[0]->body_len <= keep);
        for (size_t i = 0; i < pg.msgs[0]->body_len; i++)
            ASSERT_EQ(pg.msgs[0]->body[i], 'a' + i % 26);
        sb_peek_page_clear(&pg);
    }
    pn_message_free(msg);
    free(b);
}

/* Where the inner message's data section starts in an answer (its descriptor). */
static size_t data_at(const char *a, size_t len)
{
    for (size_t i = len; i-- > 3;)
        if (a[i - 3] == 0x00 && a[i - 2] == 0x53 && a[i - 1] == 0x75 && (unsigned char)a[i] == 0xb0)
            return i - 3;
    return len;
}

static void test_answer_cut(void)
{
    char *a;
    size_t len, at;
    answer_message(300, &a, &len);
    at = data_at(a, len);
    ASSERT_TRUE(at < len);
    for (size_t keep = 0; keep <= len; keep++) /* every cut, within the body and before it */
        check_cut(a, len, keep, at);
    free(a);

    /* 1 MiB body, 64 KiB kept: the properties whole, a body of what was kept. */
    answer_message(1u << 20, &a, &len);
    at = data_at(a, len);
    check_cut(a, len, 64u << 10, at);
    check_cut(a, len, len, at);
    free(a);
}

/* One step of w over an answer v; the highest sequence number handed out is computed here. */
static sb_peek_step_t step(sb_peek_walk_t *w, const long long *v, size_t n)
{
    sb_peek_page_t pg;
    long long top = -1;
    sb_peek_step_t st;
    read_answer(v, n, &pg);
    for (size_t i = 0; i < pg.n; i++)
        if (pg.msgs[i]->sequence_number > top)
            top = pg.msgs[i]->sequence_number;
    st = sb_peek_walk_step(w, &pg, top);
    sb_peek_page_clear(&pg);
    return st;
}

static void test_walk_pages_past_unreadable(void)
{
    sb_peek_walk_t w = {1, 3, 3, 0, 0};
    /* 1, two unreadable, 4: on from 5; the lead pair counted. */
    ASSERT_EQ(step(&w, (const long long[]){1, -2, -1, 4}, 4), SB_PEEK_MORE);
    ASSERT_EQ(w.from, 5);
    ASSERT_EQ(w.unreadable, 2);
    /* A page of unreadable entries only: asked again from 5, twice the count, nothing counted yet.
     */
    ASSERT_EQ(step(&w, (const long long[]){-2, -2, -2}, 3), SB_PEEK_MORE);
    ASSERT_EQ(w.from, 5);
    ASSERT_EQ(w.count, 6);
    ASSERT_EQ(w.unreadable, 2);
    /* The larger answer reaches 12 past them: counted once, on from 13 with pages of 3 again. */
    ASSERT_EQ(step(&w, (const long long[]){-2, -2, -2, 12, -1}, 5), SB_PEEK_MORE);
    ASSERT_EQ(w.from, 13);
    ASSERT_EQ(w.count, 3);
    ASSERT_EQ(w.unreadable, 5);
    /* The trailing one comes first in the next page and ends the entity: asked again, then counted.
     */
    ASSERT_EQ(step(&w, (const long long[]){-1}, 1), SB_PEEK_MORE);
    ASSERT_EQ(w.count, 6);
    ASSERT_EQ(step(&w, (const long long[]){-1}, 1), SB_PEEK_END);
    ASSERT_EQ(w.unreadable, 6);
    /* An empty answer ends it. */
    ASSERT_EQ(step(&w, NULL, 0), SB_PEEK_END);
    ASSERT_EQ(w.unreadable, 6);
}

static void test_walk_stuck(void)
{
    long long *v = malloc(SB_PEEK_COUNT_MAX * sizeof(*v));
    sb_peek_walk_t w = {7, 500, 500, 0, 0};
    /* Readable entries that do not get past from. */
    ASSERT_EQ(step(&w, (const long long[]){3, 6}, 2), SB_PEEK_STUCK);
    /* SB_PEEK_COUNT_MAX unreadable entries at the largest count. */
    for (size_t i = 0; i < SB_PEEK_COUNT_MAX; i++)
        v[i] = -2;
    ASSERT_EQ(step(&w, v, 500), SB_PEEK_MORE);
    ASSERT_EQ(w.count, SB_PEEK_COUNT_MAX);
    ASSERT_EQ(step(&w, v, SB_PEEK_COUNT_MAX), SB_PEEK_STUCK);
    ASSERT_EQ(w.unreadable, SB_PEEK_COUNT_MAX);
    free(v);
}

int main(void)
{
    RUN(test_page_read);
    RUN(test_answer_cut);
    RUN(test_walk_pages_past_unreadable);
    RUN(test_walk_stuck);
    return ib_test_done();
}
