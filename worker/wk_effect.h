/*
 * wk_effect.h - HTTP routes: one message through claim, call and finish
 * (wk_effect.c). The pipeline hands a message here (wk_pipeline.c,
 * hand_off_http) when its route has an "http" section, after routing and
 * binding it; such a message is always processed alone (never in a
 * batch), because its claim and its finish are transactions of their own.
 */
#ifndef WK_EFFECT_H
#define WK_EFFECT_H

#include <stdatomic.h>

#include "db_inbox.h"
#include "sb_msg.h"
#include "wk_decide.h"
#include "wk_route.h"

/*
 * Decides the fate of msg on an HTTP route and fills d: claim the inbox
 * row (claim carries the identity, key and body hash), call, classify,
 * finish. Transient failures are retried in-process with the pipeline's
 * backoff (honouring Retry-After) while *lock_lost stays false.
 * thread: a db worker (the owner of dbc).
 */
void wk_effect_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                       const wk_route_t *route, const db_claim_t *claim,
                       const atomic_bool *lock_lost, wk_decision_t *d);

#endif
