/*
 * Sessions against sbemu: 20 sessions of 5 messages each, sent interleaved,
 * consumed with max_concurrent_sessions 4. Per-session order holds, a
 * session has at most 32 messages out, no more than 4 sessions (plus a
 * replacement for each one known to be done) are held at once, sessions are
 * given back when done, and the broker ends with every message completed.
 * Then: short sessions given back at once, an abandon with later messages
 * out, and max_concurrent_calls bounding what a session hands out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

#define NSESS 20
#define PER 5

static const char *topology =
    "{\"queues\":[{\"name\":\"sq\",\"lock_duration_s\":5,\"max_delivery_count\":10,"
    "\"requires_session\":true}]}";

static int next_index[NSESS];
static int inflight_per_session[NSESS];
static int order_errors, overlap_errors;

static int session_no(const sb_msg_t *msg)
{
    return msg->session_id ? atoi(msg->session_id + 1) : -1; /* "s<N>" */
}

/* thread: proactor (on_message) */
static void hook(sbt_rx_t *rx, sb_msg_t *msg)
{
    int s = session_no(msg), n;
    pthread_mutex_lock(&rx->mu);
    if (s < 0 || s >= NSESS || sscanf(msg->message_id, "s%*d-%d", &n) != 1) {
        order_errors++;
    } else {
        /* Several of a session may be out at once, up to what a session holds (32). */
        if (inflight_per_session[s]++ >= 32)
            overlap_errors++;
        if (n != next_index[s])
            order_errors++;
        next_index[s] = n + 1;
    }
    pthread_mutex_unlock(&rx->mu);
}

/*
 * A session whose lock runs out (fault: locks end 1.5 s before the 2 s they
 * announce, so renewal cannot save it): the broker detaches the link with
 * session-lock-lost, the held message is reported lock-lost, its
 * settlement fails with IB_E_LOCK_LOST, and the broker still has it.
 */
static void test_session_lock_lost(void)
{
    static const char *const faults[] = {"--fault-lock-early-ms", "1500", NULL};
    static const char *topo =
        "{\"queues\":[{\"name\":\"sl\",\"lock_duration_s\":2,\"max_delivery_count\":10,"
        "\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    long long end;

    sbt_emu_start(&emu, topo, faults);
    sbt_send(&emu, "sl", "k", 1, "only");
    sbt_rx_init(&rx);
    sbt_options(&emu, "sl", &opt);
    opt.sessions = true;
    opt.session_wait_ms = 1000;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->session_id, "only");
    end = ib_mono_ms() + sbt_ms(5000);
    while (rx.lock_lost == 0 && ib_mono_ms() < end)
        usleep(20 * 1000);
    ASSERT_EQ(rx.lock_lost, 1);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    end = ib_mono_ms() + sbt_ms(5000);
    while (rx.results[IB_E_LOCK_LOST] == 0 && ib_mono_ms() < end)
        usleep(20 * 1000);
    ASSERT_EQ(rx.results[IB_E_LOCK_LOST], 1);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "sl", "completed", 0, 2000), 0);
    /* Back with the broker once the client has gone. */
    ASSERT_EQ(sbt_wait_stat(&emu, "sl", "active", 1, 5000), 1);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_lock_lost\n");
}

/* A message held for 2.5x the session lock keeps it through session-lock renewals. */
static void test_session_renewal(void)
{
    static const char *topo =
        "{\"queues\":[{\"name\":\"sr\",\"lock_duration_s\":2,\"max_delivery_count\":10,"
        "\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_emu_start(&emu, topo, NULL);
    sbt_send(&emu, "sr", "r", 2, "held");
    sbt_rx_init(&rx);
    sbt_options(&emu, "sr", &opt);
    opt.sessions = true;
    opt.session_wait_ms = 1000;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "r-0");
    usleep(5000 * 1000);
    ASSERT_EQ(rx.lock_lost, 0);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    msg = sbt_take(&rx, 5000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "r-1");
    ASSERT_EQ(msg->delivery_count, 1);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 5000));
    ASSERT_EQ(rx.settled_ok, 2);
    sb_client_stats(c, &st);
    ASSERT_GE(st.renewals_ok, 2);
    ASSERT_EQ(st.sessions_accepted, 1);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "sr", "completed", 2, 3000), 2);
    ASSERT_EQ(sbt_stat(&emu, "sr", "delivered"), 2);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_renewal\n");
}

static _Atomic int switches;

static void on_switch(double seconds, void *ctx)
{
    (void)ctx;
    if (seconds >= 0)
        switches++;
}

/*
 * Short sessions with session_idle_timeout_s 60 and one session slot: each
 * session is known empty from a drain and given back at once (all three
 * sessions, in order, long before 60 s), every slot move is reported to
 * on_session_switch, and the broker ends with no session held.
 */
static void test_sessions_given_back_at_once(void)
{
    static const char *topo =
        "{\"queues\":[{\"name\":\"sb\",\"lock_duration_s\":30,\"max_delivery_count\":10,"
        "\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_stats_t st;
    long long end;
    const char *order[3] = {"a", "b", "c"};

    sbt_emu_start(&emu, topo, NULL);
    for (int k = 0; k < 3; k++)
        sbt_send(&emu, "sb", order[k], 2, order[k]);
    sbt_rx_init(&rx);
    sbt_options(&emu, "sb", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 1;
    opt.session_prefetch = 4;
    opt.session_idle_timeout_s = 60;
    sbt_callbacks(&rx, &cb);
    cb.on_session_switch = on_switch;
    c = sbt_client_start(&opt, &cb);
    for (int i = 0; i < 6; i++) {
        char want[16];
        sb_msg_t *msg = sbt_take(&rx, 10000);
        ASSERT_TRUE(msg);
        /* Oldest session first, its two messages in order, then the next. */
        snprintf(want, sizeof(want), "%s-%d", msg->session_id, i % 2);
        ASSERT_TRUE(strcmp(msg->message_id, want) == 0);
        ASSERT_TRUE(strcmp(msg->session_id, order[i / 2]) == 0);
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 6, 5000) && rx.settled_ok == 6);
    /* The last one goes back when its empty drain answer is in: seconds, not the 60 s idle. */
    end = ib_mono_ms() + sbt_ms(5000);
    do {
        sb_client_stats(c, &st);
        if (st.sessions_given_back >= 3 && st.sessions_held == 0)
            break;
        usleep(20 * 1000);
    } while (ib_mono_ms() < end);
    ASSERT_TRUE(st.sessions_given_back >= 3 && st.sessions_held == 0);
    ASSERT_TRUE(sbt_wait_stat(&emu, "sb", "sessions_held", 0, 5000) == 0);
    ASSERT_TRUE(switches >= 2);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_TRUE(sbt_wait_stat(&emu, "sb", "completed", 6, 5000) == 6);
    ASSERT_TRUE(sbt_stat(&emu, "sb", "delivered") == 6);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   sessions_given_back_at_once\n");
}

/*
 * An abandon while later messages of the session are out (handed over
 * together) and given back by the worker: the session goes back and the
 * abandoned message comes first again (delivery count +1), then the rest.
 */
static void test_session_abandon_keeps_order(void)
{
    static const char *topo =
        "{\"queues\":[{\"name\":\"sa\",\"lock_duration_s\":30,\"max_delivery_count\":10,"
        "\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_msg_t *first[3];
    const char *want[6] = {"x-0", "x-1", "x-2", "x-0", "x-1", "x-2"};

    sbt_emu_start(&emu, topo, NULL);
    sbt_send(&emu, "sa", "x", 3, "x");
    sbt_rx_init(&rx);
    sbt_options(&emu, "sa", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 1;
    opt.max_concurrent_calls = 4;
    opt.session_prefetch = 4;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    for (int i = 0; i < 3; i++) {
        first[i] = sbt_take(&rx, 10000); /* one drain: handed out together */
        ASSERT_TRUE(first[i] && strcmp(first[i]->message_id, want[i]) == 0);
    }
    /* x-0 abandoned; the worker gives the later ones back behind it. */
    sb_client_settle(c, first[0], SB_ABANDON, NULL, NULL);
    sb_client_settle(c, first[1], SB_RELEASE, NULL, NULL);
    sb_client_settle(c, first[2], SB_RELEASE, NULL, NULL);
    for (int i = 3; i < 6; i++) {
        msg = sbt_take(&rx, 10000);
        ASSERT_TRUE(msg && strcmp(msg->message_id, want[i]) == 0);
        if (i == 3)
            ASSERT_TRUE(msg->delivery_count == 2);
        sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, 6, 5000) && rx.settled_ok == 6);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_TRUE(sbt_wait_stat(&emu, "sa", "completed", 3, 3000) == 3);
    ASSERT_TRUE(sbt_stat(&emu, "sa", "abandoned") == 1);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_abandon_keeps_order\n");
}

/*
 * max_concurrent_calls bounds a session's messages out: six fetched in one
 * drain are handed out two at a time, in order, the next as one settles.
 * (After a lost connection every message out comes back as lock lost: a
 * worker of few calls is not handed a whole session's worth of them.)
 */
static void test_session_within_calls(void)
{
    static const char *topo =
        "{\"queues\":[{\"name\":\"sw\",\"lock_duration_s\":30,\"max_delivery_count\":10,"
        "\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *out[2];

    sbt_emu_start(&emu, topo, NULL);
    sbt_send(&emu, "sw", "w", 6, "w");
    sbt_rx_init(&rx);
    sbt_options(&emu, "sw", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 1;
    opt.max_concurrent_calls = 2;
    opt.session_prefetch = 8;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    for (int i = 0; i < 2; i++) {
        out[i] = sbt_take(&rx, 10000);
        ASSERT_TRUE(out[i] && out[i]->message_id[2] == '0' + i);
    }
    for (int i = 2; i < 6; i++) {
        sb_msg_t *msg;
        ASSERT_TRUE(sbt_take(&rx, 300) == NULL); /* two out: the rest wait */
        sb_client_settle(c, out[i % 2], SB_COMPLETE, NULL, NULL);
        msg = sbt_take(&rx, 10000);
        ASSERT_TRUE(msg && msg->message_id[2] == '0' + i);
        out[i % 2] = msg;
    }
    sb_client_settle(c, out[0], SB_COMPLETE, NULL, NULL);
    sb_client_settle(c, out[1], SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 6, 5000) && rx.settled_ok == 6);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_TRUE(sbt_wait_stat(&emu, "sw", "completed", 6, 5000) == 6);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_within_calls\n");
}

/*
 * A drain the broker never answers (fault): session_idle_timeout_s (2 s)
 * is the upper bound, after which the session is given back anyway.
 */
static void test_session_drain_unanswered(void)
{
    static const char *const faults[] = {"--fault-ignore-drain", "1", NULL};
    static const char *topo = "{\"queues\":[{\"name\":\"su\",\"lock_duration_s\":30,"
                              "\"max_delivery_count\":10,\"requires_session\":true}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;
    long long settled_at, end;

    sbt_emu_start(&emu, topo, faults);
    sbt_send(&emu, "su", "u", 1, "u");
    sbt_rx_init(&rx);
    sbt_options(&emu, "su", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 1;
    opt.session_prefetch = 4;
    opt.session_idle_timeout_s = 2;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    msg = sbt_take(&rx, 10000);
    ASSERT_TRUE(msg && strcmp(msg->message_id, "u-0") == 0);
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000) && rx.settled_ok == 1);
    settled_at = ib_mono_ms();
    end = settled_at + sbt_ms(10000);
    do {
        usleep(20 * 1000);
        sb_client_stats(c, &st);
    } while (st.sessions_given_back == 0 && ib_mono_ms() < end);
    ASSERT_TRUE(st.sessions_given_back == 1);
    /* Not at once: no answer came, so only the bound gave it back. */
    ASSERT_TRUE(ib_mono_ms() - settled_at >= 1500);
    ASSERT_TRUE(sbt_wait_stat(&emu, "su", "sessions_held", 0, 5000) == 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_TRUE(sbt_wait_stat(&emu, "su", "completed", 1, 5000) == 1);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   session_drain_unanswered\n");
}

int main(void)
{
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    ib_error_t err;
    sb_client_t *c;
    sb_stats_t st;
    sb_sender_options_t so;
    sb_sender_t *s;
    sb_out_msg_t msgs[NSESS * PER];
    char ids[NSESS * PER][32], sids[NSESS][16];
    int done = 0;
    unsigned seed = 7;

    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_ERROR);
    sbt_emu_start(&emu, topology, NULL);

    /* Interleaved: s0-0, s1-0, ..., s19-0, s0-1, ... */
    memset(msgs, 0, sizeof(msgs));
    for (int k = 0; k < NSESS; k++)
        snprintf(sids[k], sizeof(sids[k]), "s%d", k);
    for (int i = 0; i < PER; i++)
        for (int k = 0; k < NSESS; k++) {
            int j = i * NSESS + k;
            snprintf(ids[j], sizeof(ids[j]), "s%d-%d", k, i);
            msgs[j].message_id = ids[j];
            msgs[j].session_id = sids[k];
            msgs[j].body = ids[j];
            msgs[j].body_len = strlen(ids[j]);
        }
    so = (sb_sender_options_t){emu.connstr, NULL, NULL, NULL, 10000, 0, 0};
    s = sb_sender_open(&so, &err);
    ASSERT_TRUE(s);
    ASSERT_EQ(sb_sender_send(s, "sq", msgs, NSESS * PER, &err), IB_E_OK);
    sb_sender_close(s);
    ASSERT_EQ(sbt_wait_stat(&emu, "sq", "active", NSESS * PER, 5000), NSESS * PER);

    sbt_rx_init(&rx);
    rx.hook = hook;
    sbt_options(&emu, "sq", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 4;
    opt.max_concurrent_calls = 16;
    opt.session_idle_timeout_s = 1;
    opt.session_wait_ms = 1000;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);

    /* Settle in a shuffled order across the sessions held at a time. */
    while (done < NSESS * PER) {
        sb_msg_t *batch[8];
        int nb = 0;
        sb_msg_t *msg = sbt_take(&rx, 15000);
        ASSERT_TRUE(msg);
        batch[nb++] = msg;
        while (nb < 8 && (msg = sbt_take(&rx, 20)) != NULL)
            batch[nb++] = msg;
        for (int k = nb - 1; k > 0; k--) {
            int j = (int)(rand_r(&seed) % (unsigned)(k + 1));
            sb_msg_t *t = batch[k];
            batch[k] = batch[j];
            batch[j] = t;
        }
        for (int k = 0; k < nb; k++) {
            pthread_mutex_lock(&rx.mu);
            inflight_per_session[session_no(batch[k])]--;
            pthread_mutex_unlock(&rx.mu);
            sb_client_settle(c, batch[k], SB_COMPLETE, NULL, NULL);
        }
        done += nb;
    }
    ASSERT_TRUE(sbt_wait_settled(&rx, NSESS * PER, 10000));
    ASSERT_EQ(rx.settled_ok, NSESS * PER);
    ASSERT_EQ(order_errors, 0);
    ASSERT_EQ(overlap_errors, 0);
    for (int k = 0; k < NSESS; k++)
        ASSERT_EQ(next_index[k], PER);
    ASSERT_EQ(sbt_wait_stat(&emu, "sq", "completed", NSESS * PER, 5000), NSESS * PER);
    ASSERT_EQ(sbt_stat(&emu, "sq", "active"), 0);
    ASSERT_EQ(sbt_stat(&emu, "sq", "locked"), 0);

    /* Idle sessions are given back. */
    usleep((useconds_t)sbt_ms(2500) * 1000);
    sb_client_stats(c, &st);
    fprintf(stderr, "sessions accepted=%llu released=%llu max_held=%u held=%u\n",
            st.sessions_accepted, st.sessions_released, st.max_sessions_held, st.sessions_held);
    /* 4 being processed, plus one replacement per session known to be done. */
    ASSERT_LE(st.max_sessions_held, 8);
    ASSERT_GE(st.max_sessions_held, 2);
    ASSERT_GE(st.sessions_accepted, NSESS);
    ASSERT_EQ(st.sessions_held, 0);
    ASSERT_GE(st.sessions_released, NSESS);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   sessions\n");
    test_session_lock_lost();
    test_session_renewal();
    test_sessions_given_back_at_once();
    test_session_abandon_keeps_order();
    test_session_within_calls();
    test_session_drain_unanswered();
    return 0;
}
