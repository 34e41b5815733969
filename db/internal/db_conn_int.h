/*
 * db_conn_int.h - the inside of a db_conn_t, shared by the sources of db/ only. Not part
 * of the public API (db_conn.h and db_inbox.h are).
 */
#ifndef DB_CONN_INT_H
#define DB_CONN_INT_H

#include <sql.h>
#include <sqlext.h>

#include "db_conn.h"
#include "db_inbox.h"

#define DB_SQL_MAX 4096

typedef struct db_kept db_kept_t; /* a statement kept prepared (db_stmt.c) */

struct db_conn {
    SQLHENV env;
    SQLHDBC dbc;
    bool connected;    /* SQLDriverConnect succeeded and not yet disconnected */
    bool broken;       /* lost; reopen before the next transaction */
    bool in_txn;       /* a statement ran since the last commit or rollback */
    bool wide_text;    /* bind text as UTF-16 (SQL Server's nvarchar) */
    bool param_arrays; /* the driver executes parameter arrays (SQL_ATTR_PARAMSET_SIZE) */
    bool freetds;      /* the driver is FreeTDS (libtdsodbc): see db_conn.c's wide_shape */
    long reconnects;
    db_dialect_t want;    /* as configured */
    db_dialect_t dialect; /* resolved */
    char *connstr;        /* wiped on free */
    char *table;
    long stmt_timeout_s;
    long login_timeout_s;
    db_codes_t transient, permanent;
    db_token_fn token_fn; /* db.auth workload_identity; NULL: the connection string logs in */
    void *token_arg;
    unsigned char *token_buf; /* ACCESSTOKEN, alive as long as the connection handle */
    size_t token_len;
    char sql_insert[DB_SQL_MAX];
    char sql_existing[DB_SQL_MAX];
    char *sql_claim; /* the batch claim for sql_claim_rows rows; owned */
    size_t sql_claim_rows;
    db_kept_t *kept; /* statements kept prepared (db_stmt.c); owned */
    size_t nkept;
    unsigned long kept_clock;
    db_phase_fn phase_fn; /* tracing hook (db_conn_set_phase_hook); NULL: none */
    void *phase_arg;
    size_t phase_item; /* the batch item db_inbox_apply runs for (0 alone) */
};

/* The clock phases are timed by (ns since the epoch); 0 when no hook is set. */
long long db_phase_now(const db_conn_t *dbc);
/* Reports a phase that started at start_ns to the hook, if any. */
void db_phase_report(db_conn_t *dbc, db_phase_t phase, size_t item, size_t stmt, size_t rows,
                     long long start_ns, const ib_error_t *err);

/* A bound parameter, including the internal timestamp type. */
typedef enum { DB_BIND_PARAM, DB_BIND_TS } db_bind_kind_t;

typedef struct db_bind {
    db_bind_kind_t kind;
    db_param_t p;    /* DB_BIND_PARAM */
    long long ts_ms; /* DB_BIND_TS: ms since the epoch, UTC; <= 0 = NULL */
} db_bind_t;

#define DB_B(param) ((db_bind_t){DB_BIND_PARAM, (param), 0})
#define DB_B_TS(ms) ((db_bind_t){DB_BIND_TS, DB_NULL(), (ms)})

/* Makes sure dbc is connected, reopening a broken connection. */
ib_err_t db_conn_ensure(db_conn_t *dbc, ib_error_t *err);

/*
 * Runs sql with binds. With row_cb != NULL each fetched row is passed to it
 * (return false to stop). With rows != NULL the affected row count is
 * stored. On failure err is filled and classified and the connection is
 * marked broken when it is gone; no rollback is done here.
 */
typedef bool (*db_row_cb)(SQLHSTMT st, void *arg);
ib_err_t db_run(db_conn_t *dbc, const char *sql, const db_bind_t *binds, size_t nbinds,
                db_row_cb row_cb, void *arg, long long *rows, ib_error_t *err);
/*
 * db_run for a statement that runs often (the inbox's own, a route's): it is
 * kept prepared on the connection where db_stmt_keepable says so.
 */
ib_err_t db_run_kept(db_conn_t *dbc, const char *sql, const db_bind_t *binds, size_t nbinds,
                     db_row_cb row_cb, void *arg, long long *rows, ib_error_t *err);

/* ---- statements kept prepared (db_stmt.c; thread: the owner of dbc) ---- */

/* True when sql may be kept prepared on dbc (its dialect, a single statement). */
bool db_stmt_keepable(const db_conn_t *dbc, const char *sql);
/* The signature code of one parameter: the ODBC types it is bound with. */
unsigned char db_stmt_sig_param(const db_conn_t *dbc, const db_param_t *p);
/*
 * A statement handle prepared with sql for parameters of signature sig
 * (nsig codes): a kept one when there is one, otherwise a new one (kept
 * when a slot is free). Give it back with db_stmt_give.
 */
ib_err_t db_stmt_take(db_conn_t *dbc, const char *sql, const unsigned char *sig, size_t nsig,
                      SQLHSTMT *st, ib_error_t *err);
/* Gives st back: closed for the next execution when reuse, otherwise freed. */
void db_stmt_give(db_conn_t *dbc, SQLHSTMT st, bool reuse);

/*
 * One parameter of a kept statement run one set at a time (db_run_kept):
 * where its value lives between executions, and the arguments of its last
 * SQLBindParameter. A binding stays with the statement (SQL_CLOSE keeps
 * it), so binding the same arguments again is skipped: the value is
 * written into the same storage and read at SQLExecute.
 */
/* SQLBindParameter's arguments for one parameter, the indicator aside. */
typedef struct db_binding {
    SQLSMALLINT ctype, sqltype, digits;
    SQLULEN size;
    SQLPOINTER ptr;
    SQLLEN buflen;
} db_binding_t;

typedef struct db_pbuf {
    bool bound;        /* b is the statement's binding */
    db_binding_t b;
    SQLLEN ind;
    union {
        long long i;
        double f;
        SQL_TIMESTAMP_STRUCT ts;
    } v;
    char *text; /* a copy of a short text (DB_PBUF_TEXT_MAX), so its address stays */
    size_t text_cap;
} db_pbuf_t;

/* Texts up to this many bytes are copied into a db_pbuf_t; longer ones are bound in place. */
#define DB_PBUF_TEXT_MAX 256

/*
 * The n parameter slots of st when it is a kept statement prepared for n
 * parameters (made on first use); NULL otherwise (bind each execution).
 */
db_pbuf_t *db_stmt_params(db_conn_t *dbc, SQLHSTMT st, size_t n);
/* Frees every kept statement (before the connection closes). */
void db_stmt_forget_all(db_conn_t *dbc);
/* True when text is bound as a long type (SQL Server varchar(max)). */
bool db_text_is_long(const db_conn_t *dbc, const char *text);
/* Whether a and b hold the same text, or are both NULL. */
bool db_same_text(const char *a, const char *b);

/*
 * Runs sql once per parameter set: sets[i] points to the nparams
 * parameters of set i. Where the driver takes parameter arrays the sets go
 * as one array (SQL_ATTR_PARAMSET_SIZE, bound column-wise), which psqlODBC
 * and SQL Server's drivers send in one round trip; otherwise one execution
 * per set. Every set must agree on each column's type (db_params_compatible);
 * a NULL fits any type. Any set that fails fails the call (err filled as by
 * db_run); nothing is rolled back here.
 */
ib_err_t db_run_array(db_conn_t *dbc, const char *sql, const db_param_t *const *sets, size_t nsets,
                      size_t nparams, ib_error_t *err);
/* True when parameter lists a and b (n each) can share one parameter array. */
bool db_params_compatible(const db_param_t *a, const db_param_t *b, size_t n);

/* Inbox helpers shared by db_inbox.c and db_batch.c. */
#define DB_CLAIM_NPARAMS 12
ib_err_t db_claim_check(const db_claim_t *c, ib_error_t *err);
/* The DB_CLAIM_NPARAMS parameters of the inbox INSERT for c, in db_sql_insert's order. */
void db_claim_binds(const db_claim_t *c, const char *status, const char *error_class,
                    const char *detail, db_bind_t *b);
/*
 * Reads the rows holding either key of c in the current transaction: *same
 * and *other count those with the same and with another body hash.
 */
ib_err_t db_existing_lookup(db_conn_t *dbc, const db_claim_t *c, int *same, int *other,
                            ib_error_t *err);
/*
 * The five parameters of a lookup by either key written as two arms, each on
 * a whole unique key ("consumer = ? AND message_id = ?" UNION ALL "consumer =
 * ? AND idempotency_key = ? AND message_id <> ?"). One arm with an OR lets
 * PostgreSQL keep, for the connection's life, a generic plan made while the
 * table was empty that reads every row of the consumer per lookup. Even
 * two arms may get a generic plan that reads one arm by consumer alone (seen
 * as the table grew from empty), so lookups are not kept statements: each
 * execution is planned for its own values and the table's size of the day.
 */
#define DB_KEY_ARMS_NPARAMS 5
void db_key_arm_binds(const db_claim_t *c, db_bind_t *b);
/* err := the DB_CONFLICT error of c (IB_E_CONFLICT, permanent). */
void db_conflict_error(const db_claim_t *c, ib_error_t *err);

/* An item to claim and its key, for sorting with db_key_order (db_batch.c). */
typedef struct db_keyed {
    const db_claim_t *c;
    size_t i; /* the item's index in its batch */
} db_keyed_t;
/*
 * qsort order of db_keyed_t by (consumer, message_id) byte for byte, as the
 * binary key collation orders them, then by index: replicas claiming
 * overlapping batches lock the keys they share in one order.
 */
int db_key_order(const void *a, const void *b);

/* The statements of one message. */
typedef struct db_stmt_list {
    const db_stmt_t *stmts;
    size_t nstmts;
} db_stmt_list_t;
/*
 * Runs the statements of n messages in the open transaction, those of one
 * shape (the same texts, compatible parameter types) as one parameter array
 * per statement (db_run_array), in the order of their first message. On
 * failure err is filled (a unique violation is permanent: it is the route's
 * own table) and nothing is rolled back here. In db_batch.c.
 */
ib_err_t db_batch_run_stmts(db_conn_t *dbc, const db_stmt_list_t *lists, size_t n,
                            ib_error_t *err);

/*
 * UTF-8 to UTF-16 code units; invalid input becomes U+FFFD. Writes to out
 * when not NULL; returns the number of units either way.
 */
size_t db_utf8_to_utf16(const char *s, size_t len, SQLWCHAR *out);
/*
 * n UTF-16 units to UTF-8 in out (at least 3 * n + 1 bytes), terminated; a
 * lone surrogate becomes U+FFFD. Returns the bytes written.
 */
size_t db_utf16_to_utf8(const SQLWCHAR *w, size_t n, char *out);

/* A db_row_cb storing column 1 of the first row as an integer in *(long long *)arg. */
bool db_row_first_int(SQLHSTMT st, void *arg);

/*
 * Runs ddl (n idempotent statements) in one transaction under the migration
 * lock keyed by table (serialising replicas that start together), commits
 * and releases the lock. thread: the owner of dbc.
 */
ib_err_t db_migrate_ddl(db_conn_t *dbc, const char *table, const char *const *ddl, size_t n,
                        ib_error_t *err);

/* Rolls back, ignoring (but noting a lost connection from) any failure. */
void db_rollback_quiet(db_conn_t *dbc);

/* SQL_COPT_SS_ACCESS_TOKEN of msodbcsql.h, and the longest token taken. */
#define DB_SQL_COPT_SS_ACCESS_TOKEN 1256
#define DB_ACCESS_TOKEN_MAX 16384

/*
 * With a token function: fetches the current token, builds the ACCESSTOKEN
 * and sets it on the unconnected handle (db_token.c). IB_E_CONFIG when the
 * driver refuses the attribute. The buffer lives until db_token_release,
 * called when the connection handle is freed.
 */
ib_err_t db_token_apply(db_conn_t *dbc, ib_error_t *err);
void db_token_release(db_conn_t *dbc);

/*
 * Reads column col of the current row as UTF-8 text of any length into a
 * malloc'd string (*out NULL for SQL NULL; *len its length when len is not
 * NULL). SQL Server's text is read wide (SQL_C_WCHAR) and converted here:
 * read narrow, a driver converts it to the process's C locale charset
 * (FreeTDS: ISO-8859-1, "?" for the rest). false when out of memory or the
 * driver failed. thread: the owner of dbc.
 */
bool db_get_text(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char **out, size_t *len);
/*
 * The same into buf (size bytes); "" for NULL. false when the driver failed
 * or the text does not fit (buf then holds "").
 */
bool db_get_text_buf(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char *buf,
                     size_t size);
/*
 * The same, its length in *len, read by the driver straight into buf when
 * the text is read narrow (no copy: a large value's parts). false for NULL too.
 */
bool db_get_text_into(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char *buf,
                      size_t size, size_t *len);

/* Fills err from the diagnostics of handle and classifies them. */
ib_err_t db_diag_error(db_conn_t *dbc, SQLSMALLINT htype, SQLHANDLE h, const char *what,
                       ib_error_t *err);

#endif
