/*
 * ib_breaker.c - the circuit breaker's state machine (see ib_breaker.h).
 * thread: the owner's lock.
 */
#include "ib_breaker.h"

/* The wait before the next probe after `failed` failed probes. */
static long long probe_interval(ib_breaker_t *br, int failed)
{
    return IB_BREAKER_PROBE_MIN_MS +
           ib_backoff_ms(IB_BREAKER_PROBE_MIN_MS, IB_BREAKER_PROBE_MAX_MS - IB_BREAKER_PROBE_MIN_MS,
                         failed + 1, &br->seed);
}

bool ib_breaker_admit(ib_breaker_t *br, long long now_ms, long long *wait_ms)
{
    if (!br->open)
        return true;
    if (!br->probing && now_ms >= br->next_probe_ms) {
        br->probing = true;
        return true;
    }
    if (wait_ms)
        *wait_ms = br->probing ? br->interval_ms : br->next_probe_ms - now_ms;
    return false;
}

bool ib_breaker_fail(ib_breaker_t *br, long long now_ms)
{
    bool opened = false;
    br->probing = false;
    br->failures++;
    if (br->open) {
        br->interval_ms = probe_interval(br, ++br->probes_failed);
        br->next_probe_ms = now_ms + br->interval_ms;
    } else if (br->failures >= IB_BREAKER_THRESHOLD) {
        br->open = opened = true;
        br->probes_failed = 0;
        br->interval_ms = probe_interval(br, 0);
        br->next_probe_ms = now_ms + br->interval_ms;
    }
    return opened;
}

void ib_breaker_pass(ib_breaker_t *br)
{
    br->open = br->probing = false;
    br->failures = 0;
}

void ib_breaker_restart(ib_breaker_t *br)
{
    br->probing = false;
    br->failures = 0;
}

void ib_breaker_unsure(ib_breaker_t *br, long long now_ms)
{
    br->probing = false;
    if (br->open)
        br->next_probe_ms = now_ms + br->interval_ms;
}
