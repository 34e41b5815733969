/*
 * db_status.c - the inbox counted for `inboxctl status` (db_status.h).
 * thread: the owner of dbc (inboxctl's main thread).
 */
#include "db_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_conn_int.h"
#include "db_dialect.h"

typedef struct counter {
    const db_conn_t *dbc;
    db_status_inbox_t *out;
    bool window; /* rows of the window, else of any age */
} counter_t;

/* One row: status, count. */
static bool count_row(SQLHSTMT st, void *arg)
{
    counter_t *c = arg;
    char status[32], count[32];
    db_get_text_buf(c->dbc, st, 1, status, sizeof status);
    db_get_text_buf(c->dbc, st, 2, count, sizeof count);
    long long n = atoll(count);
    db_status_inbox_t *o = c->out;
    if (!c->window)
        *(strcmp(status, "failed") == 0 ? &o->failed_all : &o->uncertain_all) = n;
    else if (strcmp(status, "processed") == 0)
        o->processed = n;
    else if (strcmp(status, "failed") == 0)
        o->failed = n;
    else if (strcmp(status, "uncertain") == 0)
        o->uncertain = n;
    else if (strcmp(status, "claimed") == 0)
        o->claimed = n;
    return true;
}

ib_err_t db_status_inbox(db_conn_t *dbc, const char *consumer, long long window_s,
                         db_status_inbox_t *out, ib_error_t *err)
{
    char sql[DB_SQL_MAX], ago[128];
    memset(out, 0, sizeof *out);
    out->window_s = window_s;
    ib_error_clear(err);
    if (!db_sql_ago(dbc->dialect, window_s, ago, sizeof ago))
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "status window too large");
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    db_bind_t b[1] = {DB_B(DB_TEXT(consumer))};
    counter_t c = {dbc, out, true};
    snprintf(sql, sizeof sql,
             "SELECT status, COUNT(*) FROM %s WHERE processed_at >= %s AND consumer = ? "
             "GROUP BY status",
             dbc->table, ago);
    ib_err_t rc = db_run(dbc, sql, b, 1, count_row, &c, NULL, err);
    if (rc == IB_E_OK) {
        c.window = false;
        snprintf(sql, sizeof sql,
                 "SELECT status, COUNT(*) FROM %s WHERE consumer = ? AND status IN "
                 "('failed', 'uncertain') GROUP BY status",
                 dbc->table);
        rc = db_run(dbc, sql, b, 1, count_row, &c, NULL, err);
    }
    db_rollback_quiet(dbc);
    return rc;
}
