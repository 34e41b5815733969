/*
 * db_effect.c - the HTTP routes' claim protocol after the claim: renewing
 * the lease, giving the claim back, and finishing the row with the
 * route's statements in one transaction, alone or for a batch. The claim
 * is db_effect_claim.c's, the statement text db_effect_sql.c's, the
 * columns db_effect_migrate.c's, the operator's list and resolve
 * db_effect_ops.c's. See db_effect.h.
 *
 * thread: the owner of dbc.
 */
#include "db_effect.h"

#include <stdlib.h>
#include <string.h>

#include "db_effect_int.h"

const char *db_claim_outcome_name(db_claim_outcome_t o)
{
    static const char *const names[] = {"new",      "taken_over", "retry",  "done",
                                        "busy",     "conflict",   "failed", "replay"};
    return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "unknown";
}

/* ---- renew, release ------------------------------------------------------- */

/* Runs one statement on our claimed row; IB_E_LOCK_LOST when it is not ours. */
static ib_err_t on_ours(db_conn_t *dbc, db_effect_stmt_t which, long lease_s, const char *consumer,
                        const db_claim_row_t *row, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return err->code;
    }
    if (db_effect_conn_sql(dbc, which, lease_s, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t b[3] = {DB_B(DB_TEXT(consumer)), DB_B(DB_TEXT(row->message_id)),
                      DB_B(DB_TEXT(row->token))};
    if (db_run(dbc, sql, b, 3, NULL, NULL, &n, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        return err->code;
    }
    if (n != 1)
        return ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                            "inbox claim was taken over by another worker");
    return IB_E_OK;
}

ib_err_t db_effect_renew(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                         long lease_s, ib_error_t *err)
{
    return on_ours(dbc, DB_ESQL_RENEW, lease_s, consumer, row, err);
}

ib_err_t db_effect_release(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                           bool reached, ib_error_t *err)
{
    return on_ours(dbc, reached ? DB_ESQL_RELEASE_EXPIRE : DB_ESQL_RELEASE_DELETE, 1, consumer, row,
                   err);
}

/* Runs the route's finishing statements in the open transaction. */
static ib_err_t run_route(db_conn_t *dbc, const db_stmt_t *stmts, size_t nstmts, ib_error_t *err)
{
    for (size_t i = 0; i < nstmts; i++) {
        db_bind_t *b = stmts[i].nparams ? calloc(stmts[i].nparams, sizeof(*b)) : NULL;
        if (stmts[i].nparams && !b)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        for (size_t k = 0; k < stmts[i].nparams; k++)
            b[k] = DB_B(stmts[i].params[k]);
        ib_err_t rc = db_run_kept(dbc, stmts[i].sql, b, stmts[i].nparams, NULL, NULL, NULL, err);
        free(b);
        if (rc != IB_E_OK) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "statement %zu", i + 1);
            return rc;
        }
    }
    return IB_E_OK;
}

/* True when res's error detail is longer than the column keeps (DB_DETAIL_MAX bytes). */
static bool detail_long(const db_effect_result_t *res)
{
    return res->error_detail && strnlen(res->error_detail, DB_DETAIL_MAX + 1) > DB_DETAIL_MAX;
}

/*
 * res's error detail as bound: itself, or when detail_long cut into buf
 * at DB_DETAIL_MAX bytes, never inside a UTF-8 character. NULL when none.
 */
static const char *detail_of(const db_effect_result_t *res, char buf[DB_DETAIL_MAX + 1])
{
    if (!detail_long(res))
        return res->error_detail;
    ib_strlcpy(buf, res->error_detail, DB_DETAIL_MAX + 1);
    size_t end = DB_DETAIL_MAX;
    while (end > 0 && ((unsigned char)res->error_detail[end] & 0xC0) == 0x80)
        buf[--end] = '\0';
    return buf;
}

/* The first five parameters of a finish: res's columns (detail: detail_of's). */
static void result_binds(const db_effect_result_t *res, const char *detail, db_bind_t *b)
{
    b[0] = DB_B(DB_TEXT(db_row_status_name(res->status)));
    b[1] = DB_B(res->remote_id && *res->remote_id ? DB_TEXT(res->remote_id) : DB_NULL());
    b[2] = DB_B(res->remote_status ? DB_INT(res->remote_status) : DB_NULL());
    b[3] = DB_B(res->error_class ? DB_TEXT(res->error_class) : DB_NULL());
    b[4] = DB_B(detail ? DB_TEXT(detail) : DB_NULL());
}

/* Our row gets res, in the open transaction; IB_E_LOCK_LOST when it is not ours. */
static ib_err_t finish_row(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                           const db_effect_result_t *res, ib_error_t *err)
{
    char sql[DB_SQL_MAX], cut[DB_DETAIL_MAX + 1];
    long long n = 0;
    db_bind_t b[8];
    if (db_effect_conn_sql(dbc, DB_ESQL_FINISH, 1, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    result_binds(res, detail_of(res, cut), b);
    b[5] = DB_B(DB_TEXT(consumer));
    b[6] = DB_B(DB_TEXT(row->message_id));
    b[7] = DB_B(DB_TEXT(row->token));
    if (db_run_kept(dbc, sql, b, 8, NULL, NULL, &n, err) != IB_E_OK)
        return err->code;
    if (n != 1)
        return ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                            "inbox claim was taken over by another worker");
    return IB_E_OK;
}

/*
 * Items [0, n) finished by one statement of db_effect_stmt_rows(n) rows
 * (where they are padded, a row joined twice is updated once).
 * IB_E_LOCK_LOST when fewer than n rows were still ours.
 */
static ib_err_t finish_chunk(db_conn_t *dbc, const char *consumer,
                             const db_effect_finish_item_t *items, size_t n, ib_error_t *err)
{
    size_t rows = db_effect_stmt_rows(dbc, n), nlong = 0;
    for (size_t k = 0; k < n; k++)
        nlong += detail_long(items[k].res);
    size_t size = 1536 + rows * 64;
    char *sql = malloc(size);
    db_bind_t *b = calloc(rows * 7 + 1, sizeof *b);
    char(*cut)[DB_DETAIL_MAX + 1] = nlong ? malloc(nlong * sizeof *cut) : NULL;
    long long updated = 0;
    ib_err_t rc = IB_E_OK;
    if (!sql || !b || (nlong && !cut) || !db_effect_finish_rows_sql(dbc, rows, sql, size))
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "batch finish statement");
    for (size_t k = 0, c = 0; rc == IB_E_OK && k < rows; k++) {
        const db_effect_finish_item_t *it = &items[k < n ? k : 0];
        if (k < n) {
            char *buf = detail_long(it->res) ? cut[c++] : NULL; /* detail_of's room, if needed */
            result_binds(it->res, detail_of(it->res, buf), b + k * 7);
        } else
            memcpy(b + k * 7, b, 5 * sizeof *b); /* the first row's result again */
        b[k * 7 + 5] = DB_B(DB_TEXT(it->row->message_id));
        b[k * 7 + 6] = DB_B(DB_TEXT(it->row->token));
    }
    if (rc == IB_E_OK) {
        b[rows * 7] = DB_B(DB_TEXT(consumer));
        rc = db_run_kept(dbc, sql, b, rows * 7 + 1, NULL, NULL, &updated, err);
    }
    if (rc == IB_E_OK && updated != (long long)n)
        rc = ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                          "%zu of %zu inbox claims were taken over by another worker",
                          n - (size_t)updated, n);
    free(sql);
    free(b);
    free(cut);
    return rc;
}

/* Every item's row gets its result, in the open transaction. */
static ib_err_t finish_rows(db_conn_t *dbc, const char *consumer,
                            const db_effect_finish_item_t *items, size_t n, ib_error_t *err)
{
    ib_err_t rc = IB_E_OK;
    if (db_dialect_effect_rows(dbc->dialect) && n > 1) {
        for (size_t at = 0; rc == IB_E_OK && at < n; at += DB_EFFECT_ROWS_MAX)
            rc = finish_chunk(dbc, consumer, items + at,
                              n - at < DB_EFFECT_ROWS_MAX ? n - at : DB_EFFECT_ROWS_MAX, err);
        return rc;
    }
    for (size_t i = 0; rc == IB_E_OK && i < n; i++)
        rc = finish_row(dbc, consumer, items[i].row, items[i].res, err);
    return rc;
}

/* Every item's route statements, those of one shape as parameter arrays. */
static ib_err_t finish_stmts(db_conn_t *dbc, const db_effect_finish_item_t *items, size_t n,
                             ib_error_t *err)
{
    if (n == 1)
        return run_route(dbc, items[0].stmts, items[0].nstmts, err);
    db_stmt_list_t *lists = calloc(n, sizeof *lists);
    if (!lists)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < n; i++)
        lists[i] = (db_stmt_list_t){items[i].stmts, items[i].nstmts};
    ib_err_t rc = db_batch_run_stmts(dbc, lists, n, err);
    free(lists);
    return rc;
}

/* After a failed finishing transaction: rolled back, err classified. */
static db_outcome_t finish_failed(db_conn_t *dbc, ib_error_t *err)
{
    db_rollback_quiet(dbc);
    if (err->code == IB_E_LOCK_LOST)
        return DB_FAILED;
    if (err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    if (err->code == IB_E_DB_CONN)
        err->cls = IB_CLASS_TRANSIENT;
    return DB_FAILED;
}

db_outcome_t db_effect_finish(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                              const db_effect_result_t *res, const db_stmt_t *stmts, size_t nstmts,
                              ib_error_t *err)
{
    db_effect_finish_item_t one = {row, res, stmts, nstmts};
    return db_effect_finish_batch(dbc, consumer, &one, 1, err);
}

db_outcome_t db_effect_finish_batch(db_conn_t *dbc, const char *consumer,
                                    const db_effect_finish_item_t *items, size_t n,
                                    ib_error_t *err)
{
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return DB_FAILED;
    }
    if (finish_rows(dbc, consumer, items, n, err) != IB_E_OK ||
        finish_stmts(dbc, items, n, err) != IB_E_OK)
        return finish_failed(dbc, err);
    if (db_end(dbc, true, err) != IB_E_OK)
        return finish_failed(dbc, err);
    return DB_APPLIED;
}
