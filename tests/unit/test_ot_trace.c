/* otel/: W3C traceparent parsing and formatting, the samplers, and the
 * OTLP/JSON body (parsed back with jansson). The protobuf body is decoded
 * with the official opentelemetry-proto definitions by tests/otel. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_test.h"
#include "ot_int.h"

#define TP "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static void test_parse_format(void)
{
    ot_ctx_t c;
    char out[OT_TRACEPARENT_LEN];
    ASSERT_TRUE(ot_ctx_parse(TP, &c));
    ASSERT_TRUE(c.valid);
    ASSERT_EQ(c.flags, 1);
    ASSERT_EQ(c.trace_id[0], 0x0a);
    ASSERT_EQ(c.span_id[7], 0x31);
    ot_ctx_format(&c, out);
    ASSERT_STREQ(out, TP);
    /* a later version may carry more after a '-' */
    ASSERT_TRUE(ot_ctx_parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-extra", &c));
    ASSERT_EQ(c.flags, 0);
}

static void test_parse_refuses(void)
{
    static const char *const bad[] = {
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",    /* short */
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", /* 00 with more */
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   /* version ff */
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",   /* upper case */
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",   /* zero trace */
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",   /* zero span */
        "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "|0af7651916cd43dd8448eb211c80319c.b7ad6b71_1.",              /* a legacy Request-Id */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ot_ctx_t c;
        c.valid = true;
        if (ot_ctx_parse(bad[i], &c) || c.valid)
            IB_FAIL_("accepted \"%s\"", bad[i]);
    }
    ot_ctx_t c;
    ASSERT_TRUE(!ot_ctx_parse(NULL, &c));
}

static void test_samplers(void)
{
    ot_ctx_t sampled, unsampled;
    uint8_t low[16] = {0}, high[16];
    memset(high, 0xff, sizeof(high));
    low[15] = 1;
    ASSERT_TRUE(ot_ctx_parse(TP, &sampled));
    unsampled = sampled;
    unsampled.flags = 0;
    ASSERT_TRUE(ot_sample(OT_SAMPLE_PARENT_ALWAYS_ON, 1.0, NULL, low));
    ASSERT_TRUE(ot_sample(OT_SAMPLE_PARENT_ALWAYS_ON, 1.0, &sampled, low));
    ASSERT_TRUE(!ot_sample(OT_SAMPLE_PARENT_ALWAYS_ON, 1.0, &unsampled, low));
    ASSERT_TRUE(!ot_sample(OT_SAMPLE_PARENT_ALWAYS_OFF, 1.0, NULL, low));
    ASSERT_TRUE(ot_sample(OT_SAMPLE_PARENT_RATIO, 0.5, NULL, low));
    ASSERT_TRUE(!ot_sample(OT_SAMPLE_PARENT_RATIO, 0.5, NULL, high));
    ASSERT_TRUE(ot_sample(OT_SAMPLE_PARENT_RATIO, 0.0, &sampled, high)); /* the parent decides */
    ASSERT_TRUE(!ot_sample(OT_SAMPLE_RATIO, 0.0, &sampled, low));
    ASSERT_TRUE(ot_sample(OT_SAMPLE_ALWAYS_ON, 0.0, &unsampled, high));
}

/* An exporter to a port nobody listens on: spans are built, ended, dropped. */
static ot_exporter_t *exporter(const char *protocol)
{
    ot_options_t o = {.traces_endpoint = "http://127.0.0.1:9/v1/traces", .protocol = protocol,
                      .service_name = "svc", .resource_attributes = "deployment.environment=t%20st",
                      .interval_ms = 50, .timeout_ms = 2000};
    ib_error_t err;
    ot_exporter_t *x = ot_exporter_new(&o, &err);
    if (!x)
        fprintf(stderr, "exporter: %s\n", err.text);
    return x;
}

static void test_json_body(void)
{
    ot_exporter_t *x = exporter("http/json");
    ot_ctx_t parent;
    ot_buf_t body = {0};
    ot_kv_t res[] = {{"service.name", "svc"}};
    json_error_t je;
    ASSERT_TRUE(x && ot_ctx_parse(TP, &parent));
    ot_span_t *s = ot_span_start(x, "process orders", OT_KIND_CONSUMER, &parent, true, 1000);
    ASSERT_TRUE(s != NULL);
    ot_span_str(s, "messaging.system", "servicebus");
    ot_span_int(s, "azure.servicebus.message.delivery_count", 3);
    ot_span_bool(s, "inboxd.duplicate", true);
    ot_span_error(s, "boom \"quoted\"");
    ot_span_link(s, &parent);
    s->end_ns = 2000;
    ASSERT_TRUE(ot_encode_json(res, 1, s, &body));
    json_t *root = json_loadb((const char *)body.p, body.len, 0, &je);
    ASSERT_TRUE(root != NULL);
    json_t *sp = json_array_get(json_object_get(json_array_get(json_object_get(
                     json_array_get(json_object_get(root, "resourceSpans"), 0), "scopeSpans"), 0),
                                                "spans"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(sp, "traceId")),
                 "0af7651916cd43dd8448eb211c80319c");
    ASSERT_STREQ(json_string_value(json_object_get(sp, "parentSpanId")), "b7ad6b7169203331");
    ASSERT_STREQ(json_string_value(json_object_get(sp, "startTimeUnixNano")), "1000");
    ASSERT_EQ(json_integer_value(json_object_get(sp, "kind")), 5);
    ASSERT_EQ(json_integer_value(json_object_get(sp, "flags")), 0x301); /* sampled, remote parent */
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_object_get(json_array_get(json_object_get(sp, "attributes"), 1), "value"),
                     "intValue")), "3");
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(sp, "status"), "code")), 2);
    ASSERT_EQ(json_array_size(json_object_get(sp, "links")), 1);
    json_decref(root);
    ot_buf_free(&body);
    ot_span_free(s);
    ot_exporter_free(x);
}

/* Spans to a collector that is not there are dropped and counted, never kept. */
static void test_drop_counted(void)
{
    ot_exporter_t *x = exporter(NULL);
    ASSERT_TRUE(x != NULL && !ot_exporter_json(x));
    for (int i = 0; i < 10; i++)
        ot_span_end(ot_span_start(x, "s", OT_KIND_INTERNAL, NULL, false, 0), 0);
    for (int i = 0; i < 100 && ot_exporter_dropped(x) < 10; i++)
        usleep(50000);
    ASSERT_EQ(ot_exporter_dropped(x), 10);
    ASSERT_EQ(ot_exporter_exported(x), 0);
    ot_exporter_free(x);
}

static void test_settings_refused(void)
{
    ib_error_t err;
    ot_options_t o = {.endpoint = "http://127.0.0.1:9", .protocol = "grpc"};
    ASSERT_TRUE(ot_exporter_new(&o, &err) == NULL);
    ASSERT_CONTAINS(err.text, "otel.protocol");
    o.protocol = NULL;
    o.sampler = "parentbased_traceidratio";
    o.sampler_arg = "1.5";
    ASSERT_TRUE(ot_exporter_new(&o, &err) == NULL);
    ASSERT_CONTAINS(err.text, "otel.sampler_arg");
    o.sampler_arg = NULL;
    o.headers = "authorization=secret,broken";
    ASSERT_TRUE(ot_exporter_new(&o, &err) == NULL);
    ASSERT_CONTAINS(err.text, "entry 2");
    ASSERT_TRUE(strstr(err.text, "secret") == NULL);
    ot_options_t off = {0};
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    ASSERT_TRUE(ot_exporter_new(&off, &err) == NULL);
    ASSERT_EQ(err.code, 0); /* off, not an error */
}

int main(void)
{
    RUN(test_parse_format);
    RUN(test_parse_refuses);
    RUN(test_samplers);
    RUN(test_json_body);
    RUN(test_drop_counted);
    RUN(test_settings_refused);
    return ib_test_done();
}
