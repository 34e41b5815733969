/*
 * db_effect_sql.c - the statement text of the HTTP routes' claim protocol:
 * one text per db_effect_stmt_t, and the batch claim's and finish's
 * (db_dialect_effect_rows: PostgreSQL and SQL Server each their own). What
 * else differs per dialect comes from its traits
 * (db_sql_now, db_sql_later). Pure string formatting; see db_effect.h.
 *
 * thread: any.
 */
#include <stdio.h>

#include "db_effect_int.h"

#define WHERE_ROW "WHERE consumer = ? AND message_id = ?"
#define WHERE_OURS WHERE_ROW " AND status = 'claimed' AND claim_token = ?"

/* Statement text; lease_s is pasted in as an integer (never user text). */
static ib_err_t effect_sql(db_dialect_t d, const char *t, db_effect_stmt_t which, long lease_s,
                           char *buf, size_t size);

ib_err_t db_effect_conn_sql(db_conn_t *dbc, db_effect_stmt_t which, long lease_s, char *buf,
                            size_t size, ib_error_t *err)
{
    if (effect_sql(dbc->dialect, dbc->table, which, lease_s, buf, size) != IB_E_OK)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT,
                            "inbox statement %d for table '%s' does not fit", (int)which,
                            dbc->table);
    return IB_E_OK;
}

ib_err_t db_effect_sql_text(db_dialect_t d, const char *table, db_effect_stmt_t which, long lease_s,
                            char *buf, size_t size)
{
    if (!db_dialect_traits(d))
        return IB_E_INVAL;
    if (which == DB_ESQL_HAS_COLUMN || which == DB_ESQL_ADD_COLUMN)
        return db_effect_column_sql(d, table, which, buf, size);
    return effect_sql(d, table, which, lease_s, buf, size);
}

static ib_err_t effect_sql(db_dialect_t d, const char *t, db_effect_stmt_t which, long lease_s,
                           char *buf, size_t size)
{
    char lease[160];
    const char *now = db_sql_now(d);
    int n = -1;
    if (!db_table_name_valid(t) || !db_sql_later(d, lease_s, lease, sizeof lease))
        return IB_E_INVAL;
    switch (which) {
    case DB_ESQL_CLAIM_INSERT:
        n = snprintf(buf, size,
                     "INSERT INTO %s (consumer, message_id, idempotency_key, body_sha256, status, "
                     "entity, sequence_number, delivery_count, enqueued_at, received_at, "
                     "processed_at, lease_until, claim_token, attempts) VALUES (?, ?, ?, ?, "
                     "'claimed', ?, ?, ?, ?, ?, %s, %s, ?, 1)",
                     t, now, lease);
        break;
    case DB_ESQL_LOOKUP:
        /* Two arms, each on a whole unique key: a plan cached while the
         * table was empty cannot scan the consumer's rows (db_key_arm_binds). */
        n = snprintf(buf, size,
                     "SELECT message_id, body_sha256, status, CASE WHEN lease_until IS NULL OR "
                     "lease_until < %s THEN 1 ELSE 0 END, remote_id, attempts, remote_status FROM "
                     "%s WHERE consumer = ? AND message_id = ? UNION ALL "
                     "SELECT message_id, body_sha256, status, CASE WHEN lease_until IS NULL OR "
                     "lease_until < %s THEN 1 ELSE 0 END, remote_id, attempts, remote_status FROM "
                     "%s WHERE consumer = ? AND idempotency_key = ? AND message_id <> ?",
                     now, t, now, t);
        break;
    case DB_ESQL_TAKEOVER:
        n = snprintf(buf, size,
                     "UPDATE %s SET claim_token = ?, lease_until = %s, attempts = "
                     "COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'claimed' AND "
                     "(lease_until IS NULL OR lease_until < %s)",
                     t, lease, now);
        break;
    case DB_ESQL_TAKE_RETRY:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'claimed', claim_token = ?, lease_until = %s, "
                     "attempts = COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'retry'",
                     t, lease);
        break;
    case DB_ESQL_TAKE_FAILED:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'claimed', claim_token = ?, lease_until = %s, "
                     "attempts = COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'failed'",
                     t, lease);
        break;
    case DB_ESQL_RENEW:
        n = snprintf(buf, size, "UPDATE %s SET lease_until = %s " WHERE_OURS, t, lease);
        break;
    case DB_ESQL_FINISH:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = ?, remote_id = ?, remote_status = ?, error_class = ?, "
                     "error_detail = ?, processed_at = %s, lease_until = NULL " WHERE_OURS,
                     t, now);
        break;
    case DB_ESQL_RELEASE_DELETE:
        n = snprintf(buf, size, "DELETE FROM %s " WHERE_OURS, t);
        break;
    case DB_ESQL_RELEASE_EXPIRE:
        n = snprintf(buf, size, "UPDATE %s SET lease_until = %s " WHERE_OURS, t, now);
        break;
    case DB_ESQL_LIST:
        n = snprintf(buf, size,
                     "SELECT consumer, message_id, idempotency_key, status, error_class, "
                     "error_detail, remote_id, remote_status, attempts, processed_at, "
                     "lease_until, resolution, resolution_note FROM %s WHERE status = ?%s "
                     "ORDER BY processed_at, consumer, message_id",
                     t, lease_s ? " AND consumer = ?" : "");
        break;
    case DB_ESQL_RESOLVE_PROCESSED:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'processed', remote_id = COALESCE(?, remote_id), "
                     "resolution = 'processed', resolution_note = ?, resolved_at = %s, "
                     "lease_until = NULL " WHERE_ROW " AND status IN ('uncertain', 'failed')",
                     t, now);
        break;
    case DB_ESQL_RESOLVE_RETRY:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'retry', resolution = 'retry', resolution_note = ?, "
                     "resolved_at = %s, lease_until = NULL " WHERE_ROW
                     " AND status IN ('uncertain', 'failed') AND claim_token IS NOT NULL",
                     t, now);
        break;
    default:
        return IB_E_INVAL;
    }
    return (n < 0 || (size_t)n >= size) ? IB_E_INVAL : IB_E_OK;
}

/* ---- the batch statements (db_dialect_effect_rows) ---------------------- */

#define CLAIM_COLS                                                                                 \
    "(consumer, message_id, idempotency_key, body_sha256, status, entity, sequence_number, "      \
    "delivery_count, enqueued_at, received_at, processed_at, lease_until, claim_token, attempts)"
#define CLAIM_SELECT "v.c, v.m, v.k, v.h, 'claimed', v.e, v.s, v.d, v.q, v.r, %s, %s, v.t, 1"
/*
 * The shared form's (db_sql_claim_shared): the consumer and entity once,
 * in p; v.q and v.r milliseconds since the epoch.
 */
#define MS_TIMESTAMP(col) "TIMESTAMP '1970-01-01 00:00:00' + " col " * INTERVAL '1 millisecond'"
#define CLAIM_SELECT_LEAN                                                                          \
    "p.c, v.m, v.k, v.h, 'claimed', p.e, v.s, v.d, " MS_TIMESTAMP("v.q") ", " MS_TIMESTAMP("v.r")  \
    ", %s, %s, v.t, 1"
#define CLAIM_FROM_LEAN "(SELECT CAST(? AS text) AS c, CAST(? AS text) AS e) AS p, (VALUES "
#define CLAIM_VCOLS_LEAN "AS v (m, k, h, s, d, q, r, t)"
#define CLAIM_VCOLS "AS v (c, m, k, h, e, s, d, q, r, t)"

/*
 * SQL Server: each row whose message id and key hold no row is inserted,
 * OUTPUT returns it. UPDLOCK + HOLDLOCK on each probe lock the key, or the
 * range it would go in, until the transaction ends: a second claimer of
 * the key waits, then sees the first's row (db/README.md, "SQL Server's
 * locks for the HTTP claim"). A row without an idempotency key skips that probe
 * (v.k IS NULL: the same result, no range lock on the index's NULL end).
 */
static bool claim_rows_mssql(const db_conn_t *dbc, size_t rows, const char *lease, char *buf,
                             size_t size)
{
    const char *t = dbc->table;
    size_t used;
    int w = snprintf(buf, size,
                     "INSERT INTO %s " CLAIM_COLS " OUTPUT inserted.message_id SELECT " CLAIM_SELECT
                     " FROM (VALUES ",
                     t, db_sql_now(dbc->dialect), lease);
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    if (!db_sql_append_rows(buf, size, &used, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") " CLAIM_VCOLS " WHERE NOT EXISTS (SELECT 1 FROM %s AS x WITH (UPDLOCK, "
                 "HOLDLOCK) WHERE x.consumer = v.c AND x.message_id = v.m) AND (v.k IS NULL OR "
                 "NOT EXISTS (SELECT 1 FROM %s AS y WITH (UPDLOCK, HOLDLOCK) WHERE y.consumer = "
                 "v.c AND y.idempotency_key = v.k))",
                 t, t);
    return w >= 0 && (size_t)w < size - used;
}

/*
 * Where the dialect shares a claim's batch values (db_sql_claim_shared:
 * PostgreSQL) the batch claim binds fewer and cheaper values: psqlODBC's
 * cost is per parameter (some 3,000 instructions each under callgrind),
 * and a bound SQL_TIMESTAMP_STRUCT costs it two snprintf calls. So the
 * consumer and entity, the same for every row of a batch (claim_rows), are
 * bound once, and the enqueued and received times as milliseconds since
 * the epoch (bigint) that the statement makes timestamps of: the value
 * stored is the one the bound timestamp gave (UTC, to the millisecond;
 * NULL for none). SQL Server binds all ten a row.
 */
bool db_effect_claim_rows_sql(const db_conn_t *dbc, size_t rows, long lease_s, char *buf,
                              size_t size)
{
    char lease[160];
    size_t used;
    if (!db_sql_later(dbc->dialect, lease_s, lease, sizeof lease))
        return false;
    if (!db_sql_claim_shared(dbc->dialect))
        return claim_rows_mssql(dbc, rows, lease, buf, size);
    int w = snprintf(buf, size,
                     "INSERT INTO %s " CLAIM_COLS " SELECT " CLAIM_SELECT_LEAN
                     " FROM " CLAIM_FROM_LEAN,
                     dbc->table, db_sql_now(dbc->dialect), lease);
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    /* psqlODBC leaves a parameter's type to the server: a VALUES column needs its own. */
    if (!db_sql_append_rows(buf, size, &used,
                            "(?, ?, ?, CAST(? AS bigint), CAST(? AS integer), CAST(? AS bigint), "
                            "CAST(? AS bigint), ?)",
                            rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") " CLAIM_VCOLS_LEAN " ON CONFLICT DO NOTHING RETURNING message_id");
    return w >= 0 && (size_t)w < size - used;
}

#define FINISH_SET                                                                                 \
    "SET status = v.s, remote_id = v.ri, remote_status = v.rs, error_class = v.ec, error_detail = " \
    "v.ed, processed_at = %s, lease_until = NULL"
#define FINISH_VCOLS "AS v (s, ri, rs, ec, ed, m, t)"

/*
 * PostgreSQL: UPDATE t AS x ... FROM (VALUES ...) WHERE; SQL Server:
 * UPDATE x ... FROM t AS x INNER JOIN (VALUES ...) ON (its drivers declare
 * each parameter's type: only remote_status, NULL or a number, is cast).
 * The consumer's parameter comes after the rows in both.
 */
bool db_effect_finish_rows_sql(const db_conn_t *dbc, size_t rows, char *buf, size_t size)
{
    bool mssql = dbc->dialect == DB_DIALECT_MSSQL;
    const char *now = db_sql_now(dbc->dialect);
    size_t used;
    int w = mssql ? snprintf(buf, size, "UPDATE x " FINISH_SET " FROM %s AS x INNER JOIN (VALUES ",
                             now, dbc->table)
                  : snprintf(buf, size, "UPDATE %s AS x " FINISH_SET " FROM (VALUES ", dbc->table,
                             now);
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    if (!db_sql_append_rows(buf, size, &used,
                            mssql ? "(?, ?, CAST(? AS int), ?, ?, ?, ?)"
                                  : "(?, ?, CAST(? AS integer), ?, ?, ?, ?)",
                            rows))
        return false;
    w = snprintf(buf + used, size - used, "%s",
                 mssql ? ") " FINISH_VCOLS " ON x.consumer = ? AND x.message_id = v.m WHERE "
                         "x.status = 'claimed' AND x.claim_token = v.t"
                       : ") " FINISH_VCOLS " WHERE x.consumer = ? AND x.message_id = v.m AND "
                         "x.status = 'claimed' AND x.claim_token = v.t");
    return w >= 0 && (size_t)w < size - used;
}
