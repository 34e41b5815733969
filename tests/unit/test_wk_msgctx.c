/*
 * wk_msgctx: trace ids from traceparent / Diagnostic-Id, and the context
 * properties of a dead letter.
 */
#include <string.h>

#include "ib_test.h"
#include "wk_msgctx.h"

static sb_msg_t with_prop(sb_prop_t *p, const char *key, const char *value)
{
    sb_msg_t m;
    memset(&m, 0, sizeof(m));
    *p = (sb_prop_t){.key = (char *)key, .type = SB_PROP_STRING, .str = (char *)value};
    m.props = p;
    m.nprops = 1;
    return m;
}

static void test_trace_id(void)
{
    char id[WK_TRACE_ID_MAX];
    sb_prop_t p;
    ot_ctx_t ctx;
    sb_msg_t m = with_prop(&p, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    ASSERT_TRUE(wk_trace_id(&m, id));
    ASSERT_STREQ(id, "4bf92f3577b34da6a3ce929d0e0e4736");
    ASSERT_STREQ(wk_trace_parent(&m, &ctx), p.str);
    ASSERT_EQ(ctx.span_id[7], 0xb7);
    ASSERT_EQ(ctx.flags, 1);
    /* One validator (ot_ctx_parse), W3C's: upper-case hex is not a traceparent,
     * for the trace id as for the consumer span's parent and what is carried on. */
    m = with_prop(&p, "traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    ASSERT_TRUE(wk_traceparent(&m) == NULL);
    ASSERT_TRUE(wk_trace_parent(&m, &ctx) == NULL);
    /* Nor is an all-zero parent (span) id. */
    m = with_prop(&p, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    ASSERT_TRUE(wk_traceparent(&m) == NULL);
    m = with_prop(&p, "Diagnostic-Id", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
    ASSERT_TRUE(wk_trace_id(&m, id));
    ASSERT_STREQ(id, "0af7651916cd43dd8448eb211c80319c");
    ASSERT_STREQ(wk_traceparent(&m), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
    m = with_prop(&p, "Diagnostic-Id", "|a1b2c3d4.e5f6.");
    ASSERT_TRUE(wk_trace_id(&m, id));
    ASSERT_STREQ(id, "a1b2c3d4");
    /* A hierarchical id names a trace but is not a traceparent to forward. */
    ASSERT_TRUE(wk_traceparent(&m) == NULL);
    /* Malformed, all-zero or absent: no trace id. */
    m = with_prop(&p, "traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    ASSERT_STREQ(id, "");
    m = with_prop(&p, "traceparent", "00-4bf92f3577b34da6-00f067aa0ba902b7-01");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    m = with_prop(&p, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    m = with_prop(&p, "Diagnostic-Id", "|\"quoted\".1.");
    ASSERT_TRUE(!wk_trace_id(&m, id));
    m = with_prop(&p, "tenant", "t1");
    ASSERT_TRUE(!wk_trace_id(&m, id));
}

static const sb_prop_t *find(const sb_prop_t *p, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].key, key) == 0)
            return &p[i];
    return NULL;
}

static void test_dead_letter_props(void)
{
    sb_prop_t p[WK_DL_PROPS];
    char at[32];
    ib_error_t e;
    ib_error_set(&e, IB_E_DB, IB_CLASS_TRANSIENT, "division by zero");
    strcpy(e.sqlstate, "22012");
    e.native = 7;
    wk_dl_context_t c = {"billing", &e, 3, 2, 1764750000123LL};
    size_t n = wk_dl_props(&c, p, at);
    ASSERT_EQ(n, 7);
    ASSERT_STREQ(find(p, n, "inboxd-consumer")->str, "billing");
    ASSERT_STREQ(find(p, n, "inboxd-error-class")->str, "transient");
    ASSERT_STREQ(find(p, n, "inboxd-sqlstate")->str, "22012");
    ASSERT_EQ(find(p, n, "inboxd-native-error")->i, 7);
    ASSERT_EQ(find(p, n, "inboxd-attempts")->i, 3);
    ASSERT_EQ(find(p, n, "inboxd-route")->i, 2);
    ASSERT_STREQ(find(p, n, "inboxd-failed-at")->str, "2025-12-03T08:20:00.123Z");
    /* No route, no database codes: those keys are left out. */
    ib_error_set(&e, IB_E_NO_ROUTE, IB_CLASS_PERMANENT, "no route");
    c = (wk_dl_context_t){"billing", &e, 0, -1, 1764750000123LL};
    n = wk_dl_props(&c, p, at);
    ASSERT_EQ(n, 4);
    ASSERT_STREQ(find(p, n, "inboxd-error-class")->str, "permanent");
    ASSERT_TRUE(!find(p, n, "inboxd-route") && !find(p, n, "inboxd-sqlstate"));
}

int main(void)
{
    RUN(test_trace_id);
    RUN(test_dead_letter_props);
    return ib_test_done();
}
