/*
 * wk_replicas_weight: the parts of a cluster's rate follow the messages each
 * replica holds and add up to the whole.
 */
#include <math.h>

#include "ib_test.h"
#include "wk_replicas.h"

static void test_one_replica_takes_all(void)
{
    ASSERT_TRUE(wk_replicas_weight(1, 0, 0) == 1.0);
    ASSERT_TRUE(wk_replicas_weight(1, 500, 9) == 1.0);
}

static void test_no_demand_is_even(void)
{
    ASSERT_TRUE(fabs(wk_replicas_weight(4, 0, 0) - 0.25) < 1e-12);
    ASSERT_TRUE(fabs(wk_replicas_weight(2, 0, 0) - 0.5) < 1e-12);
}

/* 400 messages held 276 / 124 / 0 / 0: the two holding them get nearly all, in proportion. */
static void test_parts_follow_demand_and_add_up(void)
{
    const long long held[4] = {276, 124, 0, 0};
    double sum = 0, w[4];
    for (int i = 0; i < 4; i++)
        sum += (w[i] = wk_replicas_weight(4, held[i], 400));
    ASSERT_TRUE(fabs(sum - 1.0) < 1e-12);
    ASSERT_TRUE(w[0] > 0.68 && w[0] < 0.69);   /* 277 / 404 */
    ASSERT_TRUE(w[1] > 0.30 && w[1] < 0.31);   /* 125 / 404 */
    ASSERT_TRUE(w[2] > 0.002 && w[2] < 0.003); /* 1 / 404: its first message still goes */
}

/* A sum read short of this replica's own demand (never, in one transaction) counts it. */
static void test_sum_below_own_demand(void)
{
    ASSERT_TRUE(fabs(wk_replicas_weight(2, 10, 4) - 11.0 / 12.0) < 1e-12);
    ASSERT_TRUE(fabs(wk_replicas_weight(2, -5, 0) - 0.5) < 1e-12);
}

int main(void)
{
    RUN(test_one_replica_takes_all);
    RUN(test_no_demand_is_even);
    RUN(test_parts_follow_demand_and_add_up);
    RUN(test_sum_below_own_demand);
    return ib_test_done();
}
