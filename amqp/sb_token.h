/*
 * sb_token.h - where CBS tokens come from.
 *
 * The client asks a token provider for a token per audience
 * ("sb://host[:port]/<entity>" and ".../<entity>/$management") before it
 * attaches a link, and again well before the token expires (see
 * sb_token_refresh_at). The default provider signs SAS tokens from the
 * connection string's key, or hands out the SharedAccessSignature the
 * connection string carries. An Azure AD provider plugs in through the same
 * function type.
 */
#ifndef SB_TOKEN_H
#define SB_TOKEN_H

#include "ib_err.h"
#include "sb_connstr.h"

#define SB_TOKEN_TYPE_SAS "servicebus.windows.net:sastoken"
#define SB_TOKEN_TYPE_JWT "jwt"

typedef struct sb_token {
    char *token;             /* malloc'd by the provider; the caller frees it */
    const char *type;        /* SB_TOKEN_TYPE_SAS or SB_TOKEN_TYPE_JWT (static text) */
    long long expires_at_ms; /* wall clock, ms since the epoch */
} sb_token_t;

/*
 * Fills out with a token for audience. thread: the client's proactor thread;
 * it must not block (a provider that talks to a network keeps a cached token
 * refreshed by its own thread). Returns IB_E_OK, or an error code with err
 * filled (IB_E_AUTH, IB_E_AGAIN when no token is available yet).
 */
typedef ib_err_t (*sb_token_get_fn)(void *ctx, const char *audience, sb_token_t *out,
                                    ib_error_t *err);

/* Frees out->token and zeroes out. */
void sb_token_clear(sb_token_t *tok);

/*
 * Builds "SharedAccessSignature sr=..&sig=..&se=..&skn=.." for audience,
 * signed with HMAC-SHA256 over the UTF-8 bytes of key (not base64-decoded),
 * expiring at expiry_s (Unix seconds). Returns a malloc'd string, or NULL on
 * out of memory. thread: any.
 */
char *sb_sas_token(const char *audience, const char *key_name, const char *key, long long expiry_s);

/*
 * The default provider over a parsed connection string (ctx is a
 * const sb_connstr_t * that must outlive the client). With a key it signs a
 * token valid for cs->sas_lifetime_s (one hour by default); with a SharedAccessSignature it returns a copy of
 * it, expiring at its se= field. thread: any.
 */
ib_err_t sb_token_from_connstr(void *ctx, const char *audience, sb_token_t *out, ib_error_t *err);

/*
 * When to put the next token for one that expires at expires_at_ms, given
 * now_ms (both wall clock): a quarter of the remaining lifetime early, at
 * least two minutes early, and never later than now + lifetime/2 for short
 * tokens. thread: any.
 */
long long sb_token_refresh_at(long long now_ms, long long expires_at_ms);

#endif
