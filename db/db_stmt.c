/*
 * db_stmt.c - statements kept prepared on a connection.
 *
 * The inbox's own statements (the insert, the lookup, the batch claims) and
 * the routes' statements run again and again with new parameters. Kept
 * here, each is prepared once per connection (SQLPrepare) and then only
 * executed (SQLExecute): psqlODBC then sends Bind + Execute for it instead
 * of Parse + Describe + Bind + Execute, and the server plans it once.
 *
 * A statement is kept per SQL text and per parameter signature (the ODBC
 * types its parameters are bound with), since a driver may fix the types
 * when it prepares. At most DB_KEPT_MAX per connection; the least recently
 * used goes first. A statement that failed is never reused, and every kept
 * statement is freed before its connection closes.
 *
 * thread: the owner of dbc (a db worker, the relay, a tool's main thread).
 */
#include "db_conn_int.h"

#include <stdlib.h>
#include <string.h>

#define DB_KEPT_MAX 48

struct db_kept {
    char *sql;
    unsigned char *sig; /* one code per parameter (db_stmt_sig_*) */
    size_t nsig;
    SQLHSTMT st;
    db_pbuf_t *pb;      /* nsig parameter slots (db_stmt_params), or NULL */
    unsigned long used; /* dbc->kept_clock at the last take */
    bool busy;          /* taken and not yet given back */
};

static bool ok(SQLRETURN rc)
{
    return rc == SQL_SUCCESS || rc == SQL_SUCCESS_WITH_INFO;
}

bool db_stmt_keepable(const db_conn_t *dbc, const char *sql)
{
    /*
     * PostgreSQL and SQLite are where this is measured. One statement only:
     * psqlODBC cannot prepare several in one named statement.
     */
    return db_dialect_traits(dbc->dialect)->keep_prepared && sql && !strchr(sql, ';');
}

unsigned char db_stmt_sig_param(const db_conn_t *dbc, const db_param_t *p)
{
    switch (p->type) {
    case DB_PARAM_TEXT:
        if (!p->text)
            return 'N';
        return db_text_is_long(dbc, p->text) ? 'L' : 'V';
    case DB_PARAM_INT:
        return 'I';
    case DB_PARAM_FLOAT:
        return 'F';
    default:
        return 'N';
    }
}

static void kept_free(db_kept_t *k)
{
    if (k->st != SQL_NULL_HSTMT)
        SQLFreeHandle(SQL_HANDLE_STMT, k->st);
    for (size_t i = 0; k->pb && i < k->nsig; i++)
        free(k->pb[i].text);
    free(k->pb);
    free(k->sql);
    free(k->sig);
    memset(k, 0, sizeof(*k));
}

/* The idle entry for sql and sig; NULL when there is none. */
static db_kept_t *kept_find(db_conn_t *dbc, const char *sql, const unsigned char *sig, size_t nsig)
{
    for (size_t i = 0; i < dbc->nkept; i++) {
        db_kept_t *k = &dbc->kept[i];
        if (k->sql && !k->busy && k->nsig == nsig && (nsig == 0 || memcmp(k->sig, sig, nsig) == 0) &&
            strcmp(k->sql, sql) == 0)
            return k;
    }
    return NULL;
}

/* A free slot: a new one, or the least recently used idle one (freed); NULL when all are busy. */
static db_kept_t *kept_slot(db_conn_t *dbc)
{
    db_kept_t *lru = NULL;

    if (!dbc->kept && !(dbc->kept = calloc(DB_KEPT_MAX, sizeof(*dbc->kept))))
        return NULL;
    for (size_t i = 0; i < dbc->nkept; i++)
        if (!dbc->kept[i].sql)
            return &dbc->kept[i];
    if (dbc->nkept < DB_KEPT_MAX)
        return &dbc->kept[dbc->nkept++];
    for (size_t i = 0; i < dbc->nkept; i++)
        if (!dbc->kept[i].busy && (!lru || dbc->kept[i].used < lru->used))
            lru = &dbc->kept[i];
    if (lru)
        kept_free(lru);
    return lru;
}

/* A new prepared handle for sql, kept in a slot when one is free. */
static ib_err_t kept_prepare(db_conn_t *dbc, const char *sql, const unsigned char *sig,
                             size_t nsig, SQLHSTMT *st, ib_error_t *err)
{
    db_kept_t *k;

    if (!ok(SQLAllocHandle(SQL_HANDLE_STMT, dbc->dbc, st)))
        return db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "statement allocation", err);
    if (dbc->stmt_timeout_s > 0)
        SQLSetStmtAttr(*st, SQL_ATTR_QUERY_TIMEOUT, (SQLPOINTER)(SQLULEN)dbc->stmt_timeout_s, 0);
    if (!ok(SQLPrepare(*st, (SQLCHAR *)sql, SQL_NTS))) {
        ib_err_t rc = db_diag_error(dbc, SQL_HANDLE_STMT, *st, "prepare", err);
        SQLFreeHandle(SQL_HANDLE_STMT, *st);
        *st = SQL_NULL_HSTMT;
        return rc;
    }
    k = kept_slot(dbc);
    if (!k)
        return IB_E_OK; /* used once and freed by db_stmt_give */
    k->sql = strdup(sql);
    k->sig = malloc(nsig ? nsig : 1);
    if (!k->sql || !k->sig) {
        free(k->sql);
        free(k->sig);
        memset(k, 0, sizeof(*k));
        return IB_E_OK;
    }
    memcpy(k->sig, sig, nsig);
    k->nsig = nsig;
    k->st = *st;
    k->busy = true;
    k->used = ++dbc->kept_clock;
    return IB_E_OK;
}

ib_err_t db_stmt_take(db_conn_t *dbc, const char *sql, const unsigned char *sig, size_t nsig,
                      SQLHSTMT *st, ib_error_t *err)
{
    db_kept_t *k = kept_find(dbc, sql, sig, nsig);

    if (!k)
        return kept_prepare(dbc, sql, sig, nsig, st, err);
    k->busy = true;
    k->used = ++dbc->kept_clock;
    *st = k->st;
    return IB_E_OK;
}

void db_stmt_give(db_conn_t *dbc, SQLHSTMT st, bool reuse)
{
    db_kept_t *k = NULL;

    for (size_t i = 0; i < dbc->nkept && !k; i++)
        if (dbc->kept[i].st == st)
            k = &dbc->kept[i];
    /*
     * The bindings stay: the next execution of this text binds every
     * parameter again, and psqlODBC grows its binding table one parameter
     * at a time after a reset (a claim has up to 960).
     */
    if (k && reuse && ok(SQLFreeStmt(st, SQL_CLOSE))) {
        k->busy = false;
        return;
    }
    if (k)
        kept_free(k); /* the slot stays, empty (sql NULL) for the next one */
    else
        SQLFreeHandle(SQL_HANDLE_STMT, st);
}

db_pbuf_t *db_stmt_params(db_conn_t *dbc, SQLHSTMT st, size_t n)
{
    /*
     * A statement run with parameter arrays (db_run_array) is kept under a
     * signature of one code more than its parameters, so it never meets n.
     */
    for (size_t i = 0; i < dbc->nkept; i++) {
        db_kept_t *k = &dbc->kept[i];
        if (k->st != st || !k->sql)
            continue;
        if (k->nsig != n || n == 0)
            return NULL;
        if (!k->pb)
            k->pb = calloc(n, sizeof(*k->pb));
        return k->pb;
    }
    return NULL;
}

void db_stmt_forget_all(db_conn_t *dbc)
{
    for (size_t i = 0; i < dbc->nkept; i++)
        kept_free(&dbc->kept[i]);
    free(dbc->kept);
    dbc->kept = NULL;
    dbc->nkept = 0;
}
