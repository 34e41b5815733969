/*
 * Session entities under com.microsoft:server-busy, against sbemu
 * (--fault-server-busy-for-ms). A session message's completion refused
 * busy: the client holds, gives the session back (the broker returns the
 * message and the one buffered behind it to the head of the session,
 * uncounted), and takes the session again once the broker accepts: the
 * message comes again with the same delivery count, the session's order
 * holds, nothing is abandoned or dead-lettered, and the refused settlement
 * ends IB_E_LOCK_LOST, never as settled. When the session link's credit
 * meets the window before the completion does, the broker detaches the
 * link busy instead, with the same ending.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sbt.h"

static void test_session_settle_busy(void)
{
    /* The window opens at the first busy check after the 2nd delivery: the completion of x-0. */
    static const char *const faults[] = {"--fault-server-busy-for-ms", "1500",
                                         "--fault-server-busy-after", "2", NULL};
    static const char *topo = "{\"queues\":[{\"name\":\"sbz\",\"lock_duration_s\":30,"
                              "\"max_delivery_count\":10,\"requires_session\":true}]}";
    const char *want[4] = {"x-0", "x-0", "x-1", "x-2"};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;
    unsigned first_count = 0;

    sbt_emu_start(&emu, topo, faults);
    sbt_send(&emu, "sbz", "x", 3, "x");
    sbt_rx_init(&rx);
    sbt_options(&emu, "sbz", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 1;
    opt.session_prefetch = 1; /* x-1 waits in the buffer behind x-0 */
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    for (int i = 0; i < 4; i++) {
        msg = sbt_take(&rx, 15000);
        ASSERT_TRUE(msg != NULL);
        ASSERT_STREQ(msg->message_id, want[i]);
        if (i == 0) {
            first_count = msg->delivery_count;
            ASSERT_TRUE(sbt_wait_stat(&emu, "sbz", "delivered", 2, 5000) == 2);
        } else {
            ASSERT_EQ(msg->delivery_count, first_count); /* given back: no delivery counted */
        }
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
        if (i == 0)
            ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 4, 10000));
    ASSERT_EQ(rx.settled_ok, 3);
    ASSERT_EQ(rx.results[IB_E_LOCK_LOST], 1);
    sb_client_stats(c, &st);
    ASSERT_GE(st.server_busy, 1);
    ASSERT_GT(st.throttled_ms, 0);
    /*
     * Which of the session's operations meets the window first depends on
     * timing: x-0's completion (refused: the client gives the session back)
     * or the session link's credit (the broker detaches the link busy and
     * the session goes with it). Both are a busy answer and end as above.
     */
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_TRUE(sbt_wait_stat(&emu, "sbz", "completed", 3, 5000) == 3);
    ASSERT_EQ(sbt_stat(&emu, "sbz", "abandoned"), 0);
    ASSERT_EQ(sbt_stat(&emu, "sbz", "dead_lettered"), 0);
    ASSERT_EQ(sbt_stat(&emu, "sbz", "active"), 0);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_settle_busy\n");
}

int main(void)
{
    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_ERROR);
    test_session_settle_busy();
    return 0;
}
