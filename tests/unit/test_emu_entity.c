/*
 * test_emu_entity.c - sbemu's message state machine: peek-lock, abandon
 * counting, MaxDeliveryCount, lock and TTL expiry, duplicate detection,
 * batches, sessions, topology errors.
 */
#include "emu_entity.h"
#include "emu_topo.h"
#include "ib_test.h"

#include <string.h>

#define T0 1800000000000LL

/* Hand-encodes a message: header (ttl if > 0), properties (id, group), data body. */
static size_t make_msg(uint8_t *out, const char *id, const char *group, unsigned ttl_ms,
                       const char *body)
{
    size_t n = 0;
    if (ttl_ms) {
        const uint8_t h[] = {0x00,
                             0x53,
                             0x70,
                             0xc0,
                             0x08,
                             0x03,
                             0x42,
                             0x40,
                             0x70,
                             (uint8_t)(ttl_ms >> 24),
                             (uint8_t)(ttl_ms >> 16),
                             (uint8_t)(ttl_ms >> 8),
                             (uint8_t)ttl_ms};
        memcpy(out, h, sizeof h);
        n += sizeof h;
    }
    /* properties: list8 of 11 fields (message-id, 9 nulls, group-id) */
    size_t il = id ? strlen(id) : 0, gl = group ? strlen(group) : 0;
    out[n++] = 0x00, out[n++] = 0x53, out[n++] = 0x73, out[n++] = 0xc0;
    size_t size_at = n++;
    out[n++] = 11;
    if (id) {
        out[n++] = 0xa1, out[n++] = (uint8_t)il;
        memcpy(out + n, id, il);
        n += il;
    } else {
        out[n++] = 0x40;
    }
    for (int i = 0; i < 9; i++)
        out[n++] = 0x40;
    if (group) {
        out[n++] = 0xa1, out[n++] = (uint8_t)gl;
        memcpy(out + n, group, gl);
        n += gl;
    } else {
        out[n++] = 0x40;
    }
    out[size_at] = (uint8_t)(n - size_at - 1);
    size_t bl = strlen(body);
    out[n++] = 0x00, out[n++] = 0x53, out[n++] = 0x75, out[n++] = 0xa0, out[n++] = (uint8_t)bl;
    memcpy(out + n, body, bl);
    return n + bl;
}

static emu_ns_t *new_ns(int max_dc, int dup_window_s, bool sessions)
{
    emu_ns_t *ns = emu_ns_new();
    emu_entity_opts_t o;
    emu_entity_opts_default(&o);
    o.lock_duration_s = 5;
    o.max_delivery_count = max_dc;
    o.dup_window_s = dup_window_s;
    o.requires_session = sessions;
    emu_ns_add_queue(ns, "q", &o);
    return ns;
}

static emu_entity_t *q(emu_ns_t *ns)
{
    return emu_ns_find(ns, "q", 1);
}

static void send(emu_ns_t *ns, const char *id, const char *group, unsigned ttl, int64_t now)
{
    uint8_t buf[512];
    size_t n = make_msg(buf, id, group, ttl, "body");
    emu_entity_send(q(ns), buf, n, now);
}

static emu_msg_t *take_lock(emu_ns_t *ns, emu_session_t *s, int64_t now)
{
    emu_msg_t *m = emu_entity_take(q(ns), s);
    if (m)
        emu_msg_lock(m, (void *)1, now);
    return m;
}

static void test_peek_lock_complete(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    send(ns, "a", NULL, 0, T0);
    ASSERT_EQ(q(ns)->avail.count, 1);
    emu_msg_t *m = take_lock(ns, NULL, T0);
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(m->seq, 1);
    ASSERT_EQ(m->delivery_count, 0);
    ASSERT_EQ(m->locked_until_ms, T0 + 5000);
    ASSERT_EQ(q(ns)->locked.count, 1);
    uint8_t lock[16];
    memcpy(lock, m->lock, 16);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_COMPLETE, NULL, NULL, T0 + 10), 0);
    ASSERT_EQ(q(ns)->locked.count + q(ns)->avail.count, 0);
    ASSERT_EQ(q(ns)->st.completed, 1);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_COMPLETE, NULL, NULL, T0 + 20), -1);
    emu_ns_free(ns);
}

static void test_abandon_counts_and_max_delivery(void)
{
    emu_ns_t *ns = new_ns(3, 0, false);
    send(ns, "a", NULL, 0, T0);
    for (uint32_t i = 0; i < 3; i++) {
        emu_msg_t *m = take_lock(ns, NULL, T0);
        ASSERT_TRUE(m != NULL);
        ASSERT_EQ(m->delivery_count, i);
        uint8_t lock[16];
        memcpy(lock, m->lock, 16);
        ASSERT_EQ(emu_ns_settle(ns, lock, EMU_ABANDON, NULL, NULL, T0), 0);
    }
    /* Delivered 3 times with MaxDeliveryCount 3: now in the DLQ. */
    ASSERT_TRUE(emu_entity_take(q(ns), NULL) == NULL);
    emu_entity_t *dlq = q(ns)->dlq;
    ASSERT_EQ(dlq->avail.count, 1);
    ASSERT_EQ(dlq->avail.head->delivery_count, 3);
    ASSERT_EQ(dlq->avail.head->seq, 1);
    ASSERT_EQ(q(ns)->st.abandoned, 3);
    ASSERT_EQ(q(ns)->st.dead_lettered, 1);
    ASSERT_STREQ(q(ns)->st.by_reason[0].reason, "MaxDeliveryCountExceeded");
    /* The DLQ copy carries the reason in its application properties. */
    ASSERT_TRUE(dlq->avail.head->app != NULL);
    ASSERT_TRUE(memmem(dlq->avail.head->app, dlq->avail.head->app_len, "MaxDeliveryCountExceeded",
                       24) != NULL);
    emu_ns_free(ns);
}

static void test_dead_letter_and_defer(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    send(ns, "a", NULL, 0, T0);
    send(ns, "b", NULL, 0, T0);
    emu_msg_t *a = take_lock(ns, NULL, T0);
    emu_msg_t *b = take_lock(ns, NULL, T0);
    int64_t bseq = b->seq;
    ASSERT_EQ(emu_ns_settle(ns, a->lock, EMU_DEAD_LETTER, "NoRoute", "no route", T0), 0);
    ASSERT_EQ(emu_ns_settle(ns, b->lock, EMU_DEFER, NULL, NULL, T0), 0);
    ASSERT_EQ(q(ns)->deferred.count, 1);
    ASSERT_TRUE(emu_entity_take(q(ns), NULL) == NULL);
    ASSERT_TRUE(emu_entity_deferred(q(ns), bseq) != NULL);
    emu_msg_t *dl = q(ns)->dlq->avail.head;
    ASSERT_TRUE(dl != NULL);
    ASSERT_TRUE(memmem(dl->app, dl->app_len, "no route", 8) != NULL);
    /* Dead-lettering from the DLQ counts as an abandon. */
    emu_msg_t *m = emu_entity_take(q(ns)->dlq, NULL);
    emu_msg_lock(m, (void *)1, T0);
    ASSERT_EQ(emu_ns_settle(ns, m->lock, EMU_DEAD_LETTER, "x", NULL, T0), 0);
    ASSERT_EQ(q(ns)->dlq->avail.count, 1);
    ASSERT_EQ(q(ns)->dlq->avail.head->delivery_count, 1);
    emu_ns_free(ns);
}

static void test_lock_expiry_and_renew(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    send(ns, "a", NULL, 0, T0);
    emu_msg_t *m = take_lock(ns, NULL, T0);
    uint8_t lock[16];
    memcpy(lock, m->lock, 16);
    int64_t until = 0;
    ASSERT_EQ(emu_ns_renew(ns, lock, T0 + 4000, &until), 0);
    ASSERT_EQ(until, T0 + 9000);
    emu_ns_tick(ns, T0 + 8000);
    ASSERT_EQ(q(ns)->locked.count, 1);
    emu_ns_tick(ns, T0 + 9000);
    ASSERT_EQ(q(ns)->locked.count, 0);
    ASSERT_EQ(q(ns)->avail.count, 1);
    ASSERT_EQ(q(ns)->avail.head->delivery_count, 1);
    ASSERT_EQ(emu_ns_renew(ns, lock, T0 + 9001, &until), -1);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_COMPLETE, NULL, NULL, T0 + 9001), -1);
    emu_ns_free(ns);
}

static void test_lock_early_fault(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    ns->lock_early_ms = 2000;
    send(ns, "a", NULL, 0, T0);
    emu_msg_t *m = take_lock(ns, NULL, T0);
    ASSERT_EQ(m->locked_until_ms, T0 + 5000);
    uint8_t lock[16];
    memcpy(lock, m->lock, 16);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_COMPLETE, NULL, NULL, T0 + 3500), -1);
    emu_ns_free(ns);
}

static void test_ttl_expiry(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    send(ns, "a", NULL, 1000, T0);
    send(ns, "b", NULL, 0, T0);
    emu_ns_tick(ns, T0 + 999);
    ASSERT_EQ(q(ns)->avail.count, 2);
    emu_ns_tick(ns, T0 + 1250); /* TTL scans run at most every 250 ms */
    ASSERT_EQ(q(ns)->avail.count, 1);
    ASSERT_EQ(q(ns)->st.expired, 1);
    ASSERT_EQ(q(ns)->dlq->avail.count, 0);
    emu_ns_free(ns);
}

static void test_duplicate_detection(void)
{
    emu_ns_t *ns = new_ns(10, 10, false);
    send(ns, "a", NULL, 0, T0);
    send(ns, "a", NULL, 0, T0 + 5000);
    send(ns, "b", NULL, 0, T0 + 5000);
    ASSERT_EQ(q(ns)->avail.count, 2);
    ASSERT_EQ(q(ns)->st.duplicate_detected, 1);
    /* After the window the same id is new again. */
    send(ns, "a", NULL, 0, T0 + 10001);
    ASSERT_EQ(q(ns)->avail.count, 3);
    emu_ns_free(ns);
}

static void test_batch_and_generated_id(void)
{
    emu_ns_t *ns = new_ns(10, 0, false);
    uint8_t m1[256], m2[256], env[1024];
    size_t l1 = make_msg(m1, "x", NULL, 0, "one"), l2 = make_msg(m2, NULL, NULL, 0, "two");
    size_t n = 0;
    const uint8_t hdr[] = {0x00, 0x53, 0x70, 0x45, 0x00, 0x53, 0x72, 0xc1, 0x01, 0x00};
    memcpy(env, hdr, sizeof hdr);
    n = sizeof hdr;
    env[n++] = 0x00, env[n++] = 0x53, env[n++] = 0x75, env[n++] = 0xa0, env[n++] = (uint8_t)l1;
    memcpy(env + n, m1, l1), n += l1;
    env[n++] = 0x00, env[n++] = 0x53, env[n++] = 0x75, env[n++] = 0xa0, env[n++] = (uint8_t)l2;
    memcpy(env + n, m2, l2), n += l2;
    ASSERT_EQ(emu_entity_send(q(ns), env, n, T0), EMU_SEND_OK);
    ASSERT_EQ(q(ns)->avail.count, 2);
    ASSERT_EQ(q(ns)->avail.head->seq, 1);
    ASSERT_EQ(q(ns)->avail.tail->seq, 2);
    /* The second had no message-id: one was assigned (32 hex digits). */
    ASSERT_EQ(q(ns)->avail.tail->blob->info.message_id.len, 34);
    emu_ns_free(ns);
}

static void test_sessions(void)
{
    emu_ns_t *ns = new_ns(10, 0, true);
    send(ns, "1", "A", 0, T0);
    send(ns, "2", "B", 0, T0);
    send(ns, "3", "A", 0, T0);
    send(ns, "4", NULL, 0, T0); /* no session id on a session queue */
    ASSERT_EQ(q(ns)->dlq->avail.count, 1);
    bool busy;
    emu_session_t *b = emu_session_acquire(q(ns), "B", (void *)1, T0, &busy);
    ASSERT_TRUE(b != NULL);
    ASSERT_TRUE(emu_session_acquire(q(ns), "B", (void *)2, T0, &busy) == NULL);
    ASSERT_TRUE(busy);
    emu_session_t *next = emu_session_acquire(q(ns), NULL, (void *)2, T0, &busy);
    ASSERT_TRUE(next != NULL);
    ASSERT_STREQ(next->id, "A");
    ASSERT_TRUE(emu_session_acquire(q(ns), NULL, (void *)3, T0, &busy) == NULL);
    emu_msg_t *m = take_lock(ns, next, T0);
    ASSERT_STREQ(m->session->id, "A");
    ASSERT_EQ(m->seq, 1);
    ASSERT_EQ(m->locked_until_ms, next->locked_until_ms);
    /* Closing the receiver returns its message without counting a delivery. */
    emu_session_release(q(ns), next, false, T0);
    ASSERT_EQ(q(ns)->avail.head->delivery_count, 0);
    /* Session lock expiry returns it with a count. */
    next = emu_session_acquire(q(ns), "A", (void *)4, T0, &busy);
    m = take_lock(ns, next, T0);
    emu_ns_tick(ns, T0 + 5000);
    ASSERT_TRUE(next->holder == NULL);
    ASSERT_EQ(q(ns)->avail.head->delivery_count, 1);
    /* Session state outlives messages. */
    ASSERT_EQ(emu_session_set_state(q(ns), "C", (const uint8_t *)"st", 2), 0);
    emu_session_t *c = emu_session_get(q(ns), "C", false);
    ASSERT_TRUE(c != NULL && c->has_state && c->state_len == 2);
    int64_t until;
    ASSERT_EQ(emu_session_renew(q(ns), "C", T0, &until), -1);
    /* B was not renewed either: the tick above released it too. */
    ASSERT_EQ(emu_session_renew(q(ns), "B", T0 + 5001, &until), -1);
    ASSERT_TRUE(emu_session_acquire(q(ns), "B", (void *)5, T0 + 6000, &busy) != NULL);
    ASSERT_EQ(emu_session_renew(q(ns), "B", T0 + 7000, &until), 0);
    ASSERT_EQ(until, T0 + 12000);
    emu_ns_free(ns);
}

/* n_avail follows every way in and out of the avail list (take, abandon, release, complete). */
static void test_session_available_count(void)
{
    emu_ns_t *ns = new_ns(10, 0, true);
    send(ns, "1", "A", 0, T0);
    send(ns, "2", "B", 0, T0);
    send(ns, "3", "A", 0, T0);
    bool busy;
    emu_session_t *a = emu_session_acquire(q(ns), NULL, (void *)1, T0, &busy);
    ASSERT_STREQ(a->id, "A");
    ASSERT_EQ(a->n_avail, 2);
    emu_msg_t *m1 = take_lock(ns, a, T0);
    ASSERT_EQ(a->n_avail, 1);
    uint8_t lock[16];
    memcpy(lock, m1->lock, 16);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_ABANDON, NULL, NULL, T0), 0);
    ASSERT_EQ(a->n_avail, 2);
    m1 = take_lock(ns, a, T0);
    emu_msg_t *m3 = take_lock(ns, a, T0);
    ASSERT_EQ(m1->seq, 1);
    ASSERT_EQ(m3->seq, 3);
    ASSERT_EQ(a->n_avail, 0);
    /* Nothing left in A: take answers at once although B's message is available. */
    ASSERT_TRUE(emu_entity_take(q(ns), a) == NULL);
    memcpy(lock, m1->lock, 16);
    ASSERT_EQ(emu_ns_settle(ns, lock, EMU_COMPLETE, NULL, NULL, T0), 0);
    /* Given back with m3 locked: available again, uncounted. */
    emu_session_release(q(ns), a, false, T0);
    a = emu_session_get(q(ns), "A", false);
    ASSERT_TRUE(a != NULL);
    ASSERT_EQ(a->n_avail, 1);
    ASSERT_EQ(emu_session_get(q(ns), "B", false)->n_avail, 1);
    emu_ns_free(ns);
}

static void test_topic_fanout_shares_body(void)
{
    emu_ns_t *ns = emu_ns_new();
    emu_entity_opts_t o;
    emu_entity_opts_default(&o);
    emu_entity_t *t = emu_ns_add_topic(ns, "events", &o);
    emu_ns_add_subscription(ns, t, "a", &o);
    emu_ns_add_subscription(ns, t, "b", &o);
    uint8_t buf[256];
    size_t n = make_msg(buf, "x", NULL, 0, "fan");
    ASSERT_EQ(emu_entity_send(t, buf, n, T0), EMU_SEND_OK);
    emu_entity_t *a = emu_ns_find(ns, "events/subscriptions/A", 22);
    emu_entity_t *b = emu_ns_find(ns, "/events/Subscriptions/b", 23);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->avail.count, 1);
    ASSERT_EQ(b->avail.count, 1);
    ASSERT_TRUE(a->avail.head->blob == b->avail.head->blob);
    ASSERT_EQ(a->avail.head->blob->refs, 2);
    ASSERT_TRUE(emu_ns_find(ns, "events/Subscriptions/a/$deadletterqueue", 39) == a->dlq);
    emu_ns_free(ns);
}

static void test_topology_errors(void)
{
    emu_ns_t *ns = emu_ns_new();
    emu_faults_t f = {0};
    char err[256];
    ASSERT_EQ(emu_topo_parse("{\"queues\":[{\"name\":\"a\",\"lock_duration\":5}]}", ns, &f, err,
                             sizeof err),
              -1);
    ASSERT_CONTAINS(err, "lock_duration");
    ASSERT_EQ(
        emu_topo_parse("{\"queues\":[{\"name\":\"a\"},{\"name\":\"a\"}]}", ns, &f, err, sizeof err),
        -1);
    ASSERT_CONTAINS(err, "duplicate");
    emu_ns_free(ns);
    ns = emu_ns_new();
    ASSERT_EQ(emu_topo_parse("{\"queues\":[{\"name\":\"a\",\"max_delivery_count\":2}],"
                             "\"topics\":[{\"name\":\"t\",\"subscriptions\":[{\"name\":\"s\"}]}],"
                             "\"faults\":{\"refuse_renew\":3}}",
                             ns, &f, err, sizeof err),
              0);
    ASSERT_EQ(f.refuse_renew, 3);
    ASSERT_EQ(emu_ns_find(ns, "a", 1)->opts.max_delivery_count, 2);
    ASSERT_TRUE(emu_ns_find(ns, "t/Subscriptions/s", 17) != NULL);
    emu_ns_free(ns);
}

int main(void)
{
    RUN(test_peek_lock_complete);
    RUN(test_abandon_counts_and_max_delivery);
    RUN(test_dead_letter_and_defer);
    RUN(test_lock_expiry_and_renew);
    RUN(test_lock_early_fault);
    RUN(test_ttl_expiry);
    RUN(test_duplicate_detection);
    RUN(test_batch_and_generated_id);
    RUN(test_sessions);
    RUN(test_session_available_count);
    RUN(test_topic_fanout_shares_body);
    RUN(test_topology_errors);
    return ib_test_done();
}
