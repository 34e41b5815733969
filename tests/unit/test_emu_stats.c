/*
 * test_emu_stats.c - the stats file format other test suites read: entity
 * paths as keys, gauges and counters, reasons, connection counters, the
 * rewrite sequence number, and an atomic rewrite.
 */
#include "emu_stats.h"
#include "ib_test.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void test_format(void)
{
    emu_ns_t *ns = emu_ns_new();
    emu_entity_opts_t o;
    emu_entity_opts_default(&o);
    emu_entity_t *q = emu_ns_add_queue(ns, "orders", &o);
    emu_entity_t *t = emu_ns_add_topic(ns, "events", &o);
    emu_ns_add_subscription(ns, t, "billing", &o);
    q->st.dead_lettered = 3;
    emu_stats_reason(&q->st, "NoRoute");
    emu_stats_reason(&q->st, "NoRoute");
    emu_stats_reason(&q->st, NULL);
    ns->conn_accepted = 2;
    char *s = emu_stats_json(ns);
    ASSERT_TRUE(s != NULL);
    json_t *root = json_loads(s, 0, NULL);
    ASSERT_TRUE(root != NULL);
    json_t *ents = json_object_get(root, "entities");
    json_t *orders = json_object_get(ents, "orders");
    ASSERT_TRUE(json_is_object(orders));
    const char *keys[] = {"active",   "locked",        "deferred",           "scheduled",
                          "sent",     "delivered",     "completed",          "abandoned",
                          "released", "dead_lettered", "duplicate_detected", "expired"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ASSERT_TRUE(json_is_integer(json_object_get(orders, keys[i])));
    ASSERT_EQ(json_integer_value(json_object_get(orders, "dead_lettered")), 3);
    json_t *by = json_object_get(orders, "dead_lettered_by_reason");
    ASSERT_EQ(json_integer_value(json_object_get(by, "NoRoute")), 2);
    ASSERT_EQ(json_integer_value(json_object_get(by, "(none)")), 1);
    ASSERT_TRUE(json_is_object(json_object_get(ents, "orders/$DeadLetterQueue")));
    ASSERT_TRUE(json_is_object(json_object_get(ents, "events")));
    ASSERT_TRUE(json_is_object(json_object_get(ents, "events/Subscriptions/billing")));
    ASSERT_TRUE(
        json_is_object(json_object_get(ents, "events/Subscriptions/billing/$DeadLetterQueue")));
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(root, "connections"), "accepted")),
              2);
    ASSERT_TRUE(json_is_integer(json_object_get(root, "seq")));
    ASSERT_EQ(json_integer_value(json_object_get(root, "seq")), 0);
    json_decref(root);
    free(s);

    char path[] = "/tmp/test_emu_stats_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_EQ(emu_stats_write(ns, path), 0);
    ASSERT_EQ(emu_stats_write(ns, path), 0);
    json_t *again = json_load_file(path, 0, NULL);
    ASSERT_TRUE(again != NULL);
    /* each rewrite counts: a reader waits on seq for a file rendered after it looked */
    ASSERT_EQ(json_integer_value(json_object_get(again, "seq")), 2);
    json_decref(again);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ASSERT_TRUE(access(tmp, F_OK) != 0);
    unlink(path);
    emu_ns_free(ns);
}

int main(void)
{
    RUN(test_format);
    return ib_test_done();
}
