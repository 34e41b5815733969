/* Routes: compile-time validation, first-match-wins matching, parameter
 * binding from message fields, properties and JSON paths, and keys. */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_route.h"
#include "rt_route_test.h"

static sb_prop_t props[3];

static void make_msg(sb_msg_t *m, const char *subject, const char *body)
{
    memset(m, 0, sizeof(*m));
    m->message_id = "m-1";
    m->subject = (char *)subject;
    m->sequence_number = 42;
    m->delivery_count = 2;
    m->enqueued_ms = 1764676074123LL; /* 2025-12-02 11:47:54.123 UTC */
    props[0] = (sb_prop_t){"type", SB_PROP_STRING, "OrderPlaced", 0, 0};
    props[1] = (sb_prop_t){"tenant", SB_PROP_INT64, NULL, 7, 0};
    props[2] = (sb_prop_t){"vip", SB_PROP_BOOL, NULL, 1, 0};
    m->props = props;
    m->nprops = 3;
    m->body = (unsigned char *)body;
    m->body_len = body ? strlen(body) : 0;
}

static void test_compile_errors(void)
{
    rt_routes_t rs;
    int n;
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":\"INSERT INTO t VALUES (?, ?)\",\"params\":[\"$.a\"]},"
        "{\"sql\":\"x\"},"
        "{\"match\":{\"subject\":1},\"action\":\"deadletter\"},"
        "{\"match\":\"*\",\"sql\":\"select ?\",\"params\":[\"nonsense\"],\"colour\":1},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{$.a\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"on_permanent\":\"explode\"},"
        "{\"match\":\"*\",\"sql\":[\"select ?\",\"select 1\"],\"params\":[\"$.a\"]},"
        "{\"match\":\"*\",\"sql\":\"select '?'\",\"params\":[]}]",
        &n, &rs);
    ASSERT_CONTAINS(e, "config: routes[0].sql: has 2 '?' placeholders but 1 params");
    ASSERT_CONTAINS(e, "config: routes[1].match: missing");
    ASSERT_CONTAINS(e, "config: routes[2].match.subject: must be a string");
    ASSERT_CONTAINS(e, "config: routes[2].reason: action \"deadletter\" needs");
    ASSERT_CONTAINS(e, "config: routes[3].colour: unknown key");
    ASSERT_CONTAINS(e, "config: routes[3].params: unknown source \"nonsense\"");
    ASSERT_CONTAINS(e, "config: routes[4].idempotency_key: a '{' is never closed");
    ASSERT_CONTAINS(e, "config: routes[5].on_permanent:");
    ASSERT_CONTAINS(e, "config: routes[6].params: with 2 statements");
    ASSERT_NOT_CONTAINS(e, "routes[7]"); /* a quoted '?' is not a placeholder */
    ASSERT_EQ(n, 9);
    free(e);
    rt_routes_free(&rs);
}

static void test_match_first_wins(void)
{
    rt_routes_t rs;
    int n;
    sb_msg_t m;
    char *e = compile_errors(
        "[{\"match\":{\"subject\":\"Skip\"},\"action\":\"complete\"},"
        "{\"match\":{\"property\":{\"type\":\"OrderPlaced\",\"tenant\":7}},\"sql\":\"select 1\"},"
        "{\"match\":{\"subject\":\"Bad\",\"property\":{\"vip\":true}},\"action\":\"deadletter\","
        "\"reason\":\"Rejected\"},"
        "{\"match\":\"*\",\"sql\":\"select 2\"}]",
        &n, &rs);
    ASSERT_EQ(n, 0);
    make_msg(&m, "Skip", "{}");
    ASSERT_EQ(rt_route_index(rt_routes_match(&rs, &m)), 0);
    ASSERT_EQ(rt_route_action(rt_routes_match(&rs, &m)), RT_ACT_COMPLETE);
    make_msg(&m, "Other", "{}");
    ASSERT_EQ(rt_route_index(rt_routes_match(&rs, &m)), 1);
    props[1].i = 8; /* tenant no longer matches */
    ASSERT_EQ(rt_route_index(rt_routes_match(&rs, &m)), 3);
    m.subject = "Bad";
    ASSERT_EQ(rt_route_index(rt_routes_match(&rs, &m)), 2);
    ASSERT_STREQ(rt_route_reason(rt_routes_match(&rs, &m)), "Rejected");
    free(e);
    rt_routes_free(&rs);

    e = compile_errors("[{\"match\":{\"subject\":\"A\"},\"sql\":\"select 1\"}]", &n, &rs);
    make_msg(&m, NULL, "{}");
    ASSERT_TRUE(rt_routes_match(&rs, &m) == NULL); /* no subject: no match */
    free(e);
    rt_routes_free(&rs);
}

static void test_bind_sources(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    int n;
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":[\"insert into t values (?,?,?,?,?,?,?)\","
        "\"update u set x = ? where y = ?\"],"
        "\"params\":[[\"$.order.id\",\"$.items[1].sku\",\"message_id\",\"prop:tenant\","
        "\"enqueued_at\",\"$.order\",{\"const\":\"lit\"}],[\"$['odd key']\",\"correlation_id\"]],"
        "\"idempotency_key\":\"order:{$.order.id}:{prop:type}:{{x}}\"}]",
        &n, &rs);
    ASSERT_EQ(n, 0);
    make_msg(&m, "S",
             "{\"order\":{\"id\":991},\"items\":[{\"sku\":\"a\"},{\"sku\":\"b\"}],"
             "\"odd key\":1.5}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    ASSERT_EQ(b.nstmts, 2);
    ASSERT_EQ(b.stmts[0].nparams, 7);
    ASSERT_EQ(b.stmts[0].params[0].type, DB_PARAM_INT);
    ASSERT_EQ(b.stmts[0].params[0].i, 991);
    ASSERT_STREQ(b.stmts[0].params[1].text, "b");
    ASSERT_STREQ(b.stmts[0].params[2].text, "m-1");
    ASSERT_EQ(b.stmts[0].params[3].i, 7);
    ASSERT_STREQ(b.stmts[0].params[4].text, "2025-12-02 11:47:54.123");
    ASSERT_STREQ(b.stmts[0].params[5].text, "{\"id\":991}");
    ASSERT_STREQ(b.stmts[0].params[6].text, "lit");
    ASSERT_EQ(b.stmts[1].params[0].type, DB_PARAM_FLOAT);
    ASSERT_EQ(b.stmts[1].params[1].type, DB_PARAM_NULL); /* absent correlation id */
    ASSERT_STREQ(b.idempotency_key, "order:991:OrderPlaced:{x}");
    rt_binding_free(&b);

    /* A missing path names the path; a body that is not JSON is InvalidJson. */
    make_msg(&m, "S", "{\"order\":{}}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_MISSING_FIELD);
    ASSERT_CONTAINS(err.text, "$.order.id");
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    rt_binding_free(&b);
    make_msg(&m, "S", "{not json");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_INVALID_JSON);
    rt_binding_free(&b);
    /* The error names kind and position, never a fragment of the body. */
    make_msg(&m, "S", "{\"card\": 4111111111111111 x}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_INVALID_JSON);
    ASSERT_CONTAINS(err.text, "at byte");
    ASSERT_TRUE(strstr(err.text, "4111") == NULL);
    ASSERT_TRUE(strstr(err.text, "card") == NULL);
    ASSERT_TRUE(strstr(err.text, "x}") == NULL);
    rt_binding_free(&b);
    make_msg(&m, "S", NULL);
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_INVALID_JSON);
    rt_binding_free(&b);
    free(e);
    rt_routes_free(&rs);
}

static void test_key_limits(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    int n;
    char body[600];
    char *e = compile_errors("[{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":"
                             "\"k:{$.id}\"}]",
                             &n, &rs);
    ASSERT_EQ(n, 0);
    snprintf(body, sizeof(body), "{\"id\":\"%0500d\"}", 1);
    make_msg(&m, "S", body);
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_INVAL);
    rt_binding_free(&b);
    make_msg(&m, "S", "{\"id\":null}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_MISSING_FIELD);
    rt_binding_free(&b);
    make_msg(&m, "S", "{\"id\":\"x\"}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    ASSERT_STREQ(b.idempotency_key, "k:x");
    rt_binding_free(&b);
    free(e);
    rt_routes_free(&rs);
}

/* The business-key backstop's route options. */
static void test_unique_violation_option(void)
{
    rt_routes_t rs;
    int n;
    char *e = compile_errors(
        "[{\"match\":{\"subject\":\"A\"},\"sql\":\"select 1\",\"on_unique_violation\":\"duplicate\","
        "\"constraints\":[\"ux_a\",\"ux_b\"]},"
        "{\"match\":{\"subject\":\"B\"},\"sql\":\"select 1\",\"on_unique_violation\":\"duplicate\"},"
        "{\"match\":{\"subject\":\"C\"},\"sql\":\"select 1\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"on_unique_violation\":\"ignore\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"constraints\":[\"x\"]},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"on_unique_violation\":\"duplicate\","
        "\"constraints\":[]},"
        "{\"match\":\"*\",\"action\":\"complete\",\"on_unique_violation\":\"duplicate\"}]",
        &n, &rs);
    ASSERT_NOT_CONTAINS(e, "routes[0]");
    ASSERT_NOT_CONTAINS(e, "routes[1]");
    ASSERT_CONTAINS(e, "config: routes[3].on_unique_violation: must be \"duplicate\" or \"permanent\"");
    ASSERT_CONTAINS(e, "config: routes[4].constraints: only allowed with on_unique_violation");
    ASSERT_CONTAINS(e, "config: routes[5].constraints: must be a non-empty array");
    ASSERT_CONTAINS(e, "config: routes[6].on_unique_violation: not allowed with action");
    ASSERT_EQ(n, 4);
    /* Named constraints only; without a list, any unique key; without the option, none. */
    sb_msg_t m;
    make_msg(&m, "A", "{}");
    const rt_route_t *a = rt_routes_match(&rs, &m);
    make_msg(&m, "B", "{}");
    const rt_route_t *b = rt_routes_match(&rs, &m);
    make_msg(&m, "C", "{}");
    const rt_route_t *c = rt_routes_match(&rs, &m);
    ASSERT_TRUE(a && b && c);
    ASSERT_TRUE(rt_route_unique_is_duplicate(a, "ux_b"));
    ASSERT_TRUE(!rt_route_unique_is_duplicate(a, "ux_c"));
    ASSERT_TRUE(!rt_route_unique_is_duplicate(a, ""));
    ASSERT_TRUE(rt_route_unique_is_duplicate(b, ""));
    ASSERT_TRUE(!rt_route_unique_is_duplicate(c, "ux_a"));
    free(e);
    rt_routes_free(&rs);
}

/* Keys that cannot drift: a source that differs between copies, the lock token, constants. */
static void test_key_stable(void)
{
    rt_routes_t rs;
    int n;
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{$.id}:{delivery_count}\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{sequence_number}\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"{enqueued_at}\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{lock_token}\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"always-the-same\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"{{x}}\"},"
        "{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{message_id}:{prop:t}\"}]",
        &n, &rs);
    ASSERT_CONTAINS(e, "config: routes[0].idempotency_key: {delivery_count} differs between copies");
    ASSERT_CONTAINS(e, "config: routes[1].idempotency_key: {sequence_number} differs between copies");
    ASSERT_CONTAINS(e, "config: routes[2].idempotency_key: {enqueued_at} differs between copies");
    ASSERT_CONTAINS(e, "config: routes[3].idempotency_key: {lock_token} is new on every delivery");
    ASSERT_CONTAINS(e, "config: routes[4].idempotency_key: is a constant");
    ASSERT_CONTAINS(e, "config: routes[5].idempotency_key: is a constant");
    ASSERT_NOT_CONTAINS(e, "routes[6]");
    ASSERT_EQ(n, 6);
    free(e);
    rt_routes_free(&rs);
}

/* An HTTP route without a key is valid but warned about: it keys on the message id. */
static void test_http_without_key_warns(void)
{
    rt_routes_t rs;
    int n;
    char *buf = NULL;
    size_t len = 0;
    FILE *fp;
    char *e = compile_errors("[{\"match\":\"*\",\"http\":{\"url\":\"http://x/a\"}},"
                             "{\"match\":\"*\",\"idempotency_key\":\"k:{$.id}\","
                             "\"http\":{\"url\":\"http://x/b\"}},"
                             "{\"match\":\"*\",\"sql\":\"select 1\"}]",
                             &n, &rs);
    ASSERT_EQ(n, 0);
    fp = open_memstream(&buf, &len);
    ASSERT_EQ(rt_routes_warn(&rs, fp), 1);
    fclose(fp);
    ASSERT_CONTAINS(buf, "config: warning: routes[0].idempotency_key: not set, so this HTTP route "
                         "keys its call on the message id");
    ASSERT_NOT_CONTAINS(buf, "routes[1]");
    ASSERT_NOT_CONTAINS(buf, "routes[2]");
    free(buf);
    free(e);
    rt_routes_free(&rs);
}

/* payload_hash: its values, where it is refused, and what "params" hashes. */
static void test_payload_hash(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    int n;
    char h1[65] = "body", h2[65], h3[65];
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":\"select 1\",\"payload_hash\":\"params\"},"
        "{\"match\":\"*\",\"sql\":\"select ?\",\"params\":[\"$.a\"],\"payload_hash\":\"all\"},"
        "{\"match\":\"*\",\"http\":{\"url\":\"http://x/\"},\"payload_hash\":\"params\"},"
        "{\"match\":\"*\",\"action\":\"complete\",\"payload_hash\":\"body\"}]",
        &n, &rs);
    ASSERT_CONTAINS(e, "config: routes[0].payload_hash: \"params\" needs params");
    ASSERT_CONTAINS(e, "config: routes[1].payload_hash: must be \"body\" or \"params\"");
    ASSERT_CONTAINS(e, "config: routes[2].payload_hash: \"params\" is for SQL routes");
    ASSERT_CONTAINS(e, "config: routes[3].payload_hash: not allowed with action");
    ASSERT_EQ(n, 4);
    free(e);
    rt_routes_free(&rs);

    e = compile_errors("[{\"match\":{\"subject\":\"P\"},\"sql\":\"select ?, ?\","
                       "\"params\":[\"$.id\",\"$.n\"],\"payload_hash\":\"params\"},"
                       "{\"match\":\"*\",\"sql\":\"select ?, ?\",\"params\":[\"$.id\",\"$.n\"]}]",
                       &n, &rs);
    ASSERT_EQ(n, 0);
    make_msg(&m, "P", "{\"id\":\"a\",\"n\":5,\"at\":\"10:00\"}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    rt_route_payload_hash(rt_routes_match(&rs, &m), &b, h1);
    rt_binding_free(&b);
    make_msg(&m, "P", "{\"at\":\"10:05\",\"n\":5,\"id\":\"a\"}"); /* same values, another body */
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    rt_route_payload_hash(rt_routes_match(&rs, &m), &b, h2);
    rt_binding_free(&b);
    ASSERT_EQ(strlen(h1), 64);
    ASSERT_STREQ(h1, h2);
    make_msg(&m, "P", "{\"id\":\"a\",\"n\":\"5\",\"at\":\"10:00\"}"); /* "5" is not 5 */
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    rt_route_payload_hash(rt_routes_match(&rs, &m), &b, h3);
    rt_binding_free(&b);
    ASSERT_TRUE(strcmp(h1, h3) != 0);
    make_msg(&m, "B", "{\"id\":\"a\",\"n\":5}"); /* a "body" route leaves the body's hash */
    strcpy(h3, "unchanged");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    rt_route_payload_hash(rt_routes_match(&rs, &m), &b, h3);
    rt_binding_free(&b);
    ASSERT_STREQ(h3, "unchanged");
    free(e);
    rt_routes_free(&rs);
}

int main(void)
{
    RUN(test_compile_errors);
    RUN(test_match_first_wins);
    RUN(test_bind_sources);
    RUN(test_key_limits);
    RUN(test_key_stable);
    RUN(test_http_without_key_warns);
    RUN(test_payload_hash);
    RUN(test_unique_violation_option);
    return ib_test_done();
}
