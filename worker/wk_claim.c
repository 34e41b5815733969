/*
 * wk_claim.c - a claim-checked message's blob (wk_claim.h): the budget its
 * bytes count against, the storage host's circuit (wk_dest), the
 * authorisation of the fetch, and what its result means for the message.
 *
 * thread: wk_claims_new/free on main; the rest on db workers.
 */
#include "wk_claim.h"

#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sb_aad.h"
#include "wk_metrics.h"

struct wk_claims {
    unsigned long long max_bytes; /* 0: unbounded */
    atomic_ullong held;           /* bytes of the blobs held now */
    atomic_ullong peak;           /* the most of held + the messages' at an admit */
    const sb_client_t *client;    /* whose received messages share the budget; may be NULL */
    sb_aad_t *aad;                /* workload_identity: the token for Azure Storage */
    bool curl;
};

wk_claims_t *wk_claims_new(const rt_routes_t *routes, unsigned long long max_bytes,
                           ib_error_t *err)
{
    wk_claims_t *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    cs->max_bytes = max_bytes;
    atomic_init(&cs->held, 0);
    atomic_init(&cs->peak, 0);
    if (fx_global_init(err) != IB_E_OK) {
        free(cs);
        return NULL;
    }
    cs->curl = true;
    if (rt_routes_claim_auth(routes, RT_CLAIM_WORKLOAD_IDENTITY)) {
        sb_aad_opts_t o = {.scope = WK_CLAIM_SCOPE};
        if (!(cs->aad = sb_aad_new(&o, err)) || sb_aad_wait(cs->aad, 30000, err) != IB_E_OK) {
            IB_LOG(IB_LOG_ERROR, "aad_token",
                   IB_MSG("no token for Azure Storage (claim_check.auth workload_identity)"),
                   IB_S("error", err->text));
            wk_claims_free(cs);
            return NULL;
        }
    }
    return cs;
}

void wk_claims_free(wk_claims_t *cs)
{
    if (!cs)
        return;
    sb_aad_free(cs->aad);
    if (cs->curl)
        fx_global_cleanup();
    free(cs);
}

unsigned long long wk_claims_held(const wk_claims_t *cs)
{
    return atomic_load(&((wk_claims_t *)cs)->held);
}

const atomic_ullong *wk_claims_counter(const wk_claims_t *cs)
{
    return cs ? &cs->held : NULL;
}

void wk_claims_share(wk_claims_t *cs, const sb_client_t *client)
{
    if (cs)
        cs->client = client;
}

const atomic_ullong *wk_claims_peak(const wk_claims_t *cs)
{
    return cs ? &cs->peak : NULL;
}

/* Raises peak to v. */
static void note_peak(wk_claims_t *cs, unsigned long long v)
{
    unsigned long long cur = atomic_load(&cs->peak);
    while (v > cur && !atomic_compare_exchange_weak(&cs->peak, &cur, v))
        ;
}

/*
 * fx_blob_req_t.admit: room for bytes when the received messages and the
 * blobs held leave it, or when no blob is held (the messages the workers
 * hold may be the ones that wait for this blob: one goes on).
 */
static bool admit(void *ctx, size_t bytes)
{
    wk_claims_t *cs = ctx;
    unsigned long long cur = atomic_load(&cs->held), msgs;
    do {
        msgs = cs->client ? sb_client_held_bytes(cs->client) : 0;
        if (cs->max_bytes && cur > 0 && msgs + cur + bytes > cs->max_bytes)
            return false;
    } while (!atomic_compare_exchange_weak(&cs->held, &cur, cur + bytes));
    note_peak(cs, msgs + cur + bytes);
    return true;
}

void wk_claim_free(wk_claim_t *c)
{
    if (c->cs && c->blob.reserved)
        atomic_fetch_sub(&c->cs->held, c->blob.reserved);
    fx_blob_free(&c->blob);
    memset(c, 0, sizeof(*c));
}

/* Held for the storage host: its circuit, a Retry-After, or the budget; no delivery counted. */
static void hold(wk_decision_t *d, long long wait, const char *dest)
{
    if (d->err.text[0])
        ib_strlcpy(d->carry.last_error, d->err.text, sizeof d->carry.last_error);
    wk_decide(d, WK_OUT_ABANDONED);
    d->held = true;
    d->hold_ms = wait;
    ib_strlcpy(d->dest, dest, sizeof d->dest);
}

/* Its hold ran out on the last delivery the budget allows: RetryBudgetExhausted, no fetch. */
static void spent(const sb_msg_t *msg, const rt_claim_ref_t *ref, wk_decision_t *d)
{
    ib_error_set(&d->err, IB_E_AGAIN, IB_CLASS_TRANSIENT, "%s",
                 d->carry.last_error[0] ? d->carry.last_error : "held for its storage service");
    wk_decide_dead_letter(d, WK_DL_RETRY_BUDGET,
                          "delivery %u reached retry.max_deliveries, held for the blob %s until "
                          "its lock renewal ran out; last error: %s",
                          msg->delivery_count, ref->url_redacted, d->err.text);
}

/* The bearer token of workload identity; false with d->err set (transient) when none yet. */
static bool bearer(wk_claims_t *cs, sb_token_t *tok, wk_decision_t *d)
{
    if (!cs || !cs->aad) {
        ib_error_set(&d->err, IB_E_AUTH, IB_CLASS_TRANSIENT,
                     "claim_check: no workload identity token source");
        return false;
    }
    return sb_aad_token_get(cs->aad, NULL, tok, &d->err) == IB_E_OK;
}

static wk_dl_reason_t reason_of(fx_blob_result_t r)
{
    switch (r) {
    case FX_BLOB_MISSING: return WK_DL_CLAIM_MISSING;
    case FX_BLOB_CHANGED: return WK_DL_CLAIM_CHANGED;
    case FX_BLOB_TOO_LARGE: return WK_DL_CLAIM_TOO_LARGE;
    default: return WK_DL_CLAIM_REFUSED;
    }
}

/*
 * A blob larger than the byte budget it shares with the messages is never
 * read: its route's max_bytes is lowered to the budget, which names itself
 * in the dead letter's reason (ClaimCheckTooLarge).
 */
static void within_budget(const wk_claims_t *cs, fx_blob_req_t *rq)
{
    if (cs && cs->max_bytes && cs->max_bytes < rq->max_bytes) {
        rq->max_bytes = (size_t)cs->max_bytes;
        rq->max_name = "servicebus.max_held_mb (bytes, shared with the messages held)";
    }
}

/* The fetch itself, through the host's circuit; false when d is held. */
static bool fetch(wk_pipeline_t *p, const sb_msg_t *msg, const rt_claim_spec_t *cs,
                  const rt_claim_ref_t *ref, wk_claim_t *c, wk_decision_t *d)
{
    long long wait = 0;
    wk_dest_limits_t lim = {0, 0, false};
    sb_token_t tok = {0};
    if (p->dests && !wk_dest_admit(p->dests, ref->dest, &lim, ib_mono_ms(), &wait)) {
        hold(d, wait, ref->dest);
        return false;
    }
    if (rt_claim_auth(cs) == RT_CLAIM_WORKLOAD_IDENTITY && !bearer(p->claims, &tok, d)) {
        if (p->dests)
            wk_dest_cancel(p->dests, ref->dest);
        hold(d, 1000, ref->dest);
        return false;
    }
    fx_blob_req_t rq = {.url = ref->url,
                        .account = rt_claim_account(cs),
                        .account_key = rt_claim_account_key(cs),
                        .bearer = tok.token,
                        .etag = ref->etag,
                        .sha256 = ref->sha256,
                        .max_bytes = (size_t)rt_claim_max_bytes(cs),
                        .timeout_ms = rt_claim_timeout_ms(cs),
                        .ca_file = rt_claim_ca_file(cs),
                        .admit = p->claims ? admit : NULL,
                        .admit_ctx = p->claims};
    within_budget(p->claims, &rq);
    c->cs = p->claims;
    fx_blob_get(&rq, &c->blob);
    sb_token_clear(&tok);
    bool down = c->blob.res == FX_BLOB_TRANSIENT;
    if (p->dests) {
        if (c->blob.res == FX_BLOB_NO_ROOM)
            wk_dest_cancel(p->dests, ref->dest);
        else
            wk_dest_done(p->dests, ref->dest, down ? WK_DEST_TRANSIENT : WK_DEST_OK,
                         down ? c->blob.retry_after_ms : -1, ib_mono_ms());
    }
    if (!down && c->blob.res != FX_BLOB_NO_ROOM)
        return true;
    d->err = c->blob.err;
    d->carry.fetches++;
    wait = c->blob.res == FX_BLOB_NO_ROOM
               ? 100
               : ib_backoff_ms(p->cfg->retry.base_ms, p->cfg->retry.max_ms, d->carry.fetches,
                               &d->carry.seed);
    if (c->blob.retry_after_ms > wait)
        wait = c->blob.retry_after_ms < WK_DEST_HOLD_PROBE_MS ? c->blob.retry_after_ms
                                                               : WK_DEST_HOLD_PROBE_MS;
    IB_LOG(IB_LOG_WARN, "claim_check_held",
           IB_MSG("the blob could not be fetched now: the message is held"),
           IB_S("message_id", msg->message_id), IB_S("blob", ref->url_redacted),
           IB_S("result", fx_blob_result_name(c->blob.res)), IB_I("http_status", c->blob.status),
           IB_S("error", c->blob.err.text), IB_I("hold_ms", wait));
    hold(d, wait, ref->dest);
    return false;
}

bool wk_claim_fetch(wk_pipeline_t *p, const rt_route_t *route, const sb_msg_t *msg, wk_claim_t *c,
                    wk_decision_t *d, wk_dl_reason_t *reason)
{
    const rt_claim_spec_t *cs = rt_route_claim(route);
    rt_claim_ref_t ref;
    ib_err_t rc;
    memset(c, 0, sizeof(*c));
    if ((rc = rt_route_bind_claim(route, msg, &ref, &d->err)) != IB_E_OK) {
        rt_claim_ref_free(&ref);
        if (d->err.cls == IB_CLASS_TRANSIENT) {
            wk_decide(d, WK_OUT_ABANDONED);
            *reason = WK_DL__COUNT;
        } else {
            *reason = wk_dl_reason_of_bind(rc);
        }
        return false;
    }
    if (d->carry.spent) {
        spent(msg, &ref, d);
        rt_claim_ref_free(&ref);
        *reason = WK_DL__COUNT; /* decided */
        return false;
    }
    if (!fetch(p, msg, cs, &ref, c, d)) {
        rt_claim_ref_free(&ref);
        *reason = WK_DL__COUNT; /* held */
        return false;
    }
    if (c->blob.res != FX_BLOB_OK) {
        d->err = c->blob.err;
        ib_error_set(&d->err, d->err.code, IB_CLASS_PERMANENT, "%s: %s", ref.url_redacted,
                     c->blob.err.text);
        *reason = reason_of(c->blob.res);
        rt_claim_ref_free(&ref);
        return false;
    }
    c->fetched = true;
    c->msg = *msg;
    c->msg.body = (unsigned char *)c->blob.data;
    c->msg.body_len = c->blob.len;
    rt_claim_ref_free(&ref);
    return true;
}
