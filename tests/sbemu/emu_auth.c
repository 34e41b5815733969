/*
 * emu_auth.c - SAS and JWT validation for the emulator's $cbs node.
 */
#include "emu_auth.h"

#include "emu_util.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAS_PREFIX "SharedAccessSignature "

/* thread: any */
const char *emu_audience_path(const char *s)
{
    const char *p = strstr(s, "://");
    if (!p)
        return s[0] == '/' ? s + 1 : s;
    p = strchr(p + 3, '/');
    return p ? p + 1 : "";
}

/* thread: any */
bool emu_audience_covers(const char *granted, const char *path)
{
    const char *g = emu_audience_path(granted);
    const char *e = emu_audience_path(path);
    /* A query string (the REST API's ?api-version=) is not part of the path. */
    size_t gl = strcspn(g, "?"), el = strcspn(e, "?");
    while (gl > 0 && g[gl - 1] == '/')
        gl--;
    while (el > 0 && e[el - 1] == '/')
        el--;
    if (gl == 0)
        return true;
    if (el < gl || !emu_ieq(g, gl, e, gl))
        return false;
    return el == gl || e[gl] == '/';
}

/* Finds field `name=` in an &-separated list; returns its raw value range. */
static bool sas_field(const char *fields, const char *name, const char **val, size_t *len)
{
    size_t nl = strlen(name);
    const char *p = fields;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t seg = amp ? (size_t)(amp - p) : strlen(p);
        if (seg > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            *val = p + nl + 1;
            *len = seg - nl - 1;
            return true;
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    return false;
}

static int fail(char *why, size_t whylen, const char *text)
{
    snprintf(why, whylen, "%s", text);
    return -1;
}

/* thread: any */
int emu_sas_check(const char *token, const char *key_name, const char *key, const char *audience,
                  int64_t now_s, int64_t *expiry_s, char *why, size_t whylen)
{
    if (!token || strncmp(token, SAS_PREFIX, strlen(SAS_PREFIX)) != 0)
        return fail(why, whylen, "not a SharedAccessSignature token");
    const char *fields = token + strlen(SAS_PREFIX);
    const char *sr, *sig, *se, *skn;
    size_t srl, sigl, sel, sknl;
    if (!sas_field(fields, "sr", &sr, &srl) || !sas_field(fields, "sig", &sig, &sigl) ||
        !sas_field(fields, "se", &se, &sel))
        return fail(why, whylen, "token lacks sr, sig or se");
    char buf[1024];
    if (sel == 0 || sel > 20)
        return fail(why, whylen, "bad se");
    memcpy(buf, se, sel);
    buf[sel] = '\0';
    char *end;
    long long exp = strtoll(buf, &end, 10);
    if (*end)
        return fail(why, whylen, "bad se");
    if (exp <= now_s)
        return fail(why, whylen, "token expired");
    if (key_name) {
        if (!sas_field(fields, "skn", &skn, &sknl))
            return fail(why, whylen, "token lacks skn");
        if (emu_pct_decode(skn, sknl, buf, sizeof buf) != 0 || strcmp(buf, key_name) != 0)
            return fail(why, whylen, "unknown key name");
    }
    /* The signature covers the resource exactly as it appears in the token. */
    if (srl + sel + 2 > sizeof buf)
        return fail(why, whylen, "resource too long");
    memcpy(buf, sr, srl);
    buf[srl] = '\n';
    memcpy(buf + srl + 1, se, sel);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (!HMAC(EVP_sha256(), key, (int)strlen(key), (unsigned char *)buf, srl + 1 + sel, mac,
              &maclen))
        return fail(why, whylen, "hmac failed");
    char want[64], got[256];
    emu_base64(mac, maclen, want);
    if (emu_pct_decode(sig, sigl, got, sizeof got) != 0 || strlen(got) != strlen(want) ||
        CRYPTO_memcmp(got, want, strlen(want)) != 0)
        return fail(why, whylen, "signature mismatch");
    char resource[1024];
    if (emu_pct_decode(sr, srl, resource, sizeof resource) != 0)
        return fail(why, whylen, "bad sr");
    if (!emu_audience_covers(resource, audience))
        return fail(why, whylen, "token resource does not cover the audience");
    *expiry_s = exp;
    return 0;
}

static json_t *jwt_part(const char *s, size_t len)
{
    uint8_t buf[4096];
    long n = emu_base64_decode(s, len, buf, sizeof buf);
    if (n < 0)
        return NULL;
    return json_loadb((const char *)buf, (size_t)n, 0, NULL);
}

/* thread: any */
int emu_jwt_check(const char *token, const char *issuer, const char *secret, int64_t now_s,
                  int64_t *expiry_s, char *why, size_t whylen)
{
    const char *d1 = token ? strchr(token, '.') : NULL;
    const char *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    if (!d2 || strchr(d2 + 1, '.'))
        return fail(why, whylen, "not a JWT");
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)token,
              (size_t)(d2 - token), mac, &maclen))
        return fail(why, whylen, "hmac failed");
    uint8_t sig[64];
    long sl = emu_base64_decode(d2 + 1, strlen(d2 + 1), sig, sizeof sig);
    if (sl != (long)maclen || CRYPTO_memcmp(sig, mac, maclen) != 0)
        return fail(why, whylen, "signature mismatch");
    json_t *hdr = jwt_part(token, (size_t)(d1 - token));
    json_t *body = jwt_part(d1 + 1, (size_t)(d2 - d1 - 1));
    int rc = -1;
    if (!hdr || !body) {
        fail(why, whylen, "malformed JWT");
        goto out;
    }
    const char *alg = json_string_value(json_object_get(hdr, "alg"));
    if (!alg || strcmp(alg, "HS256") != 0) {
        fail(why, whylen, "alg is not HS256");
        goto out;
    }
    const char *iss = json_string_value(json_object_get(body, "iss"));
    if (!iss || strcmp(iss, issuer) != 0) {
        fail(why, whylen, "wrong issuer");
        goto out;
    }
    json_t *aud = json_object_get(body, "aud");
    bool aud_ok = false;
    if (json_is_string(aud)) {
        aud_ok = strcmp(json_string_value(aud), "https://servicebus.azure.net") == 0;
    } else if (json_is_array(aud)) {
        size_t i;
        json_t *v;
        json_array_foreach(aud, i, v)
        {
            if (json_is_string(v) &&
                strcmp(json_string_value(v), "https://servicebus.azure.net") == 0)
                aud_ok = true;
        }
    }
    if (!aud_ok) {
        fail(why, whylen, "wrong audience");
        goto out;
    }
    json_t *exp = json_object_get(body, "exp");
    if (!json_is_number(exp) || (int64_t)json_number_value(exp) <= now_s) {
        fail(why, whylen, "token expired");
        goto out;
    }
    json_t *nbf = json_object_get(body, "nbf");
    if (json_is_number(nbf) && (int64_t)json_number_value(nbf) > now_s + 60) {
        fail(why, whylen, "token not yet valid");
        goto out;
    }
    *expiry_s = (int64_t)json_number_value(exp);
    rc = 0;
out:
    json_decref(hdr);
    json_decref(body);
    return rc;
}
