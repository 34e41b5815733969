/*
 * db_effect_migrate.c - the columns HTTP routes add to the inbox table
 * (lease, claim token, the destination's answer, an operator's
 * resolution): checked at start, added under the migration lock when
 * db.migrate allows. See db_effect.h.
 *
 * thread: the owner of dbc.
 */
#include <string.h>

#include "db_effect_int.h"
#include "ib_backoff.h"
#include "ib_log.h"
#include "ib_time.h"

/* The columns HTTP routes add to the inbox table, and their kinds (db_traits_t types). */
typedef struct newcol {
    const char *name;
    db_col_t kind;
} newcol_t;

static const newcol_t new_columns[] = {
    {"lease_until", DB_COL_TS},
    {"claim_token", DB_COL_TOKEN},
    {"remote_id", DB_COL_KEY},
    {"remote_status", DB_COL_I32},
    {"attempts", DB_COL_I32},
    {"resolution", DB_COL_WORD},
    {"resolution_note", DB_COL_DETAIL},
    {"resolved_at", DB_COL_TS},
};
#define NEW_COLUMNS (sizeof(new_columns) / sizeof(new_columns[0]))

ib_err_t db_effect_column_sql(db_dialect_t d, const char *table, db_effect_stmt_t which, char *buf,
                              size_t size)
{
    if (which == DB_ESQL_HAS_COLUMN)
        return db_sql_has_column(d, table, new_columns[0].name, buf, size);
    return db_sql_add_column(d, table, new_columns[0].name, new_columns[0].kind, false, buf, size);
}

/*
 * The ALTER statements for the columns table lacks, into stmts (pointing
 * into buf). Returns the number, or -1 with err filled. Ends the read
 * transaction.
 */
static int missing_columns(db_conn_t *dbc, char *buf, size_t size, const char **stmts,
                           const char **first, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    size_t used = 0;
    int n = 0;
    *first = NULL;
    for (size_t i = 0; i < NEW_COLUMNS; i++) {
        long long has = 0;
        if (db_sql_has_column(dbc->dialect, dbc->table, new_columns[i].name, sql, sizeof sql) !=
            IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
            return -1;
        }
        if (db_run(dbc, sql, NULL, 0, db_row_first_int, &has, NULL, err) != IB_E_OK) {
            db_rollback_quiet(dbc);
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            return -1;
        }
        if (has)
            continue;
        if (!*first)
            *first = new_columns[i].name;
        if (db_sql_add_column(dbc->dialect, dbc->table, new_columns[i].name, new_columns[i].kind,
                              false, buf + used, size - used) != IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
            return -1;
        }
        stmts[n++] = buf + used;
        used += strlen(buf + used) + 1;
    }
    db_rollback_quiet(dbc);
    return n;
}

ib_err_t db_effect_migrate(db_conn_t *dbc, bool create, ib_error_t *err)
{
    char buf[NEW_COLUMNS * 160];
    const char *stmts[NEW_COLUMNS], *first;
    ib_rand_t seed = 0; /* the backoff's state, seeded on first use */
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    for (int attempt = 1;; attempt++) {
        int n = -1;
        if (db_conn_ensure(dbc, err) == IB_E_OK)
            n = missing_columns(dbc, buf, sizeof buf, stmts, &first, err);
        if (n == 0)
            return IB_E_OK;
        if (n > 0 && !create)
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "db.inbox_table: table '%s' lacks column %s, which HTTP routes "
                                "need (set db.migrate true, or add the columns db.migrate adds)",
                                dbc->table, first);
        /* Under the migration lock; a racing migrator's column shows on the re-probe. */
        if (n > 0 && db_migrate_ddl(dbc, dbc->table, stmts, (size_t)n, err) == IB_E_OK) {
            IB_LOG(IB_LOG_INFO, "db_migrate", IB_MSG("inbox columns added"),
                   IB_S("table", dbc->table), IB_I("columns", n));
            continue;
        }
        if (attempt >= 8) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "db.migrate: inbox columns of '%s'", dbc->table);
            return err->code;
        }
        ib_sleep_ms(ib_backoff_ms(50, 800, attempt, &seed), NULL);
    }
}
