/*
 * wk_effect.h - HTTP routes: one message through claim, call and finish
 * (wk_effect.c). The pipeline hands a message here (wk_pipeline.c,
 * hand_off_http) when its route has an "http" section, after routing and
 * binding it: alone (wk_effect_process), or with the other HTTP messages
 * of its batch (wk_effect_process_batch).
 */
#ifndef WK_EFFECT_H
#define WK_EFFECT_H

#include <stdatomic.h>

#include "db_inbox.h"
#include "sb_msg.h"
#include "wk_decide.h"
#include "rt_route.h"

/*
 * Decides the fate of msg on an HTTP route and fills d: claim the inbox
 * row (claim carries the identity, key and body hash), call, classify,
 * finish. Transient failures are retried in-process with the pipeline's
 * backoff (honouring Retry-After) while *lock_lost stays false.
 * thread: a db worker (the owner of dbc).
 */
void wk_effect_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                       const rt_route_t *route, const db_claim_t *claim,
                       const atomic_bool *lock_lost, wk_decision_t *d);

/* One message of a batch on HTTP routes. */
typedef struct wk_effect_item {
    const sb_msg_t *msg;
    const rt_route_t *route;
    const db_claim_t *claim;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
    bool *settled; /* set when settled before the batch ended (NULL: never early) */
} wk_effect_item_t;

/*
 * Several messages on HTTP routes, each ending exactly as wk_effect_process
 * would end it alone: each call bound and admitted by wk_dest first (one
 * its destination will not take now is held before any claim), the fresh
 * claims in one transaction (db_effect_claim_batch), their calls made at
 * once (fx_multi_start), and as they answer (fx_multi_next) their finishing
 * transactions committed as one (db_effect_finish_batch, one by one when it
 * fails) and each decided message settled at once (wk_pipeline_t.settle_now)
 * while the batch's slower calls are still under way. A message whose row
 * exists (a duplicate, a takeover, a retry, a replay) is decided alone
 * after the batch, and a call to retry is retried after it.
 * thread: a db worker (the owner of dbc).
 */
void wk_effect_process_batch(wk_pipeline_t *p, db_conn_t *dbc, const wk_effect_item_t *items,
                             size_t n);

#endif
