/*
 * wk_breaker.h - the circuit breaker between the db workers and a database
 * whose setup refuses every message (a revoked privilege, a missing or
 * renamed table, a read-only replica, a full disk: IB_E_DB_SETUP).
 *
 *   closed  messages run normally; each attempt's result is recorded.
 *   open    IB_BREAKER_THRESHOLD consecutive attempts failed with the same
 *           setup error (same SQLSTATE and native code). No message is run
 *           except one probe at a time, when the probe is due (the interval
 *           of common/ib_breaker.h, whose state machine this is). A probe
 *           that passes closes it; a data error of one message neither
 *           counts nor closes it.
 *
 * It also keeps the database's health for /readyz, with hysteresis: not
 * healthy after WK_DB_UNHEALTHY_AFTER attempts in a row failed for a reason
 * of the database (transient or setup; a data error of one message is an
 * answer, so it counts as healthy), healthy again after
 * WK_DB_HEALTHY_AFTER attempts in a row passed; never healthy while open.
 * One slow or failed statement among good ones does not flap it.
 *
 * Pure state, no I/O: the daemon decides what "stop" means (no credit,
 * held messages kept under renewed locks or released), the breaker only
 * says when. thread: any (one mutex inside).
 */
#ifndef WK_BREAKER_H
#define WK_BREAKER_H

#include <stdbool.h>

#include "ib_err.h"

#define WK_DB_UNHEALTHY_AFTER 3
#define WK_DB_HEALTHY_AFTER 2

typedef struct wk_breaker wk_breaker_t;

/* A closed breaker; NULL on out of memory. */
wk_breaker_t *wk_breaker_new(void);
void wk_breaker_free(wk_breaker_t *b);

/*
 * Records the result of one database attempt (err NULL or code IB_E_OK: it
 * passed). Returns true exactly when this call opened the circuit; the
 * caller logs why (err names the table and the privilege). A passing
 * attempt while open (a probe) closes it. thread: a db worker.
 */
bool wk_breaker_record(wk_breaker_t *b, const ib_error_t *err, long long now_ms);

/* True while open. thread: any. */
bool wk_breaker_is_open(wk_breaker_t *b);

/*
 * While open: true for exactly one caller once the next probe is due (that
 * caller runs its message as the probe and records the result, which
 * schedules the next probe with a doubled interval or closes the circuit).
 * Otherwise false, with *wait_ms (if not NULL) set to the time until the
 * next probe is due. Closed: always true. thread: a db worker.
 */
bool wk_breaker_admit(wk_breaker_t *b, long long now_ms, long long *wait_ms);

/* The database health above (false while open). thread: any. */
bool wk_breaker_db_healthy(wk_breaker_t *b);

/* The error that opened the circuit (text empty when closed). thread: any. */
void wk_breaker_reason(wk_breaker_t *b, ib_error_t *out);

#endif
