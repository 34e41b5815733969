/*
 * ib_time.h - clocks, sleeping and condition-variable deadlines.
 *
 * Every wait in inboxd measures time on CLOCK_MONOTONIC, so a step of the
 * wall clock (NTP, an operator, a VM resume) neither stalls a wait nor makes
 * it spin. Condition variables that are waited with a deadline are created
 * with ib_cond_init (CLOCK_MONOTONIC) and waited with ib_cond_wait_until.
 * The wall clock (ib_now_ms) is for timestamps and broker lock expiries only.
 *
 * thread: any.
 */
#ifndef IB_TIME_H
#define IB_TIME_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* Wall-clock milliseconds since the epoch (timestamps, broker expiries). */
long long ib_now_ms(void);
/* Monotonic milliseconds (every duration, deadline and wait). */
long long ib_mono_ms(void);

/*
 * The one UTC formatter: ms_since_epoch (< 0 means "now") with milliseconds
 * into buf (at least IB_TIME_TEXT_MAX bytes; cut, NUL-terminated, when
 * smaller).
 *   ib_time_rfc3339  "2026-12-05T07:16:07.123Z" (logs, records, JSON)
 *   ib_time_sql      "2026-12-05 07:16:07.123"  (a timestamp without zone
 *                    as every dialect's SQL reads it)
 */
#define IB_TIME_TEXT_MAX 25
void ib_time_rfc3339(char *buf, size_t size, long long ms_since_epoch);
void ib_time_sql(char *buf, size_t size, long long ms_since_epoch);

/*
 * Sleeps ms milliseconds (<= 0 returns at once), resuming after a signal
 * until the time is up, unless stop is not NULL and *stop became non-zero
 * (a SIGINT handler's flag): then it returns early. Returns false when it
 * returned early because of *stop.
 */
bool ib_sleep_ms(long long ms, const volatile sig_atomic_t *stop);

/* Initialises cv to measure deadlines on CLOCK_MONOTONIC. Returns 0 or an errno. */
int ib_cond_init(pthread_cond_t *cv);

/*
 * pthread_cond_timedwait on cv (made by ib_cond_init) with mu held, until the
 * monotonic deadline_ms (an ib_mono_ms() value). Returns 0 when woken (or
 * spuriously: callers recheck their condition) and ETIMEDOUT once the
 * deadline has passed.
 */
int ib_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, long long deadline_ms);

#endif
