/* Unit tests of SAS tokens (amqp/sb_token.c). */
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "ib_test.h"
#include "sb_connstr.h"
#include "sb_token.h"

/* The signature was computed independently with
 *   printf 'sb%3A%2F%2Flocalhost%3A15673%2Fq1\n1700000000' |
 *     openssl dgst -sha256 -hmac SAS_KEY_VALUE -binary | base64 */
static void test_sas_vector(void)
{
    char *t = sb_sas_token("sb://localhost:15673/q1", "RootManageSharedAccessKey", "SAS_KEY_VALUE",
                           1700000000LL);
    ASSERT_STREQ(t, "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%3A15673%2Fq1"
                    "&sig=qLDqEnw5KCOPlHjzf8269LssMpthdvpppxEKk6MgY24%3D"
                    "&se=1700000000&skn=RootManageSharedAccessKey");
    free(t);
}

static void test_provider_key(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    sb_token_t tok;
    long long now = ib_now_ms();
    ASSERT_EQ(sb_connstr_parse("Endpoint=sb://localhost:5672/;SharedAccessKeyName=k;"
                               "SharedAccessKey=secret;UseDevelopmentEmulator=true",
                               &cs, &err),
              IB_E_OK);
    ASSERT_EQ(sb_token_from_connstr(&cs, "sb://localhost:5672/q", &tok, &err), IB_E_OK);
    ASSERT_STREQ(tok.type, SB_TOKEN_TYPE_SAS);
    ASSERT_CONTAINS(tok.token, "sr=sb%3A%2F%2Flocalhost%3A5672%2Fq&sig=");
    ASSERT_CONTAINS(tok.token, "&skn=k");
    ASSERT_NOT_CONTAINS(tok.token, "secret");
    ASSERT_TRUE(tok.expires_at_ms > now + 3500 * 1000LL && tok.expires_at_ms < now + 3700 * 1000LL);
    sb_token_clear(&tok);
    ASSERT_TRUE(tok.token == NULL);
    /* servicebus.sas_token_lifetime_s: a 6 s token (se= now + 6). */
    cs.sas_lifetime_s = 6;
    now = ib_now_ms();
    ASSERT_EQ(sb_token_from_connstr(&cs, "sb://localhost:5672/q", &tok, &err), IB_E_OK);
    ASSERT_TRUE(tok.expires_at_ms > now + 4000 && tok.expires_at_ms <= now + 7000);
    sb_token_clear(&tok);
    sb_connstr_free(&cs);
}

static void test_provider_signature(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    sb_token_t tok;
    ASSERT_EQ(
        sb_connstr_parse("Endpoint=sb://ns.example/;SharedAccessSignature=SharedAccessSignature "
                         "sr=x&sig=y&se=4102444800&skn=k",
                         &cs, &err),
        IB_E_OK);
    ASSERT_EQ(sb_token_from_connstr(&cs, "sb://ns.example/q", &tok, &err), IB_E_OK);
    ASSERT_STREQ(tok.token, "SharedAccessSignature sr=x&sig=y&se=4102444800&skn=k");
    ASSERT_EQ(tok.expires_at_ms, 4102444800000LL);
    sb_token_clear(&tok);
    sb_connstr_free(&cs);

    ASSERT_EQ(
        sb_connstr_parse("Endpoint=sb://ns.example/;SharedAccessSignature=SharedAccessSignature "
                         "sr=x&sig=y&se=1000&skn=k",
                         &cs, &err),
        IB_E_OK);
    ASSERT_EQ(sb_token_from_connstr(&cs, "sb://ns.example/q", &tok, &err), IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "expired");
    sb_token_clear(&tok);
    sb_connstr_free(&cs);
}

static void test_refresh_at(void)
{
    long long now = 1000000;
    /* One hour: refresh 15 minutes early. */
    ASSERT_EQ(sb_token_refresh_at(now, now + 3600000), now + 2700000);
    /* 400 s: at least two minutes early. */
    ASSERT_EQ(sb_token_refresh_at(now, now + 400000), now + 280000);
    /* Two minutes: half the lifetime. */
    ASSERT_EQ(sb_token_refresh_at(now, now + 120000), now + 60000);
    /* Six seconds: half the lifetime, 3 s before it ends. */
    ASSERT_EQ(sb_token_refresh_at(now, now + 6000), now + 3000);
    ASSERT_EQ(sb_token_refresh_at(now, now - 1), now);
}

int main(void)
{
    RUN(test_sas_vector);
    RUN(test_provider_key);
    RUN(test_provider_signature);
    RUN(test_refresh_at);
    return ib_test_done();
}
