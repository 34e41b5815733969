/*
 * db_migrate against a live database (argv[1]: postgresql|sqlite): a
 * missing table is a clear configuration error with migrate false; migrate
 * true twice, and by several processes at once, leaves one correct table;
 * a table without the inbox key is refused; the replicas' table gains its
 * demand column.
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "db_replicas.h"
#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

#define PROCS 4

static tl_db_t T;

static db_conn_t *conn_for(const char *table)
{
    db_options_t o;
    memset(&o, 0, sizeof(o));
    o.inbox_table = table;
    return tl_conn_opts(&T, &o);
}

static long long index_count(const char *table)
{
    char sql[256];
    if (T.dialect == DB_DIALECT_SQLITE)
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = '%s'",
                 table);
    else
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM pg_indexes WHERE tablename = '%s'", table);
    return tl_scalar(&T, sql);
}

static long long table_count(const char *table)
{
    char sql[256];
    if (T.dialect == DB_DIALECT_SQLITE)
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'", table);
    else
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM pg_tables WHERE tablename = '%s'", table);
    return tl_scalar(&T, sql);
}

static void test_missing_table_is_config_error(void)
{
    ib_error_t err;
    db_conn_t *dbc = conn_for("inbox");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_CONFIG);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, "db.inbox_table");
    ASSERT_CONTAINS(err.text, "'inbox'");
    ASSERT_EQ(table_count("inbox"), 0);
    db_conn_free(dbc);
}

static void test_migrate_twice(void)
{
    ib_error_t err;
    db_conn_t *dbc = conn_for("inbox");
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_OK);
    ASSERT_EQ(table_count("inbox"), 1);
    ASSERT_EQ(index_count("inbox"), 3); /* key, idempotency key, processed_at */
    /* The table works and holds its key. */
    char hash[65];
    db_claim_t c = tl_claim("m", "1", NULL, "x", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_DUPLICATE);
    ASSERT_EQ(tl_scalar(&T, "SELECT COUNT(*) FROM inbox"), 1);
    db_conn_free(dbc);
}

static void test_concurrent_processes(void)
{
    pid_t kids[PROCS];
    long long start = ib_now_ms() + (long long)(tl_timeout(0.3) * 1000);

    for (int i = 0; i < PROCS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            ib_error_t err;
            long long wait = start - ib_now_ms();
            if (wait > 0) {
                struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            db_conn_t *dbc = conn_for("inbox_race");
            ib_err_t rc = db_migrate(dbc, true, &err);
            if (rc != IB_E_OK)
                fprintf(stderr, "process %d: %s\n", i, err.text);
            db_conn_free(dbc);
            _exit(rc == IB_E_OK ? 0 : 1);
        }
        ASSERT_TRUE(kids[i] > 0);
    }
    int failed = 0;
    for (int i = 0; i < PROCS; i++) {
        int st = 0;
        waitpid(kids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    ASSERT_EQ(failed, 0);
    ASSERT_EQ(table_count("inbox_race"), 1);
    ASSERT_EQ(index_count("inbox_race"), 3);
    ib_error_t err;
    db_conn_t *dbc = conn_for("inbox_race");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_OK);
    db_conn_free(dbc);
}

static void test_table_without_key_is_refused(void)
{
    ib_error_t err;
    ASSERT_EQ(tl_exec(&T, "CREATE TABLE inbox_nokey (consumer varchar(200), message_id "
                          "varchar(128), idempotency_key varchar(400), body_sha256 char(64), "
                          "status varchar(16), entity varchar(260), sequence_number bigint, "
                          "delivery_count integer, enqueued_at timestamp, received_at "
                          "timestamp, processed_at timestamp, error_class varchar(16), "
                          "error_detail varchar(2000))"),
              0);
    db_conn_t *dbc = conn_for("inbox_nokey");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "(consumer, message_id)");
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_CONFIG);
    db_conn_free(dbc);
    /* A table that lacks a column is refused as well. */
    ASSERT_EQ(tl_exec(&T, "CREATE TABLE inbox_cols (consumer varchar(200), message_id "
                          "varchar(128), PRIMARY KEY (consumer, message_id))"),
              0);
    dbc = conn_for("inbox_cols");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "inbox_cols");
    db_conn_free(dbc);
}

/* db/schema/<dialect>.sql, as a DBA would run it, gives a table inboxd accepts. */
static void test_shipped_schema_runs(void)
{
    tl_db_t S;
    char path[1024];
    ib_error_t err;

    tl_db_create(&S, T.dialect, "schema");
    snprintf(path, sizeof(path), "%s/db/schema/%s.sql", INBOXD_SOURCE_DIR,
             db_dialect_name(T.dialect));
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char stmt[8192] = "", line[1024];
    size_t used = 0;
    int run = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "--", 2) == 0)
            continue;
        used += (size_t)snprintf(stmt + used, sizeof(stmt) - used, "%s", line);
        char *semi = strrchr(stmt, ';');
        if (semi && semi[1] == '\n') {
            *semi = '\0';
            ASSERT_EQ(tl_exec(&S, stmt), 0);
            run++;
            used = 0;
            stmt[0] = '\0';
        }
    }
    fclose(f);
    ASSERT_EQ(run, 3);
    tl_db_t saved = T;
    T = S;
    db_conn_t *dbc = conn_for("inbox");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_OK);
    char hash[65];
    db_claim_t c = tl_claim("m", "1", "k", "x", hash);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_APPLIED);
    ASSERT_EQ(db_inbox_apply(dbc, &c, NULL, 0, &err), DB_DUPLICATE);
    ASSERT_EQ(index_count("inbox"), 3);
    db_conn_free(dbc);
    T = saved;
    tl_db_drop(&S);
}

/*
 * The unique keys inboxd relies on are checked at start: the inbox's index on
 * (consumer, idempotency_key), and each unique key a route names in
 * "constraints", found by the name the dialect's violation gives it.
 */
static void test_unique_keys_checked(void)
{
    ib_error_t err;
    bool sqlite = T.dialect == DB_DIALECT_SQLITE;
    ASSERT_EQ(tl_exec(&T, "CREATE TABLE inbox_noidem (consumer varchar(200), message_id "
                          "varchar(128), idempotency_key varchar(400), body_sha256 char(64), "
                          "status varchar(16), entity varchar(260), sequence_number bigint, "
                          "delivery_count integer, enqueued_at timestamp, received_at "
                          "timestamp, processed_at timestamp, error_class varchar(16), "
                          "error_detail varchar(2000), PRIMARY KEY (consumer, message_id))"),
              0);
    ASSERT_EQ(tl_exec(&T, "CREATE INDEX inbox_noidem_plain ON inbox_noidem (consumer, "
                          "idempotency_key)"),
              0); /* an index, but not a unique one */
    db_conn_t *dbc = conn_for("inbox_noidem");
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_CONFIG);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, "'inbox_noidem' has no unique index on (consumer, idempotency_key)");
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK); /* migrate adds it */
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_OK);

    ASSERT_EQ(tl_exec(&T, "CREATE TABLE ship (id integer PRIMARY KEY, order_id varchar(64), "
                          "carrier varchar(64), region varchar(8))"),
              0);
    ASSERT_EQ(tl_exec(&T, "CREATE UNIQUE INDEX ux_ship_order ON ship (order_id)"), 0);
    ASSERT_EQ(tl_exec(&T, "CREATE UNIQUE INDEX ux_ship_pair ON ship (region, carrier)"), 0);
    ASSERT_EQ(tl_exec(&T, "CREATE INDEX ix_ship_carrier ON ship (carrier)"), 0);
    ASSERT_EQ(db_migrate_check_unique(dbc, sqlite ? "ship.order_id" : "ux_ship_order", &err),
              IB_E_OK);
    ASSERT_EQ(db_migrate_check_unique(dbc, sqlite ? "ship.region, ship.carrier" : "ux_ship_pair",
                                      &err),
              IB_E_OK);
    /* A name that is no unique key: missing, a plain index, columns in another order. */
    ASSERT_EQ(db_migrate_check_unique(dbc, sqlite ? "ship.nope" : "ux_ship_nope", &err),
              IB_E_CONFIG);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_CONTAINS(err.text, sqlite ? "unique key 'ship.nope' does not exist"
                                     : "unique key 'ux_ship_nope' does not exist");
    ASSERT_EQ(db_migrate_check_unique(dbc, sqlite ? "ship.carrier" : "ix_ship_carrier", &err),
              IB_E_CONFIG);
    if (sqlite) {
        ASSERT_EQ(db_migrate_check_unique(dbc, "ship.carrier, ship.region", &err), IB_E_CONFIG);
        ASSERT_EQ(db_migrate_check_unique(dbc, "ux_ship_order", &err), IB_E_CONFIG);
        ASSERT_CONTAINS(err.text, "not a name this database gives a unique violation");
    }
    db_conn_free(dbc);
}

/*
 * The replicas' table: one made before its demand column is refused with
 * the ALTER TABLE named (migrate false) and gains it (migrate true); two
 * heartbeats then read both replicas, their rank and their demand summed.
 */
static void test_replicas_demand(void)
{
    ib_error_t err;
    db_conn_t *dbc = tl_conn(&T);
    ASSERT_EQ(tl_exec(&T, "CREATE TABLE old_replicas (consumer VARCHAR(200) NOT NULL, replica "
                          "VARCHAR(200) NOT NULL, seen_ms BIGINT NOT NULL, PRIMARY KEY "
                          "(consumer, replica))"),
              0);
    ASSERT_EQ(tl_exec(&T, "INSERT INTO old_replicas VALUES ('c', 'gone', 1)"), 0);
    ASSERT_NE(db_replicas_migrate(dbc, "old_replicas", false, &err), IB_E_OK);
    ASSERT_CONTAINS(err.text, "ALTER TABLE old_replicas ADD demand");
    ASSERT_EQ(db_replicas_migrate(dbc, "old_replicas", true, &err), IB_E_OK);
    ASSERT_EQ(db_replicas_migrate(dbc, "old_replicas", false, &err), IB_E_OK);
    ASSERT_EQ(tl_scalar(&T, "SELECT demand FROM old_replicas WHERE replica = 'gone'"), 0);

    long long now = 1000LL * 1000 * 1000 * 1000;
    db_replica_t a = {"c", "a-replica", now, 30}, b = {"c", "b-replica", now + 5, 10};
    db_replicas_seen_t seen = {0, 0, 0};
    ASSERT_EQ(db_replicas_beat(dbc, "old_replicas", &a, 10000, &seen, &err), IB_E_OK);
    ASSERT_EQ(seen.alive, 1);
    ASSERT_EQ(seen.demand, 30);
    ASSERT_EQ(db_replicas_beat(dbc, "old_replicas", &b, 10000, &seen, &err), IB_E_OK);
    ASSERT_EQ(seen.alive, 2);
    ASSERT_EQ(seen.rank, 1);
    ASSERT_EQ(seen.demand, 40);
    a.demand = -3; /* never below none */
    ASSERT_EQ(db_replicas_beat(dbc, "old_replicas", &a, 10000, &seen, &err), IB_E_OK);
    ASSERT_EQ(seen.rank, 0);
    ASSERT_EQ(seen.demand, 10);
    ASSERT_EQ(tl_scalar(&T, "SELECT COUNT(*) FROM old_replicas WHERE replica = 'gone'"), 0);
    db_conn_free(dbc);
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_log_set_level(IB_LOG_ERROR);
    tl_db_create(&T, d, "migrate");
    RUN(test_missing_table_is_config_error);
    RUN(test_concurrent_processes);
    RUN(test_migrate_twice);
    RUN(test_table_without_key_is_refused);
    RUN(test_shipped_schema_runs);
    RUN(test_unique_keys_checked);
    RUN(test_replicas_demand);
    tl_db_drop(&T);
    return ib_test_done();
}
