/*
 * Route emits without a broker: check-config errors for emit (a missing or
 * non-deterministic message_id says why), binding an emit into the outbox
 * insert's nine parameters (templates, the correlation id and the trace
 * context handed in carried over, JSON bodies), emit_on_failure.
 */
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "sb_msg.h"
#include "rt_route.h"
#include "rt_route_test.h"

#define ROUTE(emit) "[{\"match\":\"*\",\"sql\":\"SELECT 1\",\"emit\":" emit "}]"

static void test_emit_errors(void)
{
    static const struct {
        const char *emit, *want;
    } cases[] = {
        {"[{\"entity\":\"q\"}]", "routes[0].emit[0].message_id: missing: every emitted message "
                                 "needs a deterministic message id"},
        {"[{\"entity\":\"q\",\"message_id\":\"s:{sequence_number}\"}]",
         "{sequence_number} differs between copies of one message"},
        {"[{\"entity\":\"q\",\"message_id\":\"x-{delivery_count}\"}]", "differs between copies"},
        {"[{\"entity\":\"q\",\"message_id\":\"fixed\"}]", "is a constant"},
        {"[{\"message_id\":\"{message_id}\"}]", "routes[0].emit[0].entity: must be a queue"},
        {"[{\"entity\":\"q\",\"message_id\":\"{message_id}\",\"colour\":1}]",
         "routes[0].emit[0].colour: unknown key"},
        {"[{\"entity\":\"q\",\"message_id\":\"{nonsense}\"}]", "unknown source {nonsense}"},
        {"[{\"entity\":\"q\",\"message_id\":\"{message_id}\",\"body\":\"nonsense\"}]",
         "emit[0].body: unknown source"},
        {"[{\"entity\":\"q\",\"message_id\":\"{message_id}\",\"properties\":[1]}]",
         "emit[0].properties: must be an object"},
        {"{}", "routes[0].emit: must be a non-empty array"},
        {"[]", "routes[0].emit: must be a non-empty array"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char route[512];
        rt_routes_t rs;
        int n;
        snprintf(route, sizeof(route), ROUTE("%s"), cases[i].emit);
        char *e = compile_errors(route, &n, &rs);
        ASSERT_TRUE(n >= 1);
        ASSERT_CONTAINS(e, cases[i].want);
        free(e);
        rt_routes_free(&rs);
    }
}

static sb_prop_t props[2];
/* The context the worker hands in (its consumer span when tracing is on): not the property. */
#define SPAN_TP "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"

static void make_msg(sb_msg_t *m, const char *body)
{
    memset(m, 0, sizeof(*m));
    m->message_id = "order-msg-1";
    m->subject = "OrderAccepted";
    m->content_type = "text/plain";
    m->sequence_number = 42;
    props[0] = (sb_prop_t){"traceparent", SB_PROP_STRING,
                           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 0, 0};
    props[1] = (sb_prop_t){"tenant", SB_PROP_INT64, NULL, 7, 0};
    m->props = props;
    m->nprops = 2;
    m->body = (unsigned char *)body;
    m->body_len = strlen(body);
}

static void test_emit_bind(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    size_t n;
    int problems;
    const db_stmt_t *em;
    char *e = compile_errors(
        ROUTE("[{\"entity\":\"shipments\",\"message_id\":\"shipment:{$.orderId}\","
              "\"subject\":\"ShipmentRequested\",\"session_id\":\"{$.customerId}\","
              "\"body\":\"$.shipping\","
              "\"properties\":{\"source\":{\"const\":\"orders\"},\"orderId\":\"$.orderId\","
              "\"tenant\":\"prop:tenant\"}},"
              "{\"entity\":\"audit\",\"message_id\":\"audit:{message_id}\","
              "\"correlation_id\":\"c-{$.orderId}\"}]"),
        &problems, &rs);
    ASSERT_EQ(problems, 0);
    free(e);
    ASSERT_TRUE(rt_routes_emit(&rs));
    ASSERT_TRUE(rt_routes_set_outbox(&rs, "inboxd_outbox"));
    make_msg(&m, "{\"orderId\":\"o-7\",\"customerId\":\"c-3\",\"shipping\":{\"city\":\"Bern\"}}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, SPAN_TP, &b, &err), IB_E_OK);
    ASSERT_EQ(b.nstmts, 3); /* SELECT 1, then two outbox inserts */
    ASSERT_EQ(b.nemits, 2);
    em = rt_binding_emits(&b, &n);
    ASSERT_EQ(n, 2);
    ASSERT_TRUE(em == b.stmts + 1);
    ASSERT_CONTAINS(em[0].sql, "INSERT INTO inboxd_outbox (entity, message_id, session_id");
    ASSERT_EQ(em[0].nparams, 9);
    const db_param_t *p = em[0].params;
    ASSERT_STREQ(p[0].text, "shipments");
    ASSERT_STREQ(p[1].text, "shipment:o-7");
    ASSERT_STREQ(p[2].text, "c-3");
    ASSERT_STREQ(p[3].text, "ShipmentRequested");
    ASSERT_STREQ(p[4].text, "order-msg-1"); /* correlation id: the incoming message id */
    ASSERT_STREQ(p[5].text, "application/json");
    ASSERT_CONTAINS(p[6].text, "\"source\":\"orders\"");
    ASSERT_CONTAINS(p[6].text, "\"orderId\":\"o-7\"");
    ASSERT_CONTAINS(p[6].text, "\"tenant\":7");
    ASSERT_CONTAINS(p[6].text, "\"traceparent\":\"" SPAN_TP "\"");
    ASSERT_CONTAINS(p[6].text, "\"Diagnostic-Id\":\"" SPAN_TP "\"");
    ASSERT_STREQ(p[7].text, "{\"city\":\"Bern\"}");
    /* trace_context: the context handed in, which the message carries on */
    ASSERT_STREQ(p[8].text, SPAN_TP);
    p = em[1].params;
    ASSERT_STREQ(p[0].text, "audit");
    ASSERT_STREQ(p[1].text, "audit:order-msg-1");
    ASSERT_EQ(p[2].type, DB_PARAM_NULL);
    ASSERT_EQ(p[3].type, DB_PARAM_NULL);
    ASSERT_STREQ(p[4].text, "c-o-7");
    ASSERT_STREQ(p[5].text, "text/plain"); /* the incoming body, with its content type */
    ASSERT_CONTAINS(p[6].text, "traceparent");
    ASSERT_CONTAINS(p[7].text, "\"shipping\"");
    ASSERT_STREQ(p[8].text, SPAN_TP);
    rt_binding_free(&b);

    /* No context handed in: trace_context is NULL (the relay then falls back, else a new trace). */
    make_msg(&m, "{\"orderId\":\"o-8\",\"customerId\":\"c-3\",\"shipping\":{}}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    em = rt_binding_emits(&b, &n);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(em[0].params[8].type, DB_PARAM_NULL);
    ASSERT_EQ(em[1].params[8].type, DB_PARAM_NULL);
    rt_binding_free(&b);

    /* A path an emit needs is missing: a permanent MissingField, nothing bound. */
    make_msg(&m, "{\"customerId\":\"c-3\"}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_MISSING_FIELD);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    rt_binding_free(&b);
    rt_routes_free(&rs);
}

static void test_no_emit(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    size_t n = 9;
    int problems;
    free(compile_errors("[{\"match\":\"*\",\"sql\":\"SELECT 1\"}]", &problems, &rs));
    ASSERT_EQ(problems, 0);
    ASSERT_TRUE(!rt_routes_emit(&rs));
    make_msg(&m, "{}");
    ASSERT_EQ(rt_route_bind(rt_routes_match(&rs, &m), &m, NULL, &b, &err), IB_E_OK);
    ASSERT_EQ(b.nstmts, 1);
    ASSERT_TRUE(rt_binding_emits(&b, &n) == NULL);
    ASSERT_EQ(n, 0);
    rt_binding_free(&b);
    rt_routes_free(&rs);
}

#define FROUTE(rej) "[{\"match\":\"*\",\"sql\":\"SELECT 1\",\"emit_on_failure\":" rej "}]"

/* emit_on_failure is checked like emit, under its own name; {error} never names the event. */
static void test_reject_errors(void)
{
    static const struct {
        const char *rej, *want;
    } cases[] = {
        {"[{\"entity\":\"q\"}]", "routes[0].emit_on_failure[0].message_id: missing"},
        {"[{\"entity\":\"q\",\"message_id\":\"r:{delivery_count}\"}]",
         "emit_on_failure[0].message_id: {delivery_count} differs between copies"},
        {"[{\"entity\":\"q\",\"message_id\":\"r:{error}\"}]",
         "emit_on_failure[0].message_id: {error} is a driver's or a destination's text"},
        {"[{\"entity\":\"q\",\"message_id\":\"r:{reason}\"}]",
         "emit_on_failure[0].message_id: is a constant"},
        {"[{\"entity\":\"q\",\"message_id\":\"{message_id}\",\"colour\":1}]",
         "routes[0].emit_on_failure[0].colour: unknown key"},
        {"[]", "routes[0].emit_on_failure: must be a non-empty array"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char route[512];
        rt_routes_t rs;
        int n;
        snprintf(route, sizeof(route), FROUTE("%s"), cases[i].rej);
        char *e = compile_errors(route, &n, &rs);
        ASSERT_TRUE(n >= 1);
        ASSERT_CONTAINS(e, cases[i].want);
        free(e);
        rt_routes_free(&rs);
    }
    /* The failure's sources belong to emit_on_failure only. */
    rt_routes_t rs;
    int n;
    char *e = compile_errors(ROUTE("[{\"entity\":\"q\",\"message_id\":\"{message_id}\","
                                   "\"subject\":\"{reason}\"}]"),
                             &n, &rs);
    ASSERT_EQ(n, 1);
    ASSERT_CONTAINS(e, "routes[0].emit[0].subject: unknown source {reason}");
    free(e);
    rt_routes_free(&rs);
    e = compile_errors("[{\"match\":\"*\",\"action\":\"complete\",\"emit_on_failure\":[]}]", &n,
                       &rs);
    ASSERT_CONTAINS(e, "routes[0].emit_on_failure: not allowed with action");
    free(e);
    rt_routes_free(&rs);
}

/*
 * A rejection bound over a failure: templates and properties read reason,
 * error_class and error; the default body describes the failure as JSON;
 * the route's own emits are not part of it; the description is sanitised
 * and bounded.
 */
static void test_reject_bind(void)
{
    rt_routes_t rs;
    rt_binding_t b;
    ib_error_t err;
    sb_msg_t m;
    size_t n;
    int problems;
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":\"SELECT 1\","
        "\"emit\":[{\"entity\":\"shipments\",\"message_id\":\"ship:{$.orderId}\"}],"
        "\"emit_on_failure\":[{\"entity\":\"rejections\",\"message_id\":\"{message_id}:rejected\","
        "\"subject\":\"OrderRejected.{reason}\",\"properties\":{\"class\":\"error_class\","
        "\"why\":\"error\",\"orderId\":\"$.orderId\"}},"
        "{\"entity\":\"audit\",\"message_id\":\"audit:{$.orderId}:{reason}\",\"body\":\"error\","
        "\"content_type\":\"text/plain\"}]}]",
        &problems, &rs);
    ASSERT_EQ(problems, 0);
    free(e);
    ASSERT_TRUE(rt_routes_emit(&rs));
    ASSERT_TRUE(rt_routes_set_outbox(&rs, "inboxd_outbox"));
    make_msg(&m, "{\"orderId\":\"o-9\"}");
    const rt_route_t *r = rt_routes_match(&rs, &m);
    ASSERT_TRUE(rt_route_rejects(r));
    char error[1500];
    memset(error, 'x', sizeof(error) - 1);
    error[sizeof(error) - 1] = '\0';
    memcpy(error, "HTTP 422: \xff bad", 15); /* an invalid byte and more than the bound */
    rt_failure_t f = {"HandlerError", "permanent", error};
    ASSERT_EQ(rt_route_bind_rejection(r, &m, NULL, &f, &b, &err), IB_E_OK);
    ASSERT_EQ(b.nstmts, 2); /* the rejections only, not the route's emit */
    const db_stmt_t *em = rt_binding_emits(&b, &n);
    ASSERT_EQ(n, 2);
    ASSERT_TRUE(em == b.stmts);
    const db_param_t *p = em[0].params;
    ASSERT_STREQ(p[0].text, "rejections");
    ASSERT_STREQ(p[1].text, "order-msg-1:rejected");
    ASSERT_STREQ(p[3].text, "OrderRejected.HandlerError");
    ASSERT_STREQ(p[4].text, "order-msg-1");
    ASSERT_STREQ(p[5].text, "application/json");
    ASSERT_CONTAINS(p[6].text, "\"class\":\"permanent\"");
    ASSERT_CONTAINS(p[6].text, "\"why\":\"HTTP 422: \xef\xbf\xbd bad");
    ASSERT_CONTAINS(p[6].text, "\"orderId\":\"o-9\"");
    ASSERT_CONTAINS(p[6].text, "\"causation-id\":\"order-msg-1\"");
    json_t *body = json_loads(p[7].text, 0, NULL);
    ASSERT_TRUE(body != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(body, "message_id")), "order-msg-1");
    ASSERT_STREQ(json_string_value(json_object_get(body, "reason")), "HandlerError");
    ASSERT_STREQ(json_string_value(json_object_get(body, "error_class")), "permanent");
    const char *why = json_string_value(json_object_get(body, "error"));
    ASSERT_TRUE(why && strlen(why) <= RT_FAILURE_ERROR_MAX && strncmp(why, "HTTP 422: ", 10) == 0);
    json_decref(body);
    p = em[1].params;
    ASSERT_STREQ(p[0].text, "audit");
    ASSERT_STREQ(p[1].text, "audit:o-9:HandlerError");
    ASSERT_STREQ(p[5].text, "text/plain");
    ASSERT_TRUE(strncmp(p[7].text, "HTTP 422: \xef\xbf\xbd bad", 17) == 0);
    ASSERT_TRUE(strlen(p[7].text) <= RT_FAILURE_ERROR_MAX);
    rt_binding_free(&b);

    /* A source the rejection needs is missing: it fails, nothing bound. */
    make_msg(&m, "{}");
    ASSERT_EQ(rt_route_bind_rejection(r, &m, NULL, &f, &b, &err), IB_E_MISSING_FIELD);
    rt_binding_free(&b);
    /* The route's own bind never includes the rejections. */
    make_msg(&m, "{\"orderId\":\"o-9\"}");
    ASSERT_EQ(rt_route_bind(r, &m, NULL, &b, &err), IB_E_OK);
    ASSERT_EQ(b.nemits, 1);
    ASSERT_STREQ(b.stmts[1].params[0].text, "shipments");
    rt_binding_free(&b);
    rt_routes_free(&rs);

    /* A route without emit_on_failure rejects nothing. */
    free(compile_errors("[{\"match\":\"*\",\"sql\":\"SELECT 1\"}]", &problems, &rs));
    ASSERT_TRUE(!rt_route_rejects(rt_routes_match(&rs, &m)));
    ASSERT_TRUE(!rt_routes_emit(&rs));
    rt_routes_free(&rs);
}

int main(void)
{
    RUN(test_emit_errors);
    RUN(test_reject_errors);
    RUN(test_reject_bind);
    RUN(test_emit_bind);
    RUN(test_no_emit);
    return ib_test_done();
}
