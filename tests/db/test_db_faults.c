/*
 * Faults against a live PostgreSQL: a deadlock between two connections is
 * transient and leaves the loser's connection clean; a terminated backend
 * is transient and the next job reconnects; a second copy of a message
 * waits on the key and then sees the duplicate, or proceeds when the first
 * copy rolled back.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

static tl_db_t T;

#define COUNT(sql) tl_scalar(&T, sql)

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct job {
    db_conn_t *dbc;
    const char *msg_id;
    const char *body;
    const db_stmt_t *stmts;
    size_t n;
    long delay_ms;
    db_outcome_t out;
    ib_error_t err;
} job_t;

static void *run_job(void *arg)
{
    job_t *j = arg;
    char hash[65];
    if (j->delay_ms)
        sleep_ms(j->delay_ms);
    db_claim_t c = tl_claim("faults", j->msg_id, NULL, j->body, hash);
    j->out = db_inbox_apply(j->dbc, &c, j->stmts, j->n, &j->err);
    return NULL;
}

static void test_deadlock_is_transient(void)
{
    char sleep_sql[64];
    snprintf(sleep_sql, sizeof(sleep_sql), "SELECT pg_sleep(%.2f)", tl_timeout(0.3));
    db_stmt_t a[3] = {{"UPDATE acct SET v = v + 1 WHERE id = 1", NULL, 0},
                      {sleep_sql, NULL, 0},
                      {"UPDATE acct SET v = v + 1 WHERE id = 2", NULL, 0}};
    db_stmt_t b[3] = {{"UPDATE acct SET v = v + 1 WHERE id = 2", NULL, 0},
                      {sleep_sql, NULL, 0},
                      {"UPDATE acct SET v = v + 1 WHERE id = 1", NULL, 0}};
    job_t ja = {tl_conn(&T), "dl-a", "a", a, 3, 0, DB_FAILED, {0}};
    job_t jb = {tl_conn(&T), "dl-b", "b", b, 3, 0, DB_FAILED, {0}};
    pthread_t ta, tb;

    pthread_create(&ta, NULL, run_job, &ja);
    pthread_create(&tb, NULL, run_job, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);

    job_t *win = ja.out == DB_APPLIED ? &ja : &jb;
    job_t *lose = ja.out == DB_APPLIED ? &jb : &ja;
    ASSERT_EQ(win->out, DB_APPLIED);
    ASSERT_EQ(lose->out, DB_FAILED);
    ASSERT_EQ(lose->err.cls, IB_CLASS_TRANSIENT);
    ASSERT_STREQ(lose->err.sqlstate, "40P01");
    fprintf(stderr, "deadlock loser: %s\n", lose->err.text);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('dl-a', 'dl-b')"), 1);
    ASSERT_EQ(COUNT("SELECT SUM(v) FROM acct"), 2);

    /* The loser's connection was rolled back: the retry applies on it. */
    lose->delay_ms = 0;
    run_job(lose);
    ASSERT_EQ(lose->out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('dl-a', 'dl-b')"), 2);
    ASSERT_EQ(COUNT("SELECT SUM(v) FROM acct"), 4);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.datname = current_database() AND l.locktype = 'transactionid' AND "
                    "a.pid <> pg_backend_pid()"),
              0);
    db_conn_free(ja.dbc);
    db_conn_free(jb.dbc);
}

static void test_serialization_failure_is_transient(void)
{
    /* Two serializable transactions that each read what the other writes. */
    db_conn_t *c1 = tl_conn(&T), *c2 = tl_conn(&T);
    char sleep_sql[64];
    snprintf(sleep_sql, sizeof(sleep_sql), "SELECT pg_sleep(%.2f)", tl_timeout(0.3));
    db_stmt_t a[3] = {{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", NULL, 0},
                      {"UPDATE acct SET v = (SELECT SUM(v) FROM acct) WHERE id = 1", NULL, 0},
                      {sleep_sql, NULL, 0}};
    db_stmt_t b[3] = {{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", NULL, 0},
                      {"UPDATE acct SET v = (SELECT SUM(v) FROM acct) WHERE id = 2", NULL, 0},
                      {sleep_sql, NULL, 0}};
    /*
     * The inbox INSERT runs first in the transaction, so SET TRANSACTION
     * would be too late; the isolation level is set for the session instead.
     */
    ib_error_t err;
    const char *iso = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE";
    ASSERT_EQ(db_exec(c1, iso, NULL, 0, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(c1, true, &err), IB_E_OK);
    ASSERT_EQ(db_exec(c2, iso, NULL, 0, NULL, &err), IB_E_OK);
    ASSERT_EQ(db_end(c2, true, &err), IB_E_OK);
    job_t ja = {c1, "ser-a", "a", a + 1, 2, 0, DB_FAILED, {0}};
    job_t jb = {c2, "ser-b", "b", b + 1, 2, 0, DB_FAILED, {0}};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_job, &ja);
    pthread_create(&tb, NULL, run_job, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    job_t *lose = ja.out == DB_APPLIED ? &jb : &ja;
    ASSERT_EQ((ja.out == DB_APPLIED) + (jb.out == DB_APPLIED), 1);
    ASSERT_EQ(lose->err.cls, IB_CLASS_TRANSIENT);
    ASSERT_STREQ(lose->err.sqlstate, "40001");
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('ser-a', 'ser-b')"), 1);
    run_job(lose);
    ASSERT_EQ(lose->out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('ser-a', 'ser-b')"), 2);
    db_conn_free(c1);
    db_conn_free(c2);
}

static void test_terminated_backend_reconnects(void)
{
    db_conn_t *dbc = tl_conn(&T);
    db_param_t p1[1] = {DB_TEXT("k1")}, p2[1] = {DB_TEXT("k2")};
    db_stmt_t s1 = {"INSERT INTO biz (msg_id) VALUES (?)", p1, 1};
    db_stmt_t s2 = {"INSERT INTO biz (msg_id) VALUES (?)", p2, 1};
    job_t j = {dbc, "k1", "1", &s1, 1, 0, DB_FAILED, {0}};

    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "datname = current_database() AND pid <> pg_backend_pid()"),
              1);
    sleep_ms(100);
    j.msg_id = "k2";
    j.body = "2";
    j.stmts = &s2;
    run_job(&j);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.cls, IB_CLASS_TRANSIENT);
    fprintf(stderr, "terminated backend: [%s] %s\n", j.err.sqlstate, j.err.text);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'k2'"), 0);
    /* The next job reopens the connection and succeeds. */
    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);
    ASSERT_EQ(db_conn_reconnects(dbc), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM biz WHERE msg_id IN ('k1', 'k2')"), 2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('k1', 'k2')"), 2);
    db_conn_free(dbc);
}

/*
 * The database cannot be reached at all, for a reason that would be
 * permanent at start (3D000: no such database): for a message that is
 * still weather, never a reason to dead-letter it.
 */
static void test_unreachable_database_is_transient(void)
{
    /*
     * psqlODBC reports a missing database as 08001 (native 101), not
     * 3D000; configuring 08001 as permanent makes the cause "permanent"
     * here, as a rotated password would be.
     */
    db_options_t o;
    ib_error_t err;
    json_error_t jerr;
    json_t *arr = json_loads("[\"08001\"]", 0, &jerr);
    memset(&o, 0, sizeof(o));
    ASSERT_EQ(db_codes_from_json(arr, "errors.permanent_native", &o.permanent_native, &err),
              IB_E_OK);
    json_decref(arr);
    db_conn_t *dbc = tl_conn_opts(&T, &o);
    db_codes_free(&o.permanent_native);
    char sql[256];
    db_stmt_t none = {"SELECT 1", NULL, 0};
    job_t j = {dbc, "gone1", "g", &none, 1, 0, DB_FAILED, {0}};
    int renamed = -1;

    ASSERT_EQ(COUNT("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "datname = current_database() AND pid <> pg_backend_pid()"),
              1);
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s RENAME TO %s_away", T.name, T.name);
    for (int i = 0; i < 50 && renamed != 0; i++) {
        sleep_ms(100); /* the terminated backend may take a moment to leave */
        renamed = tl_admin_exec(&T, sql);
    }
    ASSERT_EQ(renamed, 0);
    run_job(&j); /* finds the connection gone */
    fprintf(stderr, "connection gone: [%s] %s\n", j.err.sqlstate, j.err.text);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.cls, IB_CLASS_TRANSIENT);
    run_job(&j); /* cannot reopen it */
    fprintf(stderr, "reopen refused: [%s] %s\n", j.err.sqlstate, j.err.text);
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s_away RENAME TO %s", T.name, T.name);
    ASSERT_EQ(tl_admin_exec(&T, sql), 0);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.cls, IB_CLASS_TRANSIENT);
    ASSERT_STREQ(j.err.sqlstate, "08001");
    ASSERT_EQ(j.err.code, IB_E_DB_CONN);
    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'gone1'"), 1);
    db_conn_free(dbc);
}

static void test_statement_timeout_is_transient(void)
{
    db_options_t o;
    memset(&o, 0, sizeof(o));
    o.statement_timeout_s = 1;
    db_conn_t *dbc = tl_conn_opts(&T, &o);
    char sql[64];
    snprintf(sql, sizeof(sql), "SELECT pg_sleep(%.1f)", tl_timeout(1) + 4);
    db_stmt_t slow = {sql, NULL, 0};
    job_t j = {dbc, "slow1", "s", &slow, 1, 0, DB_FAILED, {0}};
    run_job(&j);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.cls, IB_CLASS_TRANSIENT);
    ASSERT_STREQ(j.err.sqlstate, "57014");
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'slow1'"), 0);
    j.stmts = NULL;
    j.n = 0;
    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);
    ASSERT_EQ(db_conn_reconnects(dbc), 0);
    db_conn_free(dbc);
}

static void test_second_copy_waits(void)
{
    char sleep_sql[64];
    snprintf(sleep_sql, sizeof(sleep_sql), "SELECT pg_sleep(%.2f)", tl_timeout(0.5));
    db_param_t p[1] = {DB_TEXT("w1")};
    db_stmt_t first_ok[2] = {{"INSERT INTO biz (msg_id) VALUES (?)", p, 1}, {sleep_sql, NULL, 0}};
    db_stmt_t first_bad[3] = {{"INSERT INTO biz (msg_id) VALUES (?)", p, 1},
                              {sleep_sql, NULL, 0},
                              {"SELECT 1 / 0", NULL, 0}};
    db_stmt_t second[1] = {{"INSERT INTO biz (msg_id) VALUES (?)", p, 1}};
    long delay = (long)(tl_timeout(0.15) * 1000);
    pthread_t ta, tb;

    /* The first copy commits: the waiting copy is a duplicate. */
    job_t ja = {tl_conn(&T), "w1", "w", first_ok, 2, 0, DB_FAILED, {0}};
    job_t jb = {tl_conn(&T), "w1", "w", second, 1, delay, DB_FAILED, {0}};
    pthread_create(&ta, NULL, run_job, &ja);
    pthread_create(&tb, NULL, run_job, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ASSERT_EQ(ja.out, DB_APPLIED);
    ASSERT_EQ(jb.out, DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM biz WHERE msg_id = 'w1'"), 1);

    /* The first copy rolls back (division by zero): the waiting copy applies. */
    ja.msg_id = jb.msg_id = "w2";
    p[0] = DB_TEXT("w2");
    ja.stmts = first_bad;
    ja.n = 3;
    pthread_create(&ta, NULL, run_job, &ja);
    pthread_create(&tb, NULL, run_job, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ASSERT_EQ(ja.out, DB_FAILED);
    ASSERT_EQ(ja.err.cls, IB_CLASS_PERMANENT);
    ASSERT_STREQ(ja.err.sqlstate, "22012");
    ASSERT_EQ(jb.out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM biz WHERE msg_id = 'w2'"), 1);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id = 'w2'"), 1);
    db_conn_free(ja.dbc);
    db_conn_free(jb.dbc);
}

/*
 * Setup errors (a revoked privilege, a table renamed away) carry their own
 * code. On the inbox's own statements they are transient: never the
 * message's fault. On a route statement the class stays permanent and the
 * worker decides (its circuit breaker). The connection is a role without
 * superuser rights, so that REVOKE bites.
 */
static void test_setup_errors(void)
{
    char role[64], sql[256];
    tl_db_t app = T;
    char *uid;
    db_stmt_t ins = {"INSERT INTO biz (msg_id) VALUES ('s')", NULL, 0};

    snprintf(role, sizeof role, "%s_app", T.name);
    snprintf(sql, sizeof sql, "CREATE ROLE %s LOGIN", role);
    ASSERT_EQ(tl_exec(&T, sql), 0);
    snprintf(sql, sizeof sql, "GRANT ALL ON inbox, biz TO %s", role);
    ASSERT_EQ(tl_exec(&T, sql), 0);
    uid = strstr(app.connstr, "Uid=postgres");
    ASSERT_TRUE(uid != NULL);
    snprintf(uid, sizeof(app.connstr) - (size_t)(uid - app.connstr), "Uid=%s;Pwd=", role);
    db_conn_t *dbc = tl_conn(&app);
    job_t j = {dbc, "setup1", "s", &ins, 1, 0, DB_FAILED, {0}};

    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);

    snprintf(sql, sizeof sql, "REVOKE ALL ON inbox FROM %s", role);
    ASSERT_EQ(tl_exec(&T, sql), 0);
    j.msg_id = "setup2";
    run_job(&j);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.code, IB_E_DB_SETUP);
    ASSERT_EQ(j.err.cls, IB_CLASS_TRANSIENT);
    ASSERT_STREQ(j.err.sqlstate, "42501");
    ASSERT_CONTAINS(j.err.text, "inbox insert into inbox");
    snprintf(sql, sizeof sql, "GRANT ALL ON inbox TO %s", role);
    ASSERT_EQ(tl_exec(&T, sql), 0);

    ASSERT_EQ(tl_exec(&T, "ALTER TABLE biz RENAME TO biz_away"), 0);
    run_job(&j);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.code, IB_E_DB_SETUP);
    ASSERT_EQ(j.err.cls, IB_CLASS_PERMANENT); /* a route statement: the worker decides */
    ASSERT_STREQ(j.err.sqlstate, "42P01");
    ASSERT_EQ(tl_exec(&T, "ALTER TABLE biz_away RENAME TO biz"), 0);

    /* A data error stays an ordinary permanent database error. */
    db_stmt_t bad = {"INSERT INTO biz (msg_id) VALUES (repeat('x', 40))", NULL, 0};
    j.stmts = &bad;
    run_job(&j);
    ASSERT_EQ(j.out, DB_FAILED);
    ASSERT_EQ(j.err.code, IB_E_DB);
    ASSERT_EQ(j.err.cls, IB_CLASS_PERMANENT);
    j.stmts = &ins;
    run_job(&j);
    ASSERT_EQ(j.out, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('setup1', 'setup2')"), 2);
    db_conn_free(dbc);
    snprintf(sql, sizeof sql, "DROP OWNED BY %s", role);
    tl_exec(&T, sql);
    snprintf(sql, sizeof sql, "DROP ROLE %s", role);
    tl_exec(&T, sql);
}

int main(int argc, char **argv)
{
    ib_error_t err;
    (void)argc;
    (void)argv;

    ib_log_set_level(IB_LOG_WARN);
    tl_db_create(&T, DB_DIALECT_POSTGRESQL, "faults");
    db_conn_t *dbc = tl_conn(&T);
    if (db_migrate(dbc, true, &err) != IB_E_OK ||
        tl_exec(&T, "CREATE TABLE acct (id integer PRIMARY KEY, v integer NOT NULL)") ||
        tl_exec(&T, "INSERT INTO acct VALUES (1, 0), (2, 0)") ||
        tl_exec(&T, "CREATE TABLE biz (msg_id varchar(32) NOT NULL)")) {
        fprintf(stderr, "setup: %s\n", err.text);
        tl_db_drop(&T);
        return 1;
    }
    db_conn_free(dbc);
    RUN(test_deadlock_is_transient);
    RUN(test_serialization_failure_is_transient);
    RUN(test_terminated_backend_reconnects);
    RUN(test_unreachable_database_is_transient);
    RUN(test_statement_timeout_is_transient);
    RUN(test_second_copy_waits);
    RUN(test_setup_errors);
    tl_db_drop(&T);
    return ib_test_done();
}
