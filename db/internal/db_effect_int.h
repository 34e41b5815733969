/*
 * db_effect_int.h - what the files of the HTTP routes' claim protocol share
 * inside db/ (db_effect.c, db_effect_claim.c, db_effect_sql.c,
 * db_effect_migrate.c, db_effect_ops.c). Not part of the public API
 * (db_effect.h is). thread: the owner of dbc.
 */
#ifndef DB_EFFECT_INT_H
#define DB_EFFECT_INT_H

#include "db_conn_int.h"
#include "db_effect.h"

/*
 * The most rows one batch claim or finish statement carries: 10 parameters
 * a row, below the 1,000 psqlODBC handles (db_sql_claim_rows_max) and the
 * 2,100 of a SQL Server request.
 */
#define DB_EFFECT_ROWS_MAX 64

/* db_effect_sql_text for dbc's dialect and table; a text that does not fit is a permanent error. */
ib_err_t db_effect_conn_sql(db_conn_t *dbc, db_effect_stmt_t which, long lease_s, char *buf,
                            size_t size, ib_error_t *err);
/*
 * The claim of rows rows as one INSERT that skips every taken key (either
 * unique index) and returns the message ids it inserted (db_dialect_effect_rows):
 * ON CONFLICT DO NOTHING RETURNING on PostgreSQL, OUTPUT ... WHERE NOT
 * EXISTS (... WITH (UPDLOCK, HOLDLOCK)) on SQL Server.
 */
bool db_effect_claim_rows_sql(const db_conn_t *dbc, size_t rows, long lease_s, char *buf,
                              size_t size);
/*
 * Where the dialect shares a claim's batch values (db_sql_claim_shared),
 * that claim binds its consumer and entity once, first, and then
 * DB_EFFECT_LEAN_ROW_PARAMS a row (message id, key, body hash, sequence
 * number, delivery count, enqueued and received times as epoch
 * milliseconds, token); otherwise each row binds all ten.
 */
#define DB_EFFECT_LEAN_ROW_PARAMS 8
/* The finish of rows rows as one UPDATE joined to their values (db_dialect_effect_rows). */
bool db_effect_finish_rows_sql(const db_conn_t *dbc, size_t rows, char *buf, size_t size);
/* DB_ESQL_HAS_COLUMN / DB_ESQL_ADD_COLUMN for the first column HTTP routes add
 * (db_effect_migrate.c). */
ib_err_t db_effect_column_sql(db_dialect_t d, const char *table, db_effect_stmt_t which, char *buf,
                              size_t size);

/*
 * The row count of a statement for n items: rounded up to a power of two
 * (at least 2) with copies of the first item, so that a few statement
 * texts serve every batch size and stay prepared.
 */
static inline size_t db_effect_padded_rows(size_t n)
{
    size_t rows = 2;
    while (rows < n)
        rows *= 2;
    return rows;
}

/* The rows of dbc's batch claim or finish statement for n items (db_dialect_effect_rows_exact). */
static inline size_t db_effect_stmt_rows(const db_conn_t *dbc, size_t n)
{
    return db_dialect_effect_rows_exact(dbc->dialect) ? n : db_effect_padded_rows(n);
}

#endif
