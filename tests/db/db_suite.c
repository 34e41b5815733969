/*
 * db_suite.c - inboxd's database suite against any server: the suite
 * scripts/test-db runs on a user's connection string, and the one CI runs
 * (through scripts/test-db as well) on PostgreSQL and SQLite.
 *
 *   test_db_suite "ODBC CONNECTION STRING"
 *
 * It works in the database the string names, in tables of its own named
 * ibt<pid>_* that it drops at the end: the inbox (created by db_migrate), a
 * business table and an account table. The dialect comes from the driver.
 * A case the server cannot provoke is skipped with its reason. Prints one
 * line per case and a summary; exits 0 when nothing failed, 1 when
 * something did, 77 when the connection string is empty.
 *
 * thread: main, except where a case starts its own threads or processes.
 */
#include "db_suite.h"
#include "db_conn_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *ds_connstr;
db_dialect_t ds_dialect;
char ds_inbox[48], ds_biz[48], ds_acct[48], ds_prefix[32];
const char *ds_skip_reason;
static int passed, skipped;

/* Runs one case (a failed assert ends it, ib_test.h) and prints its line. */
#define CASE(fn)                                                                                   \
    do {                                                                                           \
        long long t0_ = ib_mono_ms();                                                              \
        ds_skip_reason = NULL;                                                                     \
        bool ok_ = ib_test_run_(fn);                                                               \
        printf("  %s  %-26s %6lld ms%s%s\n",                                                       \
               !ok_             ? "FAIL"                                                           \
               : ds_skip_reason ? "skip"                                                           \
                                : "pass",                                                          \
               #fn + 5, ib_mono_ms() - t0_, ok_ && ds_skip_reason ? "  " : "",                     \
               ok_ && ds_skip_reason ? ds_skip_reason : "");                                       \
        fflush(stdout);                                                                            \
        passed += ok_ && !ds_skip_reason;                                                          \
        skipped += ok_ && ds_skip_reason;                                                          \
    } while (0)

void ds_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

db_conn_t *ds_conn(long statement_timeout_s)
{
    db_options_t o;
    ib_error_t err;
    db_conn_t *dbc;

    memset(&o, 0, sizeof(o));
    o.connection_string = ds_connstr;
    o.inbox_table = ds_inbox;
    o.statement_timeout_s = statement_timeout_s ? statement_timeout_s : 60;
    dbc = db_conn_new(&o, &err);
    if (!dbc) {
        fprintf(stderr, "test-db: cannot connect: %s\n", err.text);
        exit(1);
    }
    return dbc;
}

/* The first row's first column of a query, and whether there was one. */
typedef struct first_row {
    long long v;
    bool seen, null;
} first_row_t;

static bool read_first_row(SQLHSTMT st, void *arg)
{
    first_row_t *r = arg;
    SQLBIGINT v = 0;
    SQLLEN ind = 0;
    r->seen = true;
    if (!SQL_SUCCEEDED(SQLGetData(st, 1, SQL_C_SBIGINT, &v, sizeof(v), &ind)) ||
        ind == SQL_NULL_DATA)
        r->null = true;
    else
        r->v = v;
    return false;
}

long long ds_run(db_conn_t *dbc, const char *sql)
{
    ib_error_t err;
    first_row_t r = {0, false, false};
    if (db_run(dbc, sql, NULL, 0, read_first_row, &r, NULL, &err) != IB_E_OK ||
        db_end(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "test-db: FAIL: %s: %s\n", sql, err.text);
        exit(1);
    }
    if (!r.seen || r.null) {
        fprintf(stderr, "test-db: FAIL: %s: %s\n", sql, r.seen ? "NULL" : "no row");
        exit(1);
    }
    return r.v;
}

long long ds_runf(db_conn_t *dbc, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return ds_run(dbc, sql);
}

int ds_exec(db_conn_t *dbc, const char *sql)
{
    ib_error_t err;
    if (db_exec(dbc, sql, NULL, 0, NULL, &err) != IB_E_OK || db_end(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "test-db: %s: %s\n", sql, err.text);
        db_end(dbc, false, &err);
        return -1;
    }
    return 0;
}

int ds_execf(db_conn_t *dbc, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    return ds_exec(dbc, sql);
}

db_stmt_t ds_biz_stmt(char *sql, size_t size, db_param_t *params, const char *id, int thread)
{
    snprintf(sql, size, "INSERT INTO %s (msg_id, thread) VALUES (?, ?)", ds_biz);
    params[0] = DB_TEXT(id);
    params[1] = DB_INT(thread);
    return (db_stmt_t){sql, params, 2};
}

db_outcome_t ds_apply(db_conn_t *dbc, const char *consumer, const char *id, const char *idem,
                      const char *body, int thread, ib_error_t *err)
{
    char hash[65], sql[128];
    db_param_t p[2];
    db_claim_t c = tl_claim(consumer, id, idem, body, hash);
    db_stmt_t s = ds_biz_stmt(sql, sizeof(sql), p, id, thread);
    return db_inbox_apply(dbc, &c, &s, 1, err);
}

static void drop_tables(db_conn_t *dbc)
{
    const char *names[] = {ds_biz, ds_acct, ds_inbox, "ledger", "mig"};
    ib_error_t err;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char sql[160];
        /* DROP TABLE IF EXISTS: SQL Server 2016+, PostgreSQL, SQLite, MariaDB. */
        if (i < 3)
            snprintf(sql, sizeof(sql), "DROP TABLE IF EXISTS %s", names[i]);
        else
            snprintf(sql, sizeof(sql), "DROP TABLE IF EXISTS %s_%s", ds_prefix, names[i]);
        if (db_exec(dbc, sql, NULL, 0, NULL, &err) != IB_E_OK ||
            db_end(dbc, true, &err) != IB_E_OK) {
            fprintf(stderr, "test-db: %s: %s\n", sql, err.text);
            db_end(dbc, false, &err);
        }
    }
}

/* Creates the suite's tables: the inbox through db_migrate, the others by hand. */
static int setup(db_conn_t *dbc)
{
    ib_error_t err;

    drop_tables(dbc);
    if (db_migrate(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "test-db: db_migrate: %s\n", err.text);
        return -1;
    }
    /* No key on the business table: a second apply of one id shows as a second row. */
    if (ds_execf(dbc, "CREATE TABLE %s (msg_id varchar(64) NOT NULL, thread integer NOT NULL)",
                 ds_biz) < 0 ||
        ds_execf(dbc, "CREATE TABLE %s (id integer NOT NULL PRIMARY KEY, v integer NOT NULL)",
                 ds_acct) < 0 ||
        ds_execf(dbc, "INSERT INTO %s (id, v) VALUES (1, 0)", ds_acct) < 0 ||
        ds_execf(dbc, "INSERT INTO %s (id, v) VALUES (2, 0)", ds_acct) < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    db_conn_t *dbc;

    ds_connstr = argc > 1 ? argv[1] : "";
    if (!*ds_connstr) {
        printf("test-db: no connection string given: nothing to test\n");
        return 77;
    }
    ib_log_set_level(IB_LOG_ERROR);
    snprintf(ds_prefix, sizeof(ds_prefix), "ibt%d", (int)(getpid() % 1000000));
    snprintf(ds_inbox, sizeof(ds_inbox), "%s_inbox", ds_prefix);
    snprintf(ds_biz, sizeof(ds_biz), "%s_biz", ds_prefix);
    snprintf(ds_acct, sizeof(ds_acct), "%s_acct", ds_prefix);
    dbc = ds_conn(0);
    ds_dialect = db_conn_dialect(dbc);
    printf("test-db: dialect %s, tables %s_*\n", db_dialect_name(ds_dialect), ds_prefix);
    if (setup(dbc) != 0) {
        drop_tables(dbc);
        db_conn_free(dbc);
        return 1;
    }
    CASE(case_outcomes);
    CASE(case_idempotency_backstop);
    CASE(case_business_unique_key);
    CASE(case_concurrent_claims);
    CASE(case_deadlock);
    CASE(case_lock_timeout);
    CASE(case_killed_session);
    CASE(case_statement_timeout);
    CASE(case_migrate_four_processes);
    CASE(case_sweep);
    CASE(case_batch);
    drop_tables(dbc);
    db_conn_free(dbc);
    printf("test-db: %s: %d passed, %d skipped, %d failed\n", db_dialect_name(ds_dialect), passed,
           skipped, ib_test_failures);
    return ib_test_failures ? 1 : 0;
}
