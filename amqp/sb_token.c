#include "sb_token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ib_enc.h"
#include "ib_log.h"

#define SAS_LIFETIME_S 3600

void sb_token_clear(sb_token_t *tok)
{
    if (!tok)
        return;
    if (tok->token) {
        memset(tok->token, 0, strlen(tok->token));
        free(tok->token);
    }
    memset(tok, 0, sizeof(*tok));
}

char *sb_sas_token(const char *audience, const char *key_name, const char *key, long long expiry_s)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    char *sr = NULL, *sig = NULL, *skn = NULL, *to_sign = NULL, *out = NULL;
    size_t n;

    sr = ib_enc_pct_dup(audience);
    skn = ib_enc_pct_dup(key_name);
    if (!sr || !skn)
        goto done;
    n = strlen(sr) + 32;
    to_sign = malloc(n);
    if (!to_sign)
        goto done;
    snprintf(to_sign, n, "%s\n%lld", sr, expiry_s);
    if (!HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)to_sign, strlen(to_sign),
              mac, &mac_len))
        goto done;
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)mac_len);
    sig = ib_enc_pct_dup(b64);
    if (!sig)
        goto done;
    n = strlen(sr) + strlen(sig) + strlen(skn) + 80;
    out = malloc(n);
    if (out)
        snprintf(out, n, "SharedAccessSignature sr=%s&sig=%s&se=%lld&skn=%s", sr, sig, expiry_s,
                 skn);
done:
    free(sr);
    free(sig);
    free(skn);
    free(to_sign);
    return out;
}

/* The se= field of a SharedAccessSignature, or 0. */
static long long sas_expiry(const char *sas)
{
    const char *p = sas;
    while ((p = strstr(p, "se=")) != NULL) {
        if (p == sas || p[-1] == '&' || p[-1] == ' ')
            return atoll(p + 3);
        p += 3;
    }
    return 0;
}

ib_err_t sb_token_from_connstr(void *ctx, const char *audience, sb_token_t *out, ib_error_t *err)
{
    const sb_connstr_t *cs = ctx;
    long long now_s = ib_now_ms() / 1000;

    memset(out, 0, sizeof(*out));
    out->type = SB_TOKEN_TYPE_SAS;
    if (cs->sas) {
        long long se = sas_expiry(cs->sas);
        out->token = strdup(cs->sas);
        /* A signature without se= is used as if it lasted an hour; the broker decides. */
        out->expires_at_ms = (se > 0 ? se : now_s + SAS_LIFETIME_S) * 1000;
        if (se > 0 && se <= now_s)
            return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                                "the connection string's SharedAccessSignature has expired");
    } else if (!cs->key || !cs->key_name) {
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                            "the connection string has neither SharedAccessKeyName/"
                            "SharedAccessKey nor SharedAccessSignature (for Azure AD set "
                            "servicebus.auth to workload_identity)");
    } else {
        long long exp = now_s + (cs->sas_lifetime_s ? cs->sas_lifetime_s : SAS_LIFETIME_S);
        out->token = sb_sas_token(audience, cs->key_name, cs->key, exp);
        out->expires_at_ms = exp * 1000;
    }
    if (!out->token)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    return IB_E_OK;
}

long long sb_token_refresh_at(long long now_ms, long long expires_at_ms)
{
    long long remaining = expires_at_ms - now_ms, early;
    if (remaining <= 0)
        return now_ms;
    early = remaining / 4;
    if (early < 120000)
        early = 120000;
    if (early > remaining / 2)
        early = remaining / 2;
    return expires_at_ms - early;
}
