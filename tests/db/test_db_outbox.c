/*
 * The outbox table and its relay statements against a live database
 * (argv[1]: postgresql|sqlite): creation and the check, the shipped schema
 * file, rows inserted in an inbox transaction (and none from one rolled
 * back), the claim in id order with every column intact, marking
 * published / retry / failed (and many rows published at once), operator
 * list and retry, stats, two relays
 * at once (PostgreSQL: disjoint claims that keep one session's order;
 * SQLite: the second waits), cleanup in batches under its lock, and
 * trace_context: written, claimed, listed, added to a table from before it
 * (by db.migrate, and by the statement CHANGELOG.md gives for db.migrate false).
 * Every check reads rows back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_dialect.h"
#include "db_outbox.h"
#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

#define TB "inboxd_outbox"
/* The traceparent emits of "ship:1" write into trace_context. */
#define TP1 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static tl_db_t T;
static db_conn_t *dbc;

#define COUNT(sql) tl_scalar(&T, sql)

/* Inserts one row the way a route's emit does: a statement of the inbox transaction. */
static db_outcome_t emit(const char *msg_id, const char *out_id, const char *session,
                         const char *body, ib_error_t *err)
{
    char hash[65], sql[1024];
    db_claim_t c = tl_claim("orders", msg_id, NULL, "in", hash);
    db_param_t p[9] = {DB_TEXT("shipments"), DB_TEXT(out_id),          DB_TEXT(session),
                       DB_TEXT("Shipment"),  DB_TEXT(msg_id),          DB_TEXT("application/json"),
                       DB_TEXT("{\"k\":\"v\",\"n\":3}"), DB_TEXT(body),
                       strcmp(out_id, "ship:1") == 0 ? DB_TEXT(TP1) : DB_NULL()};
    db_stmt_t s = {sql, p, 9};
    if (db_outbox_sql_insert(T.dialect, TB, sql, sizeof(sql)) != IB_E_OK)
        return DB_FAILED;
    return db_inbox_apply(dbc, &c, &s, 1, err);
}

static void test_migrate(void)
{
    ib_error_t err;
    ASSERT_EQ(db_outbox_migrate(dbc, TB, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "outbox.table");
    ASSERT_CONTAINS(err.text, "'" TB "'");
    ASSERT_EQ(db_outbox_migrate(dbc, TB, true, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_migrate(dbc, TB, true, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_migrate(dbc, TB, false, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_migrate(dbc, "bad name", true, &err), IB_E_CONFIG);
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK);
}

/* Rows from a committed inbox transaction, none from a duplicate (rolled back). */
static void test_emit_in_inbox_transaction(void)
{
    ib_error_t err;
    char big[9001];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    big[0] = '{';
    ASSERT_EQ(emit("in-1", "ship:1", "cust-a", "{\"to\":\"Zürich\"}", &err), DB_APPLIED);
    ASSERT_EQ(emit("in-2", "ship:2", NULL, big, &err), DB_APPLIED);
    ASSERT_EQ(emit("in-3", "ship:3", "cust-a", "{}", &err), DB_APPLIED);
    ASSERT_EQ(emit("in-1", "ship:1", "cust-a", "{\"to\":\"Zürich\"}", &err), DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB), 3);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'pending' AND attempts = 0 AND "
                    "created_at IS NOT NULL AND published_at IS NULL"),
              3);
}

static void test_claim_and_mark(void)
{
    ib_error_t err;
    db_outbox_row_t *rows;
    size_t n;
    long long pending = -1, oldest = -1;

    ASSERT_EQ(db_outbox_stats(dbc, TB, &pending, &oldest, &err), IB_E_OK);
    ASSERT_EQ(pending, 3);
    ASSERT_TRUE(oldest >= 0 && oldest < 60);
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 3);
    ASSERT_TRUE(rows[0].id < rows[1].id && rows[1].id < rows[2].id);
    ASSERT_STREQ(rows[0].entity, "shipments");
    ASSERT_STREQ(rows[0].message_id, "ship:1");
    ASSERT_STREQ(rows[0].session_id, "cust-a");
    ASSERT_STREQ(rows[0].subject, "Shipment");
    ASSERT_STREQ(rows[0].correlation_id, "in-1");
    ASSERT_STREQ(rows[0].content_type, "application/json");
    ASSERT_STREQ(rows[0].properties, "{\"k\":\"v\",\"n\":3}");
    ASSERT_STREQ(rows[0].body, "{\"to\":\"Zürich\"}");
    ASSERT_STREQ(rows[0].trace_context, TP1);
    ASSERT_TRUE(rows[1].session_id == NULL);
    ASSERT_TRUE(rows[1].trace_context == NULL);
    ASSERT_EQ(rows[1].body_len, 9000);
    ASSERT_EQ(db_outbox_mark(dbc, TB, rows[0].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_mark(dbc, TB, rows[1].id, DB_OUTBOX_RETRY, "com.microsoft:server-busy",
                             &err),
              IB_E_OK);
    ASSERT_EQ(db_outbox_mark(dbc, TB, rows[2].id, DB_OUTBOX_FAILED, "amqp:not-found: no entity",
                             &err),
              IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id = 'ship:1' AND status = "
                    "'published' AND published_at IS NOT NULL AND attempts = 1"),
              1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id = 'ship:2' AND status = "
                    "'pending' AND attempts = 1 AND last_error = 'com.microsoft:server-busy'"),
              1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id = 'ship:3' AND status = "
                    "'failed' AND last_error LIKE 'amqp:not-found%'"),
              1);
    db_outbox_rows_free(rows, n);

    /* A rolled-back claim gives the rows back untouched. */
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(rows[0].message_id, "ship:2");
    ASSERT_EQ(db_outbox_mark(dbc, TB, rows[0].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, false, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'pending'"), 1);
}

static void test_list_and_retry(void)
{
    ib_error_t err;
    db_outbox_row_t *rows;
    size_t n;
    long long changed = -1, id;

    ASSERT_EQ(db_outbox_list(dbc, TB, "failed", 100, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(rows[0].status, "failed");
    ASSERT_STREQ(rows[0].message_id, "ship:3");
    ASSERT_CONTAINS(rows[0].last_error, "amqp:not-found");
    ASSERT_TRUE(rows[0].created_at != NULL && rows[0].published_at == NULL);
    id = rows[0].id;
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(db_outbox_list(dbc, TB, NULL, 2, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(rows[0].status, "published");
    ASSERT_TRUE(rows[0].published_at != NULL);
    ASSERT_STREQ(rows[0].trace_context, TP1); /* ship:1's, for inboxctl outbox list */
    ASSERT_TRUE(rows[1].trace_context == NULL);
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(db_outbox_retry(dbc, TB, id, &changed, &err), IB_E_OK);
    ASSERT_EQ(changed, 1);
    ASSERT_EQ(db_outbox_retry(dbc, TB, id, &changed, &err), IB_E_OK);
    ASSERT_EQ(changed, 0); /* only failed rows go back */
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'pending' AND last_error IS NULL "
                    "AND message_id = 'ship:3'"),
              1);
    /* Everything published, for the next tests. */
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 2);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(db_outbox_mark(dbc, TB, rows[i].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 0);
}

/* outbox republish: the rows published in the window, and only those, pending again. */
static void test_republish(void)
{
    ib_error_t err;
    db_outbox_row_t *rows;
    size_t n;
    long long changed = -1;
    char ago[256], sql[512];

    ASSERT_TRUE(db_sql_ago(T.dialect, 1800, ago, sizeof ago));
    snprintf(sql, sizeof sql, "UPDATE " TB " SET published_at = %s WHERE message_id = 'ship:1'",
             ago);
    ASSERT_EQ(tl_exec(&T, sql), 0);
    ASSERT_EQ(db_outbox_republish(dbc, TB, 600, &changed, &err), IB_E_OK);
    ASSERT_EQ(changed, 2); /* ship:2 and ship:3, published a moment ago */
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'published' AND message_id = "
                    "'ship:1'"),
              1);
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(rows[0].message_id, "ship:2"); /* the same message ids, in row order */
    ASSERT_STREQ(rows[1].message_id, "ship:3");
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(db_outbox_mark(dbc, TB, rows[i].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
}

/* Rows as an application inserts them (no inboxd involved). */
static void app_rows(int from, int to, const char *session)
{
    char sql[512];
    for (int i = from; i <= to; i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO " TB " (entity, message_id, session_id, body) VALUES ('q', 'app-%d', "
                 "%s%s%s, '{}')",
                 i, session ? "'" : "", session ? session : "NULL", session ? "'" : "");
        ASSERT_EQ(tl_exec(&T, sql), 0);
    }
}

/* PostgreSQL: a second relay skips the rows the first holds and keeps session order. */
static void test_two_relays_postgresql(void)
{
    ib_error_t err;
    db_outbox_row_t *a, *b;
    size_t na, nb;
    db_conn_t *other = tl_conn(&T);

    app_rows(1, 4, NULL);
    app_rows(5, 6, "s1"); /* s1's head will be held by relay A */
    app_rows(7, 8, NULL);
    app_rows(9, 9, "s1");
    app_rows(10, 10, "s2");
    ASSERT_EQ(db_outbox_claim(dbc, TB, 5, &a, &na, &err), IB_E_OK);
    ASSERT_EQ(na, 5);
    ASSERT_STREQ(a[4].message_id, "app-5");
    ASSERT_EQ(db_outbox_claim(other, TB, 10, &b, &nb, &err), IB_E_OK);
    /* app-6 and app-9 (s1, behind A's app-5) are left; app-7, 8 and 10 are B's. */
    ASSERT_EQ(nb, 3);
    ASSERT_STREQ(b[0].message_id, "app-7");
    ASSERT_STREQ(b[1].message_id, "app-8");
    ASSERT_STREQ(b[2].message_id, "app-10");
    for (size_t i = 0; i < na; i++)
        ASSERT_EQ(db_outbox_mark(dbc, TB, a[i].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    for (size_t i = 0; i < nb; i++)
        ASSERT_EQ(db_outbox_mark(other, TB, b[i].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(db_end(other, true, &err), IB_E_OK);
    db_outbox_rows_free(a, na);
    db_outbox_rows_free(b, nb);
    ASSERT_EQ(db_outbox_claim(other, TB, 10, &b, &nb, &err), IB_E_OK);
    ASSERT_EQ(nb, 2);
    ASSERT_STREQ(b[0].message_id, "app-6");
    ASSERT_STREQ(b[1].message_id, "app-9");
    ASSERT_EQ(db_end(other, false, &err), IB_E_OK);
    db_outbox_rows_free(b, nb);
    db_conn_free(other);
}

/* SQLite: one relay at a time; the second waits for the write lock, then fails transient. */
static void test_two_relays_sqlite(void)
{
    ib_error_t err;
    db_outbox_row_t *a, *b;
    size_t na, nb;
    tl_db_t short_wait = T;
    db_conn_t *other;

    snprintf(short_wait.connstr, sizeof(short_wait.connstr),
             "Driver={SQLite3};Database=%s;Timeout=300", T.path);
    other = tl_conn(&short_wait);
    app_rows(1, 3, "s1");
    ASSERT_EQ(db_outbox_claim(dbc, TB, 10, &a, &na, &err), IB_E_OK);
    ASSERT_EQ(na, 3);
    ASSERT_EQ(db_outbox_claim(other, TB, 10, &b, &nb, &err), IB_E_DB);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_EQ(nb, 0);
    for (size_t i = 0; i < na; i++)
        ASSERT_EQ(db_outbox_mark(dbc, TB, a[i].id, DB_OUTBOX_PUBLISHED, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    db_outbox_rows_free(a, na);
    ASSERT_EQ(db_outbox_claim(other, TB, 10, &b, &nb, &err), IB_E_OK);
    ASSERT_EQ(nb, 0);
    db_conn_free(other);
}

/*
 * Many rows marked published at once: 150 claimed rows (a full statement of
 * DB_OUTBOX_LIST_MAX ids and a padded one), each published once; an id of
 * the claim left out of the list stays pending.
 */
static void test_mark_published_many(void)
{
    ib_error_t err;
    db_outbox_row_t *rows = NULL;
    size_t n = 0, k = 0;
    long long ids[150];

    ASSERT_EQ(tl_exec(&T, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE "
                          "i < 151) INSERT INTO " TB " (entity, message_id) "
                          "SELECT 'q', 'many-' || i FROM s"),
              0);
    ASSERT_EQ(db_outbox_claim(dbc, TB, 1000, &rows, &n, &err), IB_E_OK);
    for (size_t i = 0; i < n && k < 150; i++)
        if (strncmp(rows[i].message_id, "many-", 5) == 0)
            ids[k++] = rows[i].id;
    ASSERT_EQ(k, 150);
    ASSERT_EQ(db_outbox_mark_published(dbc, TB, ids, k, &err), IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id LIKE 'many-%' AND status = "
                    "'published' AND attempts = 1 AND published_at IS NOT NULL"),
              150);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id LIKE 'many-%' AND status = "
                    "'pending'"),
              1);
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(tl_exec(&T, "DELETE FROM " TB " WHERE message_id LIKE 'many-%'"), 0);
}

/* Cleanup: only published rows past the retention, in batches; one cleaner at a time. */
static void test_cleanup(void)
{
    ib_error_t err;
    long long before = COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'published'");

    ASSERT_TRUE(before > 0);
    ASSERT_EQ(tl_exec(&T, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE "
                          "i < 2500) INSERT INTO " TB " (entity, message_id, status, published_at) "
                          "SELECT 'q', 'old-' || i, 'published', '2020-01-01 00:00:00' FROM s"),
              0);
    /* An old row that is not published stays whatever its age. */
    ASSERT_EQ(tl_exec(&T, "INSERT INTO " TB " (entity, message_id, status, created_at) VALUES "
                          "('q', 'old-failed', 'failed', '2020-01-01 00:00:00')"),
              0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id LIKE 'old-%'"), 2501);
    if (T.dialect == DB_DIALECT_POSTGRESQL) {
        /* Another replica holds the cleaner lock: this one does nothing. */
        db_conn_t *other = tl_conn(&T);
        char lock[512];
        long long got = 0;
        ASSERT_EQ(db_outbox_sql_cleanup_lock(T.dialect, TB, lock, sizeof(lock)), IB_E_OK);
        ASSERT_EQ(db_exec(other, lock, NULL, 0, &got, &err), IB_E_OK);
        ASSERT_EQ(got, 1);
        ASSERT_EQ(db_end(other, true, &err), IB_E_OK);
        ASSERT_EQ(db_outbox_cleanup(dbc, TB, 3600, 1000, 0, &err), 0);
        ASSERT_EQ(db_outbox_sql_cleanup_unlock(T.dialect, TB, lock, sizeof(lock)), IB_E_OK);
        ASSERT_EQ(db_exec(other, lock, NULL, 0, &got, &err), IB_E_OK);
        ASSERT_EQ(db_end(other, true, &err), IB_E_OK);
        db_conn_free(other);
    }
    ASSERT_EQ(db_outbox_cleanup(dbc, TB, 3600, 1000, 2, &err), 2000); /* a bounded turn */
    ASSERT_EQ(db_outbox_cleanup(dbc, TB, 3600, 1000, 0, &err), 500);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id LIKE 'old-%'"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'published'"), before);
    ASSERT_EQ(db_outbox_cleanup(dbc, TB, 0, 1000, 0, &err), before);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE status = 'published'"), 0);
}

/* db/schema/<dialect>_outbox.sql, as a DBA would run it, gives a table inboxd accepts. */
static void test_shipped_schema_runs(void)
{
    tl_db_t S;
    char path[1024], *text, *stmt, *next;
    int run = 0;
    ib_error_t err;
    FILE *f;
    long size;

    tl_db_create(&S, T.dialect, "obschema");
    snprintf(path, sizeof(path), "%s/db/schema/%s_outbox.sql", INBOXD_SOURCE_DIR,
             db_dialect_name(T.dialect));
    f = fopen(path, "rb");
    ASSERT_TRUE(f != NULL);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = calloc(1, (size_t)size + 1);
    ASSERT_TRUE(text && fread(text, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    /* Comment lines begin with "--"; statements end with ";" at a line's end. */
    for (stmt = text; (next = strstr(stmt, ";\n")) != NULL; stmt = next + 2) {
        *next = '\0';
        while (strncmp(stmt, "--", 2) == 0 || *stmt == '\n')
            stmt = *stmt == '\n' ? stmt + 1 : strchr(stmt, '\n') + 1;
        ASSERT_EQ(tl_exec(&S, stmt), 0);
        run++;
    }
    free(text);
    ASSERT_EQ(run, T.dialect == DB_DIALECT_MARIADB ? 4 : 5);
    db_conn_t *c = tl_conn(&S);
    ASSERT_EQ(db_outbox_migrate(c, TB, false, &err), IB_E_OK);
    db_conn_free(c);
    tl_db_drop(&S);
}

/*
 * A table from before trace_context: db.migrate false refuses it naming the
 * column; db.migrate true adds it (twice is fine) and its old rows claim
 * with no trace context.
 */
/* Creates TB in S as it was before trace_context. */
static void create_table_before_trace_context(tl_db_t *S)
{
    static char buf[16384];
    char *col, *end;
    const char *ddl[DB_DDL_MAX];
    size_t n = 0;
    ASSERT_EQ(db_outbox_sql_ddl(T.dialect, TB, buf, sizeof(buf), ddl, &n), IB_E_OK);
    col = strstr(ddl[0], ",\n    trace_context");
    ASSERT_TRUE(col != NULL);
    end = col ? strstr(col, "\n)") : NULL;
    ASSERT_TRUE(end != NULL);
    if (end)
        memmove(col, end, strlen(end) + 1);
    ASSERT_EQ(tl_exec(S, ddl[0]), 0);
}

static void test_old_table_gains_trace_context(void)
{
    tl_db_t S;
    size_t n = 0;
    ib_error_t err;
    db_outbox_row_t *rows;
    db_conn_t *c;

    tl_db_create(&S, T.dialect, "obold");
    create_table_before_trace_context(&S);
    ASSERT_EQ(tl_exec(&S, "INSERT INTO " TB " (entity, message_id, properties) VALUES ('q', "
                          "'old-1', '{\"traceparent\":\"" TP1 "\"}')"),
              0);
    c = tl_conn(&S);
    ASSERT_EQ(db_outbox_migrate(c, TB, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "trace_context");
    ASSERT_EQ(db_outbox_migrate(c, TB, true, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_migrate(c, TB, true, &err), IB_E_OK);
    ASSERT_EQ(db_outbox_migrate(c, TB, false, &err), IB_E_OK);
    ASSERT_EQ(tl_scalar(&S, "SELECT COUNT(*) FROM " TB " WHERE trace_context IS NULL"), 1);
    ASSERT_EQ(db_outbox_claim(c, TB, 10, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(rows[0].message_id, "old-1");
    ASSERT_TRUE(rows[0].trace_context == NULL);
    ASSERT_EQ(db_end(c, false, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
    db_conn_free(c);
    tl_db_drop(&S);
}

/* With db.migrate false, CHANGELOG.md's statement for this database makes an old table pass. */
static void test_changelog_adds_trace_context(void)
{
    tl_db_t S;
    ib_error_t err;
    db_conn_t *c;

    tl_db_create(&S, T.dialect, "obchl");
    create_table_before_trace_context(&S);
    c = tl_conn(&S);
    ASSERT_EQ(db_outbox_migrate(c, TB, false, &err), IB_E_CONFIG);
    ASSERT_EQ(tl_changelog_exec(&S, "**Outbox: column `trace_context`**", "inboxd_outbox", TB), 1);
    ASSERT_EQ(db_outbox_migrate(c, TB, false, &err), IB_E_OK);
    db_conn_free(c);
    tl_db_drop(&S);
}

/* Claims and marks every claimable row: published, or failed when its id is fail_id. */
static void claim_all(long long fail_id, char *ids, size_t size)
{
    ib_error_t err;
    db_outbox_row_t *rows;
    size_t n;
    ids[0] = '\0';
    ASSERT_EQ(db_outbox_claim(dbc, TB, 100, &rows, &n, &err), IB_E_OK);
    for (size_t i = 0; i < n; i++) {
        bool fail = rows[i].id == fail_id;
        ASSERT_EQ(db_outbox_mark(dbc, TB, rows[i].id, fail ? DB_OUTBOX_FAILED : DB_OUTBOX_PUBLISHED,
                                 fail ? "amqp:x: refused" : NULL, &err),
                  IB_E_OK);
        snprintf(ids + strlen(ids), size - strlen(ids), "%s ", rows[i].message_id);
    }
    if (n)
        ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
}

/*
 * A failed row of a session holds the session's later rows out of every
 * claim (listed with blocked_by, counted by db_outbox_blocked) while rows
 * without a session go on; a skip leaves it failed and lets them go.
 */
static void test_session_held(void)
{
    char ids[256];
    long long first, blocked = -1, changed = -1;
    db_outbox_row_t *rows;
    size_t n;
    ib_error_t err;

    claim_all(0, ids, sizeof(ids)); /* whatever earlier tests left */
    app_rows(901, 903, "held");
    app_rows(904, 904, NULL);
    first = COUNT("SELECT id FROM " TB " WHERE message_id = 'app-901'");
    claim_all(first, ids, sizeof(ids));
    ASSERT_STREQ(ids, "app-901 app-902 app-903 app-904 ");
    /* That claim sent all four (the relay holds the rest back itself); put two back. */
    ASSERT_EQ(tl_exec(&T, "UPDATE " TB " SET status = 'pending' WHERE message_id IN ('app-902', "
                          "'app-903', 'app-904')"),
              0);
    claim_all(0, ids, sizeof(ids));
    ASSERT_STREQ(ids, "app-904 ");
    ASSERT_EQ(db_outbox_blocked(dbc, TB, &blocked, &err), IB_E_OK);
    ASSERT_EQ(blocked, 1);
    ASSERT_EQ(db_outbox_list(dbc, TB, "pending", 100, &rows, &n, &err), IB_E_OK);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(rows[0].blocked_by, first);
    ASSERT_EQ(rows[1].blocked_by, first);
    db_outbox_rows_free(rows, n);
    ASSERT_EQ(db_outbox_skip(dbc, TB, first, "superseded", &changed, &err), IB_E_OK);
    ASSERT_EQ(changed, 1);
    ASSERT_EQ(db_outbox_skip(dbc, TB, first, NULL, &changed, &err), IB_E_OK);
    ASSERT_EQ(changed, 0); /* already skipped */
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM " TB " WHERE message_id = 'app-901' AND status = 'failed' "
                    "AND last_error = 'inboxd:skipped (superseded); was: amqp:x: refused'"),
              1);
    ASSERT_EQ(db_outbox_blocked(dbc, TB, &blocked, &err), IB_E_OK);
    ASSERT_EQ(blocked, 0);
    claim_all(0, ids, sizeof(ids));
    ASSERT_STREQ(ids, "app-902 app-903 ");
}

/*
 * A body above DB_OUTBOX_BODY_INLINE is left out of the claim's row and
 * read in parts by characters: 3,000,000 bytes of one-to-four-byte UTF-8
 * characters (a part's end falls inside the pattern) come back byte for
 * byte, beside a small row claimed with it. Rolled back.
 */
static void test_large_body_in_parts(void)
{
    static const char unit[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"; /* 10 bytes, 4 chars */
    size_t len = 300000 * (sizeof(unit) - 1), n;
    char *body = malloc(len + 1);
    ib_error_t err;
    db_outbox_row_t *rows;
    ASSERT_TRUE(body != NULL);
    for (size_t i = 0; i < len; i += sizeof(unit) - 1)
        memcpy(body + i, unit, sizeof(unit) - 1);
    body[len] = '\0';
    ASSERT_EQ(emit("in-big", "big:1", NULL, body, &err), DB_APPLIED);
    ASSERT_EQ(emit("in-small", "big:2", NULL, "{\"s\":1}", &err), DB_APPLIED);
    ASSERT_EQ(db_outbox_claim(dbc, TB, 1000, &rows, &n, &err), IB_E_OK);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].message_id, "big:1") == 0) {
            ASSERT_EQ(rows[i].body_len, len);
            ASSERT_TRUE(memcmp(rows[i].body, body, len) == 0 && rows[i].body[len] == '\0');
            seen++;
        } else if (strcmp(rows[i].message_id, "big:2") == 0) {
            ASSERT_STREQ(rows[i].body, "{\"s\":1}");
            seen++;
        }
    }
    ASSERT_EQ(seen, 2);
    ASSERT_EQ(db_end(dbc, false, &err), IB_E_OK);
    db_outbox_rows_free(rows, n);
    free(body);
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_log_set_level(IB_LOG_ERROR);
    tl_db_create(&T, d, "outbox");
    dbc = tl_conn(&T);
    RUN(test_migrate);
    RUN(test_emit_in_inbox_transaction);
    RUN(test_claim_and_mark);
    RUN(test_list_and_retry);
    RUN(test_republish);
    if (d == DB_DIALECT_POSTGRESQL)
        RUN(test_two_relays_postgresql);
    else
        RUN(test_two_relays_sqlite);
    RUN(test_mark_published_many);
    RUN(test_cleanup);
    RUN(test_shipped_schema_runs);
    RUN(test_old_table_gains_trace_context);
    RUN(test_changelog_adds_trace_context);
    RUN(test_session_held);
    RUN(test_large_body_in_parts);
    db_conn_free(dbc);
    tl_db_drop(&T);
    return ib_test_done();
}
