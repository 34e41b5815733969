/*
 * wk_claim.h - a claim-checked message's body: the blob its route's
 * claim_check names, fetched before the route binds (fx_blob_get), so
 * that the route's statements, key and payload hash read the blob as
 * they would a body. What each failure means for the message:
 *
 *   404                        dead letter ClaimCheckMissing
 *   ETag / SHA-256 differs, 412 dead letter ClaimCheckChanged
 *   above claim_check.max_bytes dead letter ClaimCheckTooLarge
 *   401, 403, other 4xx        dead letter ClaimCheckRefused
 *   host not allowed           dead letter BindError (before any request)
 *   refused, timeout, 5xx, 429 held like an HTTP destination's outage
 *                              (wk_dest.h: the storage host's circuit; no
 *                              delivery counted while the lock renews)
 *
 * Memory: a blob is held once, in a buffer of its Content-Length, from the
 * fetch until its batch ends. Blobs and received messages share one byte
 * budget, servicebus.max_held_mb: a blob is admitted when the messages
 * the receiver holds (sb_client_held_bytes) plus the blobs held plus its
 * size fit it, and the receiver counts the blobs held (held_beside) before
 * it gives credit or reads a delivery. A blob that finds no room waits,
 * held, for the others to end; when no blob is held one is admitted
 * whatever the messages hold (they may be the ones waiting for it). A
 * blob larger than the budget is never read: dead letter
 * ClaimCheckTooLarge naming servicebus.max_held_mb.
 *
 * thread: wk_claims_new/free on main; the rest on db workers.
 */
#ifndef WK_CLAIM_H
#define WK_CLAIM_H

#include <stdatomic.h>
#include <stdbool.h>

#include "fx_blob.h"
#include "rt_route.h"
#include "sb_client.h"
#include "sb_msg.h"
#include "wk_decide.h"

#define WK_CLAIM_SCOPE FX_BLOB_TOKEN_SCOPE

typedef struct wk_claims wk_claims_t;

/*
 * The process's blob memory budget (max_bytes, 0 = unbounded) and, when a
 * route fetches with workload_identity, its token for Azure Storage.
 * NULL with err set when the identity cannot be set up. thread: main.
 */
wk_claims_t *wk_claims_new(const rt_routes_t *routes, unsigned long long max_bytes,
                           ib_error_t *err);
void wk_claims_free(wk_claims_t *cs);
/* Blob bytes held now (tests and the bench). thread: any. */
unsigned long long wk_claims_held(const wk_claims_t *cs);
/* The blobs' counter, for sb_options_t.held_beside (NULL for NULL). thread: main. */
const atomic_ullong *wk_claims_counter(const wk_claims_t *cs);
/* The client whose received messages share the budget; before the workers start. thread: main. */
void wk_claims_share(wk_claims_t *cs, const sb_client_t *client);
/* The most bytes of messages and blobs held at once, seen as blobs were admitted (NULL for NULL). thread: any. */
const atomic_ullong *wk_claims_peak(const wk_claims_t *cs);

/* One message's blob and the message that binds from it. */
typedef struct wk_claim {
    sb_msg_t msg;   /* the message, its body the blob's bytes */
    fx_blob_t blob; /* owns those bytes */
    wk_claims_t *cs;
    bool fetched;
} wk_claim_t;

/*
 * Fetches the blob of msg on route (which has a claim_check) into c.
 * True: c->msg is msg with the blob as its body. False: d is decided (a
 * dead letter through reason, left to the caller with *reason set and
 * d->err filled, so that the route's on_permanent / emit_on_failure apply)
 * or held (d->held). c must be freed with wk_claim_free either way.
 */
bool wk_claim_fetch(wk_pipeline_t *p, const rt_route_t *route, const sb_msg_t *msg, wk_claim_t *c,
                    wk_decision_t *d, wk_dl_reason_t *reason);
void wk_claim_free(wk_claim_t *c);

#endif
