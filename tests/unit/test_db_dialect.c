/*
 * The dialects as text and data: the SQL Server DDL and statement text
 * (no SQL Server runs here, so this is all the coverage it gets), the
 * error tables of every dialect as SQLSTATE/native -> class, configured
 * natives, table-name checks, the shipped schema files, SHA-256 and the
 * UTF-16 conversion used for SQL Server text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_conn_int.h"
#include "db_dialect.h"
#include "db_inbox.h"
#include "ib_test.h"

#define T IB_CLASS_TRANSIENT
#define P IB_CLASS_PERMANENT
#define D IB_CLASS_DUPLICATE

static int placeholders(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '?';
    return n;
}

static void test_dialect_names(void)
{
    ASSERT_EQ(db_dialect_parse("mssql"), DB_DIALECT_MSSQL);
    ASSERT_EQ(db_dialect_parse("PostgreSQL"), DB_DIALECT_POSTGRESQL);
    ASSERT_EQ(db_dialect_parse("sqlite"), DB_DIALECT_SQLITE);
    ASSERT_EQ(db_dialect_parse("mariadb"), DB_DIALECT_MARIADB);
    ASSERT_EQ(db_dialect_parse("auto"), DB_DIALECT_AUTO);
    ASSERT_EQ(db_dialect_parse("oracle"), -1);
    ASSERT_EQ(db_dialect_parse(NULL), -1);
    ASSERT_STREQ(db_dialect_name(DB_DIALECT_MSSQL), "mssql");
    ASSERT_EQ(db_dialect_from_dbms("Microsoft SQL Server"), DB_DIALECT_MSSQL);
    ASSERT_EQ(db_dialect_from_dbms("PostgreSQL"), DB_DIALECT_POSTGRESQL);
    ASSERT_EQ(db_dialect_from_dbms("SQLite"), DB_DIALECT_SQLITE);
    ASSERT_EQ(db_dialect_from_dbms("MariaDB"), DB_DIALECT_MARIADB);
    ASSERT_EQ(db_dialect_from_dbms("Informix"), DB_DIALECT_AUTO);
}

typedef struct cls_case {
    const char *sqlstate;
    long native;
    ib_class_t want;
} cls_case_t;

static int check_cases(db_dialect_t d, const cls_case_t *c, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        ib_class_t got = db_classify(d, c[i].sqlstate, c[i].native, NULL, NULL);
        if (got != c[i].want) {
            fprintf(stderr, "%s %s/%ld: got %s, want %s\n", db_dialect_name(d), c[i].sqlstate,
                    c[i].native, ib_class_name(got), ib_class_name(c[i].want));
            bad++;
        }
    }
    return bad;
}

static void test_mssql_classification(void)
{
    static const cls_case_t cases[] = {
        {"23000", 2627, D},                       /* PRIMARY KEY / UNIQUE constraint */
        {"23000", 2601, D},                       /* unique index */
        {"40001", 1205, T},                       /* deadlock victim */
        {"HYT00", 0, T},                          /* query timeout (client) */
        {"HYT00", -2, T},    {"08S01", 10054, T}, /* connection reset */
        {"08001", 53, T},    {"42000", 40197, T}, /* Azure SQL reconfiguration */
        {"42000", 40501, T},                      /* service busy */
        {"42000", 40613, T},                      /* database unavailable */
        {"42000", 49918, T}, {"42000", 10928, T}, /* resource limit */
        {"42000", 10929, T}, {"42000", 4060, T},  /* cannot open database (failover) */
        {"22003", 8115, P},                       /* arithmetic overflow */
        {"22007", 241, P},                        /* date conversion */
        {"22001", 8152, P},                       /* string truncated */
        {"23000", 547, P},                        /* foreign key / CHECK */
        {"23000", 515, P},                        /* NULL into NOT NULL */
        {"42S02", 208, P},                        /* invalid object name */
        {"42000", 102, P},                        /* syntax */
        {"42000", 50400, P},                      /* THROW 50400: a business rejection */
        {"28000", 18456, T}, /* login failed: a failover mid-run (db_conn_new: config) */
        {"IM002", 0, P},     /* no such driver */
        {"HY000", 0, T},     /* unknown: retried, then dead-lettered by the broker */
    };
    ASSERT_EQ(check_cases(DB_DIALECT_MSSQL, cases, sizeof(cases) / sizeof(cases[0])), 0);
    ASSERT_TRUE(db_dialect_is_unique_violation(DB_DIALECT_MSSQL, "23000", 2627));
    ASSERT_TRUE(db_dialect_is_unique_violation(DB_DIALECT_MSSQL, "23000", 2601));
    ASSERT_TRUE(!db_dialect_is_unique_violation(DB_DIALECT_MSSQL, "23000", 547));
    ASSERT_TRUE(!db_dialect_is_unique_violation(DB_DIALECT_MSSQL, "42000", 2627));
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "08S01", 10054));
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "42000", 40613));
    ASSERT_TRUE(!db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "40001", 1205));
}

static void test_postgresql_classification(void)
{
    static const cls_case_t cases[] = {
        {"23505", 1, D},  {"40001", 1, T}, {"40P01", 1, T}, {"57P01", 1, T}, {"08006", 1, T},
        {"08S01", 35, T}, {"57014", 1, T}, {"53300", 1, T}, {"55P03", 1, T}, {"22P02", 1, P},
        {"22012", 1, P},  {"23514", 1, P}, {"23503", 1, P}, {"23502", 1, P}, {"42601", 1, P},
        {"42P01", 1, P},  {"3D000", 1, P}, {"28P01", 1, P}, {"XX000", 1, T},
    };
    ASSERT_EQ(check_cases(DB_DIALECT_POSTGRESQL, cases, sizeof(cases) / sizeof(cases[0])), 0);
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_POSTGRESQL, "57P01", 1));
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_POSTGRESQL, "08S01", 35));
    ASSERT_TRUE(!db_dialect_is_conn_lost(DB_DIALECT_POSTGRESQL, "40P01", 1));
}

static void test_sqlite_and_mariadb_classification(void)
{
    static const cls_case_t lite[] = {
        {"HY000", 19, D}, {"HY000", 5, T}, {"HY000", 6, T}, {"HY000", 1, P}, {"HY000", 20, P},
    };
    static const cls_case_t maria[] = {
        {"23000", 1062, D}, {"40001", 1213, T}, {"HY000", 1205, T}, {"HY000", 2013, T},
        {"08S01", 2006, T}, {"23000", 1452, P}, {"42S02", 1146, P}, {"22001", 1406, P},
    };
    ASSERT_EQ(check_cases(DB_DIALECT_SQLITE, lite, sizeof(lite) / sizeof(lite[0])), 0);
    ASSERT_EQ(check_cases(DB_DIALECT_MARIADB, maria, sizeof(maria) / sizeof(maria[0])), 0);
    ASSERT_TRUE(db_dialect_is_unique_violation(DB_DIALECT_SQLITE, "HY000", 19));
    ASSERT_TRUE(!db_dialect_is_unique_violation(DB_DIALECT_SQLITE, "HY000", 5));
    ASSERT_TRUE(db_dialect_is_unique_violation(DB_DIALECT_MARIADB, "23000", 1062));
}

static void test_configured_natives(void)
{
    json_error_t jerr;
    json_t *tj = json_loads("[50503, \"40p02\", 1205]", 0, &jerr);
    json_t *pj = json_loads("[1205, \"22P02\"]", 0, &jerr);
    db_codes_t tr, pe;
    ib_error_t err;

    ASSERT_EQ(db_codes_from_json(tj, "errors.transient_native", &tr, &err), IB_E_OK);
    ASSERT_EQ(db_codes_from_json(pj, "errors.permanent_native", &pe, &err), IB_E_OK);
    ASSERT_EQ(tr.n, 3);
    ASSERT_TRUE(tr.v[1].by_sqlstate);
    ASSERT_STREQ(tr.v[1].sqlstate, "40P02");
    /* A stored procedure's THROW 50503 made retryable. */
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "42000", 50503, &tr, &pe), T);
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "42000", 50503, NULL, NULL), P);
    /* The permanent list wins over the transient list and over the table. */
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "40001", 1205, &tr, &pe), P);
    ASSERT_EQ(db_classify(DB_DIALECT_POSTGRESQL, "40P02", 1, &tr, &pe), T);
    ASSERT_EQ(db_classify(DB_DIALECT_POSTGRESQL, "22P02", 1, &tr, NULL), P);
    /* An unlisted code still goes by the table. */
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "23000", 2627, &tr, &pe), D);
    /* The inbox key decision ignores the lists. */
    json_t *dj = json_loads("[2627]", 0, &jerr);
    db_codes_t dup;
    ASSERT_EQ(db_codes_from_json(dj, "errors.permanent_native", &dup, &err), IB_E_OK);
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "23000", 2627, NULL, &dup), P);
    ASSERT_TRUE(db_dialect_is_unique_violation(DB_DIALECT_MSSQL, "23000", 2627));
    db_codes_free(&dup);
    json_decref(dj);

    db_codes_t copy;
    ASSERT_EQ(db_codes_copy(&copy, &tr), IB_E_OK);
    ASSERT_EQ(copy.n, 3);
    ASSERT_TRUE(db_codes_match(&copy, "42000", 50503));
    db_codes_free(&copy);
    db_codes_free(&tr);
    db_codes_free(&pe);
    json_decref(tj);
    json_decref(pj);
}

static void test_configured_natives_invalid(void)
{
    static const char *bad[] = {"[1.5]",      "[\"4000\"]", "[\"400011\"]", "[true]",
                                "{\"a\": 1}", "[[1]]",      "[\"40-01\"]",  "[99999999999]"};
    json_error_t jerr;
    ib_error_t err;
    db_codes_t c;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i], JSON_DECODE_ANY, &jerr);
        ASSERT_TRUE(j != NULL);
        ASSERT_EQ(db_codes_from_json(j, "errors.transient_native", &c, &err), IB_E_CONFIG);
        ASSERT_CONTAINS(err.text, "errors.transient_native");
        ASSERT_EQ(c.n, 0);
        json_decref(j);
    }
    json_t *j = json_loads("[1, \"abc\"]", 0, &jerr);
    ASSERT_EQ(db_codes_from_json(j, "errors.permanent_native", &c, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "errors.permanent_native[1]");
    json_decref(j);
    ASSERT_EQ(db_codes_from_json(NULL, "x", &c, &err), IB_E_OK);
    ASSERT_EQ(c.n, 0);
    j = json_null();
    ASSERT_EQ(db_codes_from_json(j, "x", &c, &err), IB_E_OK);
    json_decref(j);
}

static void test_mssql_statement_text(void)
{
    char buf[4096];
    bool limit_first = false;

    ASSERT_EQ(db_sql_insert(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "INSERT INTO dbo.inbox (consumer, message_id, idempotency_key, body_sha256, "
                      "status, entity, sequence_number, delivery_count, enqueued_at, received_at, "
                      "processed_at, error_class, error_detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                      "?, ?, SYSUTCDATETIME(), ?, ?)");
    ASSERT_EQ(placeholders(buf), 12);

    ASSERT_EQ(db_sql_select_existing(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "SELECT body_sha256, status FROM dbo.inbox WHERE consumer = ? AND "
                      "message_id = ? UNION ALL SELECT body_sha256, status FROM dbo.inbox WHERE "
                      "consumer = ? AND idempotency_key = ? AND message_id <> ?");
    ASSERT_EQ(placeholders(buf), 5);

    ASSERT_EQ(db_sql_sweep(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf), &limit_first), IB_E_OK);
    ASSERT_STREQ(buf,
                 "DELETE TOP (?) FROM dbo.inbox WHERE status = 'processed' AND processed_at < ?");
    ASSERT_TRUE(limit_first);

    ASSERT_EQ(db_sql_sweep_lock(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "EXEC @r = sp_getapplock @Resource = N'inboxd-sweep:dbo.inbox'");
    ASSERT_CONTAINS(buf, "@LockOwner = N'Session', @LockTimeout = 0");
    ASSERT_CONTAINS(buf, "SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END");
    ASSERT_EQ(db_sql_sweep_unlock(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "EXEC sp_releaseapplock @Resource = N'inboxd-sweep:dbo.inbox', "
                      "@LockOwner = N'Session'");

    ASSERT_EQ(db_sql_probe_key(DB_DIALECT_MSSQL, "dbo.inbox", "message_id", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "FROM sys.indexes i WHERE i.object_id = OBJECT_ID(N'dbo.inbox')");
    ASSERT_CONTAINS(buf, "c.name IN (N'consumer', N'message_id')) = 2");
    ASSERT_EQ(db_sql_probe_columns(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "error_detail FROM dbo.inbox WHERE 1 = 0");

    ASSERT_STREQ(db_sql_now(DB_DIALECT_MSSQL), "SYSUTCDATETIME()");
}

/*
 * R1: the migration lock belongs to the session. A transaction-owned
 * sp_getapplock sent first under IMPLICIT_TRANSACTIONS (EXEC opens no
 * transaction) returns -999, so it must never be transaction-owned; it
 * reports its outcome as a row and is released by its own statement.
 */
static void test_mssql_migrate_lock_is_session_owned(void)
{
    char buf[4096];

    ASSERT_EQ(db_sql_migrate_lock(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "DECLARE @r int;\n"
                      "EXEC @r = sp_getapplock @Resource = N'inboxd-migrate:dbo.inbox', "
                      "@LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 60000;\n"
                      "SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;");
    ASSERT_NOT_CONTAINS(buf, "Transaction");
    ASSERT_NOT_CONTAINS(buf, "THROW");
    ASSERT_EQ(db_sql_migrate_unlock(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "EXEC sp_releaseapplock @Resource = N'inboxd-migrate:dbo.inbox', "
                      "@LockOwner = N'Session'");
    /* MariaDB: DDL commits implicitly, so its lock is a session lock too. */
    ASSERT_EQ(db_sql_migrate_lock(DB_DIALECT_MARIADB, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "SELECT GET_LOCK('inboxd-migrate:inbox', 60)");
    ASSERT_EQ(db_sql_migrate_unlock(DB_DIALECT_MARIADB, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "SELECT RELEASE_LOCK('inboxd-migrate:inbox')");
    /* PostgreSQL: transaction-scoped (psqlODBC opens the transaction), nothing to release. */
    ASSERT_EQ(db_sql_migrate_lock(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "SELECT 1 FROM (SELECT pg_advisory_xact_lock(");
    ASSERT_EQ(db_sql_migrate_unlock(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "");
    ASSERT_EQ(db_sql_migrate_lock(DB_DIALECT_SQLITE, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "");
    ASSERT_EQ(db_sql_migrate_unlock(DB_DIALECT_SQLITE, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "");
}

/*
 * R3: transient natives SQL Server's own clients retry, and the codes that
 * are configuration errors at start (login failed, cannot open database).
 */
static void test_mssql_transient_natives(void)
{
    static const cls_case_t cases[] = {
        {"HY000", 1222, T},  /* lock request time out period exceeded */
        {"HY000", 1204, T},  /* cannot obtain a LOCK resource */
        {"42000", 40143, T}, /* service error processing the request */
        {"42000", 40540, T}, /* service error processing the request */
        {"42000", 4221, T},  /* readable secondary waiting for versioning */
        {"42000", 42108, T}, /* paused serverless database / SQL pool */
        {"42000", 42109, T}, /* resuming */
        {"42000", 40613, T}, {"42000", 40197, T}, {"42000", 40501, T}, {"42000", 49919, T},
        {"42000", 49920, T}, {"08S01", 10054, T}, {"HY000", 596, T}, /* session killed */
        {"28000", 18456, T}, /* login failed: mid-run a failover, so transient */
        {"42000", 4060, T},  {"42000", 50400, P}, /* THROW: still permanent */
        {"23000", 547, P},                        /* FOREIGN KEY: not a duplicate */
    };
    ASSERT_EQ(check_cases(DB_DIALECT_MSSQL, cases, sizeof(cases) / sizeof(cases[0])), 0);
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "HY000", 596));
    ASSERT_TRUE(db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "42000", 42108));
    ASSERT_TRUE(!db_dialect_is_conn_lost(DB_DIALECT_MSSQL, "HY000", 1222));

    /* At start: login refused is configuration, not weather. */
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_MSSQL, "28000", 18456));
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_MSSQL, "42000", 4060));
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_AUTO, "42000", 4060));
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_AUTO, "HY000", 18456));
    ASSERT_TRUE(!db_dialect_is_login_refused(DB_DIALECT_MSSQL, "42000", 40613));
    ASSERT_TRUE(!db_dialect_is_login_refused(DB_DIALECT_MSSQL, "08001", 53));
    ASSERT_TRUE(!db_dialect_is_login_refused(DB_DIALECT_MSSQL, "HYT00", 0));
    /* MariaDB's equivalents. */
    ASSERT_EQ(db_classify(DB_DIALECT_MARIADB, "28000", 1045, NULL, NULL), T);
    ASSERT_EQ(db_classify(DB_DIALECT_MARIADB, "42000", 1049, NULL, NULL), T);
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_MARIADB, "28000", 1045));
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_MARIADB, "42000", 1049));
    /* Seen from MariaDB 10.11 with Connector/ODBC 3.1: a user without rights on the database. */
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_MARIADB, "42000", 1044));
    ASSERT_EQ(db_classify(DB_DIALECT_MARIADB, "HY018", 1969, NULL, NULL), T);
    ASSERT_TRUE(!db_dialect_is_login_refused(DB_DIALECT_MARIADB, "HY000", 2013));
    ASSERT_TRUE(db_dialect_is_login_refused(DB_DIALECT_POSTGRESQL, "28P01", 1));
    ASSERT_TRUE(!db_dialect_is_login_refused(DB_DIALECT_POSTGRESQL, "08001", 101));
}

/*
 * R4: SQL Server commits through SQLEndTran (what its drivers need in
 * manual-commit mode; the wire is checked in tests/tds); a statement
 * timeout is transient. Bounded deletes stay below lock escalation's 5,000.
 */
static void test_mssql_commit_is_bounded(void)
{
    ASSERT_TRUE(db_sql_delete_rows_max(DB_DIALECT_MSSQL) < 5000);
    ASSERT_TRUE(db_sql_delete_rows_max(DB_DIALECT_POSTGRESQL) >= 10000);
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "HYT00", 0, NULL, NULL), T);
    ASSERT_EQ(db_classify(DB_DIALECT_MSSQL, "HYT00", -2, NULL, NULL), T);
}

/* R5: every SQL Server session runs with XACT_ABORT ON; nothing for the others. */
static void test_mssql_xact_abort(void)
{
    ASSERT_STREQ(db_sql_session_setup(DB_DIALECT_MSSQL), "SET XACT_ABORT ON; SET NOCOUNT OFF");
    ASSERT_STREQ(db_sql_session_setup(DB_DIALECT_POSTGRESQL), "");
    ASSERT_STREQ(db_sql_session_setup(DB_DIALECT_SQLITE), "");
    ASSERT_STREQ(db_sql_session_setup(DB_DIALECT_MARIADB), "");
}

/* R6: the sweep deletes 'processed' rows only, in every dialect. */
static void test_sweep_keeps_failed_and_uncertain(void)
{
    char buf[1024];
    bool limit_first;
    const db_dialect_t all[] = {DB_DIALECT_MSSQL, DB_DIALECT_POSTGRESQL, DB_DIALECT_SQLITE,
                                DB_DIALECT_MARIADB};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        ASSERT_EQ(db_sql_sweep(all[i], "inbox", buf, sizeof(buf), &limit_first), IB_E_OK);
        ASSERT_CONTAINS(buf, "status = 'processed' AND processed_at < ?");
        ASSERT_NOT_CONTAINS(buf, "failed");
        ASSERT_NOT_CONTAINS(buf, "uncertain");
        ASSERT_EQ(placeholders(buf), 2);
    }
}

static void test_mssql_ddl(void)
{
    char buf[16384];
    const char *ddl[DB_DDL_MAX];
    size_t n = 0;

    ASSERT_EQ(db_sql_ddl(DB_DIALECT_MSSQL, "dbo.inbox", buf, sizeof(buf), ddl, &n), IB_E_OK);
    ASSERT_EQ(n, 3);
    ASSERT_TRUE(strncmp(ddl[0],
                        "IF OBJECT_ID(N'dbo.inbox', N'U') IS NULL\nCREATE TABLE dbo.inbox (",
                        62) == 0);
    ASSERT_CONTAINS(ddl[0],
                    "consumer        nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL");
    ASSERT_CONTAINS(ddl[0],
                    "message_id      nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL");
    ASSERT_CONTAINS(ddl[0], "idempotency_key nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL");
    ASSERT_CONTAINS(ddl[0], "body_sha256     char(64) NOT NULL");
    ASSERT_CONTAINS(ddl[0], "processed_at    datetime2(3) NOT NULL");
    ASSERT_CONTAINS(ddl[0], "CONSTRAINT PK_inbox PRIMARY KEY CLUSTERED (consumer, message_id)");
    ASSERT_NOT_CONTAINS(ddl[0], "IF NOT EXISTS"); /* not T-SQL for tables */
    ASSERT_CONTAINS(ddl[1], "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = "
                            "OBJECT_ID(N'dbo.inbox') AND name = N'UX_inbox_idem')");
    ASSERT_CONTAINS(ddl[1], "CREATE UNIQUE NONCLUSTERED INDEX UX_inbox_idem ON dbo.inbox "
                            "(consumer, idempotency_key)");
    ASSERT_CONTAINS(ddl[1], "WHERE idempotency_key IS NOT NULL");
    ASSERT_CONTAINS(ddl[2],
                    "CREATE NONCLUSTERED INDEX IX_inbox_processed ON dbo.inbox (processed_at)\n"
                    "    WHERE status = 'processed'");
    /* No statement ends in ';' or holds GO: each is one batch for SQLExecDirect. */
    for (size_t i = 0; i < n; i++) {
        ASSERT_TRUE(ddl[i][strlen(ddl[i]) - 1] != ';');
        ASSERT_NOT_CONTAINS(ddl[i], "\nGO");
    }
    /* Too small a buffer fails cleanly. */
    ASSERT_EQ(db_sql_ddl(DB_DIALECT_MSSQL, "dbo.inbox", buf, 100, ddl, &n), IB_E_INVAL);
}

static void test_other_dialect_text(void)
{
    char buf[4096];
    bool limit_first = true;

    ASSERT_EQ(db_sql_insert(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "(clock_timestamp() AT TIME ZONE 'UTC')");
    ASSERT_EQ(placeholders(buf), 12);
    ASSERT_EQ(db_sql_sweep(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf), &limit_first),
              IB_E_OK);
    ASSERT_TRUE(!limit_first);
    ASSERT_CONTAINS(buf, "LIMIT ?");
    ASSERT_EQ(db_sql_sweep(DB_DIALECT_SQLITE, "inbox", buf, sizeof(buf), &limit_first), IB_E_OK);
    ASSERT_CONTAINS(buf, "rowid IN (SELECT rowid FROM inbox WHERE status = 'processed' AND "
                         "processed_at < ? LIMIT ?)");
    ASSERT_EQ(db_sql_sweep(DB_DIALECT_MARIADB, "inbox", buf, sizeof(buf), &limit_first), IB_E_OK);
    ASSERT_STREQ(buf, "DELETE FROM inbox WHERE status = 'processed' AND processed_at < ? LIMIT ?");
    ASSERT_EQ(db_sql_sweep_lock(DB_DIALECT_SQLITE, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "");
    ASSERT_EQ(db_sql_sweep_lock(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "pg_try_advisory_lock(");
    ASSERT_EQ(db_sql_migrate_lock(DB_DIALECT_POSTGRESQL, "inbox", buf, sizeof(buf)), IB_E_OK);
    ASSERT_CONTAINS(buf, "pg_advisory_xact_lock(");
    ASSERT_EQ(db_sql_insert(DB_DIALECT_AUTO, "inbox", buf, sizeof(buf)), IB_E_INVAL);
    ASSERT_EQ(db_sql_insert(DB_DIALECT_POSTGRESQL, "inbox", buf, 40), IB_E_INVAL);
}

static void test_table_names(void)
{
    static const char *good[] = {"inbox", "dbo.inbox", "_x1", "Inbox_2", "s.t"};
    static const char *bad[] = {"",        "1abc",      "a.b.c",   "inbox; DROP TABLE x",
                                "a-b",     ".x",        "x.",      "in box",
                                "[inbox]", "\"inbox\"", "inbox--", "a..b"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ASSERT_TRUE(db_table_name_valid(good[i]));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char buf[1024];
        ASSERT_TRUE(!db_table_name_valid(bad[i]));
        ASSERT_EQ(db_sql_insert(DB_DIALECT_MSSQL, bad[i], buf, sizeof(buf)), IB_E_INVAL);
    }
    char longname[80];
    memset(longname, 'a', 64);
    longname[64] = '\0';
    ASSERT_TRUE(!db_table_name_valid(longname));
    longname[63] = '\0';
    ASSERT_TRUE(db_table_name_valid(longname));
    ASSERT_TRUE(!db_table_name_valid(NULL));
}

/* Drops "--" comment lines and "GO" lines and collapses whitespace and ';'. */
static void normalise(const char *in, char *out, size_t size)
{
    size_t o = 0;
    bool space = false;
    const char *line = in;

    while (*line && o + 2 < size) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line;
        while (p < line + len && (*p == ' ' || *p == '\t'))
            p++;
        bool skip = (p + 2 <= line + len && p[0] == '-' && p[1] == '-') ||
                    (line + len - p == 2 && p[0] == 'G' && p[1] == 'O') ||
                    (line + len - p == 24 && strncmp(p, "SET QUOTED_IDENTIFIER ON", 24) == 0);
        for (; !skip && p < line + len && o + 2 < size; p++) {
            if (*p == ' ' || *p == '\t' || *p == '\r' || *p == ';') {
                space = true;
                continue;
            }
            if (space && o)
                out[o++] = ' ';
            space = false;
            out[o++] = *p;
        }
        space = true;
        line = end ? end + 1 : line + len;
    }
    out[o] = '\0';
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* db/schema/<dialect>.sql is what db_migrate runs, statement for statement. */
static void test_shipped_schema_files(void)
{
    static const struct {
        db_dialect_t d;
        const char *table;
    } files[] = {{DB_DIALECT_MSSQL, "dbo.inbox"},
                 {DB_DIALECT_POSTGRESQL, "inbox"},
                 {DB_DIALECT_SQLITE, "inbox"},
                 {DB_DIALECT_MARIADB, "inbox"}};
    char root[1024], path[1200];
    const char *slash;

    /* This file is tests/unit/test_db_dialect.c under the source root. */
    ib_strlcpy(root, __FILE__, sizeof(root));
    slash = strstr(root, "tests/unit/test_db_dialect.c");
    ASSERT_TRUE(slash != NULL);
    root[slash - root] = '\0';
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char ddlbuf[16384], gen[16384], want[16384], got[16384];
        const char *ddl[DB_DDL_MAX];
        size_t n = 0, used = 0;
        snprintf(path, sizeof(path), "%sdb/schema/%s.sql", root, db_dialect_name(files[i].d));
        char *text = slurp(path);
        ASSERT_TRUE(text != NULL);
        /* SQL Server: QUOTED_IDENTIFIER ON in its own batch before any statement (error 1934). */
        if (files[i].d == DB_DIALECT_MSSQL) {
            const char *q = strstr(text, "\nSET QUOTED_IDENTIFIER ON\nGO\n");
            const char *first = strstr(text, "\nIF ");
            ASSERT_TRUE(q != NULL && first != NULL && q < first);
        }
        ASSERT_EQ(db_sql_ddl(files[i].d, files[i].table, ddlbuf, sizeof(ddlbuf), ddl, &n), IB_E_OK);
        for (size_t k = 0; k < n; k++)
            used += (size_t)snprintf(gen + used, sizeof(gen) - used, "%s\n", ddl[k]);
        normalise(gen, want, sizeof(want));
        normalise(text, got, sizeof(got));
        if (strcmp(want, got) != 0)
            fprintf(stderr, "%s differs from db_sql_ddl:\n%s\n---\n%s\n", path, got, want);
        ASSERT_STREQ(got, want);
        free(text);
    }
}

static void test_sha256(void)
{
    char hex[65];
    db_sha256_hex("", 0, hex);
    ASSERT_STREQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    db_sha256_hex("abc", 3, hex);
    ASSERT_STREQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    db_sha256_hex("a\0b", 3, hex); /* bodies are bytes, not strings */
    ASSERT_TRUE(strcmp(hex, "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb") !=
                0);
    ASSERT_EQ(strlen(hex), 64);
}

static void test_utf16(void)
{
    SQLWCHAR w[16];
    ASSERT_EQ(db_utf8_to_utf16("a\xc3\xa9\xe2\x82\xac", 6, w), 3);
    ASSERT_EQ(w[0], 'a');
    ASSERT_EQ(w[1], 0xE9);
    ASSERT_EQ(w[2], 0x20AC);
    ASSERT_EQ(db_utf8_to_utf16("\xf0\x9f\x93\xa6", 4, w), 2);
    ASSERT_EQ(w[0], 0xD83D);
    ASSERT_EQ(w[1], 0xDCE6);
    ASSERT_EQ(db_utf8_to_utf16("\xff", 1, w), 1);
    ASSERT_EQ(w[0], 0xFFFD);
    ASSERT_EQ(db_utf8_to_utf16("\xc0\xaf", 2, w), 1); /* overlong '/' */
    ASSERT_EQ(w[0], 0xFFFD);
    ASSERT_EQ(db_utf8_to_utf16("\xe2\x82", 2, w), 1); /* truncated */
    ASSERT_EQ(w[0], 0xFFFD);
    ASSERT_EQ(db_utf8_to_utf16("\xed\xa0\x80", 3, w), 1); /* a surrogate */
    ASSERT_EQ(w[0], 0xFFFD);
    ASSERT_EQ(db_utf8_to_utf16("", 0, NULL), 0);
}

/* The batch claim: one statement, 12 parameters a row, skipping taken keys, per dialect. */
static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void test_claim_text(void)
{
    static char buf[64 * 1024];

    ASSERT_EQ(db_sql_claim(DB_DIALECT_MSSQL, "dbo.inbox", 3, buf, sizeof(buf)), IB_E_OK);
    ASSERT_EQ(count_char(buf, '?'), 36);
    ASSERT_CONTAINS(buf, "INSERT INTO dbo.inbox (");
    ASSERT_CONTAINS(buf, "OUTPUT inserted.consumer, inserted.message_id");
    ASSERT_CONTAINS(buf, "FROM dbo.inbox AS x WITH (UPDLOCK, HOLDLOCK)");
    /* One NOT EXISTS per key, each able to seek its own index. */
    ASSERT_CONTAINS(buf, "WHERE x.consumer = v.consumer AND x.message_id = v.message_id) AND NOT "
                         "EXISTS (SELECT 1 FROM dbo.inbox AS y WITH (UPDLOCK, HOLDLOCK) WHERE "
                         "y.consumer = v.consumer AND y.idempotency_key = v.idempotency_key)");
    ASSERT_TRUE(strstr(buf, " OR ") == NULL);
    ASSERT_CONTAINS(buf, "SYSUTCDATETIME()");
    ASSERT_TRUE(!strchr(buf, ';'));
    ASSERT_EQ(db_sql_claim_rows_max(DB_DIALECT_MSSQL) * 12 <= 2100, 1);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_MSSQL, "inbox", db_sql_claim_rows_max(DB_DIALECT_MSSQL), buf,
                           sizeof(buf)),
              IB_E_OK);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_MSSQL, "inbox", db_sql_claim_rows_max(DB_DIALECT_MSSQL) + 1,
                           buf, sizeof(buf)),
              IB_E_INVAL);

    /* PostgreSQL: the columns a batch shares once, then 7 a row. */
    ASSERT_EQ(db_sql_claim_shared(DB_DIALECT_POSTGRESQL), 1);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_POSTGRESQL, "inbox", 2, buf, sizeof(buf)), IB_E_OK);
    ASSERT_EQ(count_char(buf, '?'), DB_CLAIM_SHARED + 2 * DB_CLAIM_ROW_PARAMS);
    ASSERT_CONTAINS(buf, "ON CONFLICT DO NOTHING RETURNING consumer, message_id");
    ASSERT_EQ(strncmp(buf, "INSERT INTO inbox (", 19), 0);
    ASSERT_CONTAINS(buf, " SELECT ?, v.message_id, ");
    ASSERT_EQ(db_sql_claim(DB_DIALECT_POSTGRESQL, "inbox", db_sql_claim_rows_max(DB_DIALECT_POSTGRESQL),
                           buf, sizeof(buf)),
              IB_E_OK);
    ASSERT_EQ(count_char(buf, '?') < 1000, 1); /* psqlODBC's limit (db_sql_claim_rows_max) */

    ASSERT_EQ(db_sql_claim(DB_DIALECT_SQLITE, "inbox", 2, buf, sizeof(buf)), IB_E_OK);
    ASSERT_EQ(count_char(buf, '?'), 24);
    ASSERT_EQ(strncmp(buf, "WITH v (", 8), 0); /* sqlite3odbc returns rows only then */
    ASSERT_CONTAINS(buf, "FROM v WHERE true ON CONFLICT DO NOTHING RETURNING");

    ASSERT_EQ(db_sql_claim_rows_max(DB_DIALECT_MARIADB), 0);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_MARIADB, "inbox", 2, buf, sizeof(buf)), IB_E_OK);
    ASSERT_STREQ(buf, "");
    ASSERT_EQ(db_sql_claim(DB_DIALECT_POSTGRESQL, "inbox", 0, buf, sizeof(buf)), IB_E_INVAL);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_POSTGRESQL, "inbox", 10, buf, 200), IB_E_INVAL);
    ASSERT_EQ(db_sql_claim(DB_DIALECT_POSTGRESQL, "in box", 1, buf, sizeof(buf)), IB_E_INVAL);
}

static void test_outcome_names(void)
{
    ASSERT_STREQ(db_outcome_name(DB_APPLIED), "applied");
    ASSERT_STREQ(db_outcome_name(DB_DUPLICATE), "duplicate");
    ASSERT_STREQ(db_outcome_name(DB_CONFLICT), "conflict");
    ASSERT_STREQ(db_outcome_name(DB_FAILED), "failed");
}

/* Setup errors per dialect: configuration of the database, not a bad message. */
static void test_setup_errors(void)
{
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "42P01", 1, "relation"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "42501", 1, "permission denied"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "25006", 1, "read-only"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "53100", 1, "disk full"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "42601", 1, "syntax error"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "22P02", 1, "invalid input"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_POSTGRESQL, "23505", 1, "duplicate"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_MSSQL, "42S02", 208, "Invalid object name"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_MSSQL, "42000", 229, "permission denied"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_MSSQL, "42000", 3906, "read-only"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_MSSQL, "42000", 50400, "THROW"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_MARIADB, "42S02", 1146, "doesn't exist"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_MARIADB, "42000", 1142, "denied"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_MARIADB, "23000", 1062, "Duplicate"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_SQLITE, "HY000", 1, "no such table: items"));
    ASSERT_TRUE(db_dialect_is_setup_error(DB_DIALECT_SQLITE, "HY000", 8, "readonly database"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_SQLITE, "HY000", 1, "near \"x\": syntax"));
    ASSERT_TRUE(!db_dialect_is_setup_error(DB_DIALECT_SQLITE, "HY000", 19, "UNIQUE constraint"));
}

/*
 * Every dialect has a complete row of traits: the statement builders read
 * its fields without checking them, so a new row missing one would crash
 * a builder rather than fail here.
 */
static void test_traits_complete(void)
{
    int rows = 0;
    ASSERT_TRUE(db_dialect_traits(DB_DIALECT_AUTO) == NULL);
    ASSERT_TRUE(db_dialect_traits(DB_DIALECTS) == NULL);
    for (int d = DB_DIALECT_AUTO + 1; d < DB_DIALECTS; d++) {
        const db_traits_t *tr = db_dialect_traits((db_dialect_t)d);
        char buf[256];
        ASSERT_TRUE(tr != NULL);
        ASSERT_EQ((int)tr->dialect, d);
        ASSERT_EQ(db_dialect_parse(tr->name), d);
        ASSERT_EQ(db_dialect_from_dbms(tr->dbms[0]), (db_dialect_t)d);
        for (int k = 0; k < DB_COL_KINDS; k++)
            ASSERT_TRUE(tr->type[k] != NULL && tr->type[k][0]);
        const char *texts[] = {tr->otel_system, tr->nullable, tr->key_collate, tr->pk_clause,
                               tr->pk_prefix, tr->pk_suffix, tr->now, tr->now_default,
                               tr->age_s_fmt, tr->top, tr->limit, tr->skip_locked_hint,
                               tr->skip_locked, tr->read_locked_hint, tr->create_guard,
                               tr->if_not_exists, tr->create_index, tr->index_prefix,
                               tr->index_guard_fmt, tr->probe_key_fmt, tr->probe_unfiltered,
                               tr->has_column_fmt, tr->add_column_fmt, tr->column_guard_fmt,
                               tr->unique_named_sql, tr->session_setup};
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
            ASSERT_TRUE(texts[i] != NULL);
        ASSERT_TRUE(tr->errors != NULL && tr->errors == db_dialect_errtable((db_dialect_t)d));
        ASSERT_TRUE(tr->unique[0].sqlstate || tr->unique[0].native);
        ASSERT_TRUE(db_sql_ago((db_dialect_t)d, 60, buf, sizeof buf));
        ASSERT_TRUE(db_sql_later((db_dialect_t)d, 60, buf, sizeof buf));
        ASSERT_TRUE(strstr(buf, "60") != NULL);
        ASSERT_TRUE(tr->ts_size > 0 && tr->ts_digits > 0 && tr->delete_rows_max > 0);
        /* the limit is either first (TOP) or last (LIMIT), never both nor neither */
        ASSERT_EQ(tr->limit_first, tr->top[0] != '\0');
        ASSERT_EQ(tr->limit_first, tr->limit[0] == '\0');
        rows++;
    }
    ASSERT_EQ(rows, DB_DIALECTS - 1);
}

/* Which INSERTs db_run_array sends as one statement of several VALUES rows, and their text. */
static void test_insert_rows(void)
{
    const char *sql = "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?)";
    size_t at = db_sql_insert_values_at(sql, 3);
    char buf[256];
    ASSERT_EQ(at, strlen("INSERT INTO items (id, n, message_id) VALUES"));
    ASSERT_TRUE(db_sql_insert_rows(sql, at, 3, 2, buf, sizeof buf));
    ASSERT_STREQ(buf, "INSERT INTO items (id, n, message_id) VALUES (?, ?, ?), (?, ?, ?)");
    ASSERT_TRUE(!db_sql_insert_rows(sql, at, 3, 2, buf, 40)); /* does not fit */
    ASSERT_GT(db_sql_insert_values_at("  insert into \"s\".t(a,b)values(?,?) ", 2), 0);
    ASSERT_GT(db_sql_insert_values_at("INSERT INTO [dbo].[t] (a) VALUES (?)", 1), 0);
    /* Anything else runs as it did: a parameter array, or one set after another. */
    const char *other[] = {
        "INSERT INTO t (a, b) VALUES (?, ?)", /* markers other than nparams (3) */
        "INSERT INTO t (a, b, c) VALUES (?, ?, now())",
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?) RETURNING a",
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?); DELETE FROM t",
        "INSERT INTO t (a, b, c) SELECT ?, ?, ?",
        "INSERT INTO t VALUES (?, ?, ?)",
        "INSERT INTO t (a, b, c) VALUES (?, CAST(? AS int), ?)",
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?), (?, ?, ?)",
        "UPDATE t SET a = ?, b = ?, c = ?",
        "INSERTX INTO t (a, b, c) VALUES (?, ?, ?)",
        "WITH x AS (SELECT 1) INSERT INTO t (a, b, c) VALUES (?, ?, ?)",
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (db_sql_insert_values_at(other[i], 3) != 0)
            ASSERT_STREQ(other[i], "(refused)");
    ASSERT_EQ(db_sql_insert_values_at(NULL, 3), 0);
    ASSERT_EQ(db_sql_insert_values_at("INSERT INTO t (a) VALUES (?)", 0), 0);
    ASSERT_EQ(db_sql_insert_rows_max(DB_DIALECT_POSTGRESQL), 999);
    ASSERT_EQ(db_sql_insert_rows_max(DB_DIALECT_SQLITE), 0);
    ASSERT_EQ(db_sql_insert_rows_max(DB_DIALECT_MSSQL), 0);
}

int main(void)
{
    RUN(test_dialect_names);
    RUN(test_traits_complete);
    RUN(test_mssql_classification);
    RUN(test_postgresql_classification);
    RUN(test_sqlite_and_mariadb_classification);
    RUN(test_configured_natives);
    RUN(test_configured_natives_invalid);
    RUN(test_mssql_statement_text);
    RUN(test_mssql_ddl);
    RUN(test_mssql_migrate_lock_is_session_owned);
    RUN(test_mssql_transient_natives);
    RUN(test_mssql_commit_is_bounded);
    RUN(test_mssql_xact_abort);
    RUN(test_sweep_keeps_failed_and_uncertain);
    RUN(test_other_dialect_text);
    RUN(test_table_names);
    RUN(test_shipped_schema_files);
    RUN(test_sha256);
    RUN(test_utf16);
    RUN(test_claim_text);
    RUN(test_outcome_names);
    RUN(test_setup_errors);
    RUN(test_insert_rows);
    return ib_test_done();
}
