/*
 * wk_pipeline.h - one message through the inbox: route, bind, the inbox
 * transaction with in-process retries, and the settlement decision.
 *
 * The decision (wk_decide.h) is pure data so that the daemon can settle
 * it and log it, and so that it can be tested without a broker. A message
 * whose route calls out over HTTP goes to wk_effect_process instead of the
 * inbox transaction (see wk_pipeline_process_batch).
 */
#ifndef WK_PIPELINE_H
#define WK_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "db_inbox.h"
#include "sb_msg.h"
#include "wk_decide.h"

/*
 * Decides the fate of msg: runs it through its route and the inbox
 * transaction on dbc (retrying transient failures with exponential backoff
 * and full jitter, while *lock_lost stays false), and fills d.
 * thread: a db worker (the owner of dbc).
 */
void wk_pipeline_process(wk_pipeline_t *p, db_conn_t *dbc, const sb_msg_t *msg,
                         const atomic_bool *lock_lost, wk_decision_t *d);

/*
 * One message of a batch, and the decision to fill for it: zeroed for a new
 * delivery; a run after a hold keeps only d->carry (wk_decide.h).
 */
/*
 * Whether the later messages of a session may go on after one decided d:
 * applied, duplicate, skipped or recorded (its session's next message is
 * taken as it would be after a completion); anything else (dead-lettered,
 * abandoned, released, uncertain) hands the later ones back, in order.
 */
bool wk_pipeline_goes_on(const wk_decision_t *d);

typedef struct wk_batch_msg {
    const sb_msg_t *msg;
    const atomic_bool *lock_lost;
    wk_decision_t *d;
    bool *settled; /* set when settled before the batch ended (NULL: never early) */
} wk_batch_msg_t;

/*
 * Decides the fate of n messages together: what needs no database is
 * decided first, the rest run their inbox transactions as one batch
 * (db_inbox_apply_batch: each ends exactly as it would alone), those on
 * HTTP routes share their claims, calls and finishes
 * (wk_effect_process_batch, same promise). Messages that failed
 * transiently are retried together after one backoff while each one's
 * lock holds; n == 1 is wk_pipeline_process. Sessions: several messages
 * of one session come in their order, consecutive in the session, and take
 * effect in that order (db_inbox_apply_batch_ordered); once one of them
 * does not go on (wk_pipeline_goes_on), the later ones are released, never
 * written ahead of it. The caller puts at most one message of a session on
 * an HTTP route in a batch, and keeps messages on HTTP routes
 * (wk_pipeline_http) apart from the others, one route a batch.
 * thread: a db worker (the owner of dbc).
 */
void wk_pipeline_process_batch(wk_pipeline_t *p, db_conn_t *dbc, const wk_batch_msg_t *m, size_t n);

/*
 * The route of msg when it calls out over HTTP (claim, call and finish in
 * transactions of their own, batched with messages of the same route
 * only), else NULL. thread: any.
 */
const rt_route_t *wk_pipeline_http(const wk_pipeline_t *p, const sb_msg_t *msg);

#endif
