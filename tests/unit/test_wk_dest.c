/* Per-destination state (worker/wk_dest.c): the circuit with one probe at
 * a time, Retry-After, the token bucket, the slots. */
#include <string.h>

#include "ib_breaker.h"
#include "ib_test.h"
#include "wk_dest.h"

static const wk_dest_limits_t NONE = {0, 0, false};

static void test_circuit_one_probe_backoff(void)
{
    wk_dests_t *ds = wk_dests_new();
    const char *a = "http://a:80", *b = "http://b:80";
    long long w;
    for (int i = 0; i < IB_BREAKER_THRESHOLD; i++) {
        ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 0, &w));
        ASSERT_EQ(wk_dest_done(ds, a, WK_DEST_TRANSIENT, -1, 0), i == IB_BREAKER_THRESHOLD - 1);
    }
    ASSERT_EQ(wk_dest_open_count(ds), 1);
    /* Open: nothing goes until the probe is due; another destination is untouched. */
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, 100, &w));
    /* The first probe: the floor plus a draw up to the floor again (jitter). */
    ASSERT_TRUE(w >= IB_BREAKER_PROBE_MIN_MS - 100 && w <= 2 * IB_BREAKER_PROBE_MIN_MS - 100);
    long long due = 100 + w;
    ASSERT_TRUE(wk_dest_admit(ds, b, &NONE, 100, &w));
    ASSERT_TRUE(!wk_dest_done(ds, b, WK_DEST_OK, -1, 100));
    ASSERT_TRUE(!wk_dest_ready(ds, a, 100));
    ASSERT_TRUE(!wk_dest_ready(ds, a, due - 1));
    /* Due: one held message is offered, one caller probes, the rest wait. */
    ASSERT_TRUE(wk_dest_ready(ds, a, due));
    ASSERT_TRUE(!wk_dest_ready(ds, a, due));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, due, &w));
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, due, &w));
    /* The probe fails: the next after a draw whose ceiling doubled. */
    wk_dest_done(ds, a, WK_DEST_TRANSIENT, -1, 1000);
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, 1000, &w));
    ASSERT_TRUE(w >= IB_BREAKER_PROBE_MIN_MS && w <= 3 * IB_BREAKER_PROBE_MIN_MS);
    due = 1000 + w;
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, due - 1, &w));
    ASSERT_EQ(w, 1);
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, due, &w));
    /* It passes: closed, everything goes. */
    wk_dest_done(ds, a, WK_DEST_OK, -1, 2000);
    ASSERT_EQ(wk_dest_open_count(ds), 0);
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 2000, &w));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 2000, &w));
    char m[512];
    wk_dest_metrics(ds, m, sizeof m);
    ASSERT_STREQ(m, "inboxd_http_circuit_open{destination=\"http://a:80\"} 0\n"
                    "inboxd_http_circuit_open{destination=\"http://b:80\"} 0\n");
    wk_dests_free(ds);
}

static void test_retry_after_rate_slots(void)
{
    wk_dests_t *ds = wk_dests_new();
    const char *a = "http://a:80";
    long long w;
    /* A 429 with Retry-After: 5 holds every call for 5 s. */
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 0, &w));
    wk_dest_done(ds, a, WK_DEST_TRANSIENT, 5000, 0);
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, 4999, &w));
    ASSERT_EQ(w, 1);
    ASSERT_TRUE(!wk_dest_ready(ds, a, 4999));
    ASSERT_TRUE(wk_dest_ready(ds, a, 5000));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 5000, &w));
    wk_dest_done(ds, a, WK_DEST_OK, -1, 5000);
    /* 10/s: one call at once, then one every 100 ms; a second's worth at most after idling. */
    wk_dest_limits_t rate = {10, 0, false};
    const char *r = "http://r:80";
    ASSERT_TRUE(wk_dest_admit(ds, r, &rate, 0, &w));
    ASSERT_TRUE(!wk_dest_admit(ds, r, &rate, 0, &w));
    ASSERT_TRUE(w > 0 && w <= 101);
    ASSERT_TRUE(wk_dest_admit(ds, r, &rate, 100, &w));
    int n = 0;
    while (wk_dest_admit(ds, r, &rate, 60000, &w))
        n++;
    ASSERT_EQ(n, 10);
    /* Two slots: a third call waits for one to come back. */
    wk_dest_limits_t slots = {0, 2, false};
    const char *s = "http://s:80";
    ASSERT_TRUE(wk_dest_admit(ds, s, &slots, 0, &w));
    ASSERT_TRUE(wk_dest_admit(ds, s, &slots, 0, &w));
    ASSERT_TRUE(!wk_dest_admit(ds, s, &slots, 0, &w));
    wk_dest_done(ds, s, WK_DEST_OK, -1, 1);
    ASSERT_TRUE(wk_dest_admit(ds, s, &slots, 1, &w));
    wk_dests_free(ds);
}

/*
 * A long Retry-After (a day, capped by the caller to a few minutes) holds
 * the destination, but one probe goes each WK_DEST_HOLD_PROBE_MS: its
 * Retry-After again keeps the hold, its answer ends it.
 */
static void test_long_retry_after_probed(void)
{
    wk_dests_t *ds = wk_dests_new();
    const char *a = "http://a:80";
    const long long P = WK_DEST_HOLD_PROBE_MS;
    long long w;
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 0, &w));
    wk_dest_done(ds, a, WK_DEST_TRANSIENT, 300000, 0);
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, P - 1, &w));
    ASSERT_EQ(w, 1);
    ASSERT_TRUE(!wk_dest_ready(ds, a, P - 1));
    /* The probe: one held message offered, one call admitted. */
    ASSERT_TRUE(wk_dest_ready(ds, a, P));
    ASSERT_TRUE(!wk_dest_ready(ds, a, P));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, P, &w));
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, P, &w));
    /* Answered with the same header: held on, the next probe P later. */
    wk_dest_done(ds, a, WK_DEST_TRANSIENT, 300000, P + 100);
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, 2 * P, &w));
    ASSERT_EQ(w, 100);
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 2 * P + 100, &w));
    /* A probe failing without a header keeps the hold too. */
    wk_dest_done(ds, a, WK_DEST_UNKNOWN, -1, 2 * P + 200);
    ASSERT_TRUE(!wk_dest_admit(ds, a, &NONE, 2 * P + 300, &w));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 3 * P + 200, &w));
    /* Answered: the hold is over, every call goes. */
    wk_dest_done(ds, a, WK_DEST_OK, -1, 3 * P + 300);
    ASSERT_TRUE(wk_dest_ready(ds, a, 3 * P + 300));
    ASSERT_TRUE(wk_dest_ready(ds, a, 3 * P + 300));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 3 * P + 300, &w));
    ASSERT_TRUE(wk_dest_admit(ds, a, &NONE, 3 * P + 300, &w));
    /* A call under way when the hold began is no probe: its answer ends nothing. */
    const char *b = "http://b:80";
    ASSERT_TRUE(wk_dest_admit(ds, b, &NONE, 0, &w));
    ASSERT_TRUE(wk_dest_admit(ds, b, &NONE, 0, &w));
    wk_dest_done(ds, b, WK_DEST_TRANSIENT, 300000, 10);
    wk_dest_done(ds, b, WK_DEST_OK, -1, 20);
    ASSERT_TRUE(!wk_dest_admit(ds, b, &NONE, 30, &w));
    wk_dests_free(ds);
}

/* Calls made at once (a batch): IB_BREAKER_THRESHOLD at first, more as answers come back. */
static void test_batch_window(void)
{
    wk_dests_t *ds = wk_dests_new();
    wk_dest_limits_t ramp = {0, 0, true};
    const char *d = "http://d:80";
    long long w;
    int n = 0;
    while (n < 100 && wk_dest_admit(ds, d, &ramp, 0, &w))
        n++;
    ASSERT_EQ(n, IB_BREAKER_THRESHOLD);
    ASSERT_TRUE(wk_dest_admit(ds, d, &NONE, 0, &w)); /* a call made alone is not windowed */
    for (int i = 0; i < IB_BREAKER_THRESHOLD + 1; i++)
        wk_dest_done(ds, d, WK_DEST_OK, -1, 1);
    /* Four answers in a row: a window of THRESHOLD + 4, none under way. */
    n = 0;
    while (n < 100 && wk_dest_admit(ds, d, &ramp, 2, &w))
        n++;
    ASSERT_EQ(n, IB_BREAKER_THRESHOLD + 4);
    /* A transient failure shrinks it back. */
    wk_dest_done(ds, d, WK_DEST_TRANSIENT, -1, 3);
    ASSERT_TRUE(!wk_dest_admit(ds, d, &ramp, 3, &w));
    for (int i = 0; i < IB_BREAKER_THRESHOLD + 3; i++)
        wk_dest_done(ds, d, WK_DEST_UNKNOWN, -1, 4);
    n = 0;
    while (n < 100 && wk_dest_admit(ds, d, &ramp, 5, &w))
        n++;
    ASSERT_EQ(n, IB_BREAKER_THRESHOLD);
    wk_dests_free(ds);
}

int main(void)
{
    RUN(test_circuit_one_probe_backoff);
    RUN(test_retry_after_rate_slots);
    RUN(test_long_retry_after_probed);
    RUN(test_batch_window);
    return ib_test_done();
}
