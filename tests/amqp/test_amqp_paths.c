/*
 * Less travelled paths against sbemu, each checked on the broker:
 *  - a topic subscription as the entity;
 *  - abandon and dead-letter with properties to modify;
 *  - settling after the link is gone ($management update-disposition);
 *  - stop with messages buffered and held (released, IB_E_SHUTDOWN);
 *  - a wrong SAS key (IB_E_AUTH) and tokens refreshed before they expire;
 *  - sb_sender_peek_each: a walk over several pages, a callback that stops
 *    it mid-page, a start past the end, a missing entity;
 *  - a peek that keeps only the first bytes of its answer (answer_keep): the
 *    head's properties whole, its body cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology =
    "{\"queues\":[{\"name\":\"q2\",\"lock_duration_s\":5,\"max_delivery_count\":5},"
    "{\"name\":\"q3\",\"lock_duration_s\":10,\"max_delivery_count\":5},"
    "{\"name\":\"q4\",\"lock_duration_s\":10,\"max_delivery_count\":5},"
    "{\"name\":\"q5\",\"lock_duration_s\":5,\"max_delivery_count\":5},"
    "{\"name\":\"q6\",\"lock_duration_s\":5,\"max_delivery_count\":5},"
    "{\"name\":\"q7\",\"lock_duration_s\":5,\"max_delivery_count\":5}],"
    "\"topics\":[{\"name\":\"events\",\"subscriptions\":[{\"name\":\"audit\",\"lock_duration_s\":5}"
    ","
    "{\"name\":\"billing\",\"lock_duration_s\":5}]}]}";

static sb_client_t *start_opt(sb_options_t *opt, sbt_rx_t *rx, bool wait_ready)
{
    sb_callbacks_t cb;
    sb_client_t *c;
    sbt_callbacks(rx, &cb);
    c = sbt_client_start(opt, &cb);
    if (wait_ready)
        ASSERT_TRUE(sbt_wait_ready(rx, 10000));
    return c;
}

static sb_client_t *start(sbt_emu_t *emu, const char *entity, unsigned prefetch, sbt_rx_t *rx)
{
    sb_options_t opt;
    sbt_options(emu, entity, &opt);
    opt.prefetch = prefetch;
    return start_opt(&opt, rx, true);
}

static void finish(sb_client_t *c, sbt_rx_t *rx)
{
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(rx);
}

static sb_msg_t **peek(sbt_emu_t *emu, const char *entity, size_t *n)
{
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, 10000, 0, 0};
    ib_error_t err;
    sb_sender_t *s = sb_sender_open(&so, &err);
    sb_msg_t **out;
    ASSERT_TRUE(s);
    ASSERT_EQ(sb_sender_peek(s, entity, 1, 50, &out, n, &err), IB_E_OK);
    sb_sender_close(s);
    return out;
}

static void test_subscription(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sbt_send(emu, "events", "e", 2, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "events/Subscriptions/audit", 0, &rx);
    for (int k = 0; k < 2; k++) {
        msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 5000));
    ASSERT_EQ(rx.settled_ok, 2);
    ASSERT_EQ(sbt_wait_stat(emu, "events/Subscriptions/audit", "completed", 2, 3000), 2);
    ASSERT_EQ(sbt_stat(emu, "events/Subscriptions/audit", "active"), 0);
    ASSERT_EQ(sbt_stat(emu, "events/Subscriptions/billing", "active"), 2); /* untouched */
    finish(c, &rx);
    fprintf(stderr, "ok   subscription\n");
}

static void test_modify(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg, **dl;
    size_t n;
    const sb_prop_t *p;
    sb_prop_t mod1[2] = {{"attempt", SB_PROP_INT64, NULL, 1, 0},
                         {"note", SB_PROP_STRING, "retry", 0, 0}};
    sb_prop_t mod2[1] = {{"stage", SB_PROP_STRING, "final", 0, 0}};

    sbt_send(emu, "q2", "p", 1, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "q2", 0, &rx);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_TRUE(!sb_msg_prop(msg, "attempt"));
    sb_client_settle_props(c, msg, SB_ABANDON, NULL, NULL, mod1, 2);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_EQ(msg->delivery_count, 2);
    ASSERT_TRUE((p = sb_msg_prop(msg, "attempt")));
    ASSERT_EQ(p->type, SB_PROP_INT64);
    ASSERT_EQ(p->i, 1);
    ASSERT_TRUE((p = sb_msg_prop(msg, "note")));
    ASSERT_EQ(p->type, SB_PROP_STRING);
    ASSERT_STREQ(p->str, "retry");
    sb_client_settle_props(c, msg, SB_DEADLETTER, "Poison", "cannot parse", mod2, 1);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 5000));
    ASSERT_EQ(rx.settled_ok, 2);
    ASSERT_EQ(sbt_wait_stat(emu, "q2", "dead_lettered", 1, 3000), 1);
    dl = peek(emu, "q2/$DeadLetterQueue", &n);
    ASSERT_EQ(n, 1);
    ASSERT_TRUE(dl[0]->dead_letter_reason);
    ASSERT_STREQ(dl[0]->dead_letter_reason, "Poison");
    ASSERT_TRUE((p = sb_msg_prop(dl[0], "stage")));
    ASSERT_STREQ(p->str, "final");
    ASSERT_TRUE((p = sb_msg_prop(dl[0], "note")));
    ASSERT_STREQ(p->str, "retry");
    sb_peek_free(dl, n);
    finish(c, &rx);

    /* The dead-letter queue is an entity like any other; long reasons are cut to 4096 bytes. */
    {
        char big[10000];
        memset(big, 'r', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        sbt_send(emu, "q2", "big", 1, NULL);
        sbt_rx_init(&rx);
        c = start(emu, "q2", 0, &rx);
        msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        sb_client_settle(c, msg, SB_DEADLETTER, big, big);
        ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
        ASSERT_EQ(rx.settled_ok, 1);
        finish(c, &rx);
        sbt_rx_init(&rx);
        c = start(emu, "q2/$DeadLetterQueue", 0, &rx);
        for (int k = 0; k < 2; k++) {
            msg = sbt_take(&rx, 5000);
            ASSERT_TRUE(msg);
            ASSERT_TRUE(msg->dead_letter_reason);
            /*
             * sbemu keeps at most 255 bytes of a reason and 1023 of a
             * description (its own buffers, smaller than the service's),
             * so only "accepted and stored, cut, not garbled" is checked.
             */
            if (strcmp(msg->message_id, "big-0") == 0)
                ASSERT_TRUE(strlen(msg->dead_letter_reason) > 0 &&
                            strlen(msg->dead_letter_reason) <= 4096 &&
                            strspn(msg->dead_letter_reason, "r") ==
                                strlen(msg->dead_letter_reason) &&
                            strlen(msg->dead_letter_description) <= 4096);
            sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
        }
        ASSERT_TRUE(sbt_wait_settled(&rx, 2, 5000));
        ASSERT_EQ(rx.settled_ok, 2);
        finish(c, &rx);
        ASSERT_EQ(sbt_wait_stat(emu, "q2/$DeadLetterQueue", "completed", 2, 3000), 2);
        ASSERT_EQ(sbt_stat(emu, "q2/$DeadLetterQueue", "active"), 0);
    }
    fprintf(stderr, "ok   modify\n");
}

/* What a walk handed out: message ids and sequence numbers, in order. */
typedef struct walk {
    int n, stop_after; /* stop_after 0: never stop */
    char ids[16][32];
    long long seqs[16];
} walk_t;

static bool walk_each(const sb_msg_t *m, void *arg)
{
    walk_t *w = arg;
    ASSERT_LT(w->n, 16);
    snprintf(w->ids[w->n], sizeof w->ids[0], "%s", m->message_id ? m->message_id : "(none)");
    w->seqs[w->n++] = m->sequence_number;
    return w->stop_after == 0 || w->n < w->stop_after;
}

static void test_peek_each(sbt_emu_t *emu)
{
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, 10000, 0, 0};
    ib_error_t err;
    sb_sender_t *s = sb_sender_open(&so, &err);
    walk_t w;
    long long fifth, unreadable = -1;
    char want[32];
    ASSERT_TRUE(s);
    sbt_send(emu, "q6", "w", 7, NULL);

    /* Pages of 3, 3, 1, then the empty one: all seven, once each, in order. */
    memset(&w, 0, sizeof w);
    ASSERT_EQ(sb_sender_peek_each(s, "q6", 1, 3, walk_each, &w, &unreadable, &err), IB_E_OK);
    ASSERT_EQ(w.n, 7);
    ASSERT_EQ(unreadable, 0);
    for (int i = 0; i < 7; i++) {
        snprintf(want, sizeof want, "w-%d", i);
        ASSERT_STREQ(w.ids[i], want);
        if (i)
            ASSERT_GT(w.seqs[i], w.seqs[i - 1]);
    }
    fifth = w.seqs[4];

    /* Stopped on the fourth, the first of the second page: nothing after it. */
    memset(&w, 0, sizeof w);
    w.stop_after = 4;
    ASSERT_EQ(sb_sender_peek_each(s, "q6", 1, 3, walk_each, &w, &unreadable, &err), IB_E_OK);
    ASSERT_EQ(w.n, 4);
    ASSERT_STREQ(w.ids[3], "w-3");

    /* From the fifth's sequence number; then from past the last: nothing, no error. */
    memset(&w, 0, sizeof w);
    ASSERT_EQ(sb_sender_peek_each(s, "q6", fifth, 2, walk_each, &w, &unreadable, &err), IB_E_OK);
    ASSERT_EQ(w.n, 3);
    ASSERT_STREQ(w.ids[0], "w-4");
    ASSERT_STREQ(w.ids[2], "w-6");
    memset(&w, 0, sizeof w);
    ASSERT_EQ(sb_sender_peek_each(s, "q6", fifth + 1000, 3, walk_each, &w, &unreadable, &err),
              IB_E_OK);
    ASSERT_EQ(w.n, 0);

    /* A missing entity fails with the peek's own error; a page of 0 is refused. */
    ASSERT_NE(sb_sender_peek_each(s, "nope", 1, 3, walk_each, &w, &unreadable, &err), IB_E_OK);
    ASSERT_NE(err.code, IB_E_OK);
    ASSERT_TRUE(err.text[0]);
    ASSERT_EQ(sb_sender_peek_each(s, "q6", 1, 0, walk_each, &w, &unreadable, &err), IB_E_INVAL);
    ASSERT_EQ(sb_sender_peek_each(s, "q6", 1, 3, walk_each, &w, NULL, &err), IB_E_INVAL);
    ASSERT_EQ(w.n, 0);
    ASSERT_EQ(sbt_wait_stat(emu, "q6", "active", 7, 3000), 7); /* peeking took nothing */
    sb_sender_close(s);
    fprintf(stderr, "ok   peek_each\n");
}

/* A 200 KiB head peeked keeping 16 KiB of the answer: its properties, a body cut short. */
static void test_peek_kept(sbt_emu_t *emu)
{
    enum { BIG = 200 << 10, KEEP = 16 << 10 };
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, 10000, KEEP, 0};
    char *body = malloc(BIG);
    sb_out_msg_t m = {.message_id = "big", .subject = "Big", .body = body, .body_len = BIG};
    sb_msg_t **out;
    size_t n;
    ib_error_t err;
    sb_sender_t *s;
    ASSERT_TRUE(body);
    for (size_t i = 0; i < BIG; i++)
        body[i] = (char)('a' + i % 26);
    s = sb_sender_open(&so, &err);
    ASSERT_TRUE(s);
    ASSERT_EQ(sb_sender_send(s, "q7", &m, 1, &err), IB_E_OK);
    for (int round = 0; round < 2; round++) { /* twice on one connection */
        ASSERT_EQ(sb_sender_peek(s, "q7", 1, 1, &out, &n, &err), IB_E_OK);
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(out[0]->message_id, "big");
        ASSERT_STREQ(out[0]->subject, "Big");
        ASSERT_GT(out[0]->sequence_number, 0);
        ASSERT_GT(out[0]->enqueued_ms, 0);
        ASSERT_GT(out[0]->body_len, 0);
        ASSERT_LT(out[0]->body_len, KEEP);
        ASSERT_TRUE(memcmp(out[0]->body, body, out[0]->body_len) == 0);
        sb_peek_free(out, n);
    }
    sb_sender_close(s);
    out = peek(emu, "q7", &n); /* whole without answer_keep */
    ASSERT_EQ(n, 1);
    ASSERT_EQ(out[0]->body_len, BIG);
    sb_peek_free(out, n);
    free(body);
    fprintf(stderr, "ok   peek_kept\n");
}

/* The connection drops right after the delivery: settlement goes through $management. */
static void test_settle_after_link_loss(void)
{
    static const char *const faults[] = {"--fault-drop-after", "1", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *a, *b, **dl;
    size_t n;
    long long end;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "q3", "l", 2, NULL);
    sbt_rx_init(&rx);
    c = start(&emu, "q3", 0, &rx);
    a = sbt_take(&rx, 5000);
    ASSERT_TRUE(a);
    end = ib_mono_ms() + sbt_ms(5000);
    while (rx.lock_lost < 1 && ib_mono_ms() < end)
        usleep(20 * 1000);
    ASSERT_EQ(rx.lock_lost, 1);
    /* The worker holds a: credit stays at zero, nothing else is delivered. */
    ASSERT_EQ(sbt_take(&rx, 500), NULL);
    sb_client_settle(c, a, SB_DEADLETTER, "LostLink", "settled via management");
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 10000));
    ASSERT_EQ(rx.settled_ok, 1);
    b = sbt_take(&rx, 5000); /* delivered on a new connection, which drops again */
    ASSERT_TRUE(b);
    end = ib_mono_ms() + sbt_ms(5000);
    while (rx.lock_lost < 2 && ib_mono_ms() < end)
        usleep(20 * 1000);
    ASSERT_EQ(rx.lock_lost, 2);
    sb_client_settle(c, b, SB_RELEASE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 10000));
    ASSERT_EQ(rx.settled_ok, 1);
    ASSERT_EQ(rx.results[IB_E_DETACHED], 1); /* release has no $management form */
    ASSERT_EQ(sbt_wait_stat(&emu, "q3", "dead_lettered", 1, 3000), 1);
    ASSERT_EQ(sbt_stat_reason(&emu, "q3", "LostLink"), 1);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    dl = peek(&emu, "q3/$DeadLetterQueue", &n);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(dl[0]->message_id, "l-0");
    ASSERT_STREQ(dl[0]->dead_letter_description, "settled via management");
    sb_peek_free(dl, n);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   settle_after_link_loss\n");
}

static void test_stop_releases(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sbt_send(emu, "q4", "s", 3, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "q4", 2, &rx);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_EQ(sbt_wait_stat(emu, "q4", "locked", 3, 3000), 3);
    sb_client_stop_receiving(c);
    sb_client_stop(c);
    ASSERT_EQ(rx.shutdown, 1);
    ASSERT_EQ(rx.settled, 1);
    /* Held and never settled: reported released (as it was), not complete. */
    ASSERT_EQ(rx.shutdown_completes, 0);
    /* The worker's settle after stop is ignored. */
    sb_client_free(c);
    ASSERT_EQ(sbt_wait_stat(emu, "q4", "active", 3, 3000), 3);
    ASSERT_EQ(sbt_stat(emu, "q4", "locked"), 0);
    ASSERT_EQ(sbt_stat(emu, "q4", "released"), 3);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   stop_releases\n");
}

static void test_wrong_key(sbt_emu_t *emu)
{
    char cs[512];
    sb_sender_options_t so;
    sb_sender_t *s;
    ib_error_t err;
    sb_out_msg_t m;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_client_t *c;
    sb_stats_t st;

    snprintf(cs, sizeof(cs),
             "Endpoint=sb://127.0.0.1:%d/;SharedAccessKeyName=tester;SharedAccessKey=wrong;"
             "UseDevelopmentEmulator=true",
             emu->port);
    so = (sb_sender_options_t){cs, NULL, NULL, NULL, 5000, 0, 0};
    s = sb_sender_open(&so, &err);
    ASSERT_TRUE(s);
    memset(&m, 0, sizeof(m));
    m.message_id = "nope";
    ASSERT_EQ(sb_sender_send(s, "q5", &m, 1, &err), IB_E_AUTH);
    sb_sender_close(s);

    sbt_rx_init(&rx);
    sbt_options(emu, "q5", &opt);
    opt.connection_string = cs;
    c = start_opt(&opt, &rx, false);
    /* A first put-token refused is put again a few times (sb_cbs.c) before the link hears. */
    for (long long end = ib_mono_ms() + sbt_ms(5000); rx.last_why != IB_E_AUTH && ib_mono_ms() < end;)
        usleep(20000);
    sb_client_stats(c, &st);
    ASSERT_TRUE(!rx.ready);
    ASSERT_EQ(st.connected, 0);
    ASSERT_EQ(st.links, 0);
    ASSERT_EQ(rx.last_why, IB_E_AUTH);
    finish(c, &rx);

    /* No credential and no token provider: refused before connecting. */
    {
        sb_options_t bare;
        sb_callbacks_t bcb;
        memset(&bare, 0, sizeof(bare));
        bare.connection_string = "Endpoint=sb://127.0.0.1:1/;UseDevelopmentEmulator=true";
        bare.entity = "q5";
        sbt_callbacks(&rx, &bcb);
        ASSERT_EQ(sb_client_new(&bare, &bcb, &err), NULL);
        ASSERT_EQ(err.code, IB_E_CONFIG);
    }

    /* An entity that does not exist: not ready, and the reason says so. */
    sbt_rx_init(&rx);
    sbt_options(emu, "nope", &opt);
    c = start_opt(&opt, &rx, false);
    usleep((useconds_t)sbt_ms(1500) * 1000);
    ASSERT_TRUE(!rx.ready);
    ASSERT_EQ(rx.last_why, IB_E_NOTFOUND);
    finish(c, &rx);
    sbt_stat_fresh(emu, sbt_stat_seq(emu)); /* every refused send is behind us */
    ASSERT_EQ(sbt_stat(emu, "q5", "sent"), 0);
    fprintf(stderr, "ok   wrong_key_and_missing_entity\n");
}

/* Tokens that live 8 s: the client puts fresh ones well before they expire. */
typedef struct short_tokens {
    sb_connstr_t cs;
    int calls;
    pthread_mutex_t mu;
} short_tokens_t;

static ib_err_t short_token(void *ctx, const char *audience, sb_token_t *out, ib_error_t *err)
{
    short_tokens_t *t = ctx;
    long long exp = ib_now_ms() / 1000 + 8;
    (void)err;
    pthread_mutex_lock(&t->mu);
    t->calls++;
    pthread_mutex_unlock(&t->mu);
    out->token = sb_sas_token(audience, t->cs.key_name, t->cs.key, exp);
    out->type = SB_TOKEN_TYPE_SAS;
    out->expires_at_ms = exp * 1000;
    return IB_E_OK;
}

static void test_token_refresh(sbt_emu_t *emu)
{
    short_tokens_t t;
    ib_error_t err;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_client_t *c;
    sb_msg_t *msg;
    int calls;

    memset(&t, 0, sizeof(t));
    pthread_mutex_init(&t.mu, NULL);
    ASSERT_EQ(sb_connstr_parse(emu->connstr, &t.cs, &err), IB_E_OK);
    sbt_rx_init(&rx);
    sbt_options(emu, "q5", &opt);
    opt.token_get = short_token;
    opt.token_ctx = &t;
    c = start_opt(&opt, &rx, true);
    usleep(10000 * 1000); /* past the first token's expiry */
    sbt_send(emu, "q5", "t", 1, NULL);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.settled_ok, 1);
    ASSERT_EQ(sbt_wait_stat(emu, "q5", "completed", 1, 3000), 1);
    pthread_mutex_lock(&t.mu);
    calls = t.calls;
    pthread_mutex_unlock(&t.mu);
    fprintf(stderr, "token calls: %d\n", calls);
    ASSERT_GE(calls, 3); /* the first put and a refresh every ~4 s (half of 8 s) */
    finish(c, &rx);
    sb_connstr_free(&t.cs);
    pthread_mutex_destroy(&t.mu);
    fprintf(stderr, "ok   token_refresh\n");
}

/*
 * The broker applies a completion but its answer never comes: the next
 * message is handed out meanwhile (no worker slot is held), and after
 * settle_timeout_ms the link is recycled and the outcome reported as
 * IB_E_SETTLE_UNKNOWN (asked again through $management, the broker no longer
 * knows the lock: it had completed it), never as a lost lock.
 */
static void test_settle_reply_lost(void)
{
    static const char *const faults[] = {"--fault-drop-settle-reply", "1", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_client_t *c;
    sb_msg_t *msg;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "q5", "d", 2, NULL);
    sbt_rx_init(&rx);
    sbt_options(&emu, "q5", &opt);
    opt.max_concurrent_calls = 1;
    opt.settle_timeout_ms = 1500;
    c = start_opt(&opt, &rx, true);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "d-0");
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    msg = sbt_take(&rx, 1000); /* handed out while d-0's answer is still awaited */
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "d-1");
    ASSERT_EQ(rx.settled, 0);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 8000));
    ASSERT_EQ(rx.settled_ok, 1);
    ASSERT_EQ(rx.results[IB_E_SETTLE_UNKNOWN], 1);
    ASSERT_EQ(rx.results[IB_E_LOCK_LOST], 0);
    sb_stats_t st;
    sb_client_stats(c, &st);
    ASSERT_EQ(st.link_recycles, 1);
    finish(c, &rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "q5", "completed", 2, 3000), 2);
    ASSERT_EQ(sbt_stat(&emu, "q5", "active"), 0);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   settle_reply_lost\n");
}

/* A peer that accepts TCP but never speaks AMQP: the attempt times out and is retried. */
static void test_connect_timeout(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    char cs[256];
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_stats_t st;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ASSERT_EQ(listen(fd, 8), 0);
    ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    port = ntohs(a.sin_port);
    snprintf(cs, sizeof(cs),
             "Endpoint=sb://127.0.0.1:%d/;SharedAccessKeyName=k;SharedAccessKey=v;"
             "UseDevelopmentEmulator=true",
             port);
    sbt_rx_init(&rx);
    memset(&opt, 0, sizeof(opt));
    opt.connection_string = cs;
    opt.entity = "q";
    opt.op_timeout_ms = 700;
    opt.reconnect_max_ms = 200;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    usleep((useconds_t)sbt_ms(2500) * 1000);
    sb_client_stats(c, &st);
    ASSERT_TRUE(!rx.ready);
    ASSERT_EQ(rx.last_why, IB_E_TIMEOUT);
    ASSERT_GE(st.reconnects, 1);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    close(fd);
    fprintf(stderr, "ok   connect_timeout\n");
}

int main(void)
{
    sbt_emu_t emu;
    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_OFF);
    sbt_emu_start(&emu, topology, NULL);
    test_subscription(&emu);
    test_modify(&emu);
    test_stop_releases(&emu);
    test_wrong_key(&emu);
    test_token_refresh(&emu);
    test_peek_each(&emu);
    test_peek_kept(&emu);
    sbt_emu_stop(&emu);
    test_settle_after_link_loss();
    test_settle_reply_lost();
    test_connect_timeout();
    return 0;
}
