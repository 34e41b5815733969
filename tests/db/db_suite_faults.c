/*
 * db_suite_faults.c - the concurrency and fault cases of the database suite
 * (see db_suite.c): 8 threads x 500 overlapping claims, and failures
 * provoked between real connections - a deadlock, a lock timeout, a killed
 * session, a statement timeout - each classified transient and leaving its
 * connection usable.
 *
 * thread: main; the cases start their own threads, one connection each.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "db_suite.h"

#define THREADS 8
#define CLAIMS 500
#define IDS 1000
#define RETRIES 200

static int cc_applied[IDS], cc_dup[IDS];
static long cc_retries, cc_failures;
static pthread_mutex_t cc_mu = PTHREAD_MUTEX_INITIALIZER;

/* One claimer: 500 ids, each claimed by 4 threads, retrying transients as the worker does. */
static void *claimer(void *arg)
{
    int t = (int)(long)arg;
    db_conn_t *dbc = ds_conn(0);

    for (int k = 0; k < CLAIMS; k++) {
        int id = (t * (IDS / THREADS) + k) % IDS;
        char msg_id[32], body[64];
        db_outcome_t o = DB_FAILED;
        ib_error_t err;

        snprintf(msg_id, sizeof(msg_id), "cc-%04d", id);
        snprintf(body, sizeof(body), "{\"order\":%d}", id);
        for (int attempt = 0; attempt < RETRIES; attempt++) {
            o = ds_apply(dbc, "concurrent", msg_id, NULL, body, t, &err);
            if (o != DB_FAILED || err.cls != IB_CLASS_TRANSIENT)
                break;
            pthread_mutex_lock(&cc_mu);
            cc_retries++;
            pthread_mutex_unlock(&cc_mu);
            ds_sleep_ms(1 + attempt % 10);
        }
        pthread_mutex_lock(&cc_mu);
        if (o == DB_APPLIED)
            cc_applied[id]++;
        else if (o == DB_DUPLICATE)
            cc_dup[id]++;
        else if (cc_failures++ < 5)
            fprintf(stderr, "%s: %s %s\n", msg_id, db_outcome_name(o), err.text);
        pthread_mutex_unlock(&cc_mu);
    }
    db_conn_free(dbc);
    return NULL;
}

void case_concurrent_claims(void)
{
    pthread_t th[THREADS];
    int bad = 0;
    db_conn_t *dbc;

    for (long t = 0; t < THREADS; t++)
        ASSERT_EQ(pthread_create(&th[t], NULL, claimer, (void *)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    fprintf(stderr, "concurrent claims: %d claims, %ld transient retries\n", THREADS * CLAIMS,
            cc_retries);
    ASSERT_EQ(cc_failures, 0);
    for (int id = 0; id < IDS; id++)
        bad += cc_applied[id] != 1 || cc_dup[id] != THREADS * CLAIMS / IDS - 1;
    ASSERT_EQ(bad, 0);
    dbc = ds_conn(0);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE msg_id LIKE 'cc-%%'", ds_biz), IDS);
    ASSERT_EQ(
        ds_runf(dbc, "SELECT COUNT(DISTINCT msg_id) FROM %s WHERE msg_id LIKE 'cc-%%'", ds_biz),
        IDS);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE consumer = 'concurrent'", ds_inbox), IDS);
    db_conn_free(dbc);
}

/* Two transactions that lock the account rows in opposite orders. */
typedef struct crossing {
    db_conn_t *dbc;
    int first, second;
    pthread_barrier_t *both_hold;
    ib_err_t rc;
    ib_error_t err;
} crossing_t;

static void *cross(void *arg)
{
    crossing_t *x = arg;
    char sql[128];

    snprintf(sql, sizeof(sql), "UPDATE %s SET v = v + 1 WHERE id = %d", ds_acct, x->first);
    x->rc = db_exec(x->dbc, sql, NULL, 0, NULL, &x->err);
    pthread_barrier_wait(x->both_hold);
    if (x->rc == IB_E_OK) {
        snprintf(sql, sizeof(sql), "UPDATE %s SET v = v + 1 WHERE id = %d", ds_acct, x->second);
        x->rc = db_exec(x->dbc, sql, NULL, 0, NULL, &x->err);
    }
    /* The loser ends its transaction at once, so the winner can go on. */
    if (x->rc != IB_E_OK) {
        ib_error_t e;
        db_end(x->dbc, false, &e);
    }
    return NULL;
}

void case_deadlock(void)
{
    pthread_barrier_t b;
    pthread_t ta, tb;

    if (ds_dialect == DB_DIALECT_SQLITE)
        SKIP("SQLite has one writer at a time: no deadlock to provoke");
    pthread_barrier_init(&b, NULL, 2);
    crossing_t xa = {ds_conn(0), 1, 2, &b, IB_E_OK, {0}};
    crossing_t xb = {ds_conn(0), 2, 1, &b, IB_E_OK, {0}};
    pthread_create(&ta, NULL, cross, &xa);
    pthread_create(&tb, NULL, cross, &xb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&b);
    crossing_t *lose = xa.rc != IB_E_OK ? &xa : &xb, *win = lose == &xa ? &xb : &xa;
    ib_error_t err;
    ASSERT_EQ(win->rc, IB_E_OK);
    ASSERT_EQ(db_end(win->dbc, true, &err), IB_E_OK);
    ASSERT_NE(lose->rc, IB_E_OK);
    fprintf(stderr, "deadlock victim: %s\n", lose->err.text);
    ASSERT_EQ(lose->err.cls, IB_CLASS_TRANSIENT);
    /* The victim's connection is clean: a message applies on it. */
    ASSERT_EQ(ds_apply(lose->dbc, "suite", "dl-after", NULL, "{}", 0, &err), DB_APPLIED);
    ASSERT_EQ(ds_runf(win->dbc, "SELECT SUM(v) FROM %s", ds_acct), 2);
    db_conn_free(xa.dbc);
    db_conn_free(xb.dbc);
}

/* The statement that makes the next lock wait of this session give up soon. */
static const char *lock_timeout_sql(void)
{
    switch (ds_dialect) {
    case DB_DIALECT_MSSQL:
        return "SET LOCK_TIMEOUT 500";
    case DB_DIALECT_POSTGRESQL:
        return "SET lock_timeout = 500";
    case DB_DIALECT_MARIADB:
        return "SET SESSION innodb_lock_wait_timeout = 1";
    default:
        return NULL; /* SQLite: the driver's busy Timeout from the connection string */
    }
}

void case_lock_timeout(void)
{
    db_conn_t *holder = ds_conn(0), *waiter = ds_conn(0);
    const char *set = lock_timeout_sql();
    ib_error_t err;
    char sql[128];

    long long before = ds_runf(holder, "SELECT v FROM %s WHERE id = 1", ds_acct);
    if (set)
        ASSERT_EQ(ds_exec(waiter, set), 0);
    snprintf(sql, sizeof(sql), "UPDATE %s SET v = v + 10 WHERE id = 1", ds_acct);
    ASSERT_EQ(db_exec(holder, sql, NULL, 0, NULL, &err), IB_E_OK);
    /* The waiter's message touches the held row: it fails transient, with no inbox row. */
    char hash[65];
    db_claim_t c = tl_claim("suite", "lt1", NULL, "{}", hash);
    db_stmt_t s = {sql, NULL, 0};
    ASSERT_EQ(db_inbox_apply(waiter, &c, &s, 1, &err), DB_FAILED);
    fprintf(stderr, "lock timeout: %s\n", err.text);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_EQ(db_end(holder, false, &err), IB_E_OK);
    ASSERT_EQ(db_inbox_apply(waiter, &c, &s, 1, &err), DB_APPLIED);
    ASSERT_EQ(ds_runf(holder, "SELECT COUNT(*) FROM %s WHERE message_id = 'lt1'", ds_inbox), 1);
    ASSERT_EQ(ds_runf(holder, "SELECT v FROM %s WHERE id = 1", ds_acct), before + 10);
    db_conn_free(holder);
    db_conn_free(waiter);
}

/* This session's id, and the statement another session ends it with. */
static bool session_kill_sql(db_conn_t *victim, char *kill, size_t size)
{
    long long id;
    switch (ds_dialect) {
    case DB_DIALECT_MSSQL:
        id = ds_run(victim, "SELECT @@SPID");
        return id > 0 && snprintf(kill, size, "KILL %lld", id) > 0;
    case DB_DIALECT_POSTGRESQL:
        id = ds_run(victim, "SELECT pg_backend_pid()");
        return id > 0 && snprintf(kill, size, "SELECT pg_terminate_backend(%lld)", id) > 0;
    case DB_DIALECT_MARIADB:
        id = ds_run(victim, "SELECT CONNECTION_ID()");
        return id > 0 && snprintf(kill, size, "KILL CONNECTION %lld", id) > 0;
    default:
        return false;
    }
}

void case_killed_session(void)
{
    char kill[96];
    ib_error_t err;

    if (ds_dialect == DB_DIALECT_SQLITE)
        SKIP("SQLite has no server sessions to kill");
    db_conn_t *victim = ds_conn(0), *killer = ds_conn(0);
    ASSERT_TRUE(session_kill_sql(victim, kill, sizeof(kill)));
    if (ds_exec(killer, kill) < 0) {
        db_conn_free(victim);
        db_conn_free(killer);
        SKIP("this login may not end other sessions (KILL needs ALTER ANY CONNECTION)");
    }
    ds_sleep_ms((long)(tl_timeout(0.3) * 1000));
    long before = db_conn_reconnects(victim);
    /* The first message meets the dead session: transient, nothing written. */
    db_outcome_t o = ds_apply(victim, "suite", "ks1", NULL, "{}", 0, &err);
    if (o == DB_FAILED) {
        fprintf(stderr, "killed session: %s\n", err.text);
        ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
        o = ds_apply(victim, "suite", "ks1", NULL, "{}", 0, &err);
    }
    /* Reopened, the message applies once. */
    ASSERT_EQ(o, DB_APPLIED);
    ASSERT_TRUE(db_conn_reconnects(victim) > before);
    ASSERT_EQ(ds_runf(killer, "SELECT COUNT(*) FROM %s WHERE msg_id = 'ks1'", ds_biz), 1);
    db_conn_free(victim);
    db_conn_free(killer);
}

/* A statement that takes about three seconds. */
static const char *slow_sql(void)
{
    switch (ds_dialect) {
    case DB_DIALECT_MSSQL:
        return "WAITFOR DELAY '00:00:03'";
    case DB_DIALECT_POSTGRESQL:
        return "SELECT pg_sleep(3)";
    case DB_DIALECT_MARIADB:
        return "SELECT SLEEP(3)";
    default:
        return NULL;
    }
}

void case_statement_timeout(void)
{
    ib_error_t err;
    char hash[65];

    if (!slow_sql())
        SKIP("sqlite3odbc does not enforce SQL_ATTR_QUERY_TIMEOUT");
    if (ds_dialect == DB_DIALECT_MARIADB)
        SKIP("MariaDB Connector/ODBC 3.1 ignores SQL_ATTR_QUERY_TIMEOUT (db/README.md: InitStmt)");
    db_conn_t *dbc = ds_conn(1);
    db_claim_t c = tl_claim("suite", "st1", NULL, "{}", hash);
    db_stmt_t s = {slow_sql(), NULL, 0};
    long long t0 = ib_mono_ms();
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_FAILED);
    fprintf(stderr, "statement timeout after %lld ms: %s\n", ib_mono_ms() - t0, err.text);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE message_id = 'st1'", ds_inbox), 0);
    /* The connection goes on. */
    ASSERT_EQ(ds_apply(dbc, "suite", "st2", NULL, "{}", 0, &err), DB_APPLIED);
    db_conn_free(dbc);
}
