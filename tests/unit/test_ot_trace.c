/* otel/: W3C traceparent parsing and formatting, the samplers, the
 * OTLP/JSON body (parsed back with jansson) and a span's links in both
 * bodies (the protobuf one read back with a small wire-format reader here;
 * tests/otel decodes whole bodies with the official opentelemetry-proto
 * definitions). */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib_test.h"
#include "ib_time.h"
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

/*
 * The default sampler follows a sender's decision and starts 1 trace in 100
 * of its own; ot_span_start_keep gives no span where nothing would use it.
 */
static void test_default_sampler_keep(void)
{
    ot_options_t o = {.traces_endpoint = "http://127.0.0.1:9/v1/traces", .interval_ms = 50};
    ib_error_t err;
    ot_exporter_t *x = ot_exporter_new(&o, &err);
    ot_sampler_t sampler;
    double ratio;
    ot_ctx_t sampled, unsampled;
    unsigned roots = 0;
    ASSERT_TRUE(x != NULL);
    ot_exporter_sampler(x, &sampler, &ratio);
    ASSERT_TRUE(sampler == OT_SAMPLE_PARENT_RATIO);
    ASSERT_TRUE(ratio == OT_DEFAULT_ROOT_RATIO);
    ASSERT_TRUE(ot_ctx_parse(TP, &sampled));
    unsampled = sampled;
    unsampled.flags = 0;
    for (int i = 0; i < 10000; i++) {
        ot_span_t *s = ot_span_start_keep(x, "r", OT_KIND_CONSUMER, NULL, true, 0,
                                          OT_KEEP_PROPAGATED);
        if (s) {
            ASSERT_TRUE(ot_span_recording(s));
            roots++;
        }
        ot_span_drop(s);
    }
    fprintf(stderr, "roots recorded of 10000: %u\n", roots);
    ASSERT_TRUE(roots >= 50 && roots <= 160); /* 100 expected; outside is ~1e-6 likely */
    ot_span_t *p = ot_span_start_keep(x, "p", OT_KIND_CONSUMER, &sampled, true, 0,
                                      OT_KEEP_PROPAGATED);
    ASSERT_TRUE(ot_span_recording(p)); /* the sender's "sampled" is followed */
    ot_span_t *u = ot_span_start_keep(x, "u", OT_KIND_CONSUMER, &unsampled, true, 0,
                                      OT_KEEP_PROPAGATED);
    ASSERT_TRUE(u && !ot_span_recording(u)); /* kept: its context goes on, unsampled */
    ASSERT_TRUE(ot_span_start_keep(x, "leaf", OT_KIND_CLIENT, ot_span_ctx(u), false, 0,
                                   OT_KEEP_RECORDED) == NULL);
    ot_span_t *f = ot_span_start_keep(x, "f", OT_KIND_INTERNAL, NULL, false, 0, OT_KEEP_FORCED);
    ASSERT_TRUE(ot_span_recording(f));
    ot_span_drop(f);
    ot_span_drop(u);
    ot_span_drop(p);
    ot_exporter_free(x);
    /* A sampler named without its argument takes OpenTelemetry's ratio, 1. */
    o.sampler = "parentbased_traceidratio";
    ASSERT_TRUE((x = ot_exporter_new(&o, &err)) != NULL);
    ot_exporter_sampler(x, &sampler, &ratio);
    ASSERT_TRUE(ratio == 1.0);
    ot_exporter_free(x);
}

/* An exporter to a port nobody listens on: spans are built, ended, dropped. */
static ot_exporter_t *exporter(const char *protocol)
{
    ot_options_t o = {.traces_endpoint = "http://127.0.0.1:9/v1/traces", .protocol = protocol,
                      .service_name = "svc", .resource_attributes = "deployment.environment=t%20st",
                      .interval_ms = 50, .timeout_ms = 2000,
                      .sampler = "parentbased_always_on"};
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

/* ---- a protobuf wire-format reader, enough to walk to the links ---- */

static uint64_t rd_varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int sh = 0; *p < end && sh < 64; sh += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            break;
    }
    return v;
}

/*
 * The n-th (0-based) occurrence of field in the message [p, end): its bytes
 * (length-delimited) or, for fixed32, its 4 bytes. NULL when absent.
 */
static const uint8_t *pb_find(const uint8_t *p, const uint8_t *end, unsigned field, int n,
                              size_t *len)
{
    while (p < end) {
        uint64_t key = rd_varint(&p, end);
        unsigned f = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
        size_t l = wt == 0 ? 0 : wt == 1 ? 8 : wt == 5 ? 4 : 0;
        if (wt == 0)
            rd_varint(&p, end);
        else if (wt == 2)
            l = (size_t)rd_varint(&p, end);
        if (f == field && n-- == 0) {
            *len = l;
            return p;
        }
        p += l;
    }
    return NULL;
}

static const char *hex_of(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    return out;
}

#define TP2 "00-11111111111111111111111111111111-2222222222222222-01"
#define TP3 "00-33333333333333333333333333333333-4444444444444444-00"

/* A batch's span links to the message spans it carries: OTLP Span.links = 13. */
static void test_links_encoded(void)
{
    ot_exporter_t *x = exporter(NULL);
    ot_ctx_t a, b;
    ot_buf_t pb = {0}, js = {0};
    ot_kv_t res[] = {{"service.name", "svc"}};
    const uint8_t *rs, *ss, *sp, *lk, *f;
    size_t n, l;
    char hex[40];
    ASSERT_TRUE(x && ot_ctx_parse(TP2, &a) && ot_ctx_parse(TP3, &b));
    ot_span_t *s = ot_span_start_const(x, "inbox batch", OT_KIND_INTERNAL, NULL, false, 1000);
    ASSERT_TRUE(s != NULL);
    ot_span_str_const(s, "db.system.name", "postgresql");
    for (int i = 0; i < 9; i++) /* past the first growth of the array */
        ot_span_link(s, i % 2 ? &b : &a);
    ot_span_link(s, NULL); /* ignored */
    s->end_ns = 2000;
    ASSERT_TRUE(ot_encode_protobuf(res, 1, s, &pb));
    ASSERT_TRUE((rs = pb_find(pb.p, pb.p + pb.len, 1, 0, &n)) != NULL);
    ASSERT_TRUE((ss = pb_find(rs, rs + n, 2, 0, &n)) != NULL);
    ASSERT_TRUE((sp = pb_find(ss, ss + n, 2, 0, &n)) != NULL);
    ASSERT_TRUE((f = pb_find(sp, sp + n, 5, 0, &l)) != NULL);
    ASSERT_EQ(l, 11);
    ASSERT_TRUE(memcmp(f, "inbox batch", 11) == 0);
    for (int i = 0; i < 9; i++) {
        size_t ln;
        ASSERT_TRUE((lk = pb_find(sp, sp + n, 13, i, &ln)) != NULL);
        ASSERT_TRUE((f = pb_find(lk, lk + ln, 1, 0, &l)) != NULL && l == 16);
        ASSERT_STREQ(hex_of(f, 16, hex), i % 2 ? "33333333333333333333333333333333"
                                               : "11111111111111111111111111111111");
        ASSERT_TRUE((f = pb_find(lk, lk + ln, 2, 0, &l)) != NULL && l == 8);
        ASSERT_STREQ(hex_of(f, 8, hex), i % 2 ? "4444444444444444" : "2222222222222222");
        ASSERT_TRUE((f = pb_find(lk, lk + ln, 6, 0, &l)) != NULL && l == 4);
        ASSERT_EQ(f[0], i % 2 ? 0 : 1); /* the linked span's W3C flags */
    }
    ASSERT_TRUE(pb_find(sp, sp + n, 13, 9, &l) == NULL);
    ASSERT_TRUE(ot_encode_json(res, 1, s, &js));
    json_error_t je;
    json_t *root = json_loadb((const char *)js.p, js.len, 0, &je);
    json_t *jsp = json_array_get(json_object_get(json_array_get(json_object_get(
                      json_array_get(json_object_get(root, "resourceSpans"), 0), "scopeSpans"), 0),
                                                 "spans"), 0);
    json_t *links = json_object_get(jsp, "links");
    ASSERT_EQ(json_array_size(links), 9);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(links, 1), "traceId")),
                 "33333333333333333333333333333333");
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(links, 1), "spanId")),
                 "4444444444444444");
    ASSERT_STREQ(json_string_value(json_object_get(jsp, "name")), "inbox batch");
    json_decref(root);
    ot_buf_free(&pb);
    ot_buf_free(&js);
    ot_span_free(s);
    ot_exporter_free(x);
}

/* The key of the i-th attribute (Span.attributes = 9) of the first span of a protobuf body. */
static bool pb_attr_key(const ot_buf_t *pb, int i, const char *want)
{
    const uint8_t *rs, *ss, *sp, *kv, *k;
    size_t n, l;
    if (!(rs = pb_find(pb->p, pb->p + pb->len, 1, 0, &n)) || !(ss = pb_find(rs, rs + n, 2, 0, &n)) ||
        !(sp = pb_find(ss, ss + n, 2, 0, &n)) || !(kv = pb_find(sp, sp + n, 9, i, &l)) ||
        !(k = pb_find(kv, kv + l, 1, 0, &n)))
        return want == NULL;
    return want && n == strlen(want) && memcmp(k, want, n) == 0;
}

/* A shared set's attributes come first, in both encodings, then the span's own. */
static void test_shared_attrs(void)
{
    ot_exporter_t *x = exporter(NULL);
    ot_shared_t set = {0};
    ot_buf_t pb = {0}, js = {0};
    ot_kv_t res[] = {{"service.name", "svc"}};
    json_error_t je;
    ot_shared_add(&set, "messaging.system", "servicebus");
    ot_shared_add(&set, "messaging.destination.subscription.name", NULL); /* skipped */
    ot_shared_add(&set, "messaging.operation.type", "settle");
    ASSERT_EQ(set.n, 2);
    ot_span_t *s = ot_span_start_const(x, "complete", OT_KIND_CLIENT, NULL, false, 1000);
    ASSERT_TRUE(s != NULL);
    ot_span_shared(s, &set);
    ot_span_str(s, "inboxd.subject", "Item");
    s->end_ns = 2000;
    ASSERT_TRUE(ot_encode_protobuf(res, 1, s, &pb));
    ASSERT_TRUE(pb_attr_key(&pb, 0, "messaging.system"));
    ASSERT_TRUE(pb_attr_key(&pb, 1, "messaging.operation.type"));
    ASSERT_TRUE(pb_attr_key(&pb, 2, "inboxd.subject"));
    ASSERT_TRUE(pb_attr_key(&pb, 3, NULL));
    ASSERT_TRUE(ot_encode_json(res, 1, s, &js));
    json_t *root = json_loadb((const char *)js.p, js.len, 0, &je);
    json_t *attrs = json_object_get(
        json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
                           json_object_get(root, "resourceSpans"), 0), "scopeSpans"), 0), "spans"), 0),
        "attributes");
    ASSERT_EQ(json_array_size(attrs), 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(attrs, 1), "key")),
                 "messaging.operation.type");
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_object_get(json_array_get(attrs, 1), "value"), "stringValue")), "settle");
    json_decref(root);
    ot_buf_free(&pb);
    ot_buf_free(&js);
    ot_span_free(s);
    ot_exporter_free(x);
}

/* A span that is not recorded keeps no links (nothing to export). */
static void test_links_unrecorded(void)
{
    ot_exporter_t *x = exporter(NULL);
    ot_ctx_t a, off;
    ASSERT_TRUE(x && ot_ctx_parse(TP2, &a) && ot_ctx_parse(TP3, &off));
    ot_span_t *s = ot_span_start(x, "m", OT_KIND_CONSUMER, &off, true, 0); /* parent unsampled */
    ASSERT_TRUE(s != NULL && !s->recording);
    ot_span_link(s, &a);
    ASSERT_EQ(s->nlinks, 0);
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

/* A collector that takes connections and never answers: a listening socket nobody accepts on. */
static int hung_collector(char *url, size_t size)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    snprintf(url, size, "http://127.0.0.1:%d/v1/traces", ntohs(a.sin_port));
    return fd;
}

/*
 * At stop, traces get OT_STOP_MS: a request under way to a collector that
 * never answers is cut short then, not at its 10 s timeout, and the spans
 * queued behind it are not sent to it.
 */
static void test_stop_bounded(void)
{
    char url[64];
    int fd = hung_collector(url, sizeof url);
    ASSERT_TRUE(fd >= 0);
    ot_options_t o = {.traces_endpoint = url, .interval_ms = 50, .timeout_ms = 10000,
                      .sampler = "always_on"};
    ib_error_t err;
    ot_exporter_t *x = ot_exporter_new(&o, &err);
    ASSERT_TRUE(x != NULL);
    for (int i = 0; i < 10; i++)
        ot_span_end(ot_span_start(x, "s", OT_KIND_INTERNAL, NULL, false, 0), 0);
    usleep(300000); /* the first batch is under way, unanswered */
    for (int i = 0; i < 10; i++)
        ot_span_end(ot_span_start(x, "s", OT_KIND_INTERNAL, NULL, false, 0), 0);
    ASSERT_EQ(ot_exporter_dropped(x) + ot_exporter_exported(x), 0);
    long long t0 = ib_mono_ms();
    ot_exporter_free(x);
    long long took = ib_mono_ms() - t0;
    fprintf(stderr, "stop with a hung collector: %lld ms\n", took);
    ASSERT_TRUE(took >= OT_STOP_MS - 50 && took < OT_STOP_MS + ib_test_timeout(1.0) * 1000);
    close(fd);
}

/*
 * A collector on one kept connection: records each request's body and
 * answers 200, the first only once let go (hold), so that what is queued
 * meanwhile goes out in one take, cut into batches.
 */
typedef struct collector {
    int fd, n;
    atomic_int got, hold;
    ot_buf_t body[8];
} collector_t;

/* Reads into b until it holds want bytes; false at the connection's end. */
static bool read_to(int conn, ot_buf_t *b, size_t want)
{
    while (b->len < want) {
        ssize_t r = read(conn, b->p + b->len, b->cap - b->len);
        if (r <= 0)
            return false;
        b->len += (size_t)r;
    }
    return true;
}

static void *collect(void *arg)
{
    collector_t *c = arg;
    ot_buf_t in = {malloc(1 << 16), 0, 1 << 16, false};
    int conn = accept(c->fd, NULL, NULL);
    while (conn >= 0 && c->n < 8) {
        char *end;
        while (!(end = memmem(in.p, in.len, "\r\n\r\n", 4)))
            if (!read_to(conn, &in, in.len + 1))
                goto out;
        size_t head = (size_t)(end + 4 - (char *)in.p);
        const char *cl = strcasestr((const char *)in.p, "content-length:");
        size_t len = cl ? strtoul(cl + 15, NULL, 10) : 0;
        if (!read_to(conn, &in, head + len))
            break;
        ot_buf_t *b = &c->body[c->n++];
        *b = (ot_buf_t){malloc(len + 1), len, len + 1, false};
        memcpy(b->p, in.p + head, len);
        atomic_store(&c->got, c->n);
        while (c->n == 1 && atomic_load(&c->hold))
            usleep(1000);
        const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        if (write(conn, ok, sizeof(ok) - 1) != (ssize_t)sizeof(ok) - 1)
            break;
        memmove(in.p, in.p + head + len, in.len - head - len);
        in.len -= head + len;
    }
out:
    if (conn >= 0)
        close(conn);
    free(in.p);
    return NULL;
}

/* The span names of a request body, in order, comma-separated; and its spans' count. */
static int body_names(const ot_buf_t *b, bool json, char *names, size_t size)
{
    int n = 0;
    if (json) {
        json_error_t je;
        json_t *root = json_loadb((const char *)b->p, b->len, 0, &je);
        json_t *spans = json_object_get(json_array_get(json_object_get(json_array_get(
                            json_object_get(root, "resourceSpans"), 0), "scopeSpans"), 0), "spans");
        for (size_t i = 0; i < json_array_size(spans); i++, n++)
            snprintf(names + strlen(names), size - strlen(names), "%s,",
                     json_string_value(json_object_get(json_array_get(spans, i), "name")));
        json_decref(root);
        return n;
    }
    const uint8_t *rs, *ss, *sp, *f;
    size_t l, ln;
    if (!(rs = pb_find(b->p, b->p + b->len, 1, 0, &l)) || !pb_find(rs, rs + l, 1, 0, &ln) ||
        !(ss = pb_find(rs, rs + l, 2, 0, &l)))
        return -1; /* no resource, or no scope spans */
    for (; (sp = pb_find(ss, ss + l, 2, n, &ln)) && (f = pb_find(sp, sp + ln, 5, 0, &ln)); n++)
        snprintf(names + strlen(names), size - strlen(names), "%.*s,", (int)ln, (const char *)f);
    return n;
}

/* Spans queued while a request is under way go out in batch_max requests, in order. */
static void test_batches(void)
{
    for (int json = 0; json < 2; json++) {
        collector_t c = {.fd = -1};
        char url[64], names[256] = "";
        pthread_t th;
        atomic_init(&c.got, 0);
        atomic_init(&c.hold, 1);
        ASSERT_TRUE((c.fd = hung_collector(url, sizeof url)) >= 0);
        ASSERT_TRUE(pthread_create(&th, NULL, collect, &c) == 0);
        ot_options_t o = {.traces_endpoint = url, .protocol = json ? "http/json" : NULL,
                          .batch_max = 2, .interval_ms = 10000, .sampler = "always_on"};
        ib_error_t err;
        ot_exporter_t *x = ot_exporter_new(&o, &err);
        ASSERT_TRUE(x != NULL);
        for (int i = 0; i < 7; i++) {
            char name[8];
            snprintf(name, sizeof name, "s%d", i);
            ot_span_end(ot_span_start(x, name, OT_KIND_INTERNAL, NULL, false, 0), 0);
            for (int k = 0; i == 1 && k < 5000 && atomic_load(&c.got) < 1; k++)
                usleep(1000); /* the first request is under way, held */
        }
        atomic_store(&c.hold, 0);
        for (int k = 0; k < 5000 && ot_exporter_exported(x) < 7; k++)
            usleep(1000);
        ASSERT_EQ(ot_exporter_exported(x), 7);
        ot_exporter_free(x);
        shutdown(c.fd, SHUT_RDWR);
        pthread_join(th, NULL);
        close(c.fd);
        ASSERT_EQ(c.n, 4);
        for (int i = 0; i < c.n; i++) {
            ASSERT_EQ(body_names(&c.body[i], json, names, sizeof names), i < 3 ? 2 : 1);
            ot_buf_free(&c.body[i]);
        }
        ASSERT_STREQ(names, "s0,s1,s2,s3,s4,s5,s6,");
    }
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
    RUN(test_default_sampler_keep);
    RUN(test_json_body);
    RUN(test_links_encoded);
    RUN(test_links_unrecorded);
    RUN(test_shared_attrs);
    RUN(test_drop_counted);
    RUN(test_stop_bounded);
    RUN(test_batches);
    RUN(test_settings_refused);
    return ib_test_done();
}
