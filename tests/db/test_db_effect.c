/*
 * The claim protocol of effects beyond the database against a live
 * database (argv[1]: postgresql|sqlite): the columns db.migrate adds to an
 * existing table (and those CHANGELOG.md's statements for db.migrate false
 * add), claim / busy / conflict / done, a takeover after the
 * lease that exactly one of two takers wins, a finish by the loser that
 * changes nothing, release, and the operator's list and resolve; on
 * PostgreSQL, lookups by either key that stay on a whole unique key under a
 * plan cached while the table was empty.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db_conn_int.h" /* db_run, db_end: a statement on one connection */
#include "db_effect.h"
#include "db_inbox.h"
#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

static tl_db_t T;
static db_conn_t *A, *B;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long q(const char *fmt, const char *arg)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, arg);
    return tl_scalar(&T, sql);
}

/* A table made by the previous release's DDL gets the new columns. */
static void test_migrate_adds_columns_to_existing_table(void)
{
    ib_error_t err;
    const char *ddl[DB_DDL_MAX];
    char buf[8192];
    size_t n = 0;
    ASSERT_EQ(db_sql_ddl(T.dialect, "inbox", buf, sizeof buf, ddl, &n), IB_E_OK);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(tl_exec(&T, ddl[i]), 0);
    ASSERT_EQ(tl_exec(&T, "INSERT INTO inbox (consumer, message_id, body_sha256, status, "
                          "received_at, processed_at) VALUES ('old', 'm0', 'x', 'processed', "
                          "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"),
              0);
    /* Without migrate the missing column is named. */
    ASSERT_EQ(db_effect_migrate(A, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "lease_until");
    ASSERT_EQ(db_migrate(A, true, &err), IB_E_OK);
    ASSERT_EQ(db_migrate(B, true, &err), IB_E_OK); /* twice is fine */
    ASSERT_EQ(db_effect_migrate(A, false, &err), IB_E_OK);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND lease_until IS NULL AND "
                "remote_id IS NULL AND attempts IS NULL AND resolution IS NULL",
                "m0"),
              1);
}

/* With db.migrate false, CHANGELOG.md's statements for this database make an old table pass. */
static void test_changelog_adds_columns(void)
{
    tl_db_t S;
    ib_error_t err;
    const char *ddl[DB_DDL_MAX];
    char buf[8192];
    size_t n = 0;
    db_conn_t *c;

    tl_db_create(&S, T.dialect, "effchl");
    ASSERT_EQ(db_sql_ddl(S.dialect, "inbox", buf, sizeof buf, ddl, &n), IB_E_OK);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(tl_exec(&S, ddl[i]), 0);
    c = tl_conn(&S);
    ASSERT_EQ(db_effect_migrate(c, false, &err), IB_E_CONFIG);
    ASSERT_TRUE(tl_changelog_exec(&S, "**Inbox: the columns of HTTP routes**", "inboxd_inbox",
                                  "inbox") > 0);
    ASSERT_EQ(db_effect_migrate(c, false, &err), IB_E_OK);
    db_conn_free(c);
    tl_db_drop(&S);
}

static db_claim_t claim_of(const char *mid, const char *key, const char *body, char hash[65])
{
    return tl_claim("c1", mid, key, body, hash);
}

static void test_claim_busy_conflict_finish_done(void)
{
    char h1[65], h2[65], h3[65];
    ib_error_t err;
    db_claim_row_t r, r2;
    db_claim_t c = claim_of("m1", "k1", "{\"a\":1}", h1);
    ASSERT_EQ(db_effect_claim(A, &c, 60, &r, &err), DB_CLAIM_NEW);
    ASSERT_EQ(strlen(r.token), 32);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'claimed' AND "
                "lease_until IS NOT NULL AND attempts = 1",
                "m1"),
              1);
    /* The same message again, and another copy by the key: busy, not called. */
    ASSERT_EQ(db_effect_claim(B, &c, 60, &r2, &err), DB_CLAIM_BUSY);
    db_claim_t copy = claim_of("m1-copy", "k1", "{\"a\":1}", h2);
    ASSERT_EQ(db_effect_claim(B, &copy, 60, &r2, &err), DB_CLAIM_BUSY);
    ASSERT_STREQ(r2.message_id, "m1");
    db_claim_t other = claim_of("m1-other", "k1", "{\"a\":2}", h3);
    ASSERT_EQ(db_effect_claim(B, &other, 60, &r2, &err), DB_CLAIM_CONFLICT);
    ASSERT_EQ(err.code, IB_E_CONFLICT);

    ASSERT_EQ(db_effect_renew(A, "c1", &r, 60, &err), IB_E_OK);
    db_param_t p[1] = {DB_TEXT("fx-7")};
    db_stmt_t st = {"INSERT INTO biz (remote) VALUES (?)", p, 1};
    db_effect_result_t res = {DB_ROW_PROCESSED, "fx-7", 201, NULL, NULL};
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &res, &st, 1, &err), DB_APPLIED);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'processed' AND "
                "remote_id = 'fx-7' AND remote_status = 201 AND lease_until IS NULL",
                "m1"),
              1);
    ASSERT_EQ(q("SELECT COUNT(*) FROM biz WHERE remote = '%s'", "fx-7"), 1);
    ASSERT_EQ(db_effect_claim(B, &copy, 60, &r2, &err), DB_CLAIM_DONE);
    ASSERT_EQ(r2.status, DB_ROW_PROCESSED);
    ASSERT_STREQ(r2.remote_id, "fx-7");
    /* Finishing twice changes nothing. */
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &res, &st, 1, &err), DB_FAILED);
    ASSERT_EQ(err.code, IB_E_LOCK_LOST);
    ASSERT_EQ(q("SELECT COUNT(*) FROM biz WHERE remote = '%s'", "fx-7"), 1);
}

/* A failing finishing statement rolls the outcome back: the row stays claimed. */
static void test_finish_is_one_transaction(void)
{
    char h[65];
    ib_error_t err;
    db_claim_row_t r;
    db_claim_t c = claim_of("m2", "k2", "{}", h);
    ASSERT_EQ(db_effect_claim(A, &c, 60, &r, &err), DB_CLAIM_NEW);
    db_stmt_t bad = {"INSERT INTO no_such_table VALUES (1)", NULL, 0};
    db_effect_result_t res = {DB_ROW_PROCESSED, "fx-8", 201, NULL, NULL};
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &res, &bad, 1, &err), DB_FAILED);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'claimed' AND "
                "remote_id IS NULL",
                "m2"),
              1);
    /* Released without a possible effect: the row is gone, the next claim is new. */
    ASSERT_EQ(db_effect_release(A, "c1", &r, false, &err), IB_E_OK);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s'", "m2"), 0);
    ASSERT_EQ(db_effect_claim(A, &c, 60, &r, &err), DB_CLAIM_NEW);
    /* Released after a possible effect: the next claim takes it over at once. */
    ASSERT_EQ(db_effect_release(A, "c1", &r, true, &err), IB_E_OK);
    sleep_ms(20);
    ASSERT_EQ(db_effect_claim(B, &c, 60, &r, &err), DB_CLAIM_TAKEN_OVER);
    ASSERT_EQ(r.attempts, 2);
}

/* Two takers of an expired claim: the database picks exactly one. */
static void test_takeover_after_lease(void)
{
    char h[65];
    ib_error_t err;
    db_claim_row_t old, ra, rb;
    db_claim_t c = claim_of("m3", "k3", "{}", h);
    ASSERT_EQ(db_effect_claim(A, &c, 1, &old, &err), DB_CLAIM_NEW);
    sleep_ms(1300);
    db_claim_outcome_t oa = db_effect_claim(A, &c, 60, &ra, &err);
    db_claim_outcome_t ob = db_effect_claim(B, &c, 60, &rb, &err);
    ASSERT_EQ(oa, DB_CLAIM_TAKEN_OVER);
    ASSERT_EQ(ob, DB_CLAIM_BUSY);
    /* The first owner comes back: it can neither renew nor finish. */
    ASSERT_EQ(db_effect_renew(B, "c1", &old, 60, &err), IB_E_LOCK_LOST);
    db_effect_result_t res = {DB_ROW_PROCESSED, "fx-old", 201, NULL, NULL};
    ASSERT_EQ(db_effect_finish(B, "c1", &old, &res, NULL, 0, &err), DB_FAILED);
    ASSERT_EQ(err.code, IB_E_LOCK_LOST);
    res.remote_id = "fx-new";
    ASSERT_EQ(db_effect_finish(A, "c1", &ra, &res, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND remote_id = 'fx-new' AND "
                "attempts = 2",
                "m3"),
              1);
}

typedef struct seen {
    int n;
    char mid[8][64];
    char note[8][64];
} seen_t;

static bool collect(const db_effect_listed_t *row, void *arg)
{
    seen_t *s = arg;
    if (s->n < 8) {
        ib_strlcpy(s->mid[s->n], row->message_id, sizeof s->mid[0]);
        ib_strlcpy(s->note[s->n], row->resolution_note, sizeof s->note[0]);
    }
    s->n++;
    return true;
}

/*
 * A batch's finish: every row gets its own result (a long detail cut at a
 * character's edge) and every route statement
 * runs (one UPDATE and parameter arrays on PostgreSQL), or, when one claim
 * was taken over meanwhile, nothing is written and each is finished alone.
 */
static void test_finish_batch_all_or_none(void)
{
    enum { N = 6 };
    char h[N][65], mid[N][16], key[N][16], rid[N][16], val[N][16], longer[2600];
    ib_error_t err;
    db_claim_t cl[N];
    db_effect_claim_item_t it[N];
    db_effect_result_t res[N];
    db_param_t p[N][1];
    db_stmt_t st[N];
    db_effect_finish_item_t fi[N];
    /* 1,999 bytes, then an "é" across the 2,000-byte cut of error_detail, then more. */
    memset(longer, 'x', 1999);
    memcpy(longer + 1999, "\xc3\xa9", 2);
    memset(longer + 2001, 'y', 500);
    longer[2501] = '\0';
    for (int i = 0; i < N; i++) {
        snprintf(mid[i], sizeof mid[i], "fb-%d", i);
        snprintf(key[i], sizeof key[i], "fb-key-%d", i);
        snprintf(rid[i], sizeof rid[i], "fx-fb-%d", i);
        snprintf(val[i], sizeof val[i], "fb-biz-%d", i);
        cl[i] = claim_of(mid[i], key[i], "{}", h[i]);
        it[i] = (db_effect_claim_item_t){.claim = &cl[i], .lease_s = i == 2 ? 1 : 60};
        res[i] = (db_effect_result_t){DB_ROW_PROCESSED, rid[i], 201, NULL, NULL};
        if (i == 4) /* a refusal: failed, with a detail, no remote id */
            res[i] = (db_effect_result_t){DB_ROW_FAILED, NULL, 422, "permanent", "no such card"};
        if (i == 5) /* an uncertain one whose detail is cut */
            res[i] = (db_effect_result_t){DB_ROW_UNCERTAIN, NULL, 0, "ambiguous", longer};
        p[i][0] = DB_TEXT(val[i]);
        st[i] = (db_stmt_t){"INSERT INTO biz (remote) VALUES (?)", p[i], 1};
    }
    /* SQLite claims alone; item 2 has its own lease and is claimed alone too. */
    size_t got = db_effect_claim_batch(A, it, N, &err);
    ASSERT_EQ(got, T.dialect == DB_DIALECT_SQLITE ? 0 : N - 1);
    for (int i = 0; i < N; i++) {
        if (!it[i].claimed)
            ASSERT_EQ(db_effect_claim(A, &cl[i], i == 2 ? 1 : 60, &it[i].row, &err), DB_CLAIM_NEW);
        fi[i] = (db_effect_finish_item_t){&it[i].row, &res[i], &st[i], 1};
    }
    /* Item 2's lease runs out and B takes its claim over: the batch writes nothing. */
    sleep_ms(1300);
    db_claim_row_t taken;
    ASSERT_EQ(db_effect_claim(B, &cl[2], 60, &taken, &err), DB_CLAIM_TAKEN_OVER);
    ASSERT_EQ(db_effect_finish_batch(A, "c1", fi, N, &err), DB_FAILED);
    ASSERT_EQ(err.code, IB_E_LOCK_LOST);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id LIKE '%s' AND status <> 'claimed'",
                "fb-%"),
              0);
    ASSERT_EQ(q("SELECT COUNT(*) FROM biz WHERE remote LIKE '%s'", "fb-biz-%"), 0);
    /* Without it, the other five finish together. */
    fi[2] = fi[5];
    ASSERT_EQ(db_effect_finish_batch(A, "c1", fi, N - 1, &err), DB_APPLIED);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id LIKE '%s' AND status = 'processed' "
                "AND remote_status = 201 AND remote_id = 'fx-' || message_id AND lease_until IS "
                "NULL",
                "fb-%"),
              3);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'failed' AND "
                "remote_id IS NULL AND remote_status = 422 AND error_class = 'permanent' AND "
                "error_detail = 'no such card'",
                "fb-4"),
              1);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'uncertain' AND "
                "remote_status IS NULL AND length(error_detail) = 1999 AND error_detail NOT LIKE "
                "'%%y%%'",
                "fb-5"),
              1);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'claimed'", "fb-2"),
              1);
    ASSERT_EQ(q("SELECT COUNT(*) FROM biz WHERE remote LIKE '%s'", "fb-biz-%"), 5);
    ASSERT_EQ(q("SELECT COUNT(*) FROM biz WHERE remote = '%s'", "fb-biz-2"), 0);
}

/*
 * A batch's claim stores what a claim made alone stores (PostgreSQL's
 * binds the consumer and entity once and the times as epoch milliseconds,
 * the claim alone each value as is): the times to the millisecond, UTC,
 * none as NULL. An item of another entity is left to be claimed alone.
 */
static void test_claim_batch_columns(void)
{
    char h[5][65];
    ib_error_t err;
    db_claim_row_t r;
    db_claim_t cl[4] = {claim_of("ct-0", "ct-key-0", "{}", h[0]),
                        claim_of("ct-1", "ct-key-1", "{}", h[1]),
                        claim_of("ct-2", "ct-key-2", "{}", h[2]),
                        claim_of("ct-3", "ct-key-3", "{}", h[3])};
    db_effect_claim_item_t it[4];
    for (int i = 0; i < 4; i++) {
        cl[i].enqueued_at_ms = i == 2 ? 0 : 1767225600123LL; /* 2026-01-01T00:00:00.123Z */
        cl[i].received_at_ms = 1767225601456LL;
        it[i] = (db_effect_claim_item_t){.claim = &cl[i], .lease_s = 60};
    }
    cl[3].entity = "other";
    ASSERT_EQ(db_effect_claim_batch(A, it, 4, &err), T.dialect == DB_DIALECT_SQLITE ? 0 : 3);
    ASSERT_TRUE(!it[3].claimed);
    for (int i = 0; i < 4; i++)
        if (!it[i].claimed)
            ASSERT_EQ(db_effect_claim(A, &cl[i], 60, &it[i].row, &err), DB_CLAIM_NEW);
    db_claim_t alone = claim_of("ct-alone", "ct-key-alone", "{}", h[4]);
    alone.enqueued_at_ms = cl[0].enqueued_at_ms;
    alone.received_at_ms = cl[0].received_at_ms;
    ASSERT_EQ(db_effect_claim(A, &alone, 60, &r, &err), DB_CLAIM_NEW);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox i, inbox a WHERE a.message_id = 'ct-alone' AND "
                "i.message_id LIKE '%s' AND i.enqueued_at = a.enqueued_at AND "
                "i.received_at = a.received_at AND i.consumer = 'c1' AND i.entity = 'orders' AND "
                "i.status = 'claimed' AND i.idempotency_key = 'ct-key-' || substr(i.message_id, 4)",
                "ct-_"),
              2);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox i, inbox a WHERE a.message_id = 'ct-alone' AND "
                "i.message_id = '%s' AND i.enqueued_at IS NULL AND i.received_at = a.received_at "
                "AND i.entity = 'orders'",
                "ct-2"),
              1);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND entity = 'other'", "ct-3"),
              1);
    if (T.dialect == DB_DIALECT_POSTGRESQL)
        ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id LIKE '%s' AND enqueued_at = "
                    "'2026-01-01 00:00:00.123' AND received_at = '2026-01-01 00:00:01.456'",
                    "ct-%"),
                  4);
}

static void test_uncertain_list_resolve(void)
{
    char h[65];
    ib_error_t err;
    db_claim_row_t r;
    db_claim_t c4 = claim_of("m4", "k4", "{}", h);
    db_claim_t c5 = claim_of("m5", "k5", "{}", h);
    db_effect_result_t unc = {DB_ROW_UNCERTAIN, NULL, 0, "ambiguous", "timed out after sending"};
    ASSERT_EQ(db_effect_claim(A, &c4, 60, &r, &err), DB_CLAIM_NEW);
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &unc, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(db_effect_claim(A, &c5, 60, &r, &err), DB_CLAIM_NEW);
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &unc, NULL, 0, &err), DB_APPLIED);
    /* Uncertain is never called again by itself. */
    ASSERT_EQ(db_effect_claim(B, &c4, 60, &r, &err), DB_CLAIM_DONE);
    ASSERT_EQ(r.status, DB_ROW_UNCERTAIN);

    seen_t s = {0};
    ASSERT_EQ(db_effect_list(A, "uncertain", "c1", 0, collect, &s, &err), 2);
    ASSERT_STREQ(s.mid[0], "m4");
    memset(&s, 0, sizeof s);
    ASSERT_EQ(db_effect_list(A, "uncertain", NULL, 1, collect, &s, &err), 1);
    ASSERT_EQ(db_effect_list(A, "uncertain", "nobody", 0, collect, &s, &err), 0);

    ASSERT_EQ(db_effect_resolve(A, "c1", "m4", "retry", NULL, "checked: not charged", &err),
              IB_E_OK);
    ASSERT_EQ(db_effect_resolve(A, "c1", "m5", "processed", "fx-manual", "found it", &err),
              IB_E_OK);
    ASSERT_EQ(db_effect_resolve(A, "c1", "m5", "processed", NULL, "again", &err), IB_E_NOTFOUND);
    ASSERT_EQ(db_effect_resolve(A, "c1", "m9", "retry", NULL, "x", &err), IB_E_NOTFOUND);
    /* A SQL route's failed row (never claimed) is not for retry: its replay re-runs it. */
    char hs[65];
    db_claim_t sqlrow = claim_of("m-sql", NULL, "{}", hs);
    ASSERT_EQ(db_inbox_record_failure(A, &sqlrow, IB_CLASS_PERMANENT, "bad", &err), DB_APPLIED);
    ASSERT_EQ(db_effect_resolve(A, "c1", "m-sql", "retry", NULL, "x", &err), IB_E_NOTFOUND);
    ASSERT_CONTAINS(err.text, "dlq replay");
    ASSERT_EQ(db_effect_resolve(A, "c1", "m-sql", "processed", NULL, "fixed by hand", &err),
              IB_E_OK);
    ASSERT_EQ(db_effect_resolve(A, "c1", "m4", "maybe", NULL, "x", &err), IB_E_INVAL);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'processed' AND "
                "remote_id = 'fx-manual' AND resolution = 'processed' AND resolved_at IS NOT NULL",
                "m5"),
              1);
    /* retry: the next delivery claims and calls again, once. */
    ASSERT_EQ(db_effect_claim(A, &c4, 60, &r, &err), DB_CLAIM_RETRY);
    db_claim_row_t r2;
    ASSERT_EQ(db_effect_claim(B, &c4, 60, &r2, &err), DB_CLAIM_BUSY);
    db_effect_result_t ok = {DB_ROW_PROCESSED, "fx-9", 201, NULL, NULL};
    ASSERT_EQ(db_effect_finish(A, "c1", &r, &ok, NULL, 0, &err), DB_APPLIED);
    memset(&s, 0, sizeof s);
    ASSERT_EQ(db_effect_list(A, "processed", "c1", 0, collect, &s, &err), 5);
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE message_id = '%s' AND status = 'processed' AND "
                "resolution = 'retry' AND resolution_note = 'checked: not charged'",
                "m4"),
              1);
}

/*
 * PostgreSQL keeps a kept statement's generic plan for the connection's
 * life. Made while the table is empty, "consumer = ? AND (message_id = ? OR
 * idempotency_key = ?)" became a scan of every row of the consumer, and
 * each lookup read them all. The batch claim and the lookups after a
 * unique violation (the SQL route's, an HTTP claim's) must read the index
 * entries of their own keys only: counted by the server as idx_tup_read.
 */
enum { PLAN_MAX = 40 };

/* Claims of consumer "plan" (message TAG-i, key TAG-key-i) as batch items of a 60 s lease. */
typedef struct plan_claims {
    char h[PLAN_MAX][65], mid[PLAN_MAX][32], key[PLAN_MAX][32];
    db_claim_t cl[PLAN_MAX];
    db_effect_claim_item_t it[PLAN_MAX];
} plan_claims_t;

static void plan_claims(plan_claims_t *p, int n, const char *tag)
{
    for (int i = 0; i < n; i++) {
        snprintf(p->mid[i], sizeof p->mid[i], "%s-%d", tag, i);
        snprintf(p->key[i], sizeof p->key[i], "%s-key-%d", tag, i);
        p->cl[i] = tl_claim("plan", p->mid[i], p->key[i], "{}", p->h[i]);
        p->it[i] = (db_effect_claim_item_t){.claim = &p->cl[i], .lease_s = 60};
    }
}

static void test_lookups_stay_on_their_keys(void)
{
    enum { ROWS = 20000, LOOKUPS = PLAN_MAX, WARM = 8 };
    ib_error_t err;
    char sql[512];
    static plan_claims_t warm, fresh;
    db_conn_t *C = tl_conn(&T);
    ASSERT_EQ(tl_exec(&T, "TRUNCATE inbox"), 0);
    ASSERT_EQ(tl_exec(&T, "ALTER TABLE inbox SET (autovacuum_enabled = false)"), 0);
    /* Executions on the empty table: past the fifth, PostgreSQL weighs a generic plan. */
    plan_claims(&warm, WARM, "plan");
    ASSERT_EQ(db_effect_claim_batch(C, warm.it, WARM, &err), WARM);
    for (int i = 0; i < WARM; i++)
        ASSERT_EQ(db_inbox_apply(C, &warm.cl[i], NULL, 0, &err), DB_DUPLICATE);
    snprintf(sql, sizeof sql,
             "INSERT INTO inbox (consumer, message_id, idempotency_key, body_sha256, status, "
             "received_at, processed_at) SELECT 'plan', 'old-' || g, 'old-key-' || g, "
             "repeat('a', 64), 'processed', now(), now() FROM generate_series(1, %d) g",
             ROWS);
    ASSERT_EQ(tl_exec(&T, sql), 0);
    ASSERT_EQ(tl_exec(&T, "SELECT pg_stat_reset()"), 0);
    plan_claims(&fresh, LOOKUPS, "new");
    ASSERT_EQ(db_effect_claim_batch(C, fresh.it, LOOKUPS, &err), LOOKUPS);
    for (int i = 0; i < LOOKUPS; i++) { /* copies of the new rows, decided by lookup */
        db_claim_row_t row;
        ASSERT_EQ(db_inbox_apply(C, &fresh.cl[i], NULL, 0, &err), DB_DUPLICATE);
        ASSERT_EQ(db_effect_claim(C, &fresh.cl[i], 60, &row, &err), DB_CLAIM_BUSY);
    }
    /* The backend flushes its counters when it goes idle after this. */
    ASSERT_EQ(db_run(C, "SELECT pg_stat_force_next_flush()", NULL, 0, NULL, NULL, NULL, &err),
              IB_E_OK);
    ASSERT_EQ(db_end(C, true, &err), IB_E_OK);
    long long read = tl_scalar(&T, "SELECT COALESCE(SUM(idx_tup_read), 0) FROM "
                                   "pg_stat_user_indexes WHERE relname = 'inbox'");
    printf("index entries read by %d batch claims and %d x 2 lookups over %d rows: %lld\n",
           LOOKUPS, LOOKUPS, ROWS, read);
    ASSERT_TRUE(read < ROWS); /* a scan of the consumer per lookup: 80 x 20,000 */
    ASSERT_EQ(q("SELECT COUNT(*) FROM inbox WHERE consumer = '%s' AND status = 'claimed'", "plan"),
              LOOKUPS + WARM);
    db_conn_free(C);
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_log_min_level = IB_LOG_WARN;
    tl_db_create(&T, d, "effect");
    A = tl_conn(&T);
    B = tl_conn(&T);
    if (tl_exec(&T, "CREATE TABLE biz (remote varchar(64))") != 0)
        return 1;
    RUN(test_migrate_adds_columns_to_existing_table);
    RUN(test_changelog_adds_columns);
    RUN(test_claim_busy_conflict_finish_done);
    RUN(test_finish_is_one_transaction);
    RUN(test_takeover_after_lease);
    RUN(test_uncertain_list_resolve);
    RUN(test_finish_batch_all_or_none);
    RUN(test_claim_batch_columns);
    if (d == DB_DIALECT_POSTGRESQL)
        RUN(test_lookups_stay_on_their_keys);
    db_conn_free(A);
    db_conn_free(B);
    tl_db_drop(&T);
    return ib_test_done();
}
