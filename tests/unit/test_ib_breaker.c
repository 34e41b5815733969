/* The circuit breaker's state machine (common/ib_breaker.c), on a clock the
 * test moves. */
#include "ib_breaker.h"
#include "ib_test.h"

/* Opens it: the threshold of counted failures in a row, nothing sooner. */
static void open_at(ib_breaker_t *br, long long t)
{
    for (int i = 1; i < IB_BREAKER_THRESHOLD; i++)
        ASSERT_TRUE(!ib_breaker_fail(br, t));
    ASSERT_TRUE(ib_breaker_fail(br, t));
    ASSERT_TRUE(br->open);
}

static void test_count_opens_and_restarts(void)
{
    ib_breaker_t br = {0};
    long long wait = -1;
    ASSERT_TRUE(ib_breaker_admit(&br, 0, &wait));
    ASSERT_EQ(wait, -1); /* closed: no wait written */
    for (int i = 1; i < IB_BREAKER_THRESHOLD; i++)
        ASSERT_TRUE(!ib_breaker_fail(&br, 0));
    ib_breaker_restart(&br); /* an uncounted failure: the count starts again */
    for (int i = 1; i < IB_BREAKER_THRESHOLD; i++)
        ASSERT_TRUE(!ib_breaker_fail(&br, 0));
    ib_breaker_pass(&br);
    ASSERT_EQ(br.failures, 0);
    ib_breaker_unsure(&br, 0); /* says nothing: the count is kept */
    ASSERT_TRUE(!br.open);
    open_at(&br, 1000);
    ASSERT_TRUE(!ib_breaker_fail(&br, 1000)); /* already open: not opened again */
}

/* One probe at a time once due; failed probes wait longer, within the bounds. */
static void test_probes(void)
{
    ib_breaker_t br = {0};
    long long wait = 0, t = 5000;
    open_at(&br, t);
    ASSERT_TRUE(!ib_breaker_admit(&br, t, &wait));
    ASSERT_TRUE(wait >= IB_BREAKER_PROBE_MIN_MS && wait <= 2 * IB_BREAKER_PROBE_MIN_MS);
    ASSERT_EQ(wait, br.next_probe_ms - t);
    ASSERT_TRUE(!ib_breaker_admit(&br, t + wait - 1, NULL));
    t += wait;
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));   /* the probe */
    ASSERT_TRUE(!ib_breaker_admit(&br, t, &wait)); /* and only one */
    ASSERT_EQ(wait, br.interval_ms);
    long long lo = IB_BREAKER_PROBE_MAX_MS, hi = 0;
    for (int i = 0; i < 40; i++) {
        ASSERT_TRUE(!ib_breaker_fail(&br, t));
        ASSERT_TRUE(br.open && !br.probing);
        ASSERT_EQ(br.probes_failed, i + 1);
        ASSERT_TRUE(!ib_breaker_admit(&br, t, &wait));
        ASSERT_TRUE(wait >= IB_BREAKER_PROBE_MIN_MS && wait <= IB_BREAKER_PROBE_MAX_MS);
        if (i < 2) /* the ceiling doubles: 500 + [0, 1000], then 500 + [0, 2000] */
            ASSERT_TRUE(wait <= IB_BREAKER_PROBE_MIN_MS + (IB_BREAKER_PROBE_MIN_MS << (i + 1)));
        if (i >= 10) {
            lo = wait < lo ? wait : lo;
            hi = wait > hi ? wait : hi;
        }
        t += wait;
        ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));
    }
    ASSERT_TRUE(hi - lo > IB_BREAKER_PROBE_MIN_MS); /* jitter: 30 draws are not one value */
    ib_breaker_pass(&br);
    ASSERT_TRUE(!br.open && !br.probing && br.failures == 0);
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));
}

/* A probe that says nothing waits the same interval again; one that failed
 * for an uncounted reason leaves the next probe due at once. */
static void test_unsure_and_restart_while_open(void)
{
    ib_breaker_t br = {0};
    long long wait = 0, t = 0;
    open_at(&br, t);
    t = br.next_probe_ms;
    long long interval = br.interval_ms;
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));
    ib_breaker_unsure(&br, t);
    ASSERT_TRUE(br.open);
    ASSERT_TRUE(!ib_breaker_admit(&br, t, &wait));
    ASSERT_EQ(wait, interval);
    t += interval;
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL));
    ib_breaker_restart(&br);
    ASSERT_TRUE(br.open);
    ASSERT_EQ(br.failures, 0);
    ASSERT_TRUE(ib_breaker_admit(&br, t, NULL)); /* due still: probe again */
}

int main(void)
{
    RUN(test_count_opens_and_restarts);
    RUN(test_probes);
    RUN(test_unsure_and_restart_while_open);
    return ib_test_done();
}
