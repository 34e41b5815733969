/*
 * Lock renewal against sbemu (lock duration 2 s):
 *  - a handler held for 3x the lock duration keeps its lock and completes once;
 *  - buffered (prefetched) messages are renewed too and are not redelivered;
 *  - with renewals refused by fault injection the message is reported
 *    lock-lost, its settlement fails with IB_E_LOCK_LOST, and it comes back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology =
    "{\"queues\":[{\"name\":\"slow\",\"lock_duration_s\":2,\"max_delivery_count\":10},"
    "{\"name\":\"pre\",\"lock_duration_s\":2,\"max_delivery_count\":10},"
    "{\"name\":\"exp\",\"lock_duration_s\":2,\"max_delivery_count\":10}]}";

static sb_client_t *start(sbt_emu_t *emu, const char *entity, unsigned prefetch, sbt_rx_t *rx)
{
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sbt_options(emu, entity, &opt);
    opt.prefetch = prefetch;
    opt.max_auto_lock_renewal_s = 60;
    sbt_callbacks(rx, &cb);
    c = sbt_client_start(&opt, &cb);
    ASSERT_TRUE(sbt_wait_ready(rx, 10000));
    return c;
}

static void test_held_3x(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_send(emu, "slow", "h", 1, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "slow", 0, &rx);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    usleep(6000 * 1000); /* 3x the lock duration (not scaled: the broker's clock) */
    ASSERT_EQ(rx.lock_lost, 0);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.settled_ok, 1);
    sb_client_stats(c, &st);
    ASSERT_GE(st.renewals_ok, 3);
    ASSERT_EQ(st.lock_lost, 0);
    ASSERT_EQ(sbt_wait_stat(emu, "slow", "completed", 1, 3000), 1);
    ASSERT_EQ(sbt_stat(emu, "slow", "delivered"), 1); /* never redelivered */
    ASSERT_EQ(sbt_stat(emu, "slow", "active"), 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   held_3x renewals=%llu\n", st.renewals_ok);
}

static void test_buffered_renewed(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_send(emu, "pre", "p", 3, NULL);
    sbt_rx_init(&rx);
    c = start(emu, "pre", 2, &rx);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "p-0");
    ASSERT_EQ(sbt_wait_stat(emu, "pre", "locked", 3, 3000), 3);
    usleep(5000 * 1000); /* the two buffered locks would have expired twice over */
    sb_client_stats(c, &st);
    fprintf(stderr, "buffered: %llu tokens renewed in %llu requests\n", st.renewals_ok,
            st.renew_requests);
    ASSERT_GE(st.renewals_ok, 6);                 /* 3 locks, renewed twice or more */
    ASSERT_LT(st.renew_requests, st.renewals_ok); /* batched per entity */
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    for (int k = 1; k < 3; k++) {
        msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        ASSERT_EQ(msg->delivery_count, 1);
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 3, 5000));
    ASSERT_EQ(rx.settled_ok, 3);
    ASSERT_EQ(sbt_wait_stat(emu, "pre", "completed", 3, 3000), 3);
    ASSERT_EQ(sbt_stat(emu, "pre", "delivered"), 3);
    ASSERT_EQ(sbt_stat(emu, "pre", "abandoned"), 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "ok   buffered_renewed\n");
}

static void test_refused(void)
{
    static const char *const faults[] = {"--fault-refuse-renew", "1000", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    long long end;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "slow", "r", 1, NULL);
    sbt_rx_init(&rx);
    c = start(&emu, "slow", 0, &rx);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_EQ(msg->delivery_count, 1);
    end = ib_mono_ms() + sbt_ms(5000);
    while (rx.lock_lost == 0 && ib_mono_ms() < end)
        usleep(50 * 1000);
    pthread_mutex_lock(&rx.mu);
    ASSERT_EQ(rx.lock_lost, 1);
    ASSERT_EQ(rx.nlost, 1);
    ASSERT_EQ(rx.lost[0], msg);
    pthread_mutex_unlock(&rx.mu);
    usleep(2500 * 1000); /* the refused renewal left the lock to run out */
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.results[IB_E_LOCK_LOST], 1);
    /* It comes back, counted as a second delivery, and completes. */
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "r-0");
    ASSERT_EQ(msg->delivery_count, 2);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 5000));
    ASSERT_EQ(rx.settled_ok, 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "slow", "completed", 1, 3000), 1);
    ASSERT_EQ(sbt_stat(&emu, "slow", "delivered"), 2);
    ASSERT_EQ(sbt_stat(&emu, "slow", "active"), 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   refused\n");
}

/*
 * Renewal off: prefetched messages whose locks run out while they wait are
 * dropped instead of handed out, and come back from the broker.
 */
static void test_expired_buffered(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;
    long long now;

    sbt_send(emu, "exp", "x", 3, NULL);
    sbt_rx_init(&rx);
    sbt_options(emu, "exp", &opt);
    opt.prefetch = 2;
    opt.max_auto_lock_renewal_s = 0;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "x-0");
    usleep(3000 * 1000); /* every lock (2 s) is gone */
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.results[IB_E_LOCK_LOST], 1);
    for (int k = 0; k < 3; k++) {
        msg = sbt_take(&rx, 5000);
        ASSERT_TRUE(msg);
        now = ib_now_ms();
        ASSERT_GT(msg->locked_until_ms, now); /* never handed with a dead lock */
        ASSERT_EQ(msg->delivery_count, 2);    /* each came back from the broker */
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 4, 5000));
    ASSERT_EQ(rx.settled_ok, 3);
    sb_client_stats(c, &st);
    ASSERT_EQ(st.expired_dropped, 2);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(emu, "exp", "completed", 3, 3000), 3);
    ASSERT_EQ(sbt_stat(emu, "exp", "delivered"), 6);
    fprintf(stderr, "ok   expired_buffered\n");
}

int main(void)
{
    sbt_emu_t emu;
    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_ERROR);
    sbt_emu_start(&emu, topology, NULL);
    test_held_3x(&emu);
    test_buffered_renewed(&emu);
    test_expired_buffered(&emu);
    sbt_emu_stop(&emu);
    test_refused();
    return 0;
}
