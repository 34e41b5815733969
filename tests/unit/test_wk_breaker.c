/* The circuit breaker's state machine (worker/wk_breaker.c). */
#include <string.h>

#include "ib_breaker.h"
#include "ib_test.h"
#include "wk_breaker.h"

static ib_error_t setup_err(const char *sqlstate, long native)
{
    ib_error_t e;
    ib_error_set(&e, IB_E_DB_SETUP, IB_CLASS_TRANSIENT, "permission denied for table inbox");
    strcpy(e.sqlstate, sqlstate);
    e.native = native;
    return e;
}

static void test_opens_after_threshold_of_the_same_error(void)
{
    wk_breaker_t *b = wk_breaker_new();
    ib_error_t priv = setup_err("42501", 1), missing = setup_err("42P01", 1), data;
    ib_error_set(&data, IB_E_DB, IB_CLASS_PERMANENT, "value too long");
    strcpy(data.sqlstate, "22001");

    /* Different setup errors in turn do not add up; a data error resets. */
    ASSERT_TRUE(!wk_breaker_record(b, &priv, 0));
    ASSERT_TRUE(!wk_breaker_record(b, &missing, 0));
    ASSERT_TRUE(!wk_breaker_record(b, &missing, 0));
    ASSERT_TRUE(!wk_breaker_record(b, &data, 0));
    ASSERT_TRUE(!wk_breaker_record(b, &missing, 0));
    ASSERT_TRUE(!wk_breaker_record(b, &missing, 0));
    ASSERT_TRUE(!wk_breaker_is_open(b));
    ASSERT_TRUE(wk_breaker_admit(b, 0, NULL));
    ASSERT_TRUE(wk_breaker_record(b, &missing, 1000)); /* the third in a row opens it */
    ASSERT_TRUE(wk_breaker_is_open(b));
    ib_error_t why;
    wk_breaker_reason(b, &why);
    ASSERT_STREQ(why.sqlstate, "42P01");
    wk_breaker_free(b);
}

static void test_probes_back_off_and_close(void)
{
    wk_breaker_t *b = wk_breaker_new();
    ib_error_t priv = setup_err("42501", 1);
    long long wait = 0, t = 0;
    for (int i = 0; i < IB_BREAKER_THRESHOLD; i++)
        wk_breaker_record(b, &priv, t);
    ASSERT_TRUE(wk_breaker_is_open(b));
    ASSERT_TRUE(!wk_breaker_admit(b, t, &wait));
    /* The first probe: the floor plus a draw up to the floor again. */
    ASSERT_TRUE(wait >= IB_BREAKER_PROBE_MIN_MS && wait <= 2 * IB_BREAKER_PROBE_MIN_MS);
    ASSERT_TRUE(!wk_breaker_admit(b, t + wait - 1, NULL)); /* not before it is due */
    t += wait;
    ASSERT_TRUE(wk_breaker_admit(b, t, NULL));  /* one probe */
    ASSERT_TRUE(!wk_breaker_admit(b, t, NULL)); /* and only one */
    ASSERT_TRUE(!wk_breaker_record(b, &priv, t));
    ASSERT_TRUE(!wk_breaker_admit(b, t, &wait));
    ASSERT_TRUE(wait >= IB_BREAKER_PROBE_MIN_MS && wait <= 3 * IB_BREAKER_PROBE_MIN_MS);
    /* Failing probes: the draws spread (jitter) and stay within the cap. */
    long long lo = IB_BREAKER_PROBE_MAX_MS, hi = 0;
    for (int i = 0; i < 40; i++) {
        t += IB_BREAKER_PROBE_MAX_MS;
        ASSERT_TRUE(wk_breaker_admit(b, t, NULL));
        wk_breaker_record(b, &priv, t);
        ASSERT_TRUE(!wk_breaker_admit(b, t, &wait));
        ASSERT_TRUE(wait >= IB_BREAKER_PROBE_MIN_MS && wait <= IB_BREAKER_PROBE_MAX_MS);
        if (i >= 10) {
            lo = wait < lo ? wait : lo;
            hi = wait > hi ? wait : hi;
        }
    }
    ASSERT_TRUE(hi - lo > IB_BREAKER_PROBE_MIN_MS); /* 30 draws over 0.5-30 s are not one value */
    t += IB_BREAKER_PROBE_MAX_MS;
    ASSERT_TRUE(wk_breaker_admit(b, t, NULL));
    ASSERT_TRUE(!wk_breaker_record(b, NULL, t)); /* the probe passed */
    ASSERT_TRUE(!wk_breaker_is_open(b));
    ASSERT_TRUE(wk_breaker_admit(b, t, NULL));
    ASSERT_TRUE(wk_breaker_admit(b, t, NULL));
    wk_breaker_free(b);
}

/* Readiness hysteresis: a lone failure does not flap it; a streak does. */
static void test_health_hysteresis(void)
{
    wk_breaker_t *b = wk_breaker_new();
    ib_error_t timeout, data;
    ib_error_set(&timeout, IB_E_DB, IB_CLASS_TRANSIENT, "statement timeout");
    strcpy(timeout.sqlstate, "57014");
    ib_error_set(&data, IB_E_DB, IB_CLASS_PERMANENT, "value too long");
    ASSERT_TRUE(wk_breaker_db_healthy(b));
    wk_breaker_record(b, &timeout, 0);
    wk_breaker_record(b, NULL, 0);
    wk_breaker_record(b, &timeout, 0);
    wk_breaker_record(b, &timeout, 0);
    ASSERT_TRUE(wk_breaker_db_healthy(b)); /* never three in a row */
    wk_breaker_record(b, &timeout, 0);
    ASSERT_TRUE(!wk_breaker_db_healthy(b));
    wk_breaker_record(b, &data, 0); /* the database answered */
    ASSERT_TRUE(!wk_breaker_db_healthy(b));
    wk_breaker_record(b, NULL, 0);
    ASSERT_TRUE(wk_breaker_db_healthy(b));
    ASSERT_TRUE(!wk_breaker_is_open(b)); /* timeouts are not setup errors */
    wk_breaker_free(b);
}

int main(void)
{
    RUN(test_opens_after_threshold_of_the_same_error);
    RUN(test_probes_back_off_and_close);
    RUN(test_health_hysteresis);
    return ib_test_done();
}
