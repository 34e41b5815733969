/*
 * The daemon's outbox set-up without a database (worker/wk_outbox.c): the
 * plan from outbox.enabled, outbox.relay, routes that emit and
 * --relay-only; and the relay's counters shown as the inboxd_outbox_*
 * metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_test.h"
#include "rl_relay.h"
#include "rt_route.h"
#include "rt_route_test.h"
#include "wk_metrics.h"
#include "wk_outbox.h"

#define ROUTE(emit) "[{\"match\":\"*\",\"sql\":\"SELECT 1\",\"emit\":" emit "}]"

static void test_outbox_plan(void)
{
    wk_config_t cfg;
    rt_routes_t emits, plain;
    wk_outbox_plan_t plan;
    int problems;
    char *buf = NULL;
    size_t len = 0;
    FILE *fp;

    memset(&cfg, 0, sizeof(cfg));
    free(compile_errors(ROUTE("[{\"entity\":\"q\",\"message_id\":\"{message_id}\"}]"), &problems, &emits));
    free(compile_errors("[{\"match\":\"*\",\"sql\":\"SELECT 1\"}]", &problems, &plain));
    cfg.outbox.enabled = "auto";
    cfg.outbox.relay = "auto";
    ASSERT_EQ(wk_outbox_plan(&cfg, &emits, false, &plan, NULL), 0);
    ASSERT_TRUE(plan.enabled && plan.relay);
    ASSERT_EQ(wk_outbox_plan(&cfg, &plain, false, &plan, NULL), 0);
    ASSERT_TRUE(!plan.enabled && !plan.relay);
    ASSERT_EQ(wk_outbox_plan(&cfg, &plain, true, &plan, NULL), 0);
    ASSERT_TRUE(plan.enabled && plan.relay);
    cfg.outbox.relay = "false"; /* emit here, publish from another replica */
    ASSERT_EQ(wk_outbox_plan(&cfg, &emits, false, &plan, NULL), 0);
    ASSERT_TRUE(plan.enabled && !plan.relay);
    cfg.outbox.enabled = "false";
    fp = open_memstream(&buf, &len);
    ASSERT_EQ(wk_outbox_plan(&cfg, &emits, false, &plan, fp), 1);
    fclose(fp);
    ASSERT_CONTAINS(buf, "config: outbox.enabled: is false, but a route emits");
    free(buf);
    rt_routes_free(&emits);
    rt_routes_free(&plain);
}

static void fake_outbox(void *ctx, rl_relay_stats_t *o)
{
    (void)ctx;
    o->pending = 12;
    o->oldest_pending_s = 30;
    o->blocked_sessions = 2;
    o->published_total = 1000;
    o->nfailed = 1;
    strcpy(o->failed[0].condition, "amqp:not-found");
    o->failed[0].count = 3;
}

static void test_outbox_metrics(void)
{
    wk_metrics_t *m = wk_metrics_new("t");
    char *text = wk_metrics_render(m, NULL);
    ASSERT_NOT_CONTAINS(text, "inboxd_outbox_pending");
    free(text);
    wk_metrics_outbox_source(m, fake_outbox, NULL);
    text = wk_metrics_render(m, NULL);
    ASSERT_CONTAINS(text, "# TYPE inboxd_outbox_pending gauge\ninboxd_outbox_pending 12\n");
    ASSERT_CONTAINS(text, "inboxd_outbox_oldest_pending_seconds 30\n");
    ASSERT_CONTAINS(text, "# TYPE inboxd_outbox_blocked_sessions gauge\ninboxd_outbox_blocked_sessions 2\n");
    ASSERT_CONTAINS(text, "inboxd_outbox_published_total 1000\n");
    ASSERT_CONTAINS(text, "inboxd_outbox_failed_total{condition=\"amqp:not-found\"} 3\n");
    free(text);
    wk_metrics_free(m);
}

int main(void)
{
    RUN(test_outbox_plan);
    RUN(test_outbox_metrics);
    return ib_test_done();
}
