/* HTTP routes: every field of the "http" section checked at compile time
 * (unknown fields refused, secrets only from the environment and masked),
 * the lease checks, and binding a request and the finishing statements. */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_route.h"
#include "rt_route_test.h"

/* Compiles text (one route) and returns the problem lines (caller frees). */
static char *compile(const char *route, int *n, rt_routes_t *rs)
{
    char arr[4096];
    snprintf(arr, sizeof arr, "[%s]", route);
    return compile_errors(arr, n, rs);
}

/* The first route (every route here matches subject ChargeRequested). */
static const rt_route_t *first(const rt_routes_t *rs)
{
    sb_msg_t m;
    memset(&m, 0, sizeof m);
    m.subject = "ChargeRequested";
    return rt_routes_match(rs, &m);
}

#define GOOD                                                                                       \
    "{\"match\":{\"subject\":\"ChargeRequested\"},\"idempotency_key\":\"charge:{$.orderId}\","     \
    "\"http\":{\"method\":\"POST\",\"url\":\"https://pay.example/charges/{$.orderId}?k={key}\","   \
    "\"body\":\"body\",\"headers\":{\"Authorization\":{\"env\":\"TEST_PAY_TOKEN\"},"               \
    "\"X-Tenant\":\"t-{prop:tenant}\"},\"idempotency_header\":\"Idempotency-Key\","                \
    "\"idempotent\":true,\"timeout_ms\":2000,\"lease_s\":30,\"remote_id\":\"$.id\","               \
    "\"reconcile\":{\"method\":\"GET\",\"url\":\"https://pay.example/charges?key={key}\"}},"       \
    "\"sql\":[\"UPDATE orders SET charge_id = ?, status = ?, via = ? WHERE id = ?\"],"             \
    "\"params\":[[\"response:$.id\",\"response:status\",\"response:header:X-Via\",\"$.orderId\"]]" \
    "}"

static void test_valid_route(void)
{
    rt_routes_t rs;
    int n;
    setenv("TEST_PAY_TOKEN", "Bearer s3cr3t-token-value", 1);
    char *e = compile(GOOD, &n, &rs);
    ASSERT_EQ(n, 0);
    ASSERT_STREQ(e, "");
    const rt_http_spec_t *h = rt_route_http(first(&rs));
    ASSERT_TRUE(h != NULL);
    ASSERT_STREQ(rt_http_method(h), "POST");
    ASSERT_EQ(rt_http_timeout_ms(h), 2000);
    ASSERT_EQ(rt_http_lease_s(h), 30);
    ASSERT_TRUE(rt_http_idempotent(h));
    ASSERT_TRUE(rt_http_has_reconcile(h));
    ASSERT_TRUE(rt_http_ca_file(h) == NULL);
    ASSERT_EQ(rt_http_max_retry_after_s(h), 300); /* a day's Retry-After is held 5 min */
    /* The lease is shorter than the renewal limit (300 s), not than 20 s. */
    ASSERT_EQ(rt_routes_check_limits(&rs, 300, NULL), 0);
    ASSERT_EQ(rt_routes_check_limits(&rs, 20, NULL), 1);
    ASSERT_EQ(rt_routes_check_limits(&rs, 0, NULL), 1);
    /* The secret is masked wherever it would be written. */
    char text[] = "echo: Bearer s3cr3t-token-value!";
    rt_route_scrub(first(&rs), text);
    ASSERT_STREQ(text, "echo: ***!");
    free(e);
    rt_routes_free(&rs);
}

static void test_problems_name_the_key(void)
{
    static const struct {
        const char *route, *want;
    } cases[] = {
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"colour\":1}}",
         "routes[0].http.colour: unknown key"},
        {"{\"match\":\"*\",\"http\":{}}", "routes[0].http.url: missing"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"ftp://h/x\"}}", "routes[0].http.url: must be"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/{nope}\"}}",
         "routes[0].http.url: unknown source {nope}"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"method\":\"BREW\"}}",
         "routes[0].http.method: must be GET"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"headers\":{\"A\":{\"env\":"
         "\"TEST_NOT_SET_ANYWHERE\"}}}}",
         "routes[0].http.headers.A: environment variable TEST_NOT_SET_ANYWHERE is not set"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/"
         "x\",\"headers\":{\"A\":{\"value\":\"x\"}}}}",
         "routes[0].http.headers.A: must be a string template or {\"env\": NAME}"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"headers\":{\"Bad Name\":\"x\"}}}",
         "is not a valid header name"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"timeout_ms\":5000,\"lease_s\":5}}",
         "routes[0].http.lease_s: (5 s) must be longer than http.timeout_ms"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"timeout_ms\":10}}",
         "routes[0].http.timeout_ms: must be an integer from 100"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"max_retry_after_s\":0}}",
         "routes[0].http.max_retry_after_s: must be an integer from 1 to 86400"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"idempotent\":true}}",
         "routes[0].http.idempotent: true needs idempotency_header"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"idempotent\":\"yes\"}}",
         "routes[0].http.idempotent: must be true or false"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"remote_id\":\"id\"}}",
         "routes[0].http.remote_id: must be a JSON path"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"reconcile\":{\"url\":\"https://h/"
         "?k={key}\",\"when\":1}}}",
         "routes[0].http.reconcile.when: unknown key"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\",\"reconcile\":{}}}",
         "routes[0].http.reconcile.url: missing"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\"},\"on_permanent\":\"record\"}",
         "routes[0].on_permanent: not allowed with http"},
        {"{\"match\":\"*\",\"action\":\"complete\",\"http\":{\"url\":\"https://h/x\"}}",
         "routes[0].http: not allowed with action"},
        /* response:... only where there is a response, {key} only in http templates. */
        {"{\"match\":\"*\",\"sql\":\"select ?\",\"params\":[\"response:$.id\"]}",
         "unknown source \"response:$.id\""},
        {"{\"match\":\"*\",\"sql\":\"select 1\",\"idempotency_key\":\"k:{key}\"}",
         "routes[0].idempotency_key: unknown source {key}"},
        {"{\"match\":\"*\",\"http\":{\"url\":\"https://h/x\"},\"params\":[]}",
         "routes[0].params: given without sql"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_routes_t rs;
        int n;
        char *e = compile(cases[i].route, &n, &rs);
        if (n < 1 || !strstr(e, cases[i].want)) {
            fprintf(stderr, "case %zu: want \"%s\" in:\n%s", i, cases[i].want, e);
            ASSERT_TRUE(false);
        }
        free(e);
        rt_routes_free(&rs);
    }
}

static sb_prop_t props[2];

static void make_msg(sb_msg_t *m, const char *body)
{
    memset(m, 0, sizeof(*m));
    m->message_id = "m-1";
    m->subject = "ChargeRequested";
    props[0] = (sb_prop_t){"tenant", SB_PROP_INT64, NULL, 7, 0};
    props[1] = (sb_prop_t){"traceparent", SB_PROP_STRING,
                           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 0, 0};
    m->props = props;
    m->nprops = 2;
    m->body = (unsigned char *)body;
    m->body_len = strlen(body);
}

static const char *header(const rt_http_call_t *c, const char *name)
{
    for (size_t i = 0; i < c->nheaders; i++)
        if (strcasecmp(c->headers[i].name, name) == 0)
            return c->headers[i].value;
    return NULL;
}

static void test_bind_request_and_finish(void)
{
    rt_routes_t rs;
    int n;
    sb_msg_t m;
    rt_binding_t b;
    rt_http_call_t c;
    ib_error_t err;
    setenv("TEST_PAY_TOKEN", "Bearer s3cr3t-token-value", 1);
    free(compile(GOOD, &n, &rs));
    ASSERT_EQ(n, 0);
    make_msg(&m, "{\"orderId\":\"o 1\",\"amount\":5}");
    ASSERT_EQ(rt_route_bind(first(&rs), &m, NULL, &b, &err), IB_E_OK);
    ASSERT_STREQ(b.idempotency_key, "charge:o 1");
    ASSERT_EQ(b.nstmts, 0); /* bound after the call */
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, b.idempotency_key,
                                 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &c,
                                 &err),
              IB_E_OK);
    /* Values are percent-encoded in URLs: a message cannot add a path or a query. */
    ASSERT_STREQ(c.url, "https://pay.example/charges/o%201?k=charge%3Ao%201");
    ASSERT_STREQ(c.url_redacted, "https://pay.example/charges/o%201");
    ASSERT_STREQ(c.reconcile_url, "https://pay.example/charges?key=charge%3Ao%201");
    ASSERT_EQ(c.body_len, m.body_len);
    ASSERT_TRUE(memcmp(c.body, m.body, m.body_len) == 0);
    ASSERT_STREQ(header(&c, "Authorization"), "Bearer s3cr3t-token-value");
    ASSERT_STREQ(header(&c, "X-Tenant"), "t-7");
    ASSERT_STREQ(header(&c, "Idempotency-Key"), "charge:o 1");
    ASSERT_STREQ(header(&c, "Content-Type"), "application/json");
    ASSERT_STREQ(header(&c, "traceparent"),
                 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");

    /* The answer feeds the finishing statement and the remote id. */
    char body[] = "{\"id\":\"ch_9\",\"nested\":{\"n\":3}}";
    char hdrs[] = "HTTP/1.1 201 Created\r\nX-Via: edge-2\r\n\r\n";
    fx_response_t resp = {.cls = FX_APPLIED,
                          .status = 201,
                          .body = body,
                          .body_len = strlen(body),
                          .headers = hdrs,
                          .headers_len = strlen(hdrs)};
    char rid[64];
    rt_route_remote_id(first(&rs), &resp, rid, sizeof rid);
    ASSERT_STREQ(rid, "ch_9");
    rt_binding_t fb;
    ASSERT_EQ(rt_route_bind_finish(first(&rs), &m, NULL, &resp, &fb, &err), IB_E_OK);
    ASSERT_EQ(fb.nstmts, 1);
    ASSERT_EQ(fb.stmts[0].nparams, 4);
    ASSERT_STREQ(fb.stmts[0].params[0].text, "ch_9");
    ASSERT_EQ(fb.stmts[0].params[1].i, 201);
    ASSERT_STREQ(fb.stmts[0].params[2].text, "edge-2");
    ASSERT_STREQ(fb.stmts[0].params[3].text, "o 1");
    rt_binding_free(&fb);
    /* A response without the field: a MissingField error naming it. */
    char other[] = "{\"ok\":true}";
    resp.body = other;
    resp.body_len = strlen(other);
    ASSERT_EQ(rt_route_bind_finish(first(&rs), &m, NULL, &resp, &fb, &err), IB_E_MISSING_FIELD);
    ASSERT_CONTAINS(err.text, "$.id");
    rt_binding_free(&fb);
    rt_http_call_free(&c);
    rt_binding_free(&b);
    rt_routes_free(&rs);
}

/*
 * The answer a row stores (status, remote id) as a response for a replay's
 * finishing SQL: the remote id back at http.remote_id's path, the status;
 * nothing else (a header source is reported, an empty id gives no body).
 */
static void test_stored_answer(void)
{
    rt_routes_t rs;
    int n;
    sb_msg_t m;
    ib_error_t err;
    fx_response_t resp;
    char rid[64];
    setenv("TEST_PAY_TOKEN", "Bearer s3cr3t-token-value", 1);
    free(compile(GOOD, &n, &rs));
    ASSERT_EQ(n, 0);
    make_msg(&m, "{\"orderId\":\"o 1\",\"amount\":5}");
    ASSERT_EQ(rt_route_stored_answer(first(&rs), 201, "ch_9", &resp, &err), IB_E_OK);
    ASSERT_EQ(resp.status, 201);
    ASSERT_STREQ(resp.body, "{\"id\":\"ch_9\"}");
    ASSERT_EQ(resp.headers_len, 0);
    rt_route_remote_id(first(&rs), &resp, rid, sizeof rid);
    ASSERT_STREQ(rid, "ch_9");
    /* GOOD's finishing SQL reads response:header:X-Via, which no row stores. */
    ASSERT_TRUE(rt_route_finish_reads_headers(first(&rs)));
    fx_response_free(&resp);
    ASSERT_EQ(rt_route_stored_answer(first(&rs), 200, "", &resp, &err), IB_E_OK);
    ASSERT_EQ(resp.body_len, 0);
    rt_binding_t fb;
    ASSERT_EQ(rt_route_bind_finish(first(&rs), &m, NULL, &resp, &fb, &err), IB_E_INVALID_JSON);
    rt_binding_free(&fb);
    fx_response_free(&resp);
    rt_routes_free(&rs);
}

/*
 * The remote id is read as jansson reads it, whichever path reads it: a
 * string (escapes undone) or an integer printed back; any other value, a
 * missing one or an answer that is not JSON gives none; a repeated key
 * the last one (json_loadb's default).
 */
static void test_remote_id_kinds(void)
{
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{\"id\":\"ch_9\"}", "ch_9"},
        {"{\"x\":[1,{\"id\":2}],\"id\":\"a\\\"b\\u00e9\\n\"}", "a\"b\xc3\xa9\n"},
        {"{\"id\":42}", "42"},
        {"{\"id\":-0}", "0"},
        {"{\"id\":-9223372036854775808}", "-9223372036854775808"},
        {"{\"id\":99999999999999999999}", ""},
        {"{\"id\":1.5}", ""},
        {"{\"id\":1e3}", ""},
        {"{\"id\":null}", ""},
        {"{\"id\":true}", ""},
        {"{\"id\":{\"n\":1}}", ""},
        {"{\"other\":\"x\"}", ""},
        {"[\"id\"]", ""},
        {"{\"id\":\"a\",\"id\":\"b\"}", "b"},
        {"{\"id\":\"ch_9\"", ""},
        {"not json", ""},
        {"", ""},
    };
    rt_routes_t rs;
    int n;
    setenv("TEST_PAY_TOKEN", "Bearer s3cr3t-token-value", 1);
    free(compile(GOOD, &n, &rs));
    ASSERT_EQ(n, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256], rid[64];
        snprintf(body, sizeof body, "%s", cases[i].body);
        fx_response_t resp = {
            .cls = FX_APPLIED, .status = 201, .body = body, .body_len = strlen(body)};
        rt_route_remote_id(first(&rs), &resp, rid, sizeof rid);
        ASSERT_STREQ(rid, cases[i].want);
    }
    /* Cut to the buffer, as before. */
    char body[] = "{\"id\":\"0123456789abcdef\"}", rid[8];
    fx_response_t resp = {.cls = FX_APPLIED, .status = 201, .body = body, .body_len = strlen(body)};
    rt_route_remote_id(first(&rs), &resp, rid, sizeof rid);
    ASSERT_STREQ(rid, "0123456");
    rt_routes_free(&rs);
}

/* A body taken from a JSON path is that value serialised; a line break in a header is refused. */
static void test_body_path_and_header_injection(void)
{
    rt_routes_t rs;
    int n;
    sb_msg_t m;
    rt_http_call_t c;
    ib_error_t err;
    free(compile("{\"match\":\"*\",\"http\":{\"url\":\"http://h/x\",\"body\":\"$.payload\","
                 "\"headers\":{\"X-Order\":\"{$.orderId}\"}}}",
                 &n, &rs));
    ASSERT_EQ(n, 0);
    make_msg(&m, "{\"orderId\":\"a\",\"payload\":{\"x\":[1,2]}}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
    ASSERT_STREQ(c.body, "{\"x\":[1,2]}");
    ASSERT_STREQ(header(&c, "X-Order"), "a");
    ASSERT_TRUE(header(&c, "Idempotency-Key") == NULL); /* none configured */
    rt_http_call_free(&c);
    make_msg(&m, "{\"orderId\":\"a\\r\\nX-Evil: 1\",\"payload\":1}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_INVAL);
    ASSERT_CONTAINS(err.text, "line break");
    rt_http_call_free(&c);
    make_msg(&m, "{\"orderId\":\"a\"}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_MISSING_FIELD);
    rt_http_call_free(&c);
    rt_routes_free(&rs);
}

/*
 * Where the secret goes is the configuration's: whatever a message holds,
 * the bound request goes to the host written in the route, or, with a
 * templated host, only to one of http.allowed_hosts.
 */
static void test_message_cannot_move_the_secret(void)
{
    static const char *const hostile[] = {
        "@evil.example", "evil.example/x", "//evil.example", ":8443@evil.example",
        "\\\\evil.example", "x#@evil.example", "..%2F..%2F@evil.example", "a?b=@evil.example"};
    rt_routes_t rs;
    int n;
    sb_msg_t m;
    rt_http_call_t c;
    ib_error_t err;
    char body[256];
    setenv("TEST_PAY_TOKEN", "Bearer s3cr3t-token-value", 1);
    free(compile("{\"match\":\"*\",\"http\":{\"url\":\"https://pay.example/c/{$.p}?q={$.p}\","
                 "\"headers\":{\"Authorization\":{\"env\":\"TEST_PAY_TOKEN\"}}}}",
                 &n, &rs));
    ASSERT_EQ(n, 0);
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        snprintf(body, sizeof body, "{\"p\":\"%s\"}", hostile[i]);
        make_msg(&m, body);
        ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
        ASSERT_STREQ(c.dest, "https://pay.example:443");
        ASSERT_TRUE(strncmp(c.url, "https://pay.example/c/", 22) == 0);
        ASSERT_TRUE(strchr(c.url + 8, '@') == NULL);
        rt_http_call_free(&c);
    }
    rt_routes_free(&rs);

    /* A templated host without a list: refused when the configuration is checked. */
    char *e = compile("{\"match\":\"*\",\"http\":{\"url\":\"https://{$.host}/c\"}}", &n, &rs);
    ASSERT_EQ(n, 1);
    ASSERT_CONTAINS(e, "http.url");
    free(e);
    rt_routes_free(&rs);

    /* With the list: a listed host goes, any other is refused before a call. */
    free(compile("{\"match\":\"*\",\"http\":{\"url\":\"https://{$.host}/c\","
                 "\"allowed_hosts\":[\"pay.example\",\"Pay2.example:8443\"],"
                 "\"headers\":{\"Authorization\":{\"env\":\"TEST_PAY_TOKEN\"}}}}",
                 &n, &rs));
    ASSERT_EQ(n, 0);
    make_msg(&m, "{\"host\":\"pay.example\"}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
    ASSERT_STREQ(c.dest, "https://pay.example:443");
    rt_http_call_free(&c);
    /* A "host:port" entry: the value's port is bound as written, not percent-encoded. */
    make_msg(&m, "{\"host\":\"PAY2.example:8443\"}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
    ASSERT_STREQ(c.url, "https://PAY2.example:8443/c");
    ASSERT_STREQ(c.dest, "https://pay2.example:8443");
    rt_http_call_free(&c);
    static const char *const others[] = {
        "evil.example",          "pay.example.evil.example", "pay.example@evil.example",
        "pay.example:8443",      "evil.example#pay.example", "pay2.example:9",
        "pay2.example",          "pay2.example:8443/x",      "pay2.example%3A8443",
        "pay2.example:8443:1",   "pay2.example:",            "[::1]:8443",
        "pay2.example:84430000", "",                         "pay.example\\\\evil.example"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(body, sizeof body, "{\"host\":\"%s\"}", others[i]);
        make_msg(&m, body);
        ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_NOT_ALLOWED);
        ASSERT_CONTAINS(err.text, "allowed_hosts");
        rt_http_call_free(&c);
    }
    rt_routes_free(&rs);

    /* The port as a template of its own, and an IPv6 literal. */
    free(compile("{\"match\":\"*\",\"http\":{\"url\":\"http://{$.host}:{$.port}/c?h={$.host}\","
                 "\"allowed_hosts\":[\"127.0.0.1:8080\",\"[::1]:8080\"]}}",
                 &n, &rs));
    ASSERT_EQ(n, 0);
    make_msg(&m, "{\"host\":\"127.0.0.1\",\"port\":8080}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
    ASSERT_STREQ(c.url, "http://127.0.0.1:8080/c?h=127.0.0.1");
    rt_http_call_free(&c);
    make_msg(&m, "{\"host\":\"[::1]\",\"port\":\"8080\"}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_OK);
    ASSERT_STREQ(c.dest, "http://[::1]:8080");
    ASSERT_STREQ(c.url, "http://[::1]:8080/c?h=%5B%3A%3A1%5D");
    rt_http_call_free(&c);
    make_msg(&m, "{\"host\":\"127.0.0.1\",\"port\":\"8081\"}");
    ASSERT_EQ(rt_route_bind_http(first(&rs), &m, "m-1", NULL, &c, &err), IB_E_NOT_ALLOWED);
    rt_http_call_free(&c);
    rt_routes_free(&rs);
}

int main(void)
{
    RUN(test_valid_route);
    RUN(test_problems_name_the_key);
    RUN(test_bind_request_and_finish);
    RUN(test_body_path_and_header_injection);
    RUN(test_stored_answer);
    RUN(test_remote_id_kinds);
    RUN(test_message_cannot_move_the_secret);
    return ib_test_done();
}
