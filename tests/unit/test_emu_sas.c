/*
 * test_emu_sas.c - SAS token and JWT validation of sbemu's $cbs node.
 */
#include "emu_auth.h"
#include "emu_util.h"
#include "ib_test.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#define KEY "c2VjcmV0LWtleS10ZXh0LTEyMzQ1Njc4OTA="
#define NOW 1800000000LL

/* encodeURIComponent */
static void enc(const char *in, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *in; in++) {
        unsigned char c = (unsigned char)*in;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            strchr("-_.!~*'()", c)) {
            *out++ = (char)c;
        } else {
            *out++ = '%';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
    }
    *out = '\0';
}

/* Builds a token the way the SDKs do (wire reference §2.4). */
static void make_sas(char *out, size_t size, const char *resource, long long expiry,
                     const char *key, const char *key_name)
{
    char sr[512], str[600], sig64[64], sig[128], skn[128];
    enc(resource, sr);
    snprintf(str, sizeof str, "%s\n%lld", sr, expiry);
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (unsigned char *)str, strlen(str), mac, &maclen);
    emu_base64(mac, maclen, sig64);
    enc(sig64, sig);
    enc(key_name, skn);
    snprintf(out, size, "SharedAccessSignature sr=%s&sig=%s&se=%lld&skn=%s", sr, sig, expiry, skn);
}

static void test_good_token(void)
{
    char tok[1024], why[128] = "";
    int64_t exp = 0;
    make_sas(tok, sizeof tok, "sb://localhost:5672/orders", NOW + 3600, KEY, "Root");
    ASSERT_EQ(
        emu_sas_check(tok, "Root", KEY, "sb://localhost:5672/orders", NOW, &exp, why, sizeof why),
        0);
    ASSERT_EQ(exp, NOW + 3600);
    /* No key name configured: any skn. */
    ASSERT_EQ(
        emu_sas_check(tok, NULL, KEY, "sb://localhost:5672/orders", NOW, &exp, why, sizeof why), 0);
    /* A namespace-wide token covers every entity. */
    make_sas(tok, sizeof tok, "sb://localhost:5672/", NOW + 60, KEY, "Root");
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost:5672/events/Subscriptions/b", NOW,
                            &exp, why, sizeof why),
              0);
}

static void test_bad_signature(void)
{
    char tok[1024], why[128] = "";
    int64_t exp = 0;
    make_sas(tok, sizeof tok, "sb://localhost/orders", NOW + 3600, "another-key", "Root");
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders", NOW, &exp, why, sizeof why),
              -1);
    ASSERT_CONTAINS(why, "signature");
    /* Tampered expiry with the original signature. */
    make_sas(tok, sizeof tok, "sb://localhost/orders", NOW + 3600, KEY, "Root");
    char *se = strstr(tok, "&se=");
    se[4] = se[4] == '9' ? '8' : '9';
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders", NOW, &exp, why, sizeof why),
              -1);
    /* Wrong rule name. */
    make_sas(tok, sizeof tok, "sb://localhost/orders", NOW + 3600, KEY, "Other");
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders", NOW, &exp, why, sizeof why),
              -1);
    ASSERT_EQ(
        emu_sas_check("Bearer x", "Root", KEY, "sb://localhost/orders", NOW, &exp, why, sizeof why),
        -1);
}

static void test_expired(void)
{
    char tok[1024], why[128] = "";
    int64_t exp = 0;
    make_sas(tok, sizeof tok, "sb://localhost/orders", NOW - 1, KEY, "Root");
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders", NOW, &exp, why, sizeof why),
              -1);
    ASSERT_CONTAINS(why, "expired");
}

static void test_wrong_audience(void)
{
    char tok[1024], why[128] = "";
    int64_t exp = 0;
    make_sas(tok, sizeof tok, "sb://localhost/orders", NOW + 3600, KEY, "Root");
    ASSERT_EQ(
        emu_sas_check(tok, "Root", KEY, "sb://localhost/payments", NOW, &exp, why, sizeof why), -1);
    ASSERT_CONTAINS(why, "cover");
    /* A prefix that is not a path segment does not cover. */
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders2", NOW, &exp, why, sizeof why),
              -1);
    ASSERT_EQ(emu_sas_check(tok, "Root", KEY, "sb://localhost/orders/$management", NOW, &exp, why,
                            sizeof why),
              0);
}

static void test_covers(void)
{
    ASSERT_TRUE(emu_audience_covers("sb://h:1/orders", "orders"));
    ASSERT_TRUE(emu_audience_covers("sb://h:1/Orders", "/orders/$DeadLetterQueue"));
    ASSERT_TRUE(emu_audience_covers("amqps://ns/", "anything/at/all"));
    ASSERT_TRUE(!emu_audience_covers("sb://h/orders", "order"));
    ASSERT_TRUE(!emu_audience_covers("sb://h/orders/$management", "orders"));
}

static void b64url(const unsigned char *in, size_t len, char *out)
{
    emu_base64(in, len, out);
    char *w = out;
    for (char *r = out; *r; r++) {
        if (*r == '=')
            continue;
        *w++ = *r == '+' ? '-' : *r == '/' ? '_' : *r;
    }
    *w = '\0';
}

static void make_jwt(char *out, const char *payload, const char *secret)
{
    char h[128], p[1024];
    const char *hdr = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    b64url((const unsigned char *)hdr, strlen(hdr), h);
    b64url((const unsigned char *)payload, strlen(payload), p);
    char signing[2048];
    snprintf(signing, sizeof signing, "%s.%s", h, p);
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)signing, strlen(signing), mac,
         &maclen);
    char s[64];
    b64url(mac, maclen, s);
    sprintf(out, "%s.%s", signing, s);
}

static void test_jwt(void)
{
    char tok[4096], why[128], payload[512];
    int64_t exp = 0;
    snprintf(
        payload, sizeof payload,
        "{\"iss\":\"https://issuer.test/\",\"aud\":\"https://servicebus.azure.net\",\"exp\":%lld}",
        NOW + 600);
    make_jwt(tok, payload, "jwt-secret");
    ASSERT_EQ(emu_jwt_check(tok, "https://issuer.test/", "jwt-secret", NOW, &exp, why, sizeof why),
              0);
    ASSERT_EQ(exp, NOW + 600);
    ASSERT_EQ(emu_jwt_check(tok, "https://other/", "jwt-secret", NOW, &exp, why, sizeof why), -1);
    ASSERT_EQ(emu_jwt_check(tok, "https://issuer.test/", "wrong", NOW, &exp, why, sizeof why), -1);
    ASSERT_EQ(
        emu_jwt_check(tok, "https://issuer.test/", "jwt-secret", NOW + 601, &exp, why, sizeof why),
        -1);
    snprintf(payload, sizeof payload,
             "{\"iss\":\"https://issuer.test/\",\"aud\":[\"x\",\"https://"
             "servicebus.azure.net\"],\"exp\":%lld}",
             NOW + 600);
    make_jwt(tok, payload, "jwt-secret");
    ASSERT_EQ(emu_jwt_check(tok, "https://issuer.test/", "jwt-secret", NOW, &exp, why, sizeof why),
              0);
    snprintf(
        payload, sizeof payload,
        "{\"iss\":\"https://issuer.test/\",\"aud\":\"https://storage.azure.com\",\"exp\":%lld}",
        NOW + 600);
    make_jwt(tok, payload, "jwt-secret");
    ASSERT_EQ(emu_jwt_check(tok, "https://issuer.test/", "jwt-secret", NOW, &exp, why, sizeof why),
              -1);
    ASSERT_CONTAINS(why, "audience");
}

int main(void)
{
    RUN(test_good_token);
    RUN(test_bad_signature);
    RUN(test_expired);
    RUN(test_wrong_audience);
    RUN(test_covers);
    RUN(test_jwt);
    return ib_test_done();
}
