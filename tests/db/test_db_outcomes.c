/*
 * The inbox outcomes against a live database (argv[1]: postgresql|sqlite):
 * applied, duplicate, conflict (existing row untouched), idempotency keys,
 * permanent data and constraint errors (not on the inbox key), configured
 * natives, the failure record, and the retention sweep. Every check reads
 * the rows back.
 */
#include <stdio.h>
#include <string.h>

#include "db_conn_int.h" /* to force the UTF-16 binding SQL Server uses */
#include "db_testlib.h"
#include "ib_test.h"

static tl_db_t T;
static db_conn_t *dbc;

#define COUNT(sql) tl_scalar(&T, sql)

static db_outcome_t order(const char *msg_id, const char *idem, const char *body, long long qty,
                          ib_error_t *err)
{
    char hash[65];
    db_claim_t c = tl_claim("billing", msg_id, idem, body, hash);
    db_param_t p[3] = {DB_TEXT(msg_id), DB_INT(qty), DB_FLOAT(9.5)};
    db_stmt_t s = {"INSERT INTO orders (id, qty, price) VALUES (?, ?, ?)", p, 3};
    return db_inbox_apply(dbc, &c, &s, 1, err);
}

static void test_applied_then_duplicate(void)
{
    ib_error_t err;
    ASSERT_EQ(order("m1", NULL, "{\"a\":1}", 2, &err), DB_APPLIED);
    ASSERT_EQ(err.cls, IB_CLASS_NONE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'm1' AND qty = 2"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE consumer = 'billing' AND message_id = 'm1' "
                    "AND status = 'processed' AND idempotency_key IS NULL AND delivery_count = 1 "
                    "AND processed_at IS NOT NULL AND enqueued_at IS NOT NULL"),
              1);
    ASSERT_EQ(order("m1", NULL, "{\"a\":1}", 2, &err), DB_DUPLICATE);
    ASSERT_EQ(err.cls, IB_CLASS_NONE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'm1'"), 1);
    /* Another consumer is another inbox identity. */
    char hash[65];
    db_claim_t c = tl_claim("audit", "m1", NULL, "{\"a\":1}", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'm1'"), 2);
}

static void test_conflict_leaves_row(void)
{
    ib_error_t err;
    char want[65], sql[256];
    db_sha256_hex("{\"a\":1}", 7, want);
    ASSERT_EQ(order("m1", NULL, "{\"a\":2}", 5, &err), DB_CONFLICT);
    ASSERT_EQ(err.code, IB_E_CONFLICT);
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM inbox WHERE consumer = 'billing' AND message_id = 'm1' AND "
             "body_sha256 = '%s' AND status = 'processed'",
             want);
    ASSERT_EQ(COUNT(sql), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'm1' AND qty = 2"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'm1'"), 1);
}

static void test_idempotency_key(void)
{
    ib_error_t err;
    ASSERT_EQ(order("m2", "order-7", "{\"o\":7}", 1, &err), DB_APPLIED);
    /* A different message id carrying the same key and body: a duplicate. */
    ASSERT_EQ(order("m3", "order-7", "{\"o\":7}", 1, &err), DB_DUPLICATE);
    /* The same key with another body: a conflict. */
    ASSERT_EQ(order("m4", "order-7", "{\"o\":8}", 1, &err), DB_CONFLICT);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('m2', 'm3', 'm4')"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE idempotency_key = 'order-7'"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('m3', 'm4')"), 0);
    /* NULL keys never collide with each other. */
    ASSERT_EQ(order("m5", NULL, "{\"o\":9}", 1, &err), DB_APPLIED);
}

static void test_permanent_errors(void)
{
    ib_error_t err;
    char hash[65];

    /* CHECK violation in the route's table: a data error, not a duplicate. */
    ASSERT_EQ(order("bad1", NULL, "{}", -1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_TRUE(err.sqlstate[0] != '\0');
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'bad1'"), 0);

    /* A unique violation in the route's table is permanent, never "duplicate". */
    db_claim_t c = tl_claim("billing", "bad2", NULL, "{}", hash);
    db_param_t p[1] = {DB_TEXT("SKU-1")};
    db_stmt_t s = {"INSERT INTO skus (sku) VALUES (?)", p, 1};
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'bad2'"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM skus"), 1);

    /* A NOT NULL violation. */
    c = tl_claim("billing", "bad3", NULL, "{}", hash);
    db_param_t q[2] = {DB_NULL(), DB_INT(1)};
    db_stmt_t s2 = {"INSERT INTO orders (id, qty) VALUES (?, ?)", q, 2};
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s2, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);

    /* An SQL error in the route. */
    c = tl_claim("billing", "bad4", NULL, "{}", hash);
    db_stmt_t s3 = {"INSERT INTO no_such_table (x) VALUES (1)", NULL, 0};
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s3, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);

    /* The second statement fails: the first one's effect is rolled back too. */
    c = tl_claim("billing", "bad5", NULL, "{}", hash);
    db_param_t r1[2] = {DB_TEXT("bad5"), DB_INT(1)};
    db_param_t r2[2] = {DB_TEXT("bad5"), DB_INT(0)};
    db_stmt_t two[2] = {{"INSERT INTO orders (id, qty) VALUES (?, ?)", r1, 2},
                        {"INSERT INTO orders (id, qty) VALUES (?, ?)", r2, 2}};
    ASSERT_EQ(db_inbox_apply(dbc, &c, two, 2, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'bad%'"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'bad%'"), 0);

    /* The connection is clean afterwards: the same message now applies. */
    db_param_t ok[2] = {DB_TEXT("bad5"), DB_INT(3)};
    db_stmt_t s4 = {"INSERT INTO orders (id, qty) VALUES (?, ?)", ok, 2};
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s4, 1, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'bad5' AND qty = 3"), 1);
}

static void test_configured_native(void)
{
    /* errors.transient_native turns the CHECK violation into a retry. */
    json_error_t jerr;
    json_t *arr = json_loads(T.dialect == DB_DIALECT_SQLITE ? "[19]" : "[\"23514\"]", 0, &jerr);
    db_options_t o;
    ib_error_t err;
    memset(&o, 0, sizeof(o));
    ASSERT_EQ(db_codes_from_json(arr, "errors.transient_native", &o.transient_native, &err),
              IB_E_OK);
    json_decref(arr);
    db_conn_t *c2 = tl_conn_opts(&T, &o);
    db_codes_free(&o.transient_native);
    char hash[65];
    db_claim_t c = tl_claim("billing", "cfg1", NULL, "{}", hash);
    db_param_t p[2] = {DB_TEXT("cfg1"), DB_INT(-5)};
    db_stmt_t s = {"INSERT INTO orders (id, qty) VALUES (?, ?)", p, 2};
    ASSERT_EQ(db_inbox_apply(c2, &c, &s, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    /* The inbox key is still decided by the table, not by the configured list. */
    ASSERT_EQ(order("m1", NULL, "{\"a\":1}", 2, &err), DB_DUPLICATE);
    c = tl_claim("billing", "m1", NULL, "{\"a\":1}", hash);
    ASSERT_EQ(db_inbox_apply(c2, &c, NULL, 0, &err), DB_DUPLICATE);
    db_conn_free(c2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'cfg1'"), 0);
}

static void test_record_failure(void)
{
    ib_error_t err;
    char hash[65];
    db_claim_t c = tl_claim("billing", "rec1", NULL, "{\"r\":1}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, "handler said no", &err),
              DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rec1' AND status = 'failed' "
                    "AND error_class = 'permanent' AND error_detail = 'handler said no'"),
              1);
    /* A redelivery meets the failed row: completed without running the route. */
    ASSERT_EQ(order("rec1", NULL, "{\"r\":1}", 1, &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'rec1'"), 0);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, "again", &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rec1' AND "
                    "error_detail = 'handler said no'"),
              1);
    /* Ambiguous outcomes are recorded as uncertain. */
    c = tl_claim("billing", "rec2", NULL, "{\"r\":2}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_AMBIGUOUS, NULL, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rec2' AND status = "
                    "'uncertain' AND error_class = 'ambiguous' AND error_detail IS NULL"),
              1);
    /* A long detail is cut, not refused. */
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    c = tl_claim("billing", "rec3", NULL, "{\"r\":3}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, big, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rec3' AND "
                    "LENGTH(error_detail) = 2000"),
              1);
    /* A cut never splits a UTF-8 character: 1999 'x' then a 2-byte e-acute. */
    big[1999] = '\xc3';
    big[2000] = '\xa9';
    c = tl_claim("billing", "rec4", NULL, "{\"r\":4}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, big, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rec4' AND "
                    "LENGTH(error_detail) = 1999"),
              1);
}

/*
 * A failure recorded with statements (a route's rejection events): they
 * commit with the failed row or not at all, and a second record of the
 * same message runs none of them.
 */
static void test_record_failure_with(void)
{
    ib_error_t err;
    char hash[65];
    db_param_t ok[] = {DB_TEXT("ev1"), DB_INT(1)}, bad[] = {DB_TEXT("ev2"), DB_INT(0)};
    db_stmt_t st = {"INSERT INTO orders (id, qty) VALUES (?, ?)", ok, 2};
    db_claim_t c = tl_claim("billing", "rw1", NULL, "{\"w\":1}", hash);
    ASSERT_EQ(db_inbox_record_failure_with(dbc, &c, IB_CLASS_PERMANENT, "no", &st, 1, &err),
              DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rw1' AND status = 'failed'"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'ev1'"), 1);
    /* Recorded already: a duplicate, the statement does not run again. */
    ASSERT_EQ(db_inbox_record_failure_with(dbc, &c, IB_CLASS_PERMANENT, "no", &st, 1, &err),
              DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'ev1'"), 1);
    /* A statement that fails takes the failed row with it. */
    st.params = bad;
    c = tl_claim("billing", "rw2", NULL, "{\"w\":2}", hash);
    ASSERT_EQ(db_inbox_record_failure_with(dbc, &c, IB_CLASS_PERMANENT, "no", &st, 1, &err),
              DB_FAILED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rw2'"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'ev2'"), 0);
}

static void test_sweep(void)
{
    ib_error_t err;
    long long before = COUNT("SELECT COUNT(*) FROM inbox");
    ASSERT_TRUE(before >= 5);
    for (int i = 0; i < 7; i++) {
        char id[32], hash[65];
        snprintf(id, sizeof(id), "old%d", i);
        db_claim_t c = tl_claim("billing", id, NULL, id, hash);
        ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_APPLIED);
    }
    ASSERT_EQ(tl_exec(&T, T.dialect == DB_DIALECT_SQLITE
                              ? "UPDATE inbox SET processed_at = '2020-01-01 00:00:00.000' WHERE "
                                "message_id LIKE 'old%'"
                              : "UPDATE inbox SET processed_at = TIMESTAMP '2020-01-01 00:00:00' "
                                "WHERE message_id LIKE 'old%'"),
              0);
    /* Recorded failures are as old, yet stay: they are the operator's evidence. */
    long long kept = COUNT("SELECT COUNT(*) FROM inbox WHERE status IN ('failed', 'uncertain')");
    ASSERT_TRUE(kept >= 2);
    ASSERT_EQ(tl_exec(&T, T.dialect == DB_DIALECT_SQLITE
                              ? "UPDATE inbox SET processed_at = '2020-01-01 00:00:00.000' WHERE "
                                "status <> 'processed'"
                              : "UPDATE inbox SET processed_at = TIMESTAMP '2020-01-01 00:00:00' "
                                "WHERE status <> 'processed'"),
              0);
    ASSERT_EQ(db_inbox_sweep(dbc, 0, 2, &err), 0); /* off */
    ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 7);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE status IN ('failed', 'uncertain')"), kept);
    ASSERT_EQ(err.cls, IB_CLASS_NONE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'old%'"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox"), before);
    ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 0);
    if (T.dialect == DB_DIALECT_POSTGRESQL) {
        /* Another replica holds the sweep lock: this one backs off. */
        db_conn_t *other = tl_conn(&T);
        ASSERT_EQ(db_exec(other,
                          "UPDATE inbox SET processed_at = TIMESTAMP '2020-01-01' WHERE "
                          "message_id = 'm5'",
                          NULL, 0, NULL, &err),
                  IB_E_OK);
        ASSERT_EQ(db_end(other, true, &err), IB_E_OK);
        long long held = 0;
        char lock[512];
        ASSERT_EQ(db_sql_sweep_lock(DB_DIALECT_POSTGRESQL, "inbox", lock, sizeof(lock)), IB_E_OK);
        ASSERT_EQ(db_exec(other, lock, NULL, 0, &held, &err), IB_E_OK);
        ASSERT_EQ(held, 1);
        db_end(other, true, &err);
        ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 0);
        ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'm5'"), 1);
        ASSERT_EQ(db_sql_sweep_unlock(DB_DIALECT_POSTGRESQL, "inbox", lock, sizeof(lock)), IB_E_OK);
        ASSERT_EQ(db_exec(other, lock, NULL, 0, NULL, &err), IB_E_OK);
        db_end(other, true, &err);
        db_conn_free(other);
        ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 1);
        ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'm5'"), 0);
    }
}

/*
 * Text goes to SQL Server as UTF-16. No SQL Server runs here, so the same
 * binding is forced on this driver: both bindings must store the same
 * characters, so a message bound one way is a duplicate of the other.
 */
static void test_utf16_text_binding(void)
{
    const char *id = "m-\xc3\xa9\xe2\x82\xac-\xf0\x9f\x93\xa6"; /* e-acute, euro, U+1F4E6 */
    const char *note = "caf\xc3\xa9 \xe2\x82\xac"
                       "5";
    ib_error_t err;
    char hash[65];
    db_conn_t *wide = tl_conn(&T);
    wide->wide_text = true;
    db_claim_t c = tl_claim("billing", id, NULL, "{\"u\":1}", hash);
    db_param_t p[3] = {DB_TEXT(note), DB_INT(1), DB_FLOAT(1.25)};
    db_stmt_t s = {"INSERT INTO orders (id, qty, price) VALUES (?, ?, ?)", p, 3};
    ASSERT_EQ(db_inbox_apply(wide, &c, &s, 1, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE LENGTH(id) = 7 AND price = 1.25"), 1);
    ASSERT_EQ(COUNT("SELECT LENGTH(message_id) FROM inbox WHERE message_id LIKE 'm-%'"), 6);
    /* Narrow binding of the same text meets the same key. */
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_DUPLICATE);
    long long n = 0;
    db_param_t q[1] = {DB_TEXT(note)};
    ASSERT_EQ(db_exec(dbc, "SELECT COUNT(*) FROM orders WHERE id = ?", q, 1, &n, &err), IB_E_OK);
    db_end(dbc, false, &err);
    ASSERT_EQ(n, 1);
    db_conn_free(wide);
}

/* SQLite: a writer holding the database past the driver's Timeout -> busy (5), transient. */
static void test_sqlite_busy_is_transient(void)
{
    if (T.dialect != DB_DIALECT_SQLITE)
        return;
    tl_db_t quick = T;
    snprintf(quick.connstr, sizeof(quick.connstr), "Driver={SQLite3};Database=%s;Timeout=200",
             T.path);
    db_conn_t *holder = tl_conn(&T), *waiter = tl_conn(&quick);
    ib_error_t err;
    char hash[65];

    ASSERT_EQ(db_exec(holder, "INSERT INTO skus (sku) VALUES ('HOLD')", NULL, 0, NULL, &err),
              IB_E_OK); /* write transaction left open */
    db_claim_t c = tl_claim("billing", "busy1", NULL, "{}", hash);
    ASSERT_EQ(db_inbox_apply(waiter, &c, NULL, 0, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_EQ(err.native, 5);
    ASSERT_EQ(db_end(holder, false, &err), IB_E_OK);
    ASSERT_EQ(db_inbox_apply(waiter, &c, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'busy1'"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM skus WHERE sku = 'HOLD'"), 0);
    db_conn_free(holder);
    db_conn_free(waiter);
}

static void test_bad_claims(void)
{
    ib_error_t err;
    char hash[65];
    db_claim_t c = tl_claim("billing", "", NULL, "{}", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    c = tl_claim("billing", "x1", NULL, "{}", hash);
    c.body_sha256 = "abc";
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_FAILED);
    ASSERT_EQ(err.code, IB_E_INVAL);
}

/* A replay (inboxd-replay-count) takes a 'failed' row over; a plain redelivery does not. */
static void test_replay_takeover(void)
{
    ib_error_t err;
    char hash[65];
    db_claim_t c = tl_claim("billing", "rp1", NULL, "{\"rp\":1}", hash);
    db_param_t p[2] = {DB_TEXT("rp1"), DB_INT(4)};
    db_stmt_t s = {"INSERT INTO orders (id, qty) VALUES (?, ?)", p, 2};

    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, "qty rejected", &err),
              DB_APPLIED);
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'rp1'"), 0);
    c.replay = true;
    c.delivery_count = 3;
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'rp1' AND qty = 4"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rp1' AND status = "
                    "'processed' AND error_class IS NULL AND error_detail IS NULL AND "
                    "delivery_count = 3"),
              1);
    /* Replayed again (a crash before the DLQ copy was completed): applied once only. */
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id = 'rp1'"), 1);

    /* A failing replay leaves the failed row as it was. */
    db_claim_t c2 = tl_claim("billing", "rp2", NULL, "{\"rp\":2}", hash);
    db_param_t bad[2] = {DB_TEXT("rp2"), DB_INT(-1)};
    db_stmt_t sb = {"INSERT INTO orders (id, qty) VALUES (?, ?)", bad, 2};
    ASSERT_EQ(db_inbox_record_failure(dbc, &c2, IB_CLASS_PERMANENT, "no", &err), DB_APPLIED);
    c2.replay = true;
    ASSERT_EQ(db_inbox_apply(dbc, &c2, &sb, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rp2' AND status = 'failed' "
                    "AND error_detail = 'no'"),
              1);
    /* Another body under the same message id is a conflict, replay or not. */
    db_claim_t c3 = tl_claim("billing", "rp2", NULL, "{\"rp\":99}", hash);
    c3.replay = true;
    ASSERT_EQ(db_inbox_apply(dbc, &c3, &s, 1, &err), DB_CONFLICT);
    /* Uncertain rows are never taken over by a replay: only an operator's resolve does. */
    db_claim_t c4 = tl_claim("billing", "rp4", NULL, "{\"rp\":4}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c4, IB_CLASS_AMBIGUOUS, NULL, &err), DB_APPLIED);
    c4.replay = true;
    ASSERT_EQ(db_inbox_apply(dbc, &c4, &s, 1, &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rp4' AND status = "
                    "'uncertain'"),
              1);

    /* In a batch, too. */
    db_claim_t c5 = tl_claim("billing", "rp5", NULL, "{\"rp\":5}", hash);
    db_param_t p5[2] = {DB_TEXT("rp5"), DB_INT(5)};
    db_stmt_t s5 = {"INSERT INTO orders (id, qty) VALUES (?, ?)", p5, 2};
    ASSERT_EQ(db_inbox_record_failure(dbc, &c5, IB_CLASS_PERMANENT, "x", &err), DB_APPLIED);
    c5.replay = true;
    char h6[65];
    db_claim_t c6 = tl_claim("billing", "rp6", NULL, "{\"rp\":6}", h6);
    db_param_t p6[2] = {DB_TEXT("rp6"), DB_INT(6)};
    db_stmt_t s6 = {"INSERT INTO orders (id, qty) VALUES (?, ?)", p6, 2};
    db_batch_item_t items[2] = {{&c6, &s6, 1, DB_FAILED, {0}}, {&c5, &s5, 1, DB_FAILED, {0}}};
    ASSERT_EQ(db_inbox_apply_batch(dbc, items, 2, NULL), 2);
    ASSERT_EQ(items[1].outcome, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('rp5', 'rp6')"), 2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'rp5' AND status = "
                    "'processed'"),
              1);
}

/* The business-key backstop reads which unique key a route statement hit. */
static void test_unique_violation_name(void)
{
    ib_error_t err;
    char hash[65], name[128];
    db_claim_t c = tl_claim("billing", "uv1", NULL, "{}", hash);
    db_param_t p[1] = {DB_TEXT("SKU-1")};
    db_stmt_t s = {"INSERT INTO skus (sku) VALUES (?)", p, 1};
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_FAILED);
    ASSERT_TRUE(db_unique_violation(T.dialect, &err, name, sizeof(name)));
    ASSERT_STREQ(name, T.dialect == DB_DIALECT_SQLITE ? "skus.sku" : "skus_pkey");
    ASSERT_EQ(order("uv2", NULL, "{}", -1, &err), DB_FAILED);
    ASSERT_TRUE(!db_unique_violation(T.dialect, &err, name, sizeof(name)));
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_error_t err;

    tl_db_create(&T, d, "outcomes");
    dbc = tl_conn(&T);
    if (db_migrate(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "migrate: %s\n", err.text);
        tl_db_drop(&T);
        return 1;
    }
    if (tl_exec(&T, d == DB_DIALECT_SQLITE
                        ? "CREATE TABLE orders (id TEXT NOT NULL, qty INTEGER NOT NULL CHECK "
                          "(qty > 0), price REAL)"
                        : "CREATE TABLE orders (id varchar(64) NOT NULL, qty integer NOT NULL "
                          "CONSTRAINT qty_positive CHECK (qty > 0), price double precision)") ||
        tl_exec(&T, "CREATE TABLE skus (sku varchar(20) PRIMARY KEY)") ||
        tl_exec(&T, "INSERT INTO skus (sku) VALUES ('SKU-1')")) {
        tl_db_drop(&T);
        return 1;
    }
    RUN(test_applied_then_duplicate);
    RUN(test_conflict_leaves_row);
    RUN(test_idempotency_key);
    RUN(test_permanent_errors);
    RUN(test_configured_native);
    RUN(test_record_failure);
    RUN(test_record_failure_with);
    RUN(test_replay_takeover);
    RUN(test_unique_violation_name);
    RUN(test_sweep);
    RUN(test_utf16_text_binding);
    RUN(test_sqlite_busy_is_transient);
    RUN(test_bad_claims);
    db_conn_free(dbc);
    tl_db_drop(&T);
    return ib_test_done();
}
