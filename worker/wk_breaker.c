/*
 * wk_breaker.c - the circuit breaker's state machine (see wk_breaker.h).
 * thread: any; every function takes the one mutex.
 */
#include "wk_breaker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ib_backoff.h"

struct wk_breaker {
    pthread_mutex_t mu;
    bool open;
    int consecutive;         /* attempts in a row failing with key below */
    char key_state[6];       /* SQLSTATE of the failing attempts */
    long key_native;         /* and their native code */
    ib_error_t reason;       /* the error that opened the circuit */
    long long interval_ms;   /* current probe interval */
    int probes_failed;       /* since the circuit opened (the backoff's attempt) */
    ib_rand_t seed;          /* the probe backoff's jitter */
    long long next_probe_ms; /* when the next probe may start */
    bool probing;            /* a probe is running */
    int fail_streak;         /* attempts in a row failed for a database reason */
    int ok_streak;           /* attempts in a row the database answered */
    bool unhealthy;
};

wk_breaker_t *wk_breaker_new(void)
{
    wk_breaker_t *b = calloc(1, sizeof(*b));
    if (b)
        pthread_mutex_init(&b->mu, NULL);
    return b;
}

void wk_breaker_free(wk_breaker_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static bool same_key(const wk_breaker_t *b, const ib_error_t *err)
{
    return b->consecutive > 0 && strcmp(b->key_state, err->sqlstate) == 0 &&
           b->key_native == err->native;
}

/* The health streaks; mu held. */
static void note_health(wk_breaker_t *b, const ib_error_t *err)
{
    bool db_fault = err && err->code != IB_E_OK &&
                    (err->code == IB_E_DB_SETUP || err->cls == IB_CLASS_TRANSIENT);
    if (db_fault) {
        b->ok_streak = 0;
        if (++b->fail_streak >= WK_DB_UNHEALTHY_AFTER)
            b->unhealthy = true;
    } else {
        b->fail_streak = 0;
        if (++b->ok_streak >= WK_DB_HEALTHY_AFTER)
            b->unhealthy = false;
    }
}

/*
 * The wait before the next probe after failed probes: at least
 * WK_BREAKER_PROBE_MIN_MS, plus ib_backoff_ms's full-jitter draw whose
 * ceiling doubles with each failure, so never more than
 * WK_BREAKER_PROBE_MAX_MS and replicas that opened together do not probe
 * together.
 */
static long long probe_interval(wk_breaker_t *b, int failed)
{
    return WK_BREAKER_PROBE_MIN_MS + ib_backoff_ms(WK_BREAKER_PROBE_MIN_MS,
                                                   WK_BREAKER_PROBE_MAX_MS - WK_BREAKER_PROBE_MIN_MS,
                                                   failed + 1, &b->seed);
}

bool wk_breaker_record(wk_breaker_t *b, const ib_error_t *err, long long now_ms)
{
    bool opened = false;
    pthread_mutex_lock(&b->mu);
    b->probing = false;
    note_health(b, err);
    if (!err || err->code != IB_E_DB_SETUP) {
        /* Passed, or failed for another reason (the message's own data):
         * the database's setup is not what fails. */
        b->consecutive = 0;
        if (b->open && (!err || err->code == IB_E_OK)) {
            b->open = false;
            ib_error_clear(&b->reason);
        }
        pthread_mutex_unlock(&b->mu);
        return false;
    }
    if (!same_key(b, err)) {
        b->consecutive = 0;
        memcpy(b->key_state, err->sqlstate, sizeof(b->key_state));
        b->key_native = err->native;
    }
    b->consecutive++;
    if (b->open) {
        /* A probe failed: the next one after a longer draw. */
        b->interval_ms = probe_interval(b, ++b->probes_failed);
        b->next_probe_ms = now_ms + b->interval_ms;
    } else if (b->consecutive >= WK_BREAKER_THRESHOLD) {
        b->open = opened = true;
        b->reason = *err;
        b->probes_failed = 0;
        b->interval_ms = probe_interval(b, 0);
        b->next_probe_ms = now_ms + b->interval_ms;
    }
    pthread_mutex_unlock(&b->mu);
    return opened;
}

bool wk_breaker_is_open(wk_breaker_t *b)
{
    pthread_mutex_lock(&b->mu);
    bool open = b->open;
    pthread_mutex_unlock(&b->mu);
    return open;
}

bool wk_breaker_admit(wk_breaker_t *b, long long now_ms, long long *wait_ms)
{
    bool ok = true;
    pthread_mutex_lock(&b->mu);
    if (b->open) {
        ok = !b->probing && now_ms >= b->next_probe_ms;
        if (ok)
            b->probing = true;
        else if (wait_ms)
            *wait_ms = b->probing ? b->interval_ms : b->next_probe_ms - now_ms;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

bool wk_breaker_db_healthy(wk_breaker_t *b)
{
    pthread_mutex_lock(&b->mu);
    bool ok = !b->open && !b->unhealthy;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

void wk_breaker_reason(wk_breaker_t *b, ib_error_t *out)
{
    pthread_mutex_lock(&b->mu);
    *out = b->reason;
    pthread_mutex_unlock(&b->mu);
}
