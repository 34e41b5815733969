/*
 * wk_breaker.c - the circuit breaker's state machine (see wk_breaker.h).
 * thread: any; every function takes the one mutex.
 */
#include "wk_breaker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ib_breaker.h"

struct wk_breaker {
    pthread_mutex_t mu;
    ib_breaker_t br;   /* its count: attempts in a row failing with the key below */
    char key_state[6]; /* SQLSTATE of the failing attempts */
    long key_native;   /* and their native code */
    ib_error_t reason; /* the error that opened the circuit */
    int fail_streak;   /* attempts in a row failed for a database reason */
    int ok_streak;     /* attempts in a row the database answered */
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
    return b->br.failures > 0 && strcmp(b->key_state, err->sqlstate) == 0 &&
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

bool wk_breaker_record(wk_breaker_t *b, const ib_error_t *err, long long now_ms)
{
    bool opened = false;
    pthread_mutex_lock(&b->mu);
    note_health(b, err);
    if (!err || err->code == IB_E_OK) {
        ib_breaker_pass(&b->br);
        ib_error_clear(&b->reason);
    } else if (err->code != IB_E_DB_SETUP) {
        /* Failed for another reason (the message's own data): the
         * database's setup is not what fails. */
        ib_breaker_restart(&b->br);
    } else {
        if (!same_key(b, err)) {
            ib_breaker_restart(&b->br);
            memcpy(b->key_state, err->sqlstate, sizeof(b->key_state));
            b->key_native = err->native;
        }
        opened = ib_breaker_fail(&b->br, now_ms);
        if (opened)
            b->reason = *err;
    }
    pthread_mutex_unlock(&b->mu);
    return opened;
}

bool wk_breaker_is_open(wk_breaker_t *b)
{
    pthread_mutex_lock(&b->mu);
    bool open = b->br.open;
    pthread_mutex_unlock(&b->mu);
    return open;
}

bool wk_breaker_admit(wk_breaker_t *b, long long now_ms, long long *wait_ms)
{
    pthread_mutex_lock(&b->mu);
    bool ok = ib_breaker_admit(&b->br, now_ms, wait_ms);
    pthread_mutex_unlock(&b->mu);
    return ok;
}

bool wk_breaker_db_healthy(wk_breaker_t *b)
{
    pthread_mutex_lock(&b->mu);
    bool ok = !b->br.open && !b->unhealthy;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

void wk_breaker_reason(wk_breaker_t *b, ib_error_t *out)
{
    pthread_mutex_lock(&b->mu);
    *out = b->reason;
    pthread_mutex_unlock(&b->mu);
}
