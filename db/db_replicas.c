/*
 * db_replicas.c - the live replicas of a consumer (db_replicas.h).
 * thread: the owner of dbc.
 */
#include "db_replicas.h"

#include <stdio.h>
#include <string.h>

#include "db_conn_int.h"
#include "db_dialect.h"

#define REPLICAS_SQL_MAX 1024
#define REPLICAS_FORGET_MS (60LL * 60 * 1000) /* rows of replicas gone an hour */

static const char *const columns =
    "(consumer VARCHAR(200) NOT NULL, replica VARCHAR(200) NOT NULL, "
    "seen_ms BIGINT NOT NULL, demand BIGINT NOT NULL DEFAULT 0, "
    "PRIMARY KEY (consumer, replica))";

/* Runs sql alone, committed (or rolled back on failure). */
static ib_err_t exec_alone(db_conn_t *dbc, const char *sql, long long *n, ib_error_t *err)
{
    ib_err_t rc = db_exec(dbc, sql, NULL, 0, n, err);
    ib_error_t end;
    if (db_end(dbc, rc == IB_E_OK, &end) != IB_E_OK && rc == IB_E_OK) {
        *err = end;
        rc = end.code;
    }
    return rc;
}

/*
 * A table made before the demand column (0.2.0's first builds) gains it
 * when inboxd may migrate; otherwise the check below names the statement.
 */
static ib_err_t add_demand(db_conn_t *dbc, const char *table, ib_error_t *err)
{
    char sql[REPLICAS_SQL_MAX];
    long long n;
    snprintf(sql, sizeof sql, "SELECT COUNT(demand) FROM %s WHERE 1 = 0", table);
    if (exec_alone(dbc, sql, &n, err) == IB_E_OK)
        return IB_E_OK;
    snprintf(sql, sizeof sql, "ALTER TABLE %s ADD %sdemand BIGINT NOT NULL DEFAULT 0", table,
             db_conn_dialect(dbc) == DB_DIALECT_MSSQL ? "" : "COLUMN ");
    return exec_alone(dbc, sql, NULL, err);
}

ib_err_t db_replicas_migrate(db_conn_t *dbc, const char *table, bool migrate, ib_error_t *err)
{
    char sql[REPLICAS_SQL_MAX];
    long long n;
    ib_error_clear(err);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    if (!migrate) {
        snprintf(sql, sizeof sql, "SELECT COUNT(demand) FROM %s WHERE 1 = 0", table);
    } else if (db_conn_dialect(dbc) == DB_DIALECT_MSSQL) {
        snprintf(sql, sizeof sql, "IF OBJECT_ID(N'%s', N'U') IS NULL CREATE TABLE %s %s", table,
                 table, columns);
    } else {
        snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS %s %s", table, columns);
    }
    ib_err_t rc = exec_alone(dbc, sql, migrate ? NULL : &n, err);
    if (rc == IB_E_OK && migrate)
        rc = add_demand(dbc, table, err);
    if (rc != IB_E_OK && migrate) {
        /* Two replicas starting together both create it: one loses (PostgreSQL's
         * CREATE TABLE IF NOT EXISTS is not atomic). Made by the other is fine. */
        ib_error_t again;
        if (db_replicas_migrate(dbc, table, false, &again) == IB_E_OK) {
            ib_error_clear(err);
            return IB_E_OK;
        }
    }
    if (rc != IB_E_OK && !migrate) {
        char why[sizeof err->text];
        snprintf(why, sizeof why,
                 "db.replicas_table %s: %s (db.migrate true creates it, or adds its column: "
                 "ALTER TABLE %s ADD demand BIGINT NOT NULL DEFAULT 0)",
                 table, err->text, table);
        snprintf(err->text, sizeof err->text, "%s", why);
    }
    return rc;
}

ib_err_t db_replicas_beat(db_conn_t *dbc, const char *table, const db_replica_t *me,
                          long long window_ms, db_replicas_seen_t *seen, ib_error_t *err)
{
    char del[REPLICAS_SQL_MAX], ins[REPLICAS_SQL_MAX], gone[REPLICAS_SQL_MAX],
        cnt[REPLICAS_SQL_MAX], sum[REPLICAS_SQL_MAX], before[REPLICAS_SQL_MAX];
    snprintf(del, sizeof del, "DELETE FROM %s WHERE consumer = ? AND replica = ?", table);
    snprintf(ins, sizeof ins,
             "INSERT INTO %s (consumer, replica, seen_ms, demand) VALUES (?, ?, ?, ?)", table);
    snprintf(gone, sizeof gone, "DELETE FROM %s WHERE consumer = ? AND seen_ms < ?", table);
    snprintf(cnt, sizeof cnt, "SELECT COUNT(*) FROM %s WHERE consumer = ? AND seen_ms >= ?", table);
    snprintf(sum, sizeof sum,
             "SELECT COALESCE(SUM(demand), 0) FROM %s WHERE consumer = ? AND seen_ms >= ?", table);
    snprintf(before, sizeof before,
             "SELECT COUNT(*) FROM %s WHERE consumer = ? AND seen_ms >= ? AND replica < ?", table);
    db_param_t row[4] = {DB_TEXT(me->consumer), DB_TEXT(me->replica), DB_INT(me->now_ms),
                         DB_INT(me->demand > 0 ? me->demand : 0)};
    db_param_t old[2] = {DB_TEXT(me->consumer), DB_INT(me->now_ms - REPLICAS_FORGET_MS)};
    db_param_t live[3] = {DB_TEXT(me->consumer), DB_INT(me->now_ms - window_ms),
                          DB_TEXT(me->replica)};
    long long n = 0, r = 0, d = 0;
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    ib_err_t rc = db_exec(dbc, del, row, 2, NULL, err);
    if (rc == IB_E_OK)
        rc = db_exec(dbc, ins, row, 4, NULL, err);
    if (rc == IB_E_OK)
        rc = db_exec(dbc, gone, old, 2, NULL, err);
    if (rc == IB_E_OK)
        rc = db_exec(dbc, cnt, live, 2, &n, err);
    if (rc == IB_E_OK)
        rc = db_exec(dbc, sum, live, 2, &d, err);
    if (rc == IB_E_OK)
        rc = db_exec(dbc, before, live, 3, &r, err);
    ib_error_t end;
    if (db_end(dbc, rc == IB_E_OK, &end) != IB_E_OK && rc == IB_E_OK) {
        *err = end;
        rc = end.code;
    }
    if (rc == IB_E_OK) {
        seen->alive = n > 0 ? (long)n : 1;
        seen->rank = r >= 0 && r < n ? (long)r : 0;
        seen->demand = d > 0 ? d : 0;
    }
    return rc;
}

ib_err_t db_replicas_leave(db_conn_t *dbc, const char *table, const char *consumer,
                           const char *replica, ib_error_t *err)
{
    char sql[REPLICAS_SQL_MAX];
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE consumer = ? AND replica = ?", table);
    db_param_t me[2] = {DB_TEXT(consumer), DB_TEXT(replica)};
    ib_err_t rc = db_exec(dbc, sql, me, 2, NULL, err);
    ib_error_t end;
    if (db_end(dbc, rc == IB_E_OK, &end) != IB_E_OK && rc == IB_E_OK) {
        *err = end;
        rc = end.code;
    }
    return rc;
}
