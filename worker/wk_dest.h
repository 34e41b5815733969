/*
 * wk_dest.h - what inboxd knows of each HTTP destination (the scheme, host
 * and port of a route's URL), shared by every db worker of the process:
 *
 *   circuit  closed: calls go. IB_BREAKER_THRESHOLD transient failures in
 *            a row (refused, DNS, TLS, a timeout before sending, 408, 429,
 *            5xx) open it: no call goes, except one probe at a time when it
 *            is due (the interval of common/ib_breaker.h, whose state
 *            machine this is). Any answer that is not transient closes it.
 *   not before  a Retry-After holds every call to it until then (the
 *            caller caps it: http.max_retry_after_s). A hold longer than
 *            WK_DEST_HOLD_PROBE_MS lets one probe through each
 *            WK_DEST_HOLD_PROBE_MS; any answer to it that is not
 *            transient ends the hold early.
 *   rate     http.rate_per_s: a token bucket (burst of one second's worth).
 *   slots    http.max_concurrent: calls under way at once.
 *   window   for calls made at once (a batch, wk_dest_limits_t.ramp): at most
 *            IB_BREAKER_THRESHOLD plus the answers in a row that were not
 *            transient under way at once, so a batch never sends more calls
 *            to a destination that just failed than the circuit allows
 *            (a destination that answers earns its concurrency back).
 *
 * A message refused a call is not retried in the worker: the caller hands
 * it back to the daemon, which holds it under its renewed lock and offers
 * it again when wk_dest_ready says the destination may take a call. So a
 * destination that is down holds its own messages, never the workers that
 * other destinations need. Per process: replicas multiply the limits, unless
 * the route divides them (limit_scope "cluster", wk_replicas_share).
 *
 * Pure state, no I/O. thread: any (one mutex inside).
 */
#ifndef WK_DEST_H
#define WK_DEST_H

#include <stdbool.h>
#include <stddef.h>

#include "fx_dest.h"

#define WK_DEST_MAX 256     /* destinations tracked; beyond, calls go ungoverned */
#define WK_DEST_HOLD_PROBE_MS 5000 /* a Retry-After is honoured in full up to this */
#define WK_DEST_WINDOW_MAX 4096

typedef struct wk_dests wk_dests_t;

/* What a call's answer says of its destination. */
typedef enum {
    WK_DEST_OK,        /* an answer that is not the destination's trouble (2xx, 4xx...) */
    WK_DEST_TRANSIENT, /* the destination is down, overloaded or unreachable */
    WK_DEST_UNKNOWN,   /* sent, no answer: says nothing either way */
} wk_dest_result_t;

typedef struct wk_dest_limits {
    double rate_per_s;   /* 0 = unlimited */
    long max_concurrent; /* 0 = unlimited; < 0: none now (a replica's cluster share) */
    bool ramp;           /* calls made at once: the window applies */
} wk_dest_limits_t;

/* NULL on out of memory. thread: main. */
wk_dests_t *wk_dests_new(void);
void wk_dests_free(wk_dests_t *ds);

/*
 * Before a call to key: true when it may go now (a slot taken: call
 * wk_dest_done after it); false with *wait_ms the time after which asking
 * again is worth it. thread: a db worker.
 */
bool wk_dest_admit(wk_dests_t *ds, const char *key, const wk_dest_limits_t *lim, long long now_ms,
                   long long *wait_ms);

/*
 * After an admitted call: gives its slot back and records the result; a
 * retry_after_ms >= 0 holds every call to key that long. Returns true when
 * this call opened the circuit. thread: a db worker.
 */
bool wk_dest_done(wk_dests_t *ds, const char *key, wk_dest_result_t res, long long retry_after_ms,
                  long long now_ms);

/*
 * Undoes an admission whose call will not be made (its message turned out
 * to be decided another way): the slot, the probe and the token are given
 * back, the circuit unchanged. thread: a db worker.
 */
void wk_dest_cancel(wk_dests_t *ds, const char *key);

/*
 * Whether a held message for key is worth offering now: the Retry-After
 * passed and the circuit is closed, or else a probe is due and not running
 * (then true once per probe, so that one message, not all, goes to probe).
 * thread: main (the daemon's tick).
 */
bool wk_dest_ready(wk_dests_t *ds, const char *key, long long now_ms);

/*
 * Writes one line per known destination, "inboxd_http_circuit_open{destination=...} 0|1",
 * into buf; returns the length written (truncated at size). thread: any.
 */
size_t wk_dest_metrics(wk_dests_t *ds, char *buf, size_t size);

/* Destinations whose circuit is open now. thread: any. */
int wk_dest_open_count(wk_dests_t *ds);

#endif
