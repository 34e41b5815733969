/*
 * ib_breaker.h - the one circuit breaker of inboxd: the state machine that
 * the database breaker (worker/wk_breaker.c) and every HTTP destination's
 * circuit (worker/wk_dest.c) are built on.
 *
 *   closed  attempts go; the caller reports each one. IB_BREAKER_THRESHOLD
 *           counted failures in a row (ib_breaker_fail) open it.
 *   open    nothing goes except one probe at a time once it is due: after
 *           IB_BREAKER_PROBE_MIN_MS plus a full-jitter draw (ib_backoff_ms)
 *           whose ceiling doubles with each failed probe, so never more than
 *           IB_BREAKER_PROBE_MAX_MS and breakers that opened together do not
 *           probe together. A passing attempt (ib_breaker_pass) closes it.
 *
 * Pure state, no lock and no clock: the owner holds its own mutex around
 * every call and passes now_ms (monotonic). The owner may read the fields;
 * it changes them only through these functions. thread: the owner's lock.
 */
#ifndef IB_BREAKER_H
#define IB_BREAKER_H

#include <stdbool.h>

#include "ib_backoff.h"

#define IB_BREAKER_THRESHOLD 3
#define IB_BREAKER_PROBE_MIN_MS 500
#define IB_BREAKER_PROBE_MAX_MS 30000

/* Zeroed (= {0}) is a closed breaker. */
typedef struct ib_breaker {
    bool open;
    bool probing;            /* a probe admitted by ib_breaker_admit is under way */
    int failures;            /* counted failures in a row */
    int probes_failed;       /* since it opened: the backoff's attempt */
    long long interval_ms;   /* the current wait between probes */
    long long next_probe_ms; /* while open: when the next probe may start */
    ib_rand_t seed;          /* the probe interval's jitter */
} ib_breaker_t;

/*
 * Whether an attempt may go now: always when closed; when open, true for
 * exactly one caller once the probe is due (it is the probe: report its
 * result). Otherwise false with *wait_ms (if not NULL) the time until
 * asking again is worth it.
 */
bool ib_breaker_admit(ib_breaker_t *br, long long now_ms, long long *wait_ms);

/*
 * A counted failure. Closed: the count goes up and the threshold opens it.
 * Open (a probe failed): the next probe after a longer draw. Returns true
 * exactly when this call opened it.
 */
bool ib_breaker_fail(ib_breaker_t *br, long long now_ms);

/* A passing attempt: closed, the count at zero. */
void ib_breaker_pass(ib_breaker_t *br);

/*
 * An attempt that failed for a reason the breaker does not count: the count
 * starts again; open stays open, its probe over (the next one is due when it
 * was).
 */
void ib_breaker_restart(ib_breaker_t *br);

/*
 * An attempt that says nothing either way (sent, never answered): the count
 * is kept; open, the probe is over and the next waits the same interval.
 */
void ib_breaker_unsure(ib_breaker_t *br, long long now_ms);

#endif
