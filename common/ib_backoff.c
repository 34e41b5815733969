/*
 * ib_backoff.c - full-jitter backoff and a small per-caller random generator
 * (splitmix64) with a thread-safe seed (see ib_backoff.h). thread: any.
 */
#include "ib_backoff.h"

#include <stdatomic.h>

#include "ib_time.h"

static _Atomic uint64_t seed_counter;

static uint64_t next(ib_rand_t *state)
{
    if (*state == 0) {
        uint64_t k = atomic_fetch_add(&seed_counter, 1) + 1;
        *state = ((uint64_t)ib_mono_ms() << 20) ^ (k * 0xD1B54A32D192ED03ULL) ^
                 (uint64_t)(uintptr_t)state;
        if (*state == 0)
            *state = 1;
    }
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

long long ib_rand_range(ib_rand_t *state, long long lo, long long hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    /* Rejection sampling: no modulo bias whatever the span. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t v;
    do
        v = next(state);
    while (v >= limit);
    return lo + (long long)(v % span);
}

long long ib_backoff_ms(long long base_ms, long long max_ms, int n, ib_rand_t *state)
{
    if (base_ms <= 0 || max_ms <= 0)
        return 0;
    long long cap = base_ms;
    for (int i = 1; i < n && cap < max_ms; i++)
        cap = cap > max_ms / 2 ? max_ms : cap * 2;
    if (cap > max_ms)
        cap = max_ms;
    return ib_rand_range(state, 0, cap);
}
