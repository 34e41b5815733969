/*
 * Parking a session (session_park) against sbemu, step by step:
 *  - the dead letter waits for the parked record: while the broker leaves
 *    the set-session-state unanswered, the poison is not dead-lettered;
 *    the set is sent again after the request's timeout, answered, and
 *    only then the dead letter goes out;
 *  - a record the broker refuses every time (500, four tries): the poison
 *    is released, not dead-lettered, and comes first again, before the
 *    session's later message; dead-lettered again once the broker takes
 *    the record, the session is parked and its later message never handed
 *    out;
 *  - the broker throttling (server-busy) the session-state requests: a
 *    get-session-state answered busy gives the session back uncounted and
 *    takes it again after the hold; a set-session-state answered busy more
 *    often than a refused record is tried (four) costs no try: the record
 *    goes again after each hold, the session is parked and the poison
 *    dead-lettered, never released.
 * thread: the test's main thread (the client's proactor calls the hooks).
 */
#include <stdio.h>
#include <string.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology = "{\"queues\":[{\"name\":\"pq\",\"lock_duration_s\":30,"
                              "\"max_delivery_count\":10,\"requires_session\":true}]}";

static sb_client_t *park_client(sbt_emu_t *emu, sbt_rx_t *rx, unsigned op_timeout_ms)
{
    sb_options_t opt;
    sb_callbacks_t cb;
    sbt_options(emu, "pq", &opt);
    opt.sessions = true;
    opt.session_park = true;
    opt.session_prefetch = 4;
    opt.op_timeout_ms = op_timeout_ms;
    sbt_callbacks(rx, &cb);
    return sbt_client_start(&opt, &cb);
}

static void dead_letter(sb_client_t *c, sb_msg_t *msg)
{
    sb_client_settle(c, msg, SB_DEADLETTER, "HandlerError", "poison");
}

static void test_dead_letter_waits_for_record(void)
{
    static const char *const faults[] = {"--fault-stall-set-state", "1", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "pq", "w", 2, "w");
    sbt_rx_init(&rx);
    /* The request's timeout is the window the checks below look through:
     * long enough that a loaded machine still looks inside it. */
    c = park_client(&emu, &rx, (unsigned)sbt_ms(4000));
    msg = sbt_take(&rx, 10000);
    ASSERT_TRUE(msg && strcmp(msg->message_id, "w-0") == 0);
    dead_letter(c, msg);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "session_state_sets", 1, 5000), 1LL);
    /* The set is unanswered (its timeout is 4 s): nothing settled, nothing handed out. */
    ASSERT_TRUE(sbt_take(&rx, 500) == NULL);
    ASSERT_EQ(sbt_stat(&emu, "pq", "dead_lettered"), 0LL);
    ASSERT_TRUE(rx.settled == 0);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 15000));
    ASSERT_TRUE(rx.settled_ok == 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "session_state_sets", 2, 3000), 2LL);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "dead_lettered", 1, 3000), 1LL);
    sb_client_stats(c, &st);
    ASSERT_EQ(st.sessions_parked, 1u);
    ASSERT_TRUE(sbt_take(&rx, 500) == NULL); /* w-1 waits */
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "active", 1, 3000), 1LL);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   dead_letter_waits_for_record\n");
}

static void test_record_refused_releases_poison(void)
{
    static const char *const faults[] = {"--fault-refuse-set-state", "4", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "pq", "r", 2, "r");
    sbt_rx_init(&rx);
    c = park_client(&emu, &rx, 10000);
    msg = sbt_take(&rx, 10000);
    ASSERT_TRUE(msg && strcmp(msg->message_id, "r-0") == 0);
    dead_letter(c, msg);
    /* Four tries over at most 3.5 s of jittered waits, all refused: released, not dead-lettered. */
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 10000));
    ASSERT_TRUE(rx.settled_ok == 0);
    ASSERT_TRUE(rx.results[IB_E_BROKER] == 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "session_state_sets", 4, 3000), 4LL);
    sbt_stat_fresh(&emu, sbt_stat_seq(&emu)); /* the release is handled: no dead letter after it */
    ASSERT_EQ(sbt_stat(&emu, "pq", "dead_lettered"), 0LL);
    /* The session stops at its poison all the same: r-0 comes first again. */
    msg = sbt_take(&rx, 10000);
    ASSERT_TRUE(msg && strcmp(msg->message_id, "r-0") == 0);
    dead_letter(c, msg);
    ASSERT_TRUE(sbt_wait_settled(&rx, 2, 10000));
    ASSERT_TRUE(rx.settled_ok == 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "dead_lettered", 1, 3000), 1LL);
    sb_client_stats(c, &st);
    ASSERT_EQ(st.sessions_parked, 1u);
    ASSERT_TRUE(sbt_take(&rx, 500) == NULL); /* r-1 waits */
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "active", 1, 3000), 1LL);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   record_refused_releases_poison\n");
}

static void test_busy_state_holds(void)
{
    static const char *const faults[] = {"--fault-busy-get-state", "2", "--fault-busy-set-state",
                                         "6", NULL};
    sbt_emu_t emu;
    sbt_rx_t rx;
    sb_client_t *c;
    sb_msg_t *msg;
    sb_stats_t st;

    sbt_emu_start(&emu, topology, faults);
    sbt_send(&emu, "pq", "b", 2, "b");
    sbt_rx_init(&rx);
    c = park_client(&emu, &rx, 10000);
    /* Two holds before the session's state is read: b-0 then comes, its delivery uncounted. */
    msg = sbt_take(&rx, 20000);
    ASSERT_TRUE(msg && strcmp(msg->message_id, "b-0") == 0);
    ASSERT_EQ(msg->delivery_count, 1u);
    dead_letter(c, msg);
    /* Six busy answers to the record, more than the four tries of a refused one: parked. */
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 40000));
    ASSERT_TRUE(rx.settled_ok == 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "dead_lettered", 1, 3000), 1LL);
    ASSERT_EQ(sbt_stat(&emu, "pq", "session_state_sets"), 7LL);
    sb_client_stats(c, &st);
    ASSERT_EQ(st.sessions_parked, 1u);
    ASSERT_TRUE(st.server_busy >= 8);
    ASSERT_TRUE(st.throttled_ms > 0);
    ASSERT_TRUE(sbt_take(&rx, 500) == NULL); /* b-1 waits */
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    ASSERT_EQ(sbt_wait_stat(&emu, "pq", "active", 1, 3000), 1LL);
    sbt_emu_stop(&emu);
    fprintf(stderr, "ok   busy_state_holds\n");
}

int main(void)
{
    test_dead_letter_waits_for_record();
    test_record_refused_releases_poison();
    test_busy_state_holds();
    return 0;
}
