/*
 * Reconnect under load: sbemu drops every connection every 1.5 s while 200
 * messages are consumed (prefetch 10, 4 calls). Every message ends
 * completed exactly once on the broker; every handed-out message gets
 * exactly one on_settled; nothing stays locked or in flight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

#define N 200

static const char *topology =
    "{\"queues\":[{\"name\":\"busy\",\"lock_duration_s\":3,\"max_delivery_count\":50,"
    "\"duplicate_detection_window_s\":300}]}";

static int ok_by_id[N];

static void on_settled_count(sb_msg_t *msg, const ib_error_t *res)
{
    int i;
    if (res->code == IB_E_OK && sscanf(msg->message_id, "x-%d", &i) == 1 && i >= 0 && i < N)
        ok_by_id[i]++;
}

static void (*orig_settled)(sb_msg_t *, sb_disposition_t, const ib_error_t *, void *);

static void settled_wrap(sb_msg_t *msg, sb_disposition_t d, const ib_error_t *res, void *ctx)
{
    on_settled_count(msg, res);
    orig_settled(msg, d, res, ctx);
}

/*
 * Sessions under the same drops: 5 sessions of 20 messages. Every message
 * ends completed on the broker, and within a session the successful
 * completions come in send order (a message whose session lock went with
 * the connection comes back before the ones after it).
 */
#define SN 5
#define SPER 20
static int last_ok[SN];
static int order_errors;

static void settled_sessions(sb_msg_t *msg, sb_disposition_t d, const ib_error_t *res, void *ctx)
{
    int s, i;
    if (res->code == IB_E_OK && sscanf(msg->message_id, "s%d-%d", &s, &i) == 2 && s >= 0 &&
        s < SN) {
        /* Increasing, not necessarily consecutive: a completion the broker applied
         * whose answer was lost with the connection is reported IB_E_LOCK_LOST. */
        if (i <= last_ok[s])
            order_errors++;
        last_ok[s] = i;
    }
    orig_settled(msg, d, res, ctx);
}

static void test_sessions_under_drops(void)
{
    static const char *const faults[] = {"--fault-drop-every-ms", "1500", NULL};
    static const char *topo = "{\"queues\":[{\"name\":\"sbusy\",\"lock_duration_s\":5,"
                              "\"max_delivery_count\":50,\"requires_session\":true,"
                              "\"duplicate_detection_window_s\":300}]}";
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    ib_error_t err;
    sb_client_t *c;
    long long end;
    int sent_ok = 0;
    unsigned seed = 5;

    for (int k = 0; k < SN; k++)
        last_ok[k] = -1;
    sbt_emu_start(&emu, topo, faults);
    for (int attempt = 0; attempt < 10 && !sent_ok; attempt++) {
        sb_sender_options_t so = {emu.connstr, NULL, NULL, NULL, 5000, 0, 0};
        sb_sender_t *s = sb_sender_open(&so, &err);
        sb_out_msg_t m[SN * SPER];
        char ids[SN * SPER][16], sids[SN][8];
        memset(m, 0, sizeof(m));
        for (int i = 0; i < SPER; i++)
            for (int k = 0; k < SN; k++) {
                int j = i * SN + k;
                snprintf(sids[k], sizeof(sids[k]), "s%d", k);
                snprintf(ids[j], sizeof(ids[j]), "s%d-%d", k, i);
                m[j].message_id = ids[j];
                m[j].session_id = sids[k];
            }
        if (s && sb_sender_send(s, "sbusy", m, SN * SPER, &err) == IB_E_OK)
            sent_ok = 1;
        sb_sender_close(s);
    }
    ASSERT_TRUE(sent_ok);
    sbt_rx_init(&rx);
    sbt_options(&emu, "sbusy", &opt);
    opt.sessions = true;
    opt.max_concurrent_sessions = 3;
    opt.session_wait_ms = 1000;
    opt.reconnect_max_ms = 500;
    opt.op_timeout_ms = 3000;
    sbt_callbacks(&rx, &cb);
    orig_settled = cb.on_settled;
    cb.on_settled = settled_sessions;
    c = sbt_client_start(&opt, &cb);
    end = ib_mono_ms() + sbt_ms(60000);
    while (ib_mono_ms() < end) {
        sb_msg_t *msg = sbt_take(&rx, 200);
        if (msg) {
            usleep((20 + rand_r(&seed) % 40) * 1000);
            sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
            continue;
        }
        if (sbt_stat(&emu, "sbusy", "completed") == SN * SPER)
            break;
    }
    usleep((useconds_t)sbt_ms(1000) * 1000);
    fprintf(stderr, "sessions: received=%d ok=%d lock_lost=%d LOCK_LOST=%d\n", rx.received,
            rx.settled_ok, rx.lock_lost, rx.results[IB_E_LOCK_LOST]);
    ASSERT_EQ(sbt_stat(&emu, "sbusy", "completed"), SN * SPER);
    ASSERT_EQ(sbt_stat(&emu, "sbusy", "active"), 0);
    ASSERT_EQ(order_errors, 0);
    ASSERT_EQ(rx.settled, rx.received);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   sessions_under_drops\n");
}

int main(void)
{
    static const char *const faults[] = {"--fault-drop-every-ms", "1500", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    ib_error_t err;
    sb_client_t *c;
    sb_stats_t st;
    unsigned seed = 11;
    long long end;
    int sent_ok = 0;

    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_ERROR);
    sbt_emu_start(&emu, topology, faults);
    /* The drops may cut a send short: resend (duplicate detection drops repeats). */
    for (int attempt = 0; attempt < 10 && !sent_ok; attempt++) {
        sb_sender_options_t so = {emu.connstr, NULL, NULL, NULL, 5000, 0, 0};
        sb_sender_t *s = sb_sender_open(&so, &err);
        sb_out_msg_t m[N];
        char ids[N][16];
        memset(m, 0, sizeof(m));
        for (int i = 0; i < N; i++) {
            snprintf(ids[i], sizeof(ids[i]), "x-%d", i);
            m[i].message_id = ids[i];
            m[i].body = ids[i];
            m[i].body_len = strlen(ids[i]);
        }
        if (s && sb_sender_send(s, "busy", m, N, &err) == IB_E_OK)
            sent_ok = 1;
        sb_sender_close(s);
    }
    ASSERT_TRUE(sent_ok);

    sbt_rx_init(&rx);
    sbt_options(&emu, "busy", &opt);
    opt.prefetch = 10;
    opt.max_concurrent_calls = 4;
    opt.reconnect_max_ms = 500;
    opt.op_timeout_ms = 3000;
    sbt_callbacks(&rx, &cb);
    orig_settled = cb.on_settled;
    cb.on_settled = settled_wrap;
    c = sbt_client_start(&opt, &cb);

    end = ib_mono_ms() + sbt_ms(60000);
    while (ib_mono_ms() < end) {
        sb_msg_t *msg = sbt_take(&rx, 200);
        if (msg) {
            usleep((20 + rand_r(&seed) % 40) * 1000); /* work takes a while */
            sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
            continue;
        }
        if (sbt_stat(&emu, "busy", "completed") == N && sbt_stat(&emu, "busy", "active") == 0 &&
            sbt_stat(&emu, "busy", "locked") == 0)
            break;
    }
    /* Let the last answers arrive. */
    usleep((useconds_t)sbt_ms(1500) * 1000);
    sb_client_stats(c, &st);
    fprintf(stderr,
            "received=%d settled=%d ok=%d lock_lost=%d reconnects=%llu results: "
            "LOCK_LOST=%d DETACHED=%d TIMEOUT=%d BROKER=%d\n",
            rx.received, rx.settled, rx.settled_ok, rx.lock_lost, st.reconnects,
            rx.results[IB_E_LOCK_LOST], rx.results[IB_E_DETACHED], rx.results[IB_E_TIMEOUT],
            rx.results[IB_E_BROKER]);
    ASSERT_EQ(sbt_stat(&emu, "busy", "completed"), N);
    ASSERT_EQ(sbt_stat(&emu, "busy", "active"), 0);
    ASSERT_EQ(sbt_stat(&emu, "busy", "locked"), 0);
    ASSERT_EQ(sbt_stat(&emu, "busy", "dead_lettered"), 0);
    ASSERT_GE(st.reconnects, 2);
    for (int i = 0; i < N; i++)
        if (ok_by_id[i] > 1) {
            fprintf(stderr, "x-%d completed OK %d times\n", i, ok_by_id[i]);
            ASSERT_LE(ok_by_id[i], 1);
        }
    pthread_mutex_lock(&rx.mu);
    ASSERT_EQ(rx.settled, rx.received); /* exactly one answer per message handed out */
    ASSERT_EQ(rx.qn, 0);
    pthread_mutex_unlock(&rx.mu);
    ASSERT_EQ(st.in_flight, 0);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   reconnect\n");
    test_sessions_under_drops();
    return 0;
}
