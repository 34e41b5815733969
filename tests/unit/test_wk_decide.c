/*
 * The one way a decision is made (wk_decide.c): each settlement from its
 * outcome, and a dead letter's word, outcome and class from the reason
 * table, with the description sanitised to UTF-8 on every path.
 */
#include <string.h>

#include "ib_test.h"
#include "wk_decide.h"

static void test_settlements(void)
{
    wk_decision_t d;
    memset(&d, 0, sizeof d);
    wk_decide(&d, WK_OUT_APPLIED);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    wk_decide(&d, WK_OUT_RECORDED);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    wk_decide(&d, WK_OUT_ABANDONED);
    ASSERT_EQ(d.outcome, WK_OUT_ABANDONED);
    ASSERT_EQ(d.disposition, SB_ABANDON);
    wk_decide(&d, WK_OUT_RELEASED);
    ASSERT_EQ(d.disposition, SB_RELEASE);
}

static void test_dead_letter_from_table(void)
{
    wk_decision_t d;
    memset(&d, 0, sizeof d);
    /* A subject with an invalid byte (0xff) and a cut sequence (0xc3 at the end). */
    wk_decide_dead_letter(&d, WK_DL_NO_ROUTE, "no route matches subject '%s'", "a\xff" "b\xc3");
    ASSERT_EQ(d.disposition, SB_DEADLETTER);
    ASSERT_EQ(d.outcome, WK_OUT_DEAD_LETTERED);
    ASSERT_STREQ(d.reason, "NoRoute");
    ASSERT_EQ(d.reason_class, IB_CLASS_PERMANENT);
    ASSERT_STREQ(d.description, "no route matches subject 'a\xef\xbf\xbd" "b\xef\xbf\xbd'");

    wk_decide_dead_letter(&d, WK_DL_UNCERTAIN, "timed out after sending");
    ASSERT_EQ(d.outcome, WK_OUT_UNCERTAIN);
    ASSERT_STREQ(d.reason, "OutcomeUncertain");
    ASSERT_EQ(d.reason_class, IB_CLASS_AMBIGUOUS);

    wk_decide_dead_letter(&d, WK_DL_KEY_CONFLICT, "x");
    ASSERT_EQ(d.outcome, WK_OUT_CONFLICT);
    wk_decide_dead_letter(&d, WK_DL_RETRY_BUDGET, "x");
    ASSERT_EQ(d.reason_class, IB_CLASS_TRANSIENT);
}

/* A route's own reason word is the operator's text: sanitised too. */
static void test_route_reason(void)
{
    wk_decision_t d;
    memset(&d, 0, sizeof d);
    wk_decide_route_dead_letter(&d, "Audit\xfe", "routes[%d] dead-letters it", 3);
    ASSERT_EQ(d.disposition, SB_DEADLETTER);
    ASSERT_EQ(d.outcome, WK_OUT_DEAD_LETTERED);
    ASSERT_STREQ(d.reason, "Audit\xef\xbf\xbd");
    ASSERT_STREQ(d.description, "routes[3] dead-letters it");
    ASSERT_EQ(d.reason_class, IB_CLASS_PERMANENT);
}

/*
 * The one rule where the settlement is chosen (wk_decide_settlement, what
 * the daemon's settle sends): a message never decided, or whose call may
 * have acted while its row is unfinished, is never completed, whichever
 * path hands it over.
 */
static void test_undecided_never_completed(void)
{
    wk_decision_t d;
    wk_outcome_t completing[] = {WK_OUT_APPLIED, WK_OUT_DUPLICATE, WK_OUT_SKIPPED, WK_OUT_RECORDED};

    /* Shutdown or a drain timeout before a worker decided: the zeroed decision
     * (outcome 0 is applied, disposition 0 is complete) is released. */
    memset(&d, 0, sizeof d);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    ASSERT_EQ(wk_decide_settlement(&d), SB_RELEASE);
    d.carry.unresolved = true;
    ASSERT_EQ(wk_decide_settlement(&d), SB_RELEASE);

    /* Every completing outcome, chosen for an unresolved message by any path
     * (a drain, a lost lock, the breaker, a duplicate found mid-hold): abandoned. */
    for (size_t i = 0; i < sizeof completing / sizeof completing[0]; i++) {
        memset(&d, 0, sizeof d);
        d.carry.unresolved = true;
        wk_decide(&d, completing[i]);
        ASSERT_EQ(d.disposition, SB_COMPLETE);
        ASSERT_EQ(wk_decide_settlement(&d), SB_ABANDON);
        d.carry.unresolved = false; /* its row was finished: the outcome is known */
        ASSERT_EQ(wk_decide_settlement(&d), SB_COMPLETE);
    }

    /* Lock lost, the breaker's release, a drain's release, a hold ended: as decided. */
    wk_outcome_t kept[] = {WK_OUT_RELEASED, WK_OUT_ABANDONED};
    sb_disposition_t as[] = {SB_RELEASE, SB_ABANDON};
    for (size_t i = 0; i < 2; i++) {
        memset(&d, 0, sizeof d);
        d.carry.unresolved = true;
        wk_decide(&d, kept[i]);
        ASSERT_EQ(wk_decide_settlement(&d), as[i]);
    }

    /* The budget's end: OutcomeUncertain (and any dead letter) stands. */
    memset(&d, 0, sizeof d);
    d.carry.unresolved = true;
    wk_decide_dead_letter(&d, WK_DL_UNCERTAIN, "reconcile could not tell");
    ASSERT_EQ(wk_decide_settlement(&d), SB_DEADLETTER);
    wk_decide_dead_letter(&d, WK_DL_RETRY_BUDGET, "x");
    ASSERT_EQ(wk_decide_settlement(&d), SB_DEADLETTER);
}

int main(void)
{
    RUN(test_settlements);
    RUN(test_dead_letter_from_table);
    RUN(test_route_reason);
    RUN(test_undecided_never_completed);
    return ib_test_done();
}
