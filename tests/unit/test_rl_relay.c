/*
 * The relay's pieces without a broker or a database: outbox properties
 * (a JSON object as text) parsed back into typed AMQP properties, and what
 * is refused with the key named.
 */
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "rl_relay.h"
#include "sb_msg.h"

static void test_props_parse(void)
{
    sb_prop_t *pr;
    size_t n;
    void *holder;
    ib_error_t err;
    ASSERT_EQ(rl_relay_props_parse("{\"s\":\"x\",\"i\":42,\"d\":1.5,\"b\":true,\"z\":null}",
                                   &pr, &n, &holder, &err),
              IB_E_OK);
    ASSERT_EQ(n, 5);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(pr[i].key, "s") == 0) {
            ASSERT_EQ(pr[i].type, SB_PROP_STRING);
            ASSERT_STREQ(pr[i].str, "x");
        } else if (strcmp(pr[i].key, "i") == 0) {
            ASSERT_EQ(pr[i].type, SB_PROP_INT64);
            ASSERT_EQ(pr[i].i, 42);
        } else if (strcmp(pr[i].key, "d") == 0) {
            ASSERT_EQ(pr[i].type, SB_PROP_DOUBLE);
        } else if (strcmp(pr[i].key, "b") == 0) {
            ASSERT_EQ(pr[i].type, SB_PROP_BOOL);
            ASSERT_EQ(pr[i].i, 1);
        } else if (strcmp(pr[i].key, "z") == 0) {
            ASSERT_EQ(pr[i].type, SB_PROP_NULL);
        } else {
            ASSERT_STREQ(pr[i].key, "(one of s, i, d, b, z)");
        }
    }
    rl_relay_props_free(pr, holder);
    ASSERT_EQ(rl_relay_props_parse(NULL, &pr, &n, &holder, &err), IB_E_OK);
    ASSERT_EQ(n, 0);
    ASSERT_TRUE(pr != NULL); /* room for the trace context the relay adds */
    rl_relay_props_free(pr, holder);
    ASSERT_EQ(rl_relay_props_parse("[1]", &pr, &n, &holder, &err), IB_E_INVALID_JSON);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(rl_relay_props_parse("{bad", &pr, &n, &holder, &err), IB_E_INVALID_JSON);
    /* Nested values are refused like a top-level array, naming the key. */
    ASSERT_EQ(rl_relay_props_parse("{\"s\":\"x\",\"o\":{\"a\":1}}", &pr, &n, &holder, &err),
              IB_E_INVALID_JSON);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, "properties.o is a JSON object");
    ASSERT_TRUE(pr == NULL && holder == NULL && n == 0);
    ASSERT_EQ(rl_relay_props_parse("{\"l\":[1,2]}", &pr, &n, &holder, &err), IB_E_INVALID_JSON);
    ASSERT_CONTAINS(err.text, "properties.l is a JSON array");
}

int main(void)
{
    RUN(test_props_parse);
    return ib_test_done();
}
