/*
 * test_aad.c - the workload identity token provider against a local token
 * endpoint (token_server.js, started here on 127.0.0.1): the request it
 * sends, caching, refresh before expiry with a rotated federated token,
 * AADSTS errors without the assertion, backoff after a 503, and that the
 * proactor-side call never waits on the network.
 */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ib_log.h"
#include "ib_test.h"
#include "ib_test_proc.h"
#include "sb_aad.h"

typedef struct {
    ib_test_proc_t proc;
    char authority[64];
} server_t;

static server_t plain = {{0, -1}, ""}, secure = {{0, -1}, ""};
static const char *authority = plain.authority;
static char token_file[256];
static char tmpdir[] = "/tmp/inboxd-aad-XXXXXX";

static const char *ASSERTION_1 = "eyJhbGciOiJSUzI1NiJ9.federated-one.c2lnbmF0dXJl";
static const char *ASSERTION_2 = "eyJhbGciOiJSUzI1NiJ9.federated-two.c2lnbmF0dXJl";

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Starts token_server.js (with --tls CERT KEY when cert is not NULL). */
static int start_server(server_t *s, const char *cert, const char *key)
{
    char *script = getenv("INBOXD_AAD_TOKEN_SERVER");
    char *tls[] = {"node", script, "--tls", (char *)cert, (char *)key, NULL};
    char *bare[] = {"node", script, NULL};
    int port = script ? ib_test_proc_start(&s->proc, cert ? tls : bare) : -1;
    if (port < 0)
        return -1;
    /* A trailing slash, as AZURE_AUTHORITY_HOST has on AKS. */
    snprintf(s->authority, sizeof s->authority, "%s://127.0.0.1:%d/", cert ? "https" : "http",
             port);
    return 0;
}

static void stop_server(server_t *s)
{
    ib_test_proc_stop(&s->proc); /* the server exits when its stdin closes */
}

static void write_token_file(const char *content)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", token_file);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%s\n", content);
    fclose(f);
    rename(tmp, token_file); /* atomically, as the kubelet swaps projected files */
}

static size_t collect(char *p, size_t s, size_t n, void *arg)
{
    size_t k = s * n, old = strlen(arg);
    if (old + k < 65536) {
        memcpy((char *)arg + old, p, k);
        ((char *)arg)[old + k] = '\0';
    }
    return k;
}

/* The token requests the server has seen, as a JSON array (caller decrefs). */
static json_t *server_requests(void)
{
    static char buf[65536];
    char url[96];
    buf[0] = '\0';
    snprintf(url, sizeof url, "%srequests", authority);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, buf);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    return json_loads(buf, 0, NULL);
}

static size_t requests_for(const char *client_id)
{
    json_t *all = server_requests();
    size_t i, n = 0;
    json_t *r;
    json_array_foreach(all, i, r)
    {
        const char *c = json_string_value(json_object_get(json_object_get(r, "form"), "client_id"));
        if (c && strcmp(c, client_id) == 0)
            n++;
    }
    json_decref(all);
    return n;
}

static sb_aad_opts_t opts_for(const char *client_id)
{
    return (sb_aad_opts_t){.client_id = client_id,
                           .tenant_id = "tenant-1",
                           .authority_host = authority,
                           .federated_token_file = token_file,
                           .http_timeout_ms = 1000,
                           .retry_min_ms = 100,
                           .retry_max_ms = 400};
}

static void test_missing_settings(void)
{
    ib_error_t err;
    unsetenv("AZURE_CLIENT_ID");
    unsetenv("AZURE_TENANT_ID");
    unsetenv("AZURE_FEDERATED_TOKEN_FILE");
    ASSERT_TRUE(sb_aad_new(NULL, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "AZURE_CLIENT_ID");
    setenv("AZURE_CLIENT_ID", "good", 1);
    ASSERT_TRUE(sb_aad_new(NULL, &err) == NULL);
    ASSERT_CONTAINS(err.text, "AZURE_TENANT_ID");
    setenv("AZURE_TENANT_ID", "../evil", 1);
    setenv("AZURE_FEDERATED_TOKEN_FILE", token_file, 1);
    ASSERT_TRUE(sb_aad_new(NULL, &err) == NULL);
    ASSERT_CONTAINS(err.text, "AZURE_TENANT_ID");
}

static void test_token_from_environment(void)
{
    ib_error_t err;
    setenv("AZURE_CLIENT_ID", "good", 1);
    setenv("AZURE_TENANT_ID", "tenant-env", 1);
    setenv("AZURE_FEDERATED_TOKEN_FILE", token_file, 1);
    setenv("AZURE_AUTHORITY_HOST", authority, 1);
    sb_aad_t *aad = sb_aad_new(NULL, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_OK);
    sb_token_t tok;
    long long before = ib_now_ms();
    ASSERT_EQ(sb_aad_token_get(aad, "sb://ns.servicebus.windows.net/orders", &tok, &err), IB_E_OK);
    ASSERT_CONTAINS(tok.token, "at-");
    ASSERT_STREQ(tok.type, SB_TOKEN_TYPE_JWT);
    ASSERT_TRUE(tok.expires_at_ms > before + 3590 * 1000LL &&
                tok.expires_at_ms <= before + 3600 * 1000LL);
    /* Cached: a second audience gets the same token without a new request. */
    sb_token_t tok2;
    ASSERT_EQ(
        sb_aad_token_get(aad, "sb://ns.servicebus.windows.net/orders/$management", &tok2, &err),
        IB_E_OK);
    ASSERT_STREQ(tok2.token, tok.token);
    ASSERT_EQ(sb_aad_fetch_count(aad), 1);
    sb_token_clear(&tok);
    sb_token_clear(&tok2);
    sb_aad_free(aad);

    /* What went over the wire: the client-credentials request with the assertion. */
    json_t *all = server_requests();
    json_t *r = json_array_get(all, json_array_size(all) - 1);
    json_t *form = json_object_get(r, "form");
    ASSERT_STREQ(json_string_value(json_object_get(r, "path")), "/tenant-env/oauth2/v2.0/token");
    ASSERT_STREQ(json_string_value(json_object_get(r, "contentType")),
                 "application/x-www-form-urlencoded");
    ASSERT_STREQ(json_string_value(json_object_get(form, "grant_type")), "client_credentials");
    ASSERT_STREQ(json_string_value(json_object_get(form, "client_id")), "good");
    ASSERT_STREQ(json_string_value(json_object_get(form, "scope")),
                 "https://servicebus.azure.net/.default");
    ASSERT_STREQ(json_string_value(json_object_get(form, "client_assertion_type")),
                 "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
    ASSERT_STREQ(json_string_value(json_object_get(form, "client_assertion")), ASSERTION_1);
    json_decref(all);
    unsetenv("AZURE_AUTHORITY_HOST");
}

static void test_refresh_before_expiry_reads_rotated_file(void)
{
    ib_error_t err;
    sb_aad_opts_t o = opts_for("short");
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_OK);
    sb_token_t first;
    ASSERT_EQ(sb_aad_token_get(aad, "a", &first, &err), IB_E_OK);
    write_token_file(ASSERTION_2); /* the kubelet rotates the projected token */
    /* expires_in is 3 s: the next fetch must come before the first expires. */
    while (sb_aad_fetch_count(aad) < 2 && ib_now_ms() < first.expires_at_ms)
        sleep_ms(50);
    ASSERT_TRUE(sb_aad_fetch_count(aad) >= 2);
    sb_token_t second;
    ASSERT_EQ(sb_aad_token_get(aad, "a", &second, &err), IB_E_OK);
    ASSERT_TRUE(strcmp(first.token, second.token) != 0);
    ASSERT_TRUE(second.expires_at_ms > first.expires_at_ms);
    sb_aad_free(aad);
    json_t *all = server_requests();
    json_t *last = json_array_get(all, json_array_size(all) - 1);
    ASSERT_STREQ(
        json_string_value(json_object_get(json_object_get(last, "form"), "client_assertion")),
        ASSERTION_2);
    json_decref(all);
    sb_token_clear(&first);
    sb_token_clear(&second);
    write_token_file(ASSERTION_1);
}

static void test_denied_reports_aadsts_without_assertion(void)
{
    ib_error_t err;
    char logbuf[8192] = "";
    FILE *log = fmemopen(logbuf, sizeof logbuf - 1, "w");
    ib_log_set_stream(log);
    sb_aad_opts_t o = opts_for("denied");
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_AUTH);
    ASSERT_STREQ(err.condition, "AADSTS700213");
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, "401");
    ASSERT_CONTAINS(err.text, "invalid_client");
    ASSERT_NOT_CONTAINS(err.text, ASSERTION_1);
    sb_token_t tok;
    ib_error_t err2;
    ASSERT_EQ(sb_aad_token_get(aad, "a", &tok, &err2), IB_E_AUTH);
    ASSERT_STREQ(err2.condition, "AADSTS700213");
    ASSERT_TRUE(tok.token == NULL);
    /* Retries back off (full jitter under 100, 200, 400, 400 ms caps, never
     * sooner than 100 ms) rather than spin: at most 1 + 1000 / 100 requests. */
    sleep_ms(1000);
    sb_aad_free(aad);
    ib_log_set_stream(NULL);
    fclose(log);
    size_t n = requests_for("denied");
    ASSERT_TRUE(n >= 2 && n <= 11);
    ASSERT_NOT_CONTAINS(logbuf, ASSERTION_1);
    ASSERT_NOT_CONTAINS(logbuf, "federated-one");
}

static void test_recovers_after_503(void)
{
    ib_error_t err;
    sb_aad_opts_t o = opts_for("flaky");
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    sb_token_t tok = {0};
    long long deadline = ib_mono_ms() + (long long)(ib_test_timeout(10) * 1000);
    ib_err_t rc;
    while ((rc = sb_aad_token_get(aad, "a", &tok, &err)) != IB_E_OK && ib_mono_ms() < deadline) {
        ASSERT_TRUE(rc == IB_E_AGAIN || rc == IB_E_AUTH);
        if (rc == IB_E_AUTH) /* a 503 is worth retrying */
            ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
        sleep_ms(20);
    }
    ASSERT_EQ(rc, IB_E_OK);
    ASSERT_EQ(requests_for("flaky"), 2);
    sb_token_clear(&tok);
    sb_aad_free(aad);
}

static void test_get_never_waits_on_network(void)
{
    ib_error_t err;
    sb_aad_opts_t o = opts_for("slow"); /* the endpoint answers after 3 s */
    long long t0 = ib_mono_ms();
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    sleep_ms(100); /* the refresh thread is now inside its request */
    sb_token_t tok;
    long long t1 = ib_mono_ms();
    ASSERT_EQ(sb_aad_token_get(aad, "a", &tok, &err), IB_E_AGAIN);
    ASSERT_TRUE(ib_mono_ms() - t1 < (long long)(ib_test_timeout(0.05) * 1000));
    /* Freeing waits at most the request timeout (1 s here), not the answer. */
    sb_aad_free(aad);
    ASSERT_TRUE(ib_mono_ms() - t0 < 2500 + (long long)(ib_test_timeout(0.5) * 1000));
}

/* A throwaway CA and a certificate for 127.0.0.1, made with the openssl CLI. */
static int make_certs(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "(cd %s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
             "-subj /CN=inboxd-test-ca -keyout ca.key -out ca.crt && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-subj /CN=127.0.0.1 -keyout srv.key -out srv.csr && "
             "printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > srv.ext && "
             "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile srv.ext -out srv.crt) >%s/openssl.log 2>&1",
             tmpdir, tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_tls_with_private_ca(void)
{
    ib_error_t err;
    char cert[300], key[300], ca[300];
    snprintf(cert, sizeof cert, "%s/srv.crt", tmpdir);
    snprintf(key, sizeof key, "%s/srv.key", tmpdir);
    snprintf(ca, sizeof ca, "%s/ca.crt", tmpdir);
    ASSERT_EQ(make_certs(), 0);
    ASSERT_EQ(start_server(&secure, cert, key), 0);
    sb_aad_opts_t o = opts_for("good");
    o.authority_host = secure.authority;
    o.ca_file = ca;
    /* A TLS handshake under sanitizers on a loaded machine can take longer than the 1 s of
     * the plain cases; the outcome, not the time, is what this test checks. */
    o.http_timeout_ms = (long)(ib_test_timeout(5) * 1000);
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_OK);
    sb_aad_free(aad);
    /* Without the CA the certificate is refused: verification is on. */
    o.ca_file = NULL;
    aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "certificate");
    sb_aad_free(aad);
    stop_server(&secure);
}

static void test_missing_token_file(void)
{
    ib_error_t err;
    sb_aad_opts_t o = opts_for("good");
    o.federated_token_file = "/nonexistent/inboxd/token";
    sb_aad_t *aad = sb_aad_new(&o, &err);
    ASSERT_TRUE(aad != NULL);
    ASSERT_EQ(sb_aad_wait(aad, (long)(ib_test_timeout(10) * 1000), &err), IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "/nonexistent/inboxd/token");
    sb_aad_free(aad);
}

int main(void)
{
    ib_log_set_level(IB_LOG_ERROR);
    if (!mkdtemp(tmpdir))
        return 1;
    snprintf(token_file, sizeof token_file, "%s/azure-identity-token", tmpdir);
    write_token_file(ASSERTION_1);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start_server(&plain, NULL, NULL) != 0) {
        fprintf(stderr, "cannot start token_server.js with node (INBOXD_AAD_TOKEN_SERVER=%s)\n",
                getenv("INBOXD_AAD_TOKEN_SERVER") ? getenv("INBOXD_AAD_TOKEN_SERVER") : "unset");
        stop_server(&plain);
        return 1;
    }
    RUN(test_missing_settings);
    RUN(test_token_from_environment);
    RUN(test_refresh_before_expiry_reads_rotated_file);
    RUN(test_denied_reports_aadsts_without_assertion);
    RUN(test_recovers_after_503);
    RUN(test_get_never_waits_on_network);
    RUN(test_missing_token_file);
    RUN(test_tls_with_private_ca);
    stop_server(&plain);
    stop_server(&secure);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    curl_global_cleanup();
    return ib_test_done();
}
