/* Claim-checked routes (claim_check): every key checked at compile time
 * (allowed_hosts required, the account key only from the environment and
 * masked, no claim_check beside action), and binding a message's blob
 * reference: the URL as the message gives it (a SAS kept, nothing
 * percent-encoded), its host against allowed_hosts (userinfo and other
 * hosts refused), sha256 / etag left out when the message does not carry
 * them. */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_route.h"
#include "rt_route_test.h"

static char *compile(const char *route, int *n, rt_routes_t *rs)
{
    char arr[4096];
    snprintf(arr, sizeof arr, "[%s]", route);
    return compile_errors(arr, n, rs);
}

#define GOOD                                                                                       \
    "{\"match\":\"*\",\"sql\":\"INSERT INTO t (id) VALUES (?)\",\"params\":[\"$.id\"],"            \
    "\"claim_check\":{\"url\":\"{$.data.url}\",\"etag\":\"{$.data.eTag}\","                         \
    "\"sha256\":\"{prop:blob-sha256}\",\"allowed_hosts\":[\"acct.blob.core.windows.net\","         \
    "\"127.0.0.1:10000\"],\"max_bytes\":1000,\"auth\":\"shared_key\",\"account\":\"acct\","        \
    "\"account_key\":{\"env\":\"TEST_STORAGE_KEY\"}}}"

/* The first route (each here matches "*"). */
static const rt_route_t *first(const rt_routes_t *rs)
{
    sb_msg_t m;
    memset(&m, 0, sizeof m);
    return rt_routes_match(rs, &m);
}

static sb_prop_t props[1];

static void make_msg(sb_msg_t *m, const char *body, bool with_sha)
{
    memset(m, 0, sizeof(*m));
    m->message_id = "m-1";
    props[0] = (sb_prop_t){"blob-sha256", SB_PROP_STRING, "ab12", 0, 0};
    m->props = props;
    m->nprops = with_sha ? 1 : 0;
    m->body = (unsigned char *)body;
    m->body_len = strlen(body);
}

static void test_valid(void)
{
    rt_routes_t rs;
    int n;
    setenv("TEST_STORAGE_KEY", "c2VjcmV0LWtleS12YWx1ZQ==", 1);
    char *e = compile(GOOD, &n, &rs);
    ASSERT_EQ(n, 0);
    ASSERT_STREQ(e, "");
    const rt_claim_spec_t *c = rt_route_claim(first(&rs));
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ(rt_claim_max_bytes(c), 1000);
    ASSERT_EQ(rt_claim_timeout_ms(c), 30000);
    ASSERT_EQ(rt_claim_auth(c), RT_CLAIM_SHARED_KEY);
    ASSERT_STREQ(rt_claim_account(c), "acct");
    ASSERT_STREQ(rt_claim_account_key(c), "c2VjcmV0LWtleS12YWx1ZQ==");
    ASSERT_TRUE(rt_routes_claim_auth(&rs, RT_CLAIM_SHARED_KEY));
    ASSERT_TRUE(!rt_routes_claim_auth(&rs, RT_CLAIM_WORKLOAD_IDENTITY));
    free(e);
    rt_routes_free(&rs);
}

static void expect_problem(const char *route, const char *needle)
{
    rt_routes_t rs;
    int n;
    char *e = compile(route, &n, &rs);
    ASSERT_GE(n, 1);
    ASSERT_CONTAINS(e, needle);
    free(e);
    rt_routes_free(&rs);
}

static void test_problems(void)
{
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\"}}",
                   "routes[0].claim_check.allowed_hosts: required");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"allowed_hosts\":[\"h\"]}}",
                   "routes[0].claim_check.url: missing");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\","
                   "\"allowed_hosts\":[\"h\"],\"auth\":\"shared_key\"}}",
                   "routes[0].claim_check.account_key");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\","
                   "\"allowed_hosts\":[\"h\"],\"auth\":\"basic\"}}",
                   "routes[0].claim_check.auth");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\","
                   "\"allowed_hosts\":[\"h\"],\"max_bytes\":0}}",
                   "routes[0].claim_check.max_bytes");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\","
                   "\"allowed_hosts\":[\"h\"],\"sas\":true}}",
                   "routes[0].claim_check.sas: unknown key");
    expect_problem("{\"match\":\"*\",\"sql\":\"S\",\"claim_check\":{\"url\":\"{$.u}\","
                   "\"allowed_hosts\":[\"h\"],\"account\":\"a\"}}",
                   "routes[0].claim_check.account: only with auth \"shared_key\"");
    expect_problem("{\"match\":\"*\",\"action\":\"complete\",\"claim_check\":{}}",
                   "routes[0].claim_check: not allowed with action");
}

static void test_bind(void)
{
    rt_routes_t rs;
    rt_claim_ref_t ref;
    ib_error_t err;
    sb_msg_t m;
    int n;
    setenv("TEST_STORAGE_KEY", "c2VjcmV0LWtleS12YWx1ZQ==", 1);
    free(compile(GOOD, &n, &rs));
    ASSERT_EQ(n, 0);
    const rt_route_t *r = first(&rs);
    /* As given: the SAS query kept, nothing percent-encoded. */
    make_msg(&m,
             "{\"data\":{\"url\":\"https://acct.blob.core.windows.net/c/a%20b.json?sv=1&sig=x%2B\","
             "\"eTag\":\"0x8D1\"}}",
             true);
    ASSERT_EQ(rt_route_bind_claim(r, &m, &ref, &err), IB_E_OK);
    ASSERT_STREQ(ref.url, "https://acct.blob.core.windows.net/c/a%20b.json?sv=1&sig=x%2B");
    ASSERT_STREQ(ref.url_redacted, "https://acct.blob.core.windows.net/c/a%20b.json");
    ASSERT_STREQ(ref.dest, "https://acct.blob.core.windows.net:443");
    ASSERT_STREQ(ref.etag, "0x8D1");
    ASSERT_STREQ(ref.sha256, "ab12");
    rt_claim_ref_free(&ref);
    /* No sha256 property, no eTag: nothing to check. */
    make_msg(&m, "{\"data\":{\"url\":\"http://127.0.0.1:10000/acct/c/a.json\"}}", false);
    ASSERT_EQ(rt_route_bind_claim(r, &m, &ref, &err), IB_E_OK);
    ASSERT_TRUE(ref.sha256 == NULL && ref.etag == NULL);
    rt_claim_ref_free(&ref);
    /* Hosts the route does not list, or a listed one at another port. */
    static const char *const bad[] = {
        "{\"data\":{\"url\":\"https://evil.example/c/a.json\"}}",
        "{\"data\":{\"url\":\"https://acct.blob.core.windows.net@evil.example/c/a.json\"}}",
        "{\"data\":{\"url\":\"http://127.0.0.1:10001/acct/c/a.json\"}}",
        "{\"data\":{\"url\":\"ftp://acct.blob.core.windows.net/c/a.json\"}}",
        "{\"data\":{\"url\":\"https://acct.blob.core.windows.net/c/a.json\\r\\nX: y\"}}",
        NULL};
    for (int i = 0; bad[i]; i++) {
        make_msg(&m, bad[i], false);
        ASSERT_EQ(rt_route_bind_claim(r, &m, &ref, &err), IB_E_NOT_ALLOWED);
        ASSERT_CONTAINS(err.text, "claim_check.allowed_hosts");
        rt_claim_ref_free(&ref);
    }
    make_msg(&m, "{\"data\":{}}", false);
    ASSERT_EQ(rt_route_bind_claim(r, &m, &ref, &err), IB_E_MISSING_FIELD);
    rt_claim_ref_free(&ref);
    rt_routes_free(&rs);
}

int main(void)
{
    RUN(test_valid);
    RUN(test_problems);
    RUN(test_bind);
    return ib_test_done();
}
