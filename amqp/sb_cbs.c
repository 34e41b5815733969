/*
 * sb_cbs.c - claims-based security: put-token on $cbs for each audience a
 * link needs, before it attaches, and again well before the token expires
 * (sb_token_refresh_at). Tokens come from the configured provider on the
 * proactor thread; a refused or failed refresh is retried while the old
 * token lasts, every 5 s or a quarter of what is left of it if sooner. A
 * first put-token of an audience (no token of it accepted on this
 * connection, or invalidated since) that is refused or fails is put again,
 * with a token fetched anew, up to CBS_FRESH_RETRIES times after jittered
 * waits (ib_backoff_ms from CBS_FRESH_BASE_MS), while its waiters (the links
 * to attach, the requests to send) keep waiting; only then are they told.
 * A link the broker detaches unauthorized-access (its token expired or was
 * revoked there) makes every audience put again before the next attach
 * (sb_cbs_invalidate).
 *
 * thread: the connection's proactor.
 */
#include <stdlib.h>
#include <string.h>

#include "ib_backoff.h"
#include "ib_log.h"
#include "sb_core.h"

/* A refused first put-token: put again this many times, after these waits, before failing. */
#define CBS_FRESH_RETRIES 3
#define CBS_FRESH_BASE_MS 100
#define CBS_FRESH_MAX_MS 400
#define CBS_FRESH_MIN_MS 50

typedef struct auth_waiter {
    sb_cbs_cb cb;
    void *ctx;
    struct auth_waiter *next;
} auth_waiter_t;

struct sb_aud {
    sb_core_t *core;
    char *audience;
    bool valid, inflight;
    long long expires_at;  /* wall ms */
    long long refresh_at;  /* wall ms */
    long long pending_exp; /* expiry of the token in flight */
    unsigned fresh_retries; /* first put-tokens put again since the last answer to waiters */
    ib_rand_t seed;         /* their jitter */
    auth_waiter_t *waiters;
    sb_aud_t *next;
};

static void put_token(sb_core_t *core, sb_aud_t *aud);

/* When to try again after a refresh that failed: soon enough to beat the expiry. */
static long long retry_at(const sb_aud_t *aud, long long now)
{
    long long wait = aud->valid ? (aud->expires_at - now) / 4 : 5000;
    if (wait > 5000)
        wait = 5000;
    if (wait < 250)
        wait = 250;
    return now + wait;
}

/*
 * A first put-token of aud failed while links wait for it: whether to put
 * again (a fresh token, at aud->refresh_at) rather than fail the waiters.
 */
static bool fresh_again(sb_aud_t *aud, long long now)
{
    long long wait;
    if (aud->valid || !aud->waiters || aud->fresh_retries >= CBS_FRESH_RETRIES || !aud->core->up)
        return false; /* not up: the connection is gone, and the waiters with it */
    aud->fresh_retries++;
    wait = ib_backoff_ms(CBS_FRESH_BASE_MS, CBS_FRESH_MAX_MS, (int)aud->fresh_retries, &aud->seed);
    aud->refresh_at = now + (wait < CBS_FRESH_MIN_MS ? CBS_FRESH_MIN_MS : wait);
    IB_LOG(IB_LOG_INFO, "cbs_token", IB_MSG("first token refused: putting a new one"),
           IB_S("audience", aud->audience), IB_I("retry", aud->fresh_retries),
           IB_I("retry_in_ms", aud->refresh_at - now));
    return true;
}

static void aud_notify(sb_aud_t *aud, const ib_error_t *err)
{
    auth_waiter_t *w = aud->waiters;
    aud->waiters = NULL;
    while (w) {
        auth_waiter_t *nx = w->next;
        w->cb(w->ctx, err);
        free(w);
        w = nx;
    }
}

static void on_put_token(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sb_aud_t *aud = ctx;
    ib_error_t e;
    long long now = ib_now_ms();
    aud->inflight = false;
    if (status == 200 || status == 202) {
        aud->valid = true;
        aud->fresh_retries = 0;
        aud->expires_at = aud->pending_exp;
        aud->refresh_at = sb_token_refresh_at(now, aud->expires_at);
        IB_LOG(IB_LOG_INFO, "cbs_token", IB_MSG("token accepted"), IB_S("audience", aud->audience),
               IB_I("refresh_in_s", (aud->refresh_at - now) / 1000));
        ib_error_clear(&e);
        aud_notify(aud, &e);
        return;
    }
    if (status < 0)
        e = *err;
    else
        sb_resp_error(resp, status, &e);
    if (status == 401 || status == 403)
        e.code = IB_E_AUTH, e.cls = IB_CLASS_PERMANENT;
    ib_error_prefix(&e, "put-token for %s", aud->audience);
    IB_LOG(IB_LOG_WARN, "cbs_token", IB_MSG("token refused"), IB_S("audience", aud->audience),
           IB_I("status", status), IB_S("error", e.text));
    aud->refresh_at = retry_at(aud, now); /* a refresh that failed is retried soon */
    if (aud->valid && aud->expires_at <= now)
        aud->valid = false;
    if (fresh_again(aud, now))
        return; /* the waiters wait for the next answer */
    aud->fresh_retries = 0;
    aud_notify(aud, &e);
}

static void put_token(sb_core_t *core, sb_aud_t *aud)
{
    sb_token_t tok;
    ib_error_t e;
    pn_message_t *m;
    pn_data_t *ap;

    memset(&tok, 0, sizeof(tok));
    if (core->token_get(core->token_ctx, aud->audience, &tok, &e) != IB_E_OK) {
        IB_LOG(IB_LOG_WARN, "cbs_token", IB_MSG("no token"), IB_S("audience", aud->audience),
               IB_S("error", e.text));
        sb_token_clear(&tok);
        aud->refresh_at = retry_at(aud, ib_now_ms());
        if (fresh_again(aud, ib_now_ms()))
            return;
        aud->fresh_retries = 0;
        aud_notify(aud, &e);
        return;
    }
    m = pn_message();
    pn_message_set_address(m, "$cbs");
    ap = pn_message_properties(m);
    pn_data_put_map(ap);
    pn_data_enter(ap);
    sb_put_str(ap, "operation");
    sb_put_str(ap, "put-token");
    sb_put_str(ap, "type");
    sb_put_str(ap, tok.type ? tok.type : SB_TOKEN_TYPE_SAS);
    sb_put_str(ap, "name");
    sb_put_str(ap, aud->audience);
    pn_data_exit(ap);
    sb_put_str(pn_message_body(m), tok.token);
    aud->pending_exp = tok.expires_at_ms;
    sb_token_clear(&tok);
    aud->inflight = true;
    sb_rr_request(sb_rr_mgmt(core, NULL), m, on_put_token, aud);
}

void sb_cbs_authorize(sb_core_t *core, const char *audience, sb_cbs_cb cb, void *ctx)
{
    sb_aud_t *aud;
    auth_waiter_t *w;
    for (aud = core->auds; aud; aud = aud->next)
        if (strcmp(aud->audience, audience) == 0)
            break;
    if (!aud) {
        aud = calloc(1, sizeof(*aud));
        if (aud) {
            aud->core = core;
            aud->audience = strdup(audience);
        }
        if (!aud || !aud->audience) {
            ib_error_t e;
            free(aud);
            ib_error_set(&e, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            cb(ctx, &e);
            return;
        }
        aud->next = core->auds;
        core->auds = aud;
    }
    if (aud->valid) {
        ib_error_t ok;
        ib_error_clear(&ok);
        cb(ctx, &ok);
        return;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return;
    w->cb = cb;
    w->ctx = ctx;
    w->next = aud->waiters;
    aud->waiters = w;
    if (!aud->inflight)
        put_token(core, aud);
}

void sb_cbs_tick(sb_core_t *core)
{
    long long now = ib_now_ms();
    if (!core->up)
        return;
    /* Valid: a refresh when due; not yet: a first put-token again (fresh_again). */
    for (sb_aud_t *aud = core->auds; aud; aud = aud->next)
        if ((aud->valid || aud->waiters) && !aud->inflight && now >= aud->refresh_at)
            put_token(core, aud);
}

void sb_cbs_invalidate(sb_core_t *core)
{
    for (sb_aud_t *aud = core->auds; aud; aud = aud->next)
        if (aud->valid && !aud->inflight) {
            aud->valid = false;
            aud->refresh_at = 0;
        }
}

void sb_cbs_reset(sb_core_t *core)
{
    for (sb_aud_t *aud = core->auds; aud; aud = aud->next) {
        aud->valid = aud->inflight = false;
        aud->fresh_retries = 0;
        while (aud->waiters) {
            auth_waiter_t *w = aud->waiters;
            aud->waiters = w->next;
            free(w);
        }
    }
}

void sb_cbs_free(sb_core_t *core)
{
    sb_cbs_reset(core);
    while (core->auds) {
        sb_aud_t *aud = core->auds;
        core->auds = aud->next;
        free(aud->audience);
        free(aud);
    }
}
