/*
 * sb_aad.h - Azure AD workload identity as a CBS token provider.
 *
 * On AKS with workload identity the pod gets a projected service account
 * token (a JWT the kubelet rotates) at AZURE_FEDERATED_TOKEN_FILE, and the
 * webhook sets AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_AUTHORITY_HOST.
 * This provider exchanges that federated token for an Azure AD access token
 * (OAuth 2.0 client credentials with a client_assertion), for the scope
 * https://servicebus.azure.net/.default, and hands it out as a CBS token of
 * type "jwt" for any audience of the namespace.
 *
 * A thread of its own does every HTTP request: it fetches the first token
 * at once, refreshes it well before expiry (sb_token_refresh_at), and backs
 * off exponentially (1 s to 60 s, with jitter) after failures. The proactor
 * thread only ever copies the cached token, under a mutex, and never waits
 * on the network.
 *
 * Token endpoint errors are logged (event "aad_token") and kept for callers
 * with their OAuth error and AADSTS code; neither the federated token nor
 * the access token is ever logged or put in an error.
 */
#ifndef SB_AAD_H
#define SB_AAD_H

#include "ib_err.h"
#include "sb_token.h"

#define SB_AAD_SCOPE_SERVICEBUS "https://servicebus.azure.net/.default"

typedef struct sb_aad sb_aad_t;

typedef struct sb_aad_opts {
    /* Each NULL or "" is read from the environment variable in brackets. */
    const char *client_id;      /* [AZURE_CLIENT_ID] required */
    const char *tenant_id;      /* [AZURE_TENANT_ID] required */
    const char *authority_host; /* [AZURE_AUTHORITY_HOST], else https://login.microsoftonline.com */
    const char *federated_token_file; /* [AZURE_FEDERATED_TOKEN_FILE] required */
    const char *scope;                /* NULL: SB_AAD_SCOPE_SERVICEBUS */
    const char *ca_file;              /* extra CA bundle for the authority (tests); NULL: system */
    long http_timeout_ms;             /* per request; 0 = 10000 */
    long long retry_min_ms;           /* first backoff after a failure; 0 = 1000 */
    long long retry_max_ms;           /* backoff cap; 0 = 60000 */
} sb_aad_opts_t;

/*
 * Checks the settings (IB_E_CONFIG naming the missing variable), then
 * starts the refresh thread, which requests the first token at once.
 * Returns NULL with err filled on failure. Calls curl_global_init, so call
 * it from the main thread before other threads use libcurl.
 * thread: main.
 */
sb_aad_t *sb_aad_new(const sb_aad_opts_t *opts, ib_error_t *err);

/*
 * Stops the thread (an HTTP request in progress is bounded by
 * http_timeout_ms), frees everything and releases its curl_global_init.
 * NULL is a no-op. thread: main.
 */
void sb_aad_free(sb_aad_t *aad);

/*
 * Waits up to timeout_ms for the first token. Returns IB_E_OK once a token
 * is cached, IB_E_AUTH (err has the endpoint's error and AADSTS code) when
 * the last attempt failed and no token is cached, IB_E_TIMEOUT otherwise.
 * For start-up, so a misconfigured identity fails fast with a clear reason.
 * thread: any but the proactor.
 */
ib_err_t sb_aad_wait(sb_aad_t *aad, long timeout_ms, ib_error_t *err);

/*
 * sb_token_get_fn over ctx = sb_aad_t *: copies the cached access token
 * (type SB_TOKEN_TYPE_JWT, expires_at_ms from the endpoint's expires_in).
 * Never blocks on the network. Returns IB_E_AGAIN while the first token is
 * pending, IB_E_AUTH when fetching failed and no unexpired token is left
 * (err carries the last failure), IB_E_NOMEM. audience is not used: one
 * token serves every entity of the namespace.
 * thread: any (normally proactor).
 */
ib_err_t sb_aad_token_get(void *ctx, const char *audience, sb_token_t *out, ib_error_t *err);

/* Successful token fetches so far (tests and the stats log). thread: any. */
long sb_aad_fetch_count(sb_aad_t *aad);

#endif
