/* The settlement decision of the pipeline, against a real SQLite inbox:
 * applied, duplicate, conflict, the dead-letter reasons, record-and-complete,
 * and a lost lock that releases the message unprocessed. */
#include <stdlib.h>
#include <unistd.h>

#include "ib_test.h"
#include "ib_time.h"
#include "wk_config.h"
#include "wk_pipeline.h"

static char dbpath[128], cfgpath[128];
static wk_config_t cfg;
static rt_routes_t routes;
static wk_pipeline_t pipe_;
static db_conn_t *dbc;

static void setup(void)
{
    char cs[256];
    FILE *fp;
    ib_error_t err;
    db_options_t opt;

    snprintf(dbpath, sizeof(dbpath), "/tmp/inboxd-pipeline-%d.db", (int)getpid());
    snprintf(cfgpath, sizeof(cfgpath), "/tmp/inboxd-pipeline-%d.json", (int)getpid());
    unlink(dbpath);
    snprintf(cs, sizeof(cs), "Driver={SQLite3};Database=%s;Timeout=5000", dbpath);
    fp = fopen(cfgpath, "w");
    fprintf(fp,
            "{\"consumer\":\"t\",\"servicebus\":{\"connection_string\":\"Endpoint=sb://h/;"
            "SharedAccessKeyName=k;SharedAccessKey=v\",\"entity\":\"q\"},"
            "\"db\":{\"connection_string\":\"%s\",\"dialect\":\"sqlite\"},"
            "\"retry\":{\"attempts\":2,\"base_ms\":1,\"max_ms\":2},"
            "\"routes\":["
            "{\"match\":{\"subject\":\"Item\"},\"sql\":\"INSERT INTO items (id, n) VALUES (?, ?)\","
            "\"params\":[\"$.id\",\"$.n\"],\"idempotency_key\":\"item:{$.id}\"},"
            "{\"match\":{\"subject\":\"Rec\"},\"sql\":\"INSERT INTO items (id, n) VALUES (?, ?)\","
            "\"params\":[\"$.id\",\"$.n\"],\"on_permanent\":\"record\"},"
            "{\"match\":{\"subject\":\"Skip\"},\"action\":\"complete\"},"
            "{\"match\":{\"subject\":\"Reject\"},\"action\":\"deadletter\",\"reason\":\"Nope\"}]}",
            cs);
    fclose(fp);
    if (wk_config_load(&cfg, cfgpath, stderr) != 0 ||
        rt_routes_compile(cfg.routes, &routes, stderr))
        abort();
    memset(&opt, 0, sizeof(opt));
    opt.connection_string = cfg.db.connection_string;
    opt.dialect = DB_DIALECT_SQLITE;
    opt.inbox_table = cfg.db.inbox_table;
    dbc = db_conn_new(&opt, &err);
    if (!dbc || db_migrate(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "setup: %s\n", err.text);
        abort();
    }
    if (db_exec(dbc, "CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL CHECK (n >= 0))",
                NULL, 0, NULL, &err) != IB_E_OK ||
        db_end(dbc, true, &err) != IB_E_OK)
        abort();
    pipe_.cfg = &cfg;
    pipe_.routes = &routes;
}

static void teardown(void)
{
    db_conn_free(dbc);
    rt_routes_free(&routes);
    wk_config_free(&cfg);
    unlink(dbpath);
    unlink(cfgpath);
}

static wk_decision_t run(const char *id, const char *subject, const char *body, bool lost)
{
    sb_msg_t m;
    wk_decision_t d = {0}; /* a new delivery's */
    atomic_bool lock_lost;
    memset(&m, 0, sizeof(m));
    m.message_id = (char *)id;
    m.subject = (char *)subject;
    m.body = (unsigned char *)body;
    m.body_len = body ? strlen(body) : 0;
    m.delivery_count = 1;
    atomic_init(&lock_lost, lost);
    wk_pipeline_process(&pipe_, dbc, &m, &lock_lost, &d);
    return d;
}

static long long count(const char *sql)
{
    long long n = -1;
    ib_error_t err;
    db_exec(dbc, sql, NULL, 0, &n, &err);
    db_end(dbc, false, &err);
    return n;
}

static void test_outcomes(void)
{
    wk_decision_t d;

    d = run("m1", "Item", "{\"id\":\"a\",\"n\":1}", false);
    ASSERT_EQ(d.outcome, WK_OUT_APPLIED);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    d = run("m1", "Item", "{\"id\":\"a\",\"n\":1}", false);
    ASSERT_EQ(d.outcome, WK_OUT_DUPLICATE);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    d = run("m2", "Item", "{\"id\":\"a\",\"n\":2}", false); /* same key, other body */
    ASSERT_EQ(d.outcome, WK_OUT_CONFLICT);
    ASSERT_STREQ(d.reason, "IdempotencyKeyConflict");
    ASSERT_EQ(count("SELECT n FROM items WHERE id = 'a'"), 1);

    d = run("m3", "Item", "{\"id\":", false);
    ASSERT_STREQ(d.reason, "InvalidJson");
    d = run("m4", "Item", "{\"n\":4}", false);
    ASSERT_STREQ(d.reason, "MissingField");
    ASSERT_CONTAINS(d.description, "$.id");
    d = run("m5", "Nothing", "{}", false);
    ASSERT_STREQ(d.reason, "NoRoute");
    d = run("m6", "Item", "{\"id\":\"neg\",\"n\":-1}", false); /* CHECK constraint */
    ASSERT_EQ(d.disposition, SB_DEADLETTER);
    ASSERT_STREQ(d.reason, "HandlerError");
    ASSERT_EQ(d.err.cls, IB_CLASS_PERMANENT);
    d = run("m7", "Skip", "{}", false);
    ASSERT_EQ(d.outcome, WK_OUT_SKIPPED);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    d = run("m8", "Reject", "{}", false);
    ASSERT_STREQ(d.reason, "Nope");
    d = run(NULL, "Item", "{\"id\":\"z\",\"n\":1}", false);
    ASSERT_STREQ(d.reason, "InvalidMessageId");
    /* Only the applied message wrote anything. */
    ASSERT_EQ(count("SELECT count(*) FROM items"), 1);
    ASSERT_EQ(count("SELECT count(*) FROM inboxd_inbox"), 1);
}

static void test_record_then_duplicate(void)
{
    wk_decision_t d = run("r1", "Rec", "{\"id\":\"r\",\"n\":-5}", false);
    ASSERT_EQ(d.outcome, WK_OUT_RECORDED);
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    ASSERT_EQ(
        count("SELECT count(*) FROM inboxd_inbox WHERE message_id = 'r1' AND status = 'failed'"),
        1);
    /* The redelivery meets the failed row and is completed without running again. */
    d = run("r1", "Rec", "{\"id\":\"r\",\"n\":-5}", false);
    ASSERT_EQ(d.outcome, WK_OUT_DUPLICATE);
    ASSERT_EQ(count("SELECT count(*) FROM items WHERE id = 'r'"), 0);
}

static void test_lock_lost_releases(void)
{
    wk_decision_t d = run("l1", "Item", "{\"id\":\"l\",\"n\":1}", true);
    ASSERT_EQ(d.outcome, WK_OUT_RELEASED);
    ASSERT_EQ(d.disposition, SB_RELEASE);
    ASSERT_EQ(wk_decide_settlement(&d), SB_RELEASE);
    ASSERT_EQ(count("SELECT count(*) FROM items WHERE id = 'l'"), 0);
}

/*
 * A run after a hold keeps what its delivery carries (and nothing else of
 * the earlier decision); whatever that run decides, a message left
 * unresolved is not completed.
 */
static void test_carry_kept(void)
{
    sb_msg_t m;
    wk_decision_t d = {0};
    atomic_bool lock_lost;
    memset(&m, 0, sizeof(m));
    m.message_id = "c1";
    m.subject = "Skip";
    m.delivery_count = 1;
    atomic_init(&lock_lost, false);
    d.carry.lookups = 2;
    d.carry.unresolved = true;
    snprintf(d.carry.last_error, sizeof d.carry.last_error, "http: status 500");
    d.attempts = 7;
    d.held = true;
    wk_pipeline_process(&pipe_, dbc, &m, &lock_lost, &d);
    ASSERT_EQ(d.outcome, WK_OUT_SKIPPED);
    ASSERT_EQ(d.attempts, 0);
    ASSERT_EQ(d.held, false);
    ASSERT_EQ(d.carry.lookups, 2);
    ASSERT_STREQ(d.carry.last_error, "http: status 500");
    ASSERT_EQ(d.disposition, SB_COMPLETE);
    ASSERT_EQ(wk_decide_settlement(&d), SB_ABANDON);
}

/* The retry budget ends on delivery retry.max_deliveries and past retry.max_age_s. */
static void test_budget_ends(void)
{
    sb_msg_t m;
    memset(&m, 0, sizeof(m));
    long long md = cfg.retry.max_deliveries, age = cfg.retry.max_age_s;
    cfg.retry.max_deliveries = 3;
    m.delivery_count = 2;
    ASSERT_EQ(wk_pipeline_budget_ends(&pipe_, &m), false);
    m.delivery_count = 3;
    ASSERT_EQ(wk_pipeline_budget_ends(&pipe_, &m), true);
    m.delivery_count = 4; /* a lost lock on the last one: still the end */
    ASSERT_EQ(wk_pipeline_budget_ends(&pipe_, &m), true);
    m.delivery_count = 1;
    cfg.retry.max_age_s = 60;
    m.enqueued_ms = ib_now_ms() - 120000;
    ASSERT_EQ(wk_pipeline_budget_ends(&pipe_, &m), true);
    m.enqueued_ms = ib_now_ms();
    ASSERT_EQ(wk_pipeline_budget_ends(&pipe_, &m), false);
    cfg.retry.max_deliveries = md;
    cfg.retry.max_age_s = age;
}

int main(void)
{
    setup();
    RUN(test_outcomes);
    RUN(test_record_then_duplicate);
    RUN(test_lock_lost_releases);
    RUN(test_carry_kept);
    RUN(test_budget_ends);
    teardown();
    return ib_test_done();
}
