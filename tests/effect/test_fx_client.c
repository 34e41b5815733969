/*
 * test_fx_client.c - effect/fx_client.c against a real HTTP server
 * (tests/fakehttp/fakehttp.js, started here on 127.0.0.1): each class of
 * answer, whether the request counts as sent, connection reuse, TLS with a
 * throwaway CA, and that libcurl never sends a request twice on its own.
 * Assertions read the server's ledger, not only the client's view.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fx_client.h"
#include "fx_int.h" /* fx_count_out */
#include "fx_multi.h"
#include "ib_tls.h"
#include "ib_test.h"
#include "ib_test_proc.h"

typedef struct {
    ib_test_proc_t proc;
    char base[64];
} server_t;

static server_t plain = {{0, -1}, ""}, secure = {{0, -1}, ""};
static fx_client_t *fx;
static char tmpdir[] = "/tmp/inboxd-fx-XXXXXX";
static char ca[300], other_ca[300];

static int start_server(server_t *s, const char *mode, const char *cert, const char *key)
{
    char *script = getenv("INBOXD_FAKEHTTP");
    char *tls[] = {"node",  script,       "--mode",    (char *)mode,
                   "--tls", (char *)cert, (char *)key, NULL};
    char *bare[] = {"node", script, "--mode", (char *)mode, NULL};
    int port = script ? ib_test_proc_start(&s->proc, cert ? tls : bare) : -1;
    if (port < 0)
        return -1;
    snprintf(s->base, sizeof s->base, "%s://127.0.0.1:%d", cert ? "https" : "http", port);
    return 0;
}

static void stop_server(server_t *s)
{
    ib_test_proc_stop(&s->proc); /* the server exits when its stdin closes */
}

static long call(const char *method, const char *url, const char *body, const char *key,
                 long timeout_ms, const char *cafile, fx_response_t *rs)
{
    fx_header_t h[2] = {{"Content-Type", "application/json"}, {"Idempotency-Key", key}};
    fx_request_t rq = {.method = method,
                       .url = url,
                       .body = body,
                       .body_len = body ? strlen(body) : 0,
                       .headers = h,
                       .nheaders = key ? 2 : 1,
                       .timeout_ms = timeout_ms,
                       .ca_file = cafile};
    fx_client_call(fx, &rq, rs);
    return rs->status;
}

/* POST /_config on the plain server with the given JSON. */
static void configure(const char *json)
{
    char url[128];
    fx_response_t rs;
    snprintf(url, sizeof url, "%s/_config", plain.base);
    call("POST", url, json, NULL, 5000, NULL, &rs);
    fx_response_free(&rs);
}

/* The plain server's ledger, parsed. */
static json_t *ledger(void)
{
    char url[128];
    fx_response_t rs;
    snprintf(url, sizeof url, "%s/_ledger", plain.base);
    call("GET", url, NULL, NULL, 5000, NULL, &rs);
    json_t *j = json_loads(rs.body, 0, NULL);
    fx_response_free(&rs);
    return j;
}

static size_t requests_for(json_t *led, const char *key)
{
    size_t n = 0, i;
    json_t *r;
    json_array_foreach(json_object_get(led, "requests"), i, r)
    {
        if (strcmp(json_string_value(json_object_get(r, "key")), key) == 0)
            n++;
    }
    return n;
}

static size_t effects_for(json_t *led, const char *key)
{
    return json_array_size(json_object_get(json_object_get(led, "effects"), key));
}

static void test_applied_with_key_and_reuse(void)
{
    char url[128], v[64];
    fx_response_t rs;
    snprintf(url, sizeof url, "%s/charges", plain.base);
    ASSERT_EQ(call("POST", url, "{\"orderId\":1}", "k-applied", 5000, NULL, &rs), 201);
    ASSERT_EQ(rs.cls, FX_APPLIED);
    ASSERT_TRUE(rs.sent);
    ASSERT_CONTAINS(rs.body, "\"id\":\"fx-");
    ASSERT_STREQ(fx_response_header(&rs, "content-type", v, sizeof v), "application/json");
    ASSERT_TRUE(fx_response_header(&rs, "X-Absent", v, sizeof v) == NULL);
    ASSERT_STREQ(fx_response_metric_class(&rs), "2xx");
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", url, "{\"orderId\":2}", "k-applied-2", 5000, NULL, &rs), 201);
    fx_response_free(&rs);

    json_t *led = ledger();
    ASSERT_TRUE(led != NULL);
    ASSERT_EQ(effects_for(led, "k-applied"), 1);
    ASSERT_EQ(effects_for(led, "k-applied-2"), 1);
    /* Both calls (and the ledger read) went over one connection. */
    json_t *reqs = json_object_get(led, "requests");
    size_t n = json_array_size(reqs);
    ASSERT_TRUE(n >= 2);
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(reqs, n - 1), "conn")),
              json_integer_value(json_object_get(json_array_get(reqs, n - 2), "conn")));
    json_decref(led);
}

static void test_status_classes(void)
{
    static const struct {
        const char *key;
        long status;
        fx_class_t cls;
        const char *metric;
    } cases[] = {{"st-400", 400, FX_PERMANENT, "4xx"}, {"st-404", 404, FX_PERMANENT, "4xx"},
                 {"st-409", 409, FX_PERMANENT, "4xx"}, {"st-408", 408, FX_TRANSIENT, "4xx"},
                 {"st-429", 429, FX_TRANSIENT, "429"}, {"st-500", 500, FX_TRANSIENT, "5xx"},
                 {"st-502", 502, FX_TRANSIENT, "5xx"}, {"st-301", 301, FX_PERMANENT, "error"}};
    char url[128], json[4096] = "{\"faults\":[", rule[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(rule, sizeof rule, "%s{\"kind\":\"status\",\"match\":\"%s\",\"status\":%ld}",
                 i ? "," : "", cases[i].key, cases[i].status);
        strcat(json, rule);
    }
    strcat(json, "]}");
    configure(json);
    snprintf(url, sizeof url, "%s/charges", plain.base);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fx_response_t rs;
        ASSERT_EQ(call("POST", url, "{}", cases[i].key, 5000, NULL, &rs), cases[i].status);
        ASSERT_EQ(rs.cls, cases[i].cls);
        ASSERT_STREQ(fx_response_metric_class(&rs), cases[i].metric);
        ASSERT_EQ(rs.retry_after_ms, -1);
        fx_response_free(&rs);
    }
    json_t *led = ledger();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ASSERT_EQ(effects_for(led, cases[i].key), 0);
    json_decref(led);
    configure("{\"faults\":[]}");
}

static void test_retry_after_then_applied(void)
{
    char url[128];
    fx_response_t rs;
    configure("{\"faults\":[{\"kind\":\"status\",\"match\":\"ra-\",\"status\":503,"
              "\"retry_after\":2,\"times\":1}]}");
    snprintf(url, sizeof url, "%s/charges", plain.base);
    ASSERT_EQ(call("POST", url, "{}", "ra-1", 5000, NULL, &rs), 503);
    ASSERT_EQ(rs.cls, FX_TRANSIENT);
    ASSERT_EQ(rs.retry_after_ms, 2000);
    ASSERT_EQ(rs.err.cls, IB_CLASS_TRANSIENT);
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", url, "{}", "ra-1", 5000, NULL, &rs), 201);
    ASSERT_EQ(rs.cls, FX_APPLIED);
    fx_response_free(&rs);
    json_t *led = ledger();
    ASSERT_EQ(requests_for(led, "ra-1"), 2);
    ASSERT_EQ(effects_for(led, "ra-1"), 1);
    json_decref(led);
    configure("{\"faults\":[]}");
}

/* The destination acts, then answers after the client gave up: ambiguous. */
static void test_timeout_after_send_is_ambiguous(void)
{
    char url[128];
    fx_response_t rs;
    configure("{\"faults\":[{\"kind\":\"delay\",\"match\":\"slow-\",\"delay_ms\":3000}]}");
    snprintf(url, sizeof url, "%s/charges", plain.base);
    ASSERT_EQ(call("POST", url, "{\"orderId\":9}", "slow-1", 500, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_AMBIGUOUS);
    ASSERT_TRUE(rs.sent);
    ASSERT_EQ(rs.err.code, IB_E_TIMEOUT);
    ASSERT_EQ(rs.err.cls, IB_CLASS_AMBIGUOUS);
    ASSERT_STREQ(fx_response_metric_class(&rs), "timeout");
    fx_response_free(&rs);
    json_t *led = ledger();
    ASSERT_EQ(requests_for(led, "slow-1"), 1);
    ASSERT_EQ(effects_for(led, "slow-1"), 1);
    json_decref(led);
    configure("{\"faults\":[]}");
}

/*
 * fx_multi_next hands each answer over as it arrives: the three quick calls
 * of a batch come back while the slow one, already at the destination, is
 * still unanswered; the slow one last.
 */
static void test_multi_answers_as_they_come(void)
{
    char url[128];
    const char *keys[4] = {"quick-1", "slow-m", "quick-2", "quick-3"};
    fx_header_t h[4][2];
    fx_request_t rq[4];
    fx_response_t rs[4];
    size_t done[4], k, seen = 0;
    fx_multi_t *m = fx_multi_new();
    configure("{\"faults\":[{\"kind\":\"delay\",\"match\":\"slow-\",\"delay_ms\":4000}]}");
    snprintf(url, sizeof url, "%s/charges", plain.base);
    for (int i = 0; i < 4; i++) {
        h[i][0] = (fx_header_t){"Content-Type", "application/json"};
        h[i][1] = (fx_header_t){"Idempotency-Key", keys[i]};
        rq[i] = (fx_request_t){.method = "POST", .url = url, .body = "{}", .body_len = 2,
                               .headers = h[i], .nheaders = 2, .timeout_ms = 10000};
    }
    fx_multi_start(m, rq, rs, 4);
    while (seen < 3 && (k = fx_multi_next(m, done)) > 0)
        for (size_t j = 0; j < k; j++) {
            ASSERT_TRUE(done[j] != 1); /* not the slow one */
            ASSERT_EQ(rs[done[j]].status, 201);
            seen++;
        }
    ASSERT_EQ(seen, 3);
    json_t *led = ledger(); /* the slow call reached it, and is not answered yet */
    ASSERT_EQ(requests_for(led, "slow-m"), 1);
    json_decref(led);
    ASSERT_EQ(fx_multi_next(m, done), 1);
    ASSERT_EQ(done[0], 1);
    ASSERT_EQ(rs[1].status, 201);
    ASSERT_EQ(fx_multi_next(m, done), 0);
    for (int i = 0; i < 4; i++)
        fx_response_free(&rs[i]);
    fx_multi_free(m);
    configure("{\"faults\":[]}");
}

/*
 * A reset after the request was read, on a connection the client reused:
 * libcurl would resend on a fresh connection by itself; the client must
 * refuse and report ambiguous, and the destination sees one request only.
 */
static void test_reset_on_reused_connection_is_not_resent(void)
{
    char url[128];
    fx_response_t rs;
    size_t big_len = 200 * 1024;
    char *big = malloc(big_len + 1);
    ASSERT_TRUE(big != NULL);
    memset(big, 'x', big_len);
    big[0] = '"';
    big[big_len - 1] = '"';
    big[big_len] = '\0';
    configure("{\"faults\":[{\"kind\":\"reset\",\"match\":\"rst-\"}]}");
    snprintf(url, sizeof url, "%s/charges", plain.base);
    ASSERT_EQ(call("POST", url, "{}", "warm-1", 5000, NULL, &rs), 201); /* a live connection */
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", url, "{\"orderId\":7}", "rst-small", 5000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_AMBIGUOUS);
    ASSERT_TRUE(rs.sent);
    /* Said as what happened, not as libcurl's refused rewind. */
    ASSERT_CONTAINS(rs.err.text, "the connection closed after the request was sent");
    ASSERT_NOT_CONTAINS(rs.err.text, "seek callback");
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", url, "{}", "warm-2", 5000, NULL, &rs), 201);
    fx_response_free(&rs);
    ASSERT_EQ(call("PUT", url, big, "rst-big", 5000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_AMBIGUOUS);
    ASSERT_NOT_CONTAINS(rs.err.text, "seek callback");
    fx_response_free(&rs);
    free(big);
    json_t *led = ledger();
    ASSERT_EQ(requests_for(led, "rst-small"), 1);
    ASSERT_EQ(effects_for(led, "rst-small"), 1);
    ASSERT_EQ(requests_for(led, "rst-big"), 1);
    json_decref(led);
    configure("{\"faults\":[]}");
}

static void test_refused_and_unresolvable_are_transient(void)
{
    /* A port that was just free: bind, read the port, close. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    ASSERT_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(getsockname(s, (struct sockaddr *)&a, &alen), 0);
    close(s);
    char url[128];
    fx_response_t rs;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/charges", ntohs(a.sin_port));
    ASSERT_EQ(call("POST", url, "{}", "refused", 2000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_TRANSIENT);
    ASSERT_TRUE(!rs.sent);
    ASSERT_STREQ(fx_response_metric_class(&rs), "error");
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", "http://no-such-host.invalid/charges", "{}", "dns", 3000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_TRANSIENT);
    ASSERT_TRUE(!rs.sent);
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", "ftp://127.0.0.1/x", "{}", "proto", 2000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_PERMANENT);
    fx_response_free(&rs);
}

static void test_tls_verified(void)
{
    char url[128];
    fx_response_t rs;
    snprintf(url, sizeof url, "%s/charges", secure.base);
    ASSERT_EQ(call("POST", url, "{}", "tls-1", 5000, ca, &rs), 201);
    ASSERT_EQ(rs.cls, FX_APPLIED);
    fx_response_free(&rs);
    /* The wrong CA, and the system store: refused before anything is sent. */
    ASSERT_EQ(call("POST", url, "{}", "tls-2", 5000, other_ca, &rs), 0);
    ASSERT_EQ(rs.cls, FX_TRANSIENT);
    ASSERT_TRUE(!rs.sent);
    ASSERT_EQ(rs.err.code, IB_E_TLS);
    ASSERT_CONTAINS(rs.err.text, "certificate");
    fx_response_free(&rs);
    ASSERT_EQ(call("POST", url, "{}", "tls-3", 5000, NULL, &rs), 0);
    ASSERT_EQ(rs.cls, FX_TRANSIENT);
    ASSERT_EQ(rs.err.code, IB_E_TLS);
    fx_response_free(&rs);
}

/* No CA file: the hashed system directory (SSL_CERT_DIR) is trusted, as the bundle was. */
static void test_tls_system_dir(void)
{
    char cmd[1024], dir[300], empty[300], url[128];
    char *saved = getenv("SSL_CERT_DIR") ? strdup(getenv("SSL_CERT_DIR")) : NULL;
    fx_response_t rs;
    snprintf(dir, sizeof dir, "%s/certs", tmpdir);
    snprintf(empty, sizeof empty, "%s/nocerts", tmpdir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s %s && cp %s %s/$(openssl x509 -hash -noout -in %s).0 && cp %s %s/ca.pem",
             dir, empty, ca, dir, ca, ca, empty);
    ASSERT_EQ(system(cmd), 0);
    snprintf(url, sizeof url, "%s/charges", secure.base);
    setenv("SSL_CERT_DIR", dir, 1);
    ASSERT_STREQ(ib_tls_system_ca_dir(), dir);
    ASSERT_EQ(call("POST", url, "{}", "tls-dir-1", 5000, NULL, &rs), 201);
    fx_response_free(&rs);
    /* A directory without hashed names is not used: libcurl's bundle, which lacks our CA. */
    setenv("SSL_CERT_DIR", empty, 1);
    ASSERT_TRUE(ib_tls_system_ca_dir() == NULL);
    ASSERT_EQ(call("POST", url, "{}", "tls-dir-2", 5000, NULL, &rs), 0);
    ASSERT_EQ(rs.err.code, IB_E_TLS);
    fx_response_free(&rs);
    if (saved)
        setenv("SSL_CERT_DIR", saved, 1);
    else
        unsetenv("SSL_CERT_DIR");
    free(saved);
}

static void test_status_table(void)
{
    ASSERT_EQ(fx_classify_status(200), FX_APPLIED);
    ASSERT_EQ(fx_classify_status(204), FX_APPLIED);
    ASSERT_EQ(fx_classify_status(299), FX_APPLIED);
    ASSERT_EQ(fx_classify_status(408), FX_TRANSIENT);
    ASSERT_EQ(fx_classify_status(429), FX_TRANSIENT);
    ASSERT_EQ(fx_classify_status(503), FX_TRANSIENT);
    ASSERT_EQ(fx_classify_status(599), FX_TRANSIENT);
    ASSERT_EQ(fx_classify_status(400), FX_PERMANENT);
    ASSERT_EQ(fx_classify_status(422), FX_PERMANENT);
    ASSERT_EQ(fx_classify_status(302), FX_PERMANENT);
    ASSERT_STREQ(fx_class_name(FX_AMBIGUOUS), "ambiguous");
}

/* What fx_count_out must decide, byte by byte: the header's end, then the body bytes. */
static void count_ref(exchange_t *x, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (x->header_done) {
            x->body_out += n - i;
            break;
        }
        memmove(x->tail, x->tail + 1, 3);
        x->tail[3] = p[i];
        x->header_done = memcmp(x->tail, "\r\n\r\n", 4) == 0;
    }
    if (x->header_done && x->body_out >= (x->req->body ? x->req->body_len : 0))
        x->resp->sent = true;
}

/*
 * The outgoing stream cut anywhere into up to three chunks, and stopped
 * anywhere (a connection that died mid-request): fx_count_out finds the
 * header's end and counts the body as the byte-by-byte reading does, an
 * end that straddles two chunks included.
 */
static void test_count_out_any_chunking(void)
{
    static const struct {
        const char *out, *body;
    } cases[] = {
        {"POST /c HTTP/1.1\r\nHost: h\r\n\r\nBODY1", "BODY1"},
        {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", NULL},
        {"P\r\n\r\r\n\r\n\r\n\r\nB\r\n\r\n", "\r\n\r\nB\r\n\r\n"},
        {"\r\n\r\n", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *out = cases[k].out;
        size_t len = strlen(out);
        fx_request_t rq = {.method = "POST", .url = "http://h/", .body = cases[k].body,
                           .body_len = cases[k].body ? strlen(cases[k].body) : 0};
        for (size_t stop = 0; stop <= len; stop++)
            for (size_t a = 0; a <= stop; a++)
                for (size_t b = a; b <= stop; b++) {
                    fx_response_t r1 = {0}, r2 = {0};
                    exchange_t x1 = {.req = &rq, .resp = &r1}, x2 = {.req = &rq, .resp = &r2};
                    size_t cut[4] = {0, a, b, stop};
                    for (int c = 0; c < 3; c++) {
                        fx_count_out(&x1, out + cut[c], cut[c + 1] - cut[c]);
                        count_ref(&x2, out + cut[c], cut[c + 1] - cut[c]);
                    }
                    ASSERT_EQ(x1.header_done, x2.header_done);
                    ASSERT_EQ(x1.body_out, x2.body_out);
                    ASSERT_EQ(r1.sent, r2.sent);
                }
        /* The whole request went out: sent. */
        fx_response_t r = {0};
        exchange_t x = {.req = &rq, .resp = &r};
        fx_count_out(&x, out, len);
        ASSERT_TRUE(r.sent);
    }
}

int main(void)
{
    char cmd[512], cert[300], key[300];
    RUN(test_count_out_any_chunking);
    if (!getenv("INBOXD_FAKEHTTP") || system("node --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skip: node or INBOXD_FAKEHTTP missing\n");
        return 77;
    }
    if (!mkdtemp(tmpdir))
        return 1;
    snprintf(cmd, sizeof cmd, "%s %s", getenv("INBOXD_MKCA"), tmpdir);
    if (system(cmd) != 0) {
        fprintf(stderr, "mkca failed\n");
        return 1;
    }
    snprintf(ca, sizeof ca, "%s/ca.crt", tmpdir);
    snprintf(other_ca, sizeof other_ca, "%s/other-ca.crt", tmpdir);
    snprintf(cert, sizeof cert, "%s/srv.crt", tmpdir);
    snprintf(key, sizeof key, "%s/srv.key", tmpdir);
    ib_error_t err;
    if (fx_global_init(&err) != IB_E_OK || start_server(&plain, "idempotent", NULL, NULL) != 0 ||
        start_server(&secure, "idempotent", cert, key) != 0) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    fx = fx_client_new();
    RUN(test_status_table);
    RUN(test_applied_with_key_and_reuse);
    RUN(test_status_classes);
    RUN(test_retry_after_then_applied);
    RUN(test_timeout_after_send_is_ambiguous);
    RUN(test_multi_answers_as_they_come);
    RUN(test_reset_on_reused_connection_is_not_resent);
    RUN(test_refused_and_unresolvable_are_transient);
    RUN(test_tls_verified);
    RUN(test_tls_system_dir);
    fx_client_free(fx);
    stop_server(&plain);
    stop_server(&secure);
    fx_global_cleanup();
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return ib_test_done();
}
