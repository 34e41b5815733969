/*
 * sb_client_send_each against sbemu, each result checked on the broker:
 *  - a receiving client sends on its own connection: every message
 *    accepted, and read back in order with its id, subject, session,
 *    properties and body;
 *  - a send-only client: ready once connected; an entity that does not
 *    exist fails permanently (IB_E_NOTFOUND) and another entity on the same
 *    connection is unaffected;
 *  - two threads sending to one entity at once: every message arrives;
 *  - a broker that drops the connection every 400 ms: sends fail only
 *    transiently and succeed when repeated; every id arrives, read back while the drops go on;
 *  - after sb_client_stop a send ends at once with IB_E_SHUTDOWN.
 * thread: the test's main thread and two sender threads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology =
    "{\"queues\":[{\"name\":\"in\",\"lock_duration_s\":30},{\"name\":\"out\",\"lock_duration_s\":"
    "30},"
    "{\"name\":\"out2\",\"lock_duration_s\":30},{\"name\":\"out3\",\"lock_duration_s\":30}]}";

/* n messages "<prefix>-<i>", body {"i":i}, session "s<i%3>", property k=i. */
typedef struct batch {
    sb_out_msg_t m[200];
    char ids[200][32], bodies[200][32], sess[200][8];
    sb_prop_t props[200];
    size_t n;
} batch_t;

static void batch_fill(batch_t *b, const char *prefix, size_t from, size_t n)
{
    memset(b, 0, sizeof(*b));
    b->n = n;
    for (size_t k = 0; k < n; k++) {
        size_t i = from + k;
        snprintf(b->ids[k], sizeof(b->ids[k]), "%s-%zu", prefix, i);
        snprintf(b->bodies[k], sizeof(b->bodies[k]), "{\"i\":%zu}", i);
        snprintf(b->sess[k], sizeof(b->sess[k]), "s%zu", i % 3);
        b->props[k].key = "k";
        b->props[k].type = SB_PROP_INT64;
        b->props[k].i = (long long)i;
        b->m[k].message_id = b->ids[k];
        b->m[k].subject = "Sent";
        b->m[k].session_id = b->sess[k];
        b->m[k].props = &b->props[k];
        b->m[k].nprops = 1;
        b->m[k].body = b->bodies[k];
        b->m[k].body_len = strlen(b->bodies[k]);
    }
}

static void check_all_ok(const ib_error_t *each, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (each[k].code != IB_E_OK) {
            fprintf(stderr, "message %zu: %s (%s)\n", k, each[k].text, each[k].condition);
            ASSERT_EQ(each[k].code, IB_E_OK);
        }
}

static sb_client_t *sender_only(sbt_emu_t *emu, sbt_rx_t *rx)
{
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sbt_options(emu, NULL, &opt);
    opt.send_only = true;
    sbt_callbacks(rx, &cb);
    cb.on_message = NULL; /* not needed by a client that only sends */
    cb.on_settled = NULL;
    c = sbt_client_start(&opt, &cb);
    ASSERT_TRUE(sbt_wait_ready(rx, 10000));
    return c;
}

static void test_receiver_sends(sbt_emu_t *emu)
{
    sbt_rx_t rx, rx2;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c, *r;
    static batch_t b;
    ib_error_t each[200];

    sbt_rx_init(&rx);
    sbt_options(emu, "in", &opt);
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    ASSERT_TRUE(sbt_wait_ready(&rx, 10000));
    batch_fill(&b, "a", 0, 50);
    ASSERT_EQ(sb_client_send_each(c, "out", b.m, b.n, 10000, each), IB_E_OK);
    check_all_ok(each, b.n);
    ASSERT_EQ(sbt_wait_stat(emu, "out", "active", 50, 3000), 50);

    /* Read back: order, id, subject, session, property, body. */
    sbt_rx_init(&rx2);
    sbt_options(emu, "out", &opt);
    opt.prefetch = 50;
    sbt_callbacks(&rx2, &cb);
    r = sbt_client_start(&opt, &cb);
    for (size_t k = 0; k < b.n; k++) {
        sb_msg_t *msg = sbt_take(&rx2, 5000);
        ASSERT_TRUE(msg);
        ASSERT_STREQ(msg->message_id, b.ids[k]);
        ASSERT_STREQ(msg->subject, "Sent");
        ASSERT_STREQ(msg->session_id, b.sess[k]);
        ASSERT_EQ(msg->nprops, 1);
        ASSERT_EQ(msg->props[0].i, (long long)k);
        ASSERT_EQ(msg->body_len, strlen(b.bodies[k]));
        ASSERT_TRUE(memcmp(msg->body, b.bodies[k], msg->body_len) == 0);
        sb_client_settle(r, msg, SB_COMPLETE, NULL, NULL);
    }
    ASSERT_TRUE(sbt_wait_settled(&rx2, 50, 5000));
    sb_client_free(r);
    sbt_rx_destroy(&rx2);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "receiver sends: ok\n");
}

static void test_send_only_not_found(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    static batch_t b;
    ib_error_t each[200];

    sbt_rx_init(&rx);
    c = sender_only(emu, &rx);
    batch_fill(&b, "nf", 0, 3);
    ASSERT_EQ(sb_client_send_each(c, "no-such-queue", b.m, b.n, 10000, each), IB_E_NOTFOUND);
    for (size_t k = 0; k < b.n; k++) {
        ASSERT_EQ(each[k].code, IB_E_NOTFOUND);
        ASSERT_EQ(each[k].cls, IB_CLASS_PERMANENT);
    }
    batch_fill(&b, "ok", 0, 5);
    ASSERT_EQ(sb_client_send_each(c, "out2", b.m, b.n, 10000, each), IB_E_OK);
    check_all_ok(each, b.n);
    ASSERT_EQ(sbt_wait_stat(emu, "out2", "active", 5, 3000), 5);
    sb_client_stop(c);
    ASSERT_EQ(sb_client_send_each(c, "out2", b.m, 1, 10000, each), IB_E_SHUTDOWN);
    ASSERT_EQ(sbt_stat(emu, "out2", "active"), 5);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "send-only, not found, shutdown: ok\n");
}

typedef struct thread_arg {
    sb_client_t *c;
    const char *prefix;
    int failures;
} thread_arg_t;

static void *send_thread(void *p)
{
    thread_arg_t *a = p;
    static __thread batch_t b;
    ib_error_t each[200];
    for (size_t from = 0; from < 100; from += 20) {
        batch_fill(&b, a->prefix, from, 20);
        if (sb_client_send_each(a->c, "out3", b.m, b.n, 10000, each) != IB_E_OK)
            a->failures++;
    }
    return NULL;
}

static void test_two_threads(sbt_emu_t *emu)
{
    sbt_rx_t rx;
    sb_client_t *c;
    pthread_t t1, t2;
    thread_arg_t a1 = {NULL, "t1", 0}, a2 = {NULL, "t2", 0};

    sbt_rx_init(&rx);
    c = sender_only(emu, &rx);
    a1.c = a2.c = c;
    ASSERT_EQ(pthread_create(&t1, NULL, send_thread, &a1), 0);
    ASSERT_EQ(pthread_create(&t2, NULL, send_thread, &a2), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ASSERT_EQ(a1.failures, 0);
    ASSERT_EQ(a2.failures, 0);
    ASSERT_EQ(sbt_wait_stat(emu, "out3", "active", 200, 3000), 200);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    fprintf(stderr, "two threads: ok\n");
}

/*
 * Every id prefix-0..n-1 is in entity (read with a receiving client); returns how many came.
 * The broker may still be dropping connections: what it delivered to a dropped connection stays
 * locked until the lock expires (as in Service Bus, a lock outlives its link), so the read goes
 * on until every id came or within_ms passed, not only until a first quiet moment.
 */
static size_t drain_ids(sbt_emu_t *emu, const char *entity, const char *prefix, size_t n,
                        long long within_ms)
{
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *r;
    unsigned char *seen = calloc(n, 1);
    size_t got = 0, distinct = 0, plen = strlen(prefix);
    long long until;
    sb_msg_t *msg;

    ASSERT_TRUE(seen);
    sbt_rx_init(&rx);
    sbt_options(emu, entity, &opt);
    opt.prefetch = 100;
    opt.max_concurrent_calls = 100;
    sbt_callbacks(&rx, &cb);
    r = sbt_client_start(&opt, &cb);
    until = ib_mono_ms() + sbt_ms(within_ms);
    while (distinct < n && ib_mono_ms() < until) {
        size_t i;
        if (!(msg = sbt_take(&rx, 500)))
            continue;
        got++;
        if (strncmp(msg->message_id, prefix, plen) == 0 && msg->message_id[plen] == '-') {
            i = strtoul(msg->message_id + plen + 1, NULL, 10);
            if (i < n && !seen[i]) {
                seen[i] = 1;
                distinct++;
            }
        }
        sb_client_settle(r, msg, SB_COMPLETE, NULL, NULL);
    }
    sb_client_stop(r);
    sb_client_free(r);
    sbt_rx_destroy(&rx);
    free(seen);
    fprintf(stderr, "%s: %zu distinct of %zu (%zu received)\n", entity, distinct, n, got);
    return distinct;
}

/*
 * The drops go on while the ids are read back: each drop strands what was delivered and not yet
 * settled (up to the prefetch) under its lock, hence a short lock and a read that outlasts it.
 */
static void test_connection_drops(void)
{
    static const char *drop_topology = "{\"queues\":[{\"name\":\"out\",\"lock_duration_s\":2}]}";
    sbt_emu_t emu;
    const char *extra[] = {"--fault-drop-every-ms", "400", NULL};
    sbt_rx_t rx;
    sb_client_t *c;
    sb_stats_t st;
    static batch_t b;
    ib_error_t each[200];
    int transient = 0;
    size_t total = 0;
    long long until = ib_mono_ms() + 2500; /* several drops */

    sbt_emu_start(&emu, drop_topology, extra);
    sbt_rx_init(&rx);
    c = sender_only(&emu, &rx);
    for (size_t from = 0; ib_mono_ms() < until; from += 10) {
        int tries = 0;
        usleep(20000);
        total = from + 10;
        batch_fill(&b, "d", from, 10);
        while (sb_client_send_each(c, "out", b.m, b.n, 5000, each) != IB_E_OK) {
            for (size_t k = 0; k < b.n; k++)
                if (each[k].code != IB_E_OK)
                    ASSERT_EQ(each[k].cls, IB_CLASS_TRANSIENT);
            transient++;
            ASSERT_LT(++tries, 50);
        }
    }
    sb_client_stats(c, &st);
    fprintf(stderr, "drops: %d transient failures, %llu reconnects\n", transient, st.reconnects);
    ASSERT_GT(st.reconnects, 0ULL);
    sb_client_free(c);
    sbt_rx_destroy(&rx);
    /*
     * Every id reached the queue (a message whose answer was lost may be there twice). The
     * read goes on under the drops, each stranding up to a prefetch for the 2 s lock: on a
     * loaded machine a reconnect takes much of the 400 ms between drops, hence a long window
     * (the read ends as soon as every id is seen).
     */
    ASSERT_EQ(drain_ids(&emu, "out", "d", total, 50000), total);
    sbt_emu_stop(&emu);
}

int main(void)
{
    sbt_emu_t emu;
    sbt_emu_start(&emu, topology, NULL);
    test_receiver_sends(&emu);
    test_send_only_not_found(&emu);
    test_two_threads(&emu);
    sbt_emu_stop(&emu);
    test_connection_drops();
    return 0;
}
