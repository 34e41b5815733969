/*
 * ib_backoff.h - the one retry backoff of inboxd, and its random numbers.
 *
 * Every retry (a transient database failure, a reconnect to the broker or the
 * database, a token fetch, a busy claim) waits ib_backoff_ms: "full jitter",
 * a uniform draw in [0, min(max, base * 2^(n-1))] for attempt n, so many
 * workers that failed together do not retry together.
 *
 * The random state is the caller's (an ib_rand_t in its struct or on its
 * stack, or a thread-local): no hidden global, so any thread may call these.
 * A state of 0 seeds itself on first use from a process-wide counter, the
 * monotonic clock and the state's address, so two threads never share a
 * sequence.
 *
 * thread: any (the state is the caller's).
 */
#ifndef IB_BACKOFF_H
#define IB_BACKOFF_H

#include <stdint.h>

typedef uint64_t ib_rand_t;

/* A uniform draw in [lo, hi] (hi < lo gives lo). */
long long ib_rand_range(ib_rand_t *state, long long lo, long long hi);

/*
 * The wait before retry attempt n (1-based; n < 1 counts as 1): uniform in
 * [0, min(max_ms, base_ms * 2^(n-1))]. base_ms <= 0 gives 0; max_ms below
 * base_ms caps at max_ms.
 */
long long ib_backoff_ms(long long base_ms, long long max_ms, int n, ib_rand_t *state);

#endif
