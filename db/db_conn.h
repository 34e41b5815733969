/*
 * db_conn.h - a connection to the inbox's database over ODBC: the options
 * that open one, the statement parameters every caller binds, and running a
 * statement outside the inbox protocol. db_inbox.h (the inbox transaction),
 * db_effect.h and db_outbox.h build on it; a caller that only opens a
 * connection (the relay, inboxctl, the sweeper) needs this header alone.
 *
 * Threads: a db_conn_t belongs to one thread at a time; different threads
 * use different connections concurrently. Nothing here keeps global state
 * except unixODBC's own.
 *
 * Errors: every failure fills an ib_error_t whose class (transient,
 * permanent, ambiguous) is all the caller needs; sqlstate, native and the
 * driver's message ride along for logs. Texts never hold the connection
 * string or a password.
 */
#ifndef DB_CONN_H
#define DB_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "db_dialect.h"
#include "ib_err.h"

/* ---- connection ------------------------------------------------------- */

/*
 * db.auth "workload_identity": writes the current Azure AD access token for
 * the database (the JWT text, NUL-terminated) into buf and returns IB_E_OK,
 * or fills err (IB_E_AGAIN while the first token is pending, IB_E_AUTH).
 * Called before every connect, reconnects included, so a provider that
 * refreshes its token before expiry keeps new connections logging in.
 * thread: the connecting thread; must not block for long.
 */
typedef ib_err_t (*db_token_fn)(void *arg, char *buf, size_t size, ib_error_t *err);

/* The inbox table when none is named (db.inbox_table's default). */
#define DB_INBOX_DEFAULT_TABLE "inboxd_inbox"

typedef struct db_options {
    const char *connection_string; /* ODBC, for SQLDriverConnect; copied */
    db_dialect_t dialect;          /* DB_DIALECT_AUTO: from SQL_DBMS_NAME */
    const char *inbox_table;       /* NULL or "": DB_INBOX_DEFAULT_TABLE; copied */
    long statement_timeout_s;      /* per statement; 0 = none */
    long login_timeout_s;          /* 0 = 15 */
    db_codes_t transient_native;   /* errors.transient_native; copied */
    db_codes_t permanent_native;   /* errors.permanent_native; copied */
    db_token_fn access_token;      /* NULL, or db.auth workload_identity (SQL Server only) */
    void *access_token_arg;        /* borrowed; must outlive the connection */
} db_options_t;

typedef struct db_conn db_conn_t;

/*
 * Opens a connection (autocommit off) and resolves the dialect. opt and
 * everything it points to may be freed after the call. Returns NULL with
 * err filled on failure: IB_E_CONFIG (permanent) for a bad option or when
 * the server refused the login or the database (db_dialect_is_login_refused:
 * SQL Server 18456 / 4060, MariaDB 1045 / 1049, 28xxx), IB_E_DB_CONN (class
 * from the error table, usually transient) when the database could not be
 * reached.
 *
 * A connection that breaks later (08xxx, a terminated backend) is reopened
 * by the next call that needs it, so the caller keeps its db_conn_t.
 * thread: any; the returned connection is then used by one thread at a time.
 */
db_conn_t *db_conn_new(const db_options_t *opt, ib_error_t *err);
/* Rolls back anything open and disconnects. NULL is fine. thread: the owner. */
void db_conn_free(db_conn_t *dbc);
/* The resolved dialect (never DB_DIALECT_AUTO). */
db_dialect_t db_conn_dialect(const db_conn_t *dbc);
/* The number of times the connection was reopened after breaking. */
long db_conn_reconnects(const db_conn_t *dbc);
/*
 * How many connections the server accepts for this login
 * (db_sql_max_connections), read-only and rolled back; *limit 0 when the
 * database has no such limit (SQLite). thread: the owner of dbc.
 */
ib_err_t db_conn_max_connections(db_conn_t *dbc, long long *limit, ib_error_t *err);

/*
 * A phase of an inbox transaction, reported to the connection's phase hook
 * as it ends, for tracing: its start and end (ns since the epoch), the
 * item of db_inbox_apply_batch it belongs to (DB_PHASE_BATCH: the batch's
 * own transaction, shared by its items; db_inbox_apply alone: item 0), for
 * DB_PHASE_STMT the statement's index (0-based), the rows it covers (the
 * claim's or the parameter array's) and err when it failed (else NULL).
 */
typedef enum { DB_PHASE_CLAIM = 0, DB_PHASE_STMT, DB_PHASE_COMMIT } db_phase_t;
#define DB_PHASE_BATCH ((size_t)-1)
typedef struct db_phase_info {
    db_phase_t phase;
    size_t item;
    size_t stmt;
    size_t rows;
    long long start_ns, end_ns;
    const ib_error_t *err;
} db_phase_info_t;
typedef void (*db_phase_fn)(void *arg, const db_phase_info_t *info);
/*
 * Sets (fn NULL: clears) the hook called after each phase of the inbox
 * transactions that follow on dbc; with none set no clock is read.
 * thread: the owner of dbc.
 */
void db_conn_set_phase_hook(db_conn_t *dbc, db_phase_fn fn, void *arg);

/* ---- parameters ------------------------------------------------------- */

typedef enum {
    DB_PARAM_NULL = 0,
    DB_PARAM_TEXT,
    DB_PARAM_INT,
    DB_PARAM_FLOAT,
} db_param_type_t;

typedef struct db_param {
    db_param_type_t type;
    const char *text; /* DB_PARAM_TEXT, UTF-8, borrowed */
    long long i;      /* DB_PARAM_INT */
    double f;         /* DB_PARAM_FLOAT */
} db_param_t;

#define DB_NULL() ((db_param_t){DB_PARAM_NULL, NULL, 0, 0})
#define DB_TEXT(s) ((db_param_t){DB_PARAM_TEXT, (s), 0, 0})
#define DB_INT(v) ((db_param_t){DB_PARAM_INT, NULL, (long long)(v), 0})
#define DB_FLOAT(v) ((db_param_t){DB_PARAM_FLOAT, NULL, 0, (double)(v)})

/* One route statement: SQL with '?' placeholders and its parameters (borrowed). */
typedef struct db_stmt {
    const char *sql;
    const db_param_t *params;
    size_t nparams;
} db_stmt_t;

/* ---- outside the inbox protocol --------------------------------------- */

/*
 * The ACCESSTOKEN that SQL_COPT_SS_ACCESS_TOKEN takes: a 4-byte
 * little-endian byte count, then each byte of token followed by a zero byte
 * (no terminator). Returns the bytes needed (4 + 2 * len); with out NULL it
 * only measures, with cap too small it writes nothing and returns 0.
 */
size_t db_access_token_build(const char *token, size_t len, unsigned char *out, size_t cap);
/*
 * Checks that connstr can carry an access token: IB_E_CONFIG naming the
 * driver when it is not Microsoft's ODBC Driver for SQL Server (FreeTDS,
 * PostgreSQL, ... take none), or the key (UID, PWD, Authentication,
 * Trusted_Connection) that must go. A DSN without Driver= passes.
 */
ib_err_t db_token_connstr_check(const char *connstr, ib_error_t *err);

/*
 * Runs one statement outside the inbox protocol in the current transaction
 * (no commit) - for tooling and tests. With out != NULL the first column of
 * the first row is read as an integer (*out = 0 when there is no row or it is
 * NULL). Returns IB_E_OK or IB_E_DB/IB_E_DB_CONN with err classified; the
 * transaction is left as the driver leaves it, so follow with db_end.
 * thread: the owner of dbc.
 */
ib_err_t db_exec(db_conn_t *dbc, const char *sql, const db_param_t *params, size_t nparams,
                 long long *out, ib_error_t *err);
/* Commits (commit true) or rolls back the current transaction. */
ib_err_t db_end(db_conn_t *dbc, bool commit, ib_error_t *err);

#endif
