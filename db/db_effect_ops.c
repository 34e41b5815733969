/*
 * db_effect_ops.c - an operator's view of the HTTP routes' inbox rows
 * (inboxctl inbox list) and their resolution (inboxctl inbox resolve): a
 * row left uncertain or failed made processed, or handed back for another
 * call. See db_effect.h.
 *
 * thread: the owner of dbc.
 */
#include <stdlib.h>
#include <string.h>

#include "db_effect_int.h"

typedef struct lister {
    db_effect_list_cb cb;
    void *arg;
    long limit, count;
    const db_conn_t *dbc;
} lister_t;

static bool list_row(SQLHSTMT st, void *arg)
{
    lister_t *l = arg;
    char c[13][2001];
    for (SQLUSMALLINT i = 0; i < 13; i++)
        db_get_text_buf(l->dbc, st, i + 1, c[i], sizeof c[i]);
    db_effect_listed_t r = {c[0],       c[1],  c[2][0] ? c[2] : NULL,
                            c[3],       c[4],  c[5],
                            c[6],       c[9],  c[10],
                            c[11],      c[12], atol(c[7]),
                            atoll(c[8])};
    l->count++;
    if (!l->cb(&r, l->arg))
        return false;
    return l->limit <= 0 || l->count < l->limit;
}

long db_effect_list(db_conn_t *dbc, const char *status, const char *consumer, long limit,
                    db_effect_list_cb cb, void *arg, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    lister_t l = {cb, arg, limit, 0, dbc};
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return -1;
    /* lease_s carries "with a consumer filter" for this statement. */
    if (db_effect_conn_sql(dbc, DB_ESQL_LIST, consumer ? 1 : 0, sql, sizeof sql, err) != IB_E_OK)
        return -1;
    db_bind_t b[2] = {DB_B(DB_TEXT(status)), DB_B(DB_TEXT(consumer ? consumer : ""))};
    ib_err_t rc = db_run(dbc, sql, b, consumer ? 2 : 1, list_row, &l, NULL, err);
    db_rollback_quiet(dbc);
    return rc == IB_E_OK ? l.count : -1;
}

ib_err_t db_effect_resolve(db_conn_t *dbc, const char *consumer, const char *message_id,
                           const char *as, const char *remote_id, const char *note, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    bool retry = strcmp(as, "retry") == 0;
    ib_error_clear(err);
    if (!retry && strcmp(as, "processed") != 0)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "--as must be processed or retry");
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    if (db_effect_conn_sql(dbc, retry ? DB_ESQL_RESOLVE_RETRY : DB_ESQL_RESOLVE_PROCESSED, 1, sql,
                           sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t b[4];
    size_t nb = 0;
    if (!retry)
        b[nb++] = DB_B(remote_id ? DB_TEXT(remote_id) : DB_NULL());
    b[nb++] = DB_B(note ? DB_TEXT(note) : DB_NULL());
    b[nb++] = DB_B(DB_TEXT(consumer));
    b[nb++] = DB_B(DB_TEXT(message_id));
    if (db_run(dbc, sql, b, nb, NULL, NULL, &n, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return err->code;
    }
    /* A SQL route's failed row (no claim token) comes back with a replay instead. */
    if (n != 1)
        return ib_error_set(err, IB_E_NOTFOUND, IB_CLASS_PERMANENT,
                            "no uncertain or failed %sinbox row for consumer '%.64s' message "
                            "'%.64s'%s",
                            retry ? "HTTP-route " : "", consumer, message_id,
                            retry ? " (a SQL route's failed row is replayed with inboxctl dlq "
                                    "replay, not resolved as retry)"
                                  : "");
    return IB_E_OK;
}
