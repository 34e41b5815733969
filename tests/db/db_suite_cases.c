/*
 * db_suite_cases.c - the inbox cases of the database suite (see db_suite.c):
 * outcomes, the idempotency-key backstop, a business unique key, the
 * retention sweep, a batch, and four processes migrating at once. Each
 * asserts the rows left in the database.
 *
 * thread: main (the migration case forks).
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db_suite.h"

/* Applied, then a duplicate (no second effect), then a conflict (row untouched). */
void case_outcomes(void)
{
    db_conn_t *dbc = ds_conn(0);
    ib_error_t err;

    ASSERT_EQ(ds_apply(dbc, "suite", "o1", NULL, "{\"a\":1}", 0, &err), DB_APPLIED);
    ASSERT_EQ(ds_apply(dbc, "suite", "o1", NULL, "{\"a\":1}", 0, &err), DB_DUPLICATE);
    ASSERT_EQ(ds_apply(dbc, "suite", "o1", NULL, "{\"a\":2}", 0, &err), DB_CONFLICT);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    /* Another consumer is another inbox identity. */
    ASSERT_EQ(ds_apply(dbc, "suite-2", "o1", NULL, "{\"a\":1}", 0, &err), DB_APPLIED);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE msg_id = 'o1'", ds_biz), 2);
    ASSERT_EQ(ds_runf(dbc,
                      "SELECT COUNT(*) FROM %s WHERE message_id = 'o1' AND status = 'processed'",
                      ds_inbox),
              2);
    db_conn_free(dbc);
}

/* The idempotency key catches a resend under a new message id. */
void case_idempotency_backstop(void)
{
    db_conn_t *dbc = ds_conn(0);
    ib_error_t err;

    ASSERT_EQ(ds_apply(dbc, "suite", "k1", "order-7", "{\"o\":7}", 0, &err), DB_APPLIED);
    ASSERT_EQ(ds_apply(dbc, "suite", "k2", "order-7", "{\"o\":7}", 0, &err), DB_DUPLICATE);
    ASSERT_EQ(ds_apply(dbc, "suite", "k3", "order-7", "{\"o\":8}", 0, &err), DB_CONFLICT);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE msg_id IN ('k1', 'k2', 'k3')", ds_biz),
              1);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE idempotency_key = 'order-7'", ds_inbox),
              1);
    db_conn_free(dbc);
}

/*
 * A unique key of a business table stops a second message (another id, no
 * idempotency key) that would repeat an effect: a permanent failure, never
 * a duplicate, and the message leaves no inbox row.
 */
void case_business_unique_key(void)
{
    db_conn_t *dbc = ds_conn(0);
    ib_error_t err;
    char sql[160], hash[65];

    ASSERT_TRUE(ds_execf(dbc, "CREATE TABLE %s_ledger (ref varchar(64) NOT NULL PRIMARY KEY)",
                         ds_prefix) >= 0);
    snprintf(sql, sizeof(sql), "INSERT INTO %s_ledger (ref) VALUES (?)", ds_prefix);
    db_param_t p = DB_TEXT("invoice-42");
    db_stmt_t s = {sql, &p, 1};
    db_claim_t c = tl_claim("suite", "u1", NULL, "{\"u\":1}", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_APPLIED);
    c = tl_claim("suite", "u2", NULL, "{\"u\":2}", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, &s, 1, &err), DB_FAILED);
    fprintf(stderr, "business key: %s\n", err.text);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE message_id = 'u2'", ds_inbox), 0);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s_ledger", ds_prefix), 1);
    db_conn_free(dbc);
}

/* Old processed rows go in batches; failed and uncertain rows stay. */
void case_sweep(void)
{
    db_conn_t *dbc = ds_conn(0);
    ib_error_t err;

    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof(id), "sw%d", i);
        ASSERT_EQ(ds_apply(dbc, "sweep", id, NULL, id, 0, &err), DB_APPLIED);
    }
    char hash[65];
    db_claim_t c = tl_claim("sweep", "swf", NULL, "{}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_PERMANENT, "bad", &err), DB_APPLIED);
    c = tl_claim("sweep", "swu", NULL, "{}", hash);
    ASSERT_EQ(db_inbox_record_failure(dbc, &c, IB_CLASS_AMBIGUOUS, "timeout", &err), DB_APPLIED);
    /* Text a timestamp column of every dialect accepts. */
    ASSERT_TRUE(ds_execf(dbc,
                         "UPDATE %s SET processed_at = '2020-01-01 00:00:00.000' WHERE consumer = "
                         "'sweep'",
                         ds_inbox) >= 0);
    ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 5);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE consumer = 'sweep'", ds_inbox), 2);
    ASSERT_EQ(ds_runf(dbc,
                      "SELECT COUNT(*) FROM %s WHERE consumer = 'sweep' AND status IN ('failed', "
                      "'uncertain')",
                      ds_inbox),
              2);
    ASSERT_EQ(db_inbox_sweep(dbc, 30, 2, &err), 0);
    db_conn_free(dbc);
}

/*
 * A batch of new messages, an old one and the same key twice: each ends as
 * it would alone (a transient one is retried alone, as the worker does); in
 * the end every id took effect exactly once.
 */
void case_batch(void)
{
    db_conn_t *dbc = ds_conn(0);
    ib_error_t err;
    const char *ids[] = {"b1", "b2", "o1", "b1", "b3"};
    char h[5][65], sql[5][160];
    db_param_t p[5][2];
    db_claim_t c[5];
    db_stmt_t s[5];
    db_batch_item_t items[5];
    int applied = 0, dup = 0;

    memset(items, 0, sizeof(items));
    for (int i = 0; i < 5; i++) {
        c[i] = tl_claim("suite", ids[i], NULL, strcmp(ids[i], "o1") ? ids[i] : "{\"a\":1}", h[i]);
        s[i] = ds_biz_stmt(sql[i], sizeof(sql[i]), p[i], ids[i], 0);
        items[i] = (db_batch_item_t){&c[i], &s[i], 1, DB_FAILED, {0}};
    }
    db_inbox_apply_batch(dbc, items, 5, NULL);
    for (int i = 0; i < 5; i++) {
        db_outcome_t o = items[i].outcome;
        if (o == DB_FAILED && items[i].err.cls == IB_CLASS_TRANSIENT)
            o = db_inbox_apply(dbc, &c[i], &s[i], 1, &err);
        applied += o == DB_APPLIED;
        dup += o == DB_DUPLICATE;
        if (ds_dialect != DB_DIALECT_MSSQL)
            ASSERT_EQ(items[i].outcome, i == 2 || i == 3 ? DB_DUPLICATE : DB_APPLIED);
    }
    ASSERT_EQ(applied, 3);
    ASSERT_EQ(dup, 2);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE msg_id IN ('b1', 'b2', 'b3')", ds_biz),
              3);
    ASSERT_EQ(ds_runf(dbc, "SELECT COUNT(*) FROM %s WHERE msg_id = 'o1'", ds_biz), 2);
    db_conn_free(dbc);
}

/* Four processes create the same new inbox table at once; all succeed. */
void case_migrate_four_processes(void)
{
    char table[64];
    pid_t pid[4];
    int ok = 0;

    snprintf(table, sizeof(table), "%s_mig", ds_prefix);
    fflush(NULL);
    for (int i = 0; i < 4; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            db_options_t o;
            ib_error_t err;
            memset(&o, 0, sizeof(o));
            o.connection_string = ds_connstr;
            o.inbox_table = table;
            o.statement_timeout_s = 60;
            db_conn_t *dbc = db_conn_new(&o, &err);
            int rc = dbc && db_migrate(dbc, true, &err) == IB_E_OK ? 0 : 1;
            if (rc)
                fprintf(stderr, "migrate %d: %s\n", i, err.text);
            db_conn_free(dbc);
            _exit(rc);
        }
    }
    for (int i = 0; i < 4; i++) {
        int st = 0;
        if (pid[i] > 0 && waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) &&
            WEXITSTATUS(st) == 0)
            ok++;
    }
    db_options_t o;
    ib_error_t err;
    memset(&o, 0, sizeof(o));
    o.connection_string = ds_connstr;
    o.inbox_table = table;
    db_conn_t *dbc = db_conn_new(&o, &err);
    ASSERT_TRUE(dbc != NULL);
    /* migrate false: the table exists with its key. */
    long long checked = db_migrate(dbc, false, &err);
    ds_execf(dbc, "DROP TABLE IF EXISTS %s", table);
    db_conn_free(dbc);
    ASSERT_EQ(ok, 4);
    ASSERT_EQ(checked, IB_E_OK);
}
