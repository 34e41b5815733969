/*
 * db_inbox.h - the transactional inbox over ODBC (connections, the inbox
 * transaction); db_effect.h and db_outbox.h are db/'s other public headers.
 *
 * A db worker thread owns one db_conn_t and runs every message through
 * db_inbox_apply():
 *
 *   BEGIN; INSERT inbox row; run the route's statements; COMMIT
 *
 * The unique key on the inbox row, not this code, decides which of two
 * concurrent copies wins: the second copy's INSERT waits for the first
 * transaction and then fails with a unique violation (or proceeds when the
 * first rolled back). There is never a check-then-insert.
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
#ifndef DB_INBOX_H
#define DB_INBOX_H

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

/*
 * create true: creates the inbox table and its indexes when absent, in one
 * transaction serialised across replicas (advisory lock / sp_getapplock);
 * safe to run any number of times, concurrently.
 * create false: checks that the table exists with its key; IB_E_CONFIG
 * (permanent) with a message naming the table when not.
 * thread: the owner of dbc.
 */
ib_err_t db_migrate(db_conn_t *dbc, bool create, ib_error_t *err);
/*
 * Checks that a unique constraint or index named as the dialect's unique
 * violation names it (db_unique_violation: "ux_orders" in PostgreSQL, SQL
 * Server and MariaDB, "orders.order_id" in SQLite) exists; IB_E_CONFIG
 * (permanent) naming it when not. For a route's "constraints" at start.
 * thread: the owner of dbc.
 */
ib_err_t db_migrate_check_unique(db_conn_t *dbc, const char *name, ib_error_t *err);

/* ---- the inbox transaction ------------------------------------------- */

typedef enum {
    DB_APPLIED = 0, /* committed: inbox row + statements */
    DB_DUPLICATE,   /* the key exists with the same body hash: nothing done */
    DB_CONFLICT,    /* the key exists with another body hash: nothing done, row untouched */
    DB_FAILED,      /* rolled back; err->cls says transient / permanent / ambiguous */
} db_outcome_t;

/* "applied", "duplicate", "conflict", "failed". */
const char *db_outcome_name(db_outcome_t o);

/*
 * The inbox row's status: the states db/ hands the worker (db_effect.h
 * draws how they move). A `processed` row is what the outcome `applied`
 * leaves (also a duplicate found later); `uncertain` records the error
 * class `ambiguous` (it may have acted).
 */
typedef enum {
    DB_ROW_PROCESSED = 0, /* "processed" */
    DB_ROW_FAILED,        /* "failed": a permanent failure recorded */
    DB_ROW_UNCERTAIN,     /* "uncertain": may have acted, cannot tell */
    DB_ROW_CLAIMED,       /* "claimed": an HTTP route's call under a lease */
    DB_ROW_RETRY,         /* "retry": an operator asked for another call */
    DB_ROW_UNKNOWN,       /* a status this version does not know */
} db_row_status_t;

/* The column's text ("processed", ...); "unknown" for DB_ROW_UNKNOWN. */
const char *db_row_status_name(db_row_status_t s);
/* The state of the column's text; DB_ROW_UNKNOWN for any other. */
db_row_status_t db_row_status_parse(const char *text);

/* The identity and bookkeeping of one message. All pointers are borrowed. */
typedef struct db_claim {
    const char *consumer;        /* required, <= 200 bytes */
    const char *message_id;      /* required, <= 128 bytes */
    const char *idempotency_key; /* NULL when the route defines none; <= 400 bytes */
    const char *body_sha256;     /* 64 lowercase hex characters (db_sha256_hex) */
    const char *entity;          /* may be NULL */
    long long sequence_number;
    long long delivery_count;
    long long enqueued_at_ms; /* ms since the epoch, UTC; 0 = unknown (NULL) */
    long long received_at_ms; /* ms since the epoch, UTC; 0 = now */
    bool replay; /* an operator's replay (inboxd-replay-count): a row recorded 'failed' (or
                    resolved 'retry') with the same body is taken over, see db_inbox_apply */
} db_claim_t;

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

/*
 * The inbox transaction for one message: INSERT the inbox row (status
 * 'processed'), run stmts in order, COMMIT.
 *
 *   DB_APPLIED    committed.
 *   DB_DUPLICATE  unique violation on (consumer, message_id) or
 *                 (consumer, idempotency_key) and the existing row has the
 *                 same body hash (whatever its status: a 'failed' row
 *                 recorded earlier is also a duplicate).
 *   DB_CONFLICT   unique violation and an existing row has another hash.
 *   With claim->replay, a unique violation on a row whose status is
 *   'failed' or 'retry' and whose body hash is the same is not a duplicate:
 *   in a new transaction one conditional UPDATE takes the row over (status
 *   'processed', error columns cleared), stmts run, COMMIT: DB_APPLIED. Of
 *   two concurrent replays the row lock lets one win; the other then sees
 *   'processed' and is a DB_DUPLICATE.
 *   DB_FAILED     err filled: transient (deadlock, serialization, timeout,
 *                 lost connection: retry), permanent (data error, SQL error,
 *                 a constraint that is not the inbox key, a configured
 *                 permanent code: dead-letter or record). A database that
 *                 cannot be reached or reopened is always transient here,
 *                 whatever the cause: it is never the message's fault.
 *
 * Every outcome but DB_APPLIED leaves no open transaction: it was rolled
 * back before returning (DB_APPLIED committed). err is cleared on
 * DB_APPLIED and DB_DUPLICATE; on DB_CONFLICT it holds IB_E_CONFLICT
 * (permanent) with a text fit for a dead-letter description.
 * thread: the owner of dbc.
 */
db_outcome_t db_inbox_apply(db_conn_t *dbc, const db_claim_t *claim, const db_stmt_t *stmts,
                            size_t nstmts, ib_error_t *err);

/*
 * The on_permanent:"record" path: a short transaction of its own that
 * inserts the inbox row with status 'failed' (or 'uncertain' when cls is
 * IB_CLASS_AMBIGUOUS), error_class = ib_class_name(cls) and detail (cut to
 * 2000 bytes; may be NULL). A redelivery then meets the row and is a
 * DB_DUPLICATE without running the route again.
 *
 *   DB_APPLIED    recorded.
 *   DB_DUPLICATE  the key was already there with the same hash (recorded
 *                 or applied earlier).
 *   DB_CONFLICT   the key is there with another hash.
 *   DB_FAILED     as for db_inbox_apply.
 * thread: the owner of dbc.
 */
db_outcome_t db_inbox_record_failure(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                     const char *detail, ib_error_t *err);
/*
 * The same, running stmts (a route's rejection events: outbox inserts)
 * after the row's insert and before the COMMIT, so they commit with the
 * failure or not at all; nothing runs when the row is already there
 * (DB_DUPLICATE / DB_CONFLICT). A failing statement rolls the whole
 * transaction back: DB_FAILED (a setup error, a missing table, transient).
 */
db_outcome_t db_inbox_record_failure_with(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                          const char *detail, const db_stmt_t *stmts,
                                          size_t nstmts, ib_error_t *err);

/*
 * Retention: deletes 'processed' inbox rows whose processed_at is older
 * than days ('failed' and 'uncertain' rows are kept for reconciliation), at
 * most batch rows per statement and transaction, until a batch comes back
 * short. Only one sweeper runs at a time across replicas (pg advisory lock,
 * sp_getapplock, GET_LOCK; SQLite serialises writers itself): when another
 * holds the lock this returns 0 at once. Returns the rows deleted, or -1
 * with err filled. thread: the owner of dbc.
 */
long long db_inbox_sweep(db_conn_t *dbc, long days, long batch, ib_error_t *err);

/*
 * Several messages in one transaction: one claim statement inserts every
 * inbox row (skipping keys already taken), each route statement runs once
 * for all its messages as a parameter array, one COMMIT. Each item ends
 * with exactly the outcome db_inbox_apply would give it alone:
 *
 *   - a key already taken is a duplicate or a conflict by body hash, decided
 *     in the batch without disturbing the others; two items with one key:
 *     the first claims it, the second is a duplicate (or conflict) of it;
 *   - any failure (a route statement, a deadlock, a lost connection, the
 *     COMMIT) rolls the whole transaction back and every item is then
 *     applied in a transaction of its own, so a failure belongs to the
 *     message that caused it. fallback (may be NULL) then holds the failure
 *     that rolled the batch back; its code is IB_E_OK when there was none. When the
 *     database cannot be reopened the remaining items fail transient
 *     without being tried.
 *
 * A replay claim goes alone (db_inbox_apply: it may take over a 'failed'
 * row), after the batch. A batch of one is db_inbox_apply. MariaDB has no claim statement: its
 * batches always run one transaction per item. Returns the number of items
 * applied. thread: the owner of dbc.
 */
typedef struct db_batch_item {
    const db_claim_t *claim; /* in, borrowed */
    const db_stmt_t *stmts;  /* in, borrowed */
    size_t nstmts;           /* in */
    db_outcome_t outcome;    /* out */
    ib_error_t err;          /* out: filled when outcome is DB_FAILED or DB_CONFLICT */
} db_batch_item_t;

size_t db_inbox_apply_batch(db_conn_t *dbc, db_batch_item_t *items, size_t n, ib_error_t *fallback);

/* ---- helpers ----------------------------------------------------------- */

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

/* SHA-256 of len bytes at data as 64 lowercase hex characters + NUL into hex. */
void db_sha256_hex(const void *data, size_t len, char hex[65]);

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
