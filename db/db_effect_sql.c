/*
 * db_effect_sql.c - the statement text of the HTTP routes' claim protocol:
 * one text per db_effect_stmt_t, and the batch claim's and finish's
 * (db_dialect_effect_rows). What differs per dialect comes from its traits
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

bool db_effect_claim_rows_sql(const db_conn_t *dbc, size_t rows, long lease_s, char *buf,
                              size_t size)
{
    char lease[160];
    size_t used;
    if (!db_sql_later(dbc->dialect, lease_s, lease, sizeof lease))
        return false;
    int w = snprintf(buf, size,
                     "INSERT INTO %s (consumer, message_id, idempotency_key, body_sha256, status, "
                     "entity, sequence_number, delivery_count, enqueued_at, received_at, "
                     "processed_at, lease_until, claim_token, attempts) SELECT v.c, v.m, v.k, v.h, "
                     "'claimed', v.e, v.s, v.d, v.q, v.r, %s, %s, v.t, 1 FROM (VALUES ",
                     dbc->table, db_sql_now(dbc->dialect), lease);
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    /* psqlODBC leaves a parameter's type to the server: a VALUES column needs its own. */
    if (!db_sql_append_rows(buf, size, &used,
                            "(?, ?, ?, ?, ?, CAST(? AS bigint), CAST(? AS integer), CAST(? AS "
                            "timestamp), CAST(? AS timestamp), ?)",
                            rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") AS v (c, m, k, h, e, s, d, q, r, t) ON CONFLICT DO NOTHING RETURNING "
                 "message_id");
    return w >= 0 && (size_t)w < size - used;
}

bool db_effect_finish_rows_sql(const db_conn_t *dbc, size_t rows, char *buf, size_t size)
{
    size_t used;
    int w = snprintf(buf, size,
                     "UPDATE %s AS x SET status = v.s, remote_id = v.ri, remote_status = v.rs, "
                     "error_class = v.ec, error_detail = v.ed, processed_at = %s, lease_until = "
                     "NULL FROM (VALUES ",
                     dbc->table, db_sql_now(dbc->dialect));
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    if (!db_sql_append_rows(buf, size, &used, "(?, ?, CAST(? AS integer), ?, ?, ?, ?)", rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") AS v (s, ri, rs, ec, ed, m, t) WHERE x.consumer = ? AND x.message_id = v.m "
                 "AND x.status = 'claimed' AND x.claim_token = v.t");
    return w >= 0 && (size_t)w < size - used;
}
