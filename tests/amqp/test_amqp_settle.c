/*
 * Receive and settle against sbemu: complete, abandon, dead-letter with a
 * reason, defer; credit bounds. Every outcome is checked in the broker's
 * stats file or by peeking the dead-letter queue, not by the client's view.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology =
    "{\"queues\":[{\"name\":\"orders\",\"lock_duration_s\":5,\"max_delivery_count\":5},"
    "{\"name\":\"bulk\",\"lock_duration_s\":30,\"max_delivery_count\":5},"
    "{\"name\":\"big\",\"lock_duration_s\":30,\"max_delivery_count\":5}]}";

static sb_client_t *start(sbt_emu_t *emu, const char *entity, unsigned prefetch, unsigned mcc,
                          sbt_rx_t *rx)
{
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sbt_options(emu, entity, &opt);
    opt.prefetch = prefetch;
    opt.max_concurrent_calls = mcc;
    sbt_callbacks(rx, &cb);
    c = sbt_client_start(&opt, &cb);
    ASSERT_TRUE(sbt_wait_ready(rx, 10000));
    return c;
}

static void test_outcomes(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, 10000, 0, 0};
    sb_sender_t *s;
    sb_msg_t **peeked;
    size_t npeek;
    ib_error_t err;
    long long now = ib_now_ms();
    const sb_prop_t *p;

    sbt_send(emu, "orders", "m", 4, NULL);
    ASSERT_EQ(sbt_wait_stat(emu, "orders", "active", 4, 5000), 4);
    sbt_rx_init(&rx);
    c = start(emu, "orders", 0, 1, &rx);

    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "m-0");
    ASSERT_EQ(msg->decode_err.code, IB_E_OK);
    ASSERT_STREQ(msg->subject, "test");
    ASSERT_EQ(msg->body_len, 7);
    ASSERT_EQ(memcmp(msg->body, "{\"n\":0}", 7), 0);
    ASSERT_TRUE((p = sb_msg_prop(msg, "kind")));
    ASSERT_EQ(p->type, SB_PROP_STRING);
    ASSERT_STREQ(p->str, "test");
    ASSERT_EQ(strlen(msg->lock_token), 36);
    ASSERT_EQ(msg->delivery_count, 1);
    ASSERT_GE(msg->sequence_number, 1);
    ASSERT_GT(msg->enqueued_ms, now - 60000);
    ASSERT_LE(msg->enqueued_ms, ib_now_ms() + 1000);
    ASSERT_GT(msg->locked_until_ms, ib_now_ms());
    /* Broker view: exactly one locked (prefetch 0, one call). */
    ASSERT_EQ(sbt_wait_stat(emu, "orders", "locked", 1, 3000), 1);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.settled_ok, 1);

    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "m-1");
    sb_client_settle(c, msg, SB_ABANDON, NULL, NULL);
    /* The abandon on its way frees the slot at once, so m-2 may come before
     * m-1 is back (the broker may take the new credit before the abandon). */
    for (int k = 0; k < 2; k++) {
        msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        if (strcmp(msg->message_id, "m-1") == 0) {
            ASSERT_EQ(msg->delivery_count, 2); /* back at once, counted */
            sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
        } else {
            ASSERT_STREQ(msg->message_id, "m-2");
            sb_client_settle(c, msg, SB_DEADLETTER, "BadOrder", "the order has no lines");
        }
    }

    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "m-3");
    sb_client_settle(c, msg, SB_DEFER, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 5, 5000));
    ASSERT_EQ(rx.settled_ok, 5);

    /* The broker's state (the stats file is one snapshot: wait for the last change). */
    ASSERT_EQ(sbt_wait_stat(emu, "orders", "deferred", 1, 3000), 1);
    ASSERT_EQ(sbt_stat(emu, "orders", "completed"), 2);
    ASSERT_EQ(sbt_stat(emu, "orders", "abandoned"), 1);
    ASSERT_EQ(sbt_stat(emu, "orders", "dead_lettered"), 1);
    ASSERT_EQ(sbt_stat_reason(emu, "orders", "BadOrder"), 1);
    ASSERT_EQ(sbt_stat(emu, "orders", "active"), 0);
    ASSERT_EQ(sbt_stat(emu, "orders", "locked"), 0);

    /* The DLQ through $management peek. */
    s = sb_sender_open(&so, &err);
    ASSERT_TRUE(s);
    ASSERT_EQ(sb_sender_peek(s, "orders/$DeadLetterQueue", 1, 10, &peeked, &npeek, &err), IB_E_OK);
    ASSERT_EQ(npeek, 1);
    ASSERT_STREQ(peeked[0]->message_id, "m-2");
    ASSERT_TRUE(peeked[0]->dead_letter_reason);
    ASSERT_STREQ(peeked[0]->dead_letter_reason, "BadOrder");
    ASSERT_TRUE(peeked[0]->dead_letter_description);
    ASSERT_STREQ(peeked[0]->dead_letter_description, "the order has no lines");
    ASSERT_EQ(peeked[0]->body_len, 7);
    sb_peek_free(peeked, npeek);
    /* The active queue holds only the deferred message now. */
    ASSERT_EQ(sb_sender_peek(s, "orders", 1, 10, &peeked, &npeek, &err), IB_E_OK);
    ASSERT_EQ(npeek, 1);
    ASSERT_STREQ(peeked[0]->message_id, "m-3");
    sb_peek_free(peeked, npeek);
    sb_sender_close(s);

    sb_client_stop(c);
    sb_client_free(c);
    ASSERT_EQ(rx.shutdown, 0);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   outcomes\n");
}

/* prefetch 5 + 3 calls: the broker never has more than 8 locked for us
 * while the worker holds them. */
static void test_credit(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *held[64];
    int nh = 0, done = 0;
    sb_stats_t st;

    sbt_send(emu, "bulk", "b", 30, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "bulk", 5, 3, &rx);
    usleep((useconds_t)sbt_ms(1500) * 1000);
    ASSERT_EQ(sbt_wait_stat(emu, "bulk", "locked", 8, 3000), 8);
    sb_client_stats(c, &st);
    ASSERT_EQ(st.in_flight, 3);
    ASSERT_EQ(st.buffered, 5);
    pthread_mutex_lock(&rx.mu);
    ASSERT_EQ(rx.received, 3);
    pthread_mutex_unlock(&rx.mu);
    while (done < 30) {
        sb_msg_t *msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        held[nh++] = msg;
        /* Handed to the worker and not yet given back: never more than the 3
         * calls (a settlement on its way no longer holds a slot). */
        pthread_mutex_lock(&rx.mu);
        int holding = rx.received - done;
        pthread_mutex_unlock(&rx.mu);
        ASSERT_LE(holding, 3);
        if (nh == 3 || done + nh == 30) {
            for (int k = 0; k < nh; k++)
                sb_client_settle(c, held[k], SB_COMPLETE, NULL, NULL);
            done += nh;
            nh = 0;
        }
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 30, 10000));
    ASSERT_EQ(rx.settled_ok, 30);
    ASSERT_EQ(sbt_wait_stat(emu, "bulk", "completed", 30, 3000), 30);
    ASSERT_EQ(sbt_stat(emu, "bulk", "active"), 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   credit\n");
}

/* Sends n messages of size bytes each to entity. */
static void send_big(sbt_emu_t *emu, const char *entity, int n, size_t size)
{
    sb_sender_options_t so = {emu->connstr, NULL, NULL, NULL, (unsigned)sbt_ms(10000), 0, 0};
    ib_error_t err;
    sb_sender_t *s = sb_sender_open(&so, &err);
    char *body = malloc(size);
    ASSERT_TRUE(s && body);
    memset(body, 'x', size);
    for (int i = 0; i < n; i++) {
        char id[32];
        sb_out_msg_t m = {0};
        snprintf(id, sizeof(id), "big-%d", i);
        m.message_id = id;
        m.body = body;
        m.body_len = size;
        ASSERT_EQ(sb_sender_send(s, entity, &m, 1, &err), IB_E_OK);
    }
    sb_sender_close(s);
    free(body);
}

/* A byte budget of 1 MiB with messages of 100 KiB (each counted twice: the
 * delivery's bytes and the decoded message): a window of 40 by count
 * (prefetch 20 + 20 calls) holds at most five at once, and every message
 * still arrives once the worker settles what it holds. */
static void test_credit_bytes(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    int done = 0;

    send_big(emu, "big", 20, 100 * 1024);
    sbt_rx_init(&rx);
    sbt_options(emu, "big", &opt);
    opt.prefetch = 20;
    opt.max_concurrent_calls = 20;
    opt.max_held_bytes = 1024 * 1024;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    ASSERT_TRUE(sbt_wait_ready(&rx, 10000));
    usleep((useconds_t)sbt_ms(1500) * 1000);
    {
        long long locked = sbt_stat(emu, "big", "locked");
        fprintf(stderr, "     locked with a 1 MiB budget: %lld of 20\n", locked);
        ASSERT_TRUE(locked >= 1 && locked <= 5);
    }
    while (done < 20) {
        sb_msg_t *msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        ASSERT_EQ(msg->body_len, (size_t)100 * 1024);
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
        done++;
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 20, 10000));
    ASSERT_EQ(sbt_wait_stat(emu, "big", "completed", 20, 3000), 20);
    ASSERT_EQ(sbt_stat(emu, "big", "active"), 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   credit by bytes\n");
}

int main(void)
{
    sbt_emu_t emu;
    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_WARN);
    sbt_emu_start(&emu, topology, NULL);
    test_outcomes(&emu);
    test_credit(&emu);
    test_credit_bytes(&emu);
    sbt_emu_stop(&emu);
    return 0;
}
