/*
 * db_dialect.h - what differs between the databases inboxd speaks to: one
 * table of traits per dialect (db_traits_t: column types, the current
 * time, statement shapes, limits, what the driver needs), the inbox DDL and
 * the statement text of the inbox transaction built from it, and the error
 * table that maps SQLSTATE plus native code to a class. The other statement
 * builders of db/ read the traits instead of naming a dialect.
 *
 * Everything here is pure text and data: no ODBC handle is touched, so the
 * SQL Server dialect (which no server here can run) is unit-tested through
 * these functions.
 *
 * thread: any. The tables are immutable.
 */
#ifndef DB_DIALECT_H
#define DB_DIALECT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "db_limits.h"
#include "ib_err.h"

typedef enum {
    DB_DIALECT_AUTO = 0, /* detect from SQL_DBMS_NAME at connect */
    DB_DIALECT_MSSQL,
    DB_DIALECT_POSTGRESQL,
    DB_DIALECT_SQLITE,
    DB_DIALECT_MARIADB,
    DB_DIALECTS /* how many values above: not a dialect */
} db_dialect_t;

/* "auto", "mssql", "postgresql", "sqlite", "mariadb"; -1 for anything else. */
int db_dialect_parse(const char *s);
const char *db_dialect_name(db_dialect_t d);
/* The dialect of a SQL_DBMS_NAME value, DB_DIALECT_AUTO when unknown. */
db_dialect_t db_dialect_from_dbms(const char *dbms_name);

/*
 * One row of an error table. sqlstate is an exact 5-character SQLSTATE, a
 * 2-character class prefix ("08"), or NULL for any; native is a driver
 * native code or DB_NATIVE_ANY. The first matching row wins.
 */
#define DB_NATIVE_ANY (-2147483647L - 1)
typedef struct db_errrule {
    const char *sqlstate;
    long native;
    ib_class_t cls;
} db_errrule_t;

/* The dialect's table, terminated by a row with cls IB_CLASS_NONE. */
const db_errrule_t *db_dialect_errtable(db_dialect_t d);

/*
 * The kinds of column inboxd's tables hold; a dialect's type for each is a
 * row of its traits. The bounded text kinds are as wide as db_limits.h says.
 */
typedef enum {
    DB_COL_ID = 0,   /* DB_MESSAGE_ID_MAX: message ids, session ids, trace context */
    DB_COL_CONSUMER, /* DB_CONSUMER_MAX: the consumer */
    DB_COL_NAME,     /* DB_ENTITY_MAX: entity paths, subjects, content types */
    DB_COL_KEY,      /* DB_IDEM_KEY_MAX: idempotency keys, remote ids */
    DB_COL_DETAIL,   /* DB_DETAIL_MAX: error details, notes */
    DB_COL_WORD,     /* a status or class word, ASCII, 16 bytes */
    DB_COL_TOKEN,    /* a claim token, 32 hex characters */
    DB_COL_HASH,     /* a SHA-256, 64 hex characters */
    DB_COL_BIG,      /* unbounded text (an outbox body, its properties) */
    DB_COL_I64,
    DB_COL_I32,
    DB_COL_TS,     /* a UTC timestamp without zone, milliseconds */
    DB_COL_SERIAL, /* the outbox's id: an identity primary key, whole clause */
    DB_COL_KINDS
} db_col_t;

/*
 * A unique violation as a dialect reports it: the SQLSTATE (NULL: any) and
 * native code (DB_NATIVE_ANY: any), a text it must contain (NULL: none),
 * and the text the violated key's name follows up to the quote close
 * (marker NULL: the text lists the key's columns instead, SQLite).
 */
typedef struct db_unique_shape {
    const char *sqlstate;
    long native;
    const char *needs;
    const char *marker;
    char close;
} db_unique_shape_t;

/*
 * Everything that differs per dialect, as data. Adding a dialect is a row
 * of the table in db_dialect.c (and its schema files, db/schema/). Format
 * fields name their arguments; "" means the dialect needs nothing there.
 */
typedef struct db_traits {
    db_dialect_t dialect;
    const char *name;           /* db.dialect's value */
    const char *dbms[2];        /* SQL_DBMS_NAME contains one of these (NULL: unused) */
    const char *otel_system;    /* OpenTelemetry's db.system */
    const db_errrule_t *errors; /* the error table (db_dialect_errtable) */

    /* ---- columns ---- */
    const char *type[DB_COL_KINDS];
    const char *nullable;              /* after a nullable column's type: " NULL", or "" */
    const char *key_collate;           /* after the inbox key columns' type */
    const char *pk_clause;             /* the inbox key's constraint kind */
    const char *pk_prefix, *pk_suffix; /* the key constraint's name around the table's base */

    /* ---- time ---- */
    const char *now;         /* the current UTC time, as of the statement */
    const char *now_default; /* the same as a column DEFAULT */
    const char *ago_fmt;     /* the UTC time %lld seconds ago ... */
    int ago_sign;            /* ... the seconds given as this sign times seconds */
    const char *later_fmt;   /* the UTC time %ld seconds from now (a lease's end) */
    const char *age_s_fmt;   /* whole seconds since the timestamp expression %s */

    /* ---- statement shapes ---- */
    bool limit_first;             /* the row limit is the first parameter (TOP) */
    const char *top;              /* after SELECT / DELETE: "TOP (?) " */
    const char *limit;            /* at the end: " LIMIT ?" */
    const char *skip_locked_hint; /* after a table read by a claim: " WITH (...)" */
    const char *skip_locked;      /* after a claim's ORDER BY: " FOR UPDATE SKIP LOCKED" */
    const char *read_locked_hint; /* after a table whose uncommitted rows a read must wait for */
    const char *create_guard; /* before CREATE TABLE, %s the table: "IF OBJECT_ID(...) IS NULL\n" */
    const char *if_not_exists;    /* in CREATE TABLE / INDEX: "IF NOT EXISTS " */
    bool partial_indexes;         /* CREATE INDEX ... WHERE */
    const char *create_index;     /* "CREATE INDEX IF NOT EXISTS " */
    const char *index_prefix;     /* before an index's name: "IX_" */
    const char *index_guard_fmt;  /* before CREATE INDEX: table %s, index %s */
    const char *probe_key_fmt;    /* table %s, unfiltered %s, column %s: see db_sql_probe_key */
    const char *probe_unfiltered; /* the clause that refuses a filtered index */
    const char *has_column_fmt;   /* one row, 1 when column %s (2nd) exists on table %s (1st) */
    const char *add_column_fmt;   /* ALTER TABLE %s ADD column %s of type %s */
    const char *column_guard_fmt; /* before an ADD COLUMN of its own: table %s, column %s */
    bool catalog_base;            /* the catalogue names a table by its base (no schema) */
    const char *unique_named_sql; /* db_sql_probe_unique_named's query */
    bool unique_by_columns;       /* a unique violation names columns, not a key (SQLite) */
    bool unique_strip_table;      /* a violation's key name may carry "table." (MariaDB) */
    bool unique_code_shared;      /* the unique violation's code is every constraint's (SQLite) */
    db_unique_shape_t unique[2];
    const char *session_setup;   /* db_sql_session_setup */
    const char *max_connections; /* db_sql_max_connections; NULL: no server */
    const char *trancount_sql;   /* one row: transactions open (NULL: the driver tracks them) */

    /* ---- the driver and the server ---- */
    bool one_writer;             /* db_dialect_one_writer */
    bool claim_shared;           /* db_sql_claim_shared */
    bool insert_rows;            /* db_sql_insert_rows_max */
    bool effect_rows;            /* db_dialect_effect_rows */
    bool effect_rows_exact;      /* db_dialect_effect_rows_exact */
    bool wide_text;              /* text binds as UTF-16 (nvarchar) */
    bool keep_prepared;          /* statements kept prepared per connection (db_stmt.c) */
    bool dead_flag;              /* SQL_ATTR_CONNECTION_DEAD reads a flag (no round trip) */
    bool access_token;           /* db.auth workload_identity */
    unsigned ts_size, ts_digits; /* a timestamp parameter's declared size and digits */

    /* ---- limits ---- */
    size_t claim_rows_max;  /* db_sql_claim_rows_max */
    size_t delete_rows_max; /* db_sql_delete_rows_max */
} db_traits_t;

/* The traits of d; NULL for DB_DIALECT_AUTO and any value that is no dialect. */
const db_traits_t *db_dialect_traits(db_dialect_t d);

/*
 * Configured codes (errors.transient_native / errors.permanent_native): an
 * element is either a native code (integer in JSON) or an exact SQLSTATE
 * (5-character string).
 */
typedef struct db_code {
    bool by_sqlstate;
    char sqlstate[6];
    long native;
} db_code_t;

typedef struct db_codes {
    db_code_t *v; /* owned; free with db_codes_free */
    size_t n;
} db_codes_t;

/*
 * Builds codes from a JSON array (NULL or JSON null = empty list). key names
 * the setting in error messages. On failure out is empty and err says which
 * element is wrong (IB_E_CONFIG, permanent).
 */
ib_err_t db_codes_from_json(const json_t *arr, const char *key, db_codes_t *out, ib_error_t *err);
/* Deep copy; IB_E_NOMEM on failure (dst left empty). */
ib_err_t db_codes_copy(db_codes_t *dst, const db_codes_t *src);
void db_codes_free(db_codes_t *codes);
bool db_codes_match(const db_codes_t *codes, const char *sqlstate, long native);

/*
 * Classifies a database error. Configured permanent codes are checked
 * first, then configured transient codes, then the dialect's table, then
 * rules all dialects share (IMxxx driver manager, 28xxx authentication,
 * 3Dxxx unknown database: permanent); a code no rule knows is transient
 * (bounded retries end in the dead-letter queue anyway, while a wrong
 * "permanent" loses the retry).
 *
 * The result may be IB_CLASS_DUPLICATE: "a unique or constraint violation
 * that may be the inbox key". Only the inbox insert treats it as a
 * duplicate; everywhere else the caller turns it into permanent. The
 * configured lists never produce DUPLICATE and never override it on the
 * inbox insert (see db_dialect_is_unique_violation).
 */
ib_class_t db_classify(db_dialect_t d, const char *sqlstate, long native,
                       const db_codes_t *transient, const db_codes_t *permanent);
/* True when the dialect's table calls (sqlstate, native) a unique violation. */
bool db_dialect_is_unique_violation(db_dialect_t d, const char *sqlstate, long native);
/*
 * True when err (a failed statement's error) is a unique violation - of any
 * unique key, not only the inbox's - and then name holds the constraint or
 * index it names ("" when the text does not say): PostgreSQL 23505
 * (`unique constraint "NAME"`), SQL Server 23000 with 2627 (`constraint
 * 'NAME'`) or 2601 (`unique index 'NAME'`), MariaDB 1062 (`for key 'NAME'`).
 * SQLite names no constraint: name holds the columns it reports
 * ("table.col" or "table.a, table.b"). Reads err->text; never classifies by
 * text alone. thread: any (db_unique.c).
 */
bool db_unique_violation(db_dialect_t d, const ib_error_t *err, char *name, size_t size);
/*
 * True when the error is about the database's setup rather than the data of
 * one message: an undefined table, column or function, a missing privilege,
 * a read-only database, a full disk. Such an error repeats for every message
 * until an operator fixes it, so it must never dead-letter them one by one.
 * Per dialect, as data (db_dialect.c); text is the driver's message, needed
 * only where the dialect has no distinct code (SQLite's "no such table").
 */
bool db_dialect_is_setup_error(db_dialect_t d, const char *sqlstate, long native, const char *text);
/* True when the error means the connection is gone and must be reopened. */
bool db_dialect_is_conn_lost(db_dialect_t d, const char *sqlstate, long native);
/*
 * True when the server refused the login or the database named in the
 * connection string: 28xxx anywhere; SQL Server 18456 (login failed) and
 * 4060 (cannot open database); MariaDB 1045 and 1049; PostgreSQL 3D000.
 * With DB_DIALECT_AUTO (no connection made yet) every dialect's codes
 * count. Mid-run these are transient (a failover refuses logins for a
 * while); on the first connection at start they are configuration errors.
 */
bool db_dialect_is_login_refused(db_dialect_t d, const char *sqlstate, long native);

/*
 * The inbox table name: one identifier or schema.identifier, each
 * [A-Za-z_][A-Za-z0-9_]* and at most 63 bytes. It is pasted into SQL text,
 * so this check is what keeps it from being anything else.
 */
bool db_table_name_valid(const char *table);
/* The last component of a table name ("dbo.inbox" -> "inbox"): index and lock names derive from it. */
const char *db_table_base(const char *table);

/* Statement text. Each renders into buf and returns IB_E_INVAL when it does not fit. */

/*
 * The inbox DDL, one statement per element of out (at most DB_DDL_MAX), each
 * idempotent (creates only what is absent). Strings point into buf.
 */
#define DB_DDL_MAX 8
ib_err_t db_sql_ddl(db_dialect_t d, const char *table, char *buf, size_t size, const char **out,
                    size_t *n);
/*
 * INSERT of one inbox row. Parameters in order: consumer, message_id,
 * idempotency_key, body_sha256, status, entity, sequence_number,
 * delivery_count, enqueued_at, received_at, error_class, error_detail;
 * processed_at is the dialect's current time.
 */
ib_err_t db_sql_insert(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * The rows holding either key. Parameters: consumer, message_id,
 * idempotency_key. Columns: body_sha256, status.
 */
ib_err_t db_sql_select_existing(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * The replay takeover: turns a row recorded 'failed' (or resolved 'retry')
 * with the same body hash into 'processed', clearing its error columns.
 * Parameters: sequence_number, delivery_count, consumer, message_id (or,
 * by_key, idempotency_key), body_sha256. Affects one row or none. One
 * statement per key, each on a whole unique key (db_key_arm_binds says why).
 */
ib_err_t db_sql_takeover(db_dialect_t d, const char *table, bool by_key, char *buf, size_t size);
/*
 * The checks run when migrate is false. probe_columns selects every inbox
 * column from the table with no rows: it fails when the table or a column
 * is missing. probe_key returns one row with the number of unique indexes
 * (or primary keys) on exactly (consumer, column): 0 means no key. On
 * message_id the key must be unfiltered (it holds every row); on
 * idempotency_key it may filter out NULL (the shipped schemas do).
 */
ib_err_t db_sql_probe_columns(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_sql_probe_key(db_dialect_t d, const char *table, const char *column, char *buf,
                          size_t size);
/*
 * One row, one integer: 1 when table has column, else 0 (read from the
 * catalogue, so a missing column is no error). column is inboxd's own.
 */
ib_err_t db_sql_has_column(db_dialect_t d, const char *table, const char *column, char *buf,
                           size_t size);
/*
 * ALTER TABLE adding column (nullable) of kind to table; with guarded, a
 * dialect whose ADD has no IF NOT EXISTS (SQL Server) tests the column
 * first. SQLite's ADD COLUMN never tests: a racing migrator's error is
 * re-probed by the caller.
 */
ib_err_t db_sql_add_column(db_dialect_t d, const char *table, const char *column, db_col_t kind,
                           bool guarded, char *buf, size_t size);
/*
 * An index named <base>_<name> (SQL Server: IX_<base>_<name>) on table's
 * cols ("(a, b)"), created when absent; filter is its WHERE, dropped where
 * the dialect has no partial index (traits partial_indexes: the caller
 * chooses columns that do without).
 */
ib_err_t db_sql_index(db_dialect_t d, const char *table, const char *name, const char *cols,
                      const char *filter, char *buf, size_t size);
/*
 * A unique key a route names in "constraints", as the dialect's unique
 * violation names it (db_unique_violation). Renders a query returning one
 * row with the number of unique constraints or indexes by that name
 * (PostgreSQL, SQL Server, MariaDB: parameter 1 is the name; SQLite, whose
 * name is "table.a, table.b": parameter 1 is the table, parameter 2 the
 * columns "a,b" in index order, and *nparams says which). IB_E_INVAL when
 * name cannot be one (a SQLite name that is not "table.column, ...").
 * thread: any (db_unique.c).
 */
ib_err_t db_sql_probe_unique_named(db_dialect_t d, const char *name, char *buf, size_t size,
                                   char *table, size_t tsize, char *cols, size_t csize,
                                   int *nparams);
/*
 * One bounded retention batch of 'processed' rows: 'failed' and
 * 'uncertain' rows are never swept, they are what an operator reconciles
 * from. Parameters: cutoff (timestamp, UTC), batch size (integer); the
 * order depends on the dialect and is given by *limit_first (true: batch
 * size first).
 */
ib_err_t db_sql_sweep(db_dialect_t d, const char *table, char *buf, size_t size, bool *limit_first);
/*
 * The most rows one bounded delete (sweep, outbox cleanup) takes: on SQL
 * Server below the 5,000 locks at which it escalates to a table lock.
 */
size_t db_sql_delete_rows_max(db_dialect_t d);
/*
 * The collation of SQL Server's key columns (consumer, message_id,
 * idempotency_key): binary, so that keys compare as on PostgreSQL and
 * SQLite and as the batch compares them (byte for byte), not as the
 * database's default collation does (usually case-insensitive).
 */
#define DB_MSSQL_KEY_COLLATE " COLLATE Latin1_General_100_BIN2"
/*
 * The same bounded batch for any table with a status and a timestamp column
 * (the outbox's cleanup): rows with that status older than the cutoff.
 * status and time_column are inboxd's own constants, never user input.
 */
ib_err_t db_sql_delete_bounded(db_dialect_t d, const char *table, const char *status,
                               const char *time_column, char *buf, size_t size, bool *limit_first);
/*
 * The single-sweeper lock: a statement taking it without waiting and
 * returning one row with 1 (taken) or 0 (held elsewhere), and the statement
 * releasing it. Both render "" when the database serialises writers itself
 * (SQLite).
 */
ib_err_t db_sql_sweep_lock(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_sql_sweep_unlock(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * The same pair for any purpose ("sweep", "outbox-cleanup"): a session-level
 * lock named after purpose and table, taken without waiting.
 */
ib_err_t db_sql_try_lock(db_dialect_t d, const char *purpose, const char *table, char *buf,
                         size_t size);
ib_err_t db_sql_unlock(db_dialect_t d, const char *purpose, const char *table, char *buf,
                       size_t size);
/*
 * The lock that serialises concurrent migrations across replicas: a
 * statement run first, waiting up to DB_MIGRATE_LOCK_WAIT_S and returning
 * one row with 1 when the lock was taken (anything else: not granted), and
 * the statement releasing it after the migration's COMMIT or ROLLBACK.
 * SQL Server and MariaDB hold it in the session (sp_getapplock Session,
 * GET_LOCK), PostgreSQL in the transaction (the release renders ""); both
 * render "" when the dialect needs none (SQLite: the database lock does it).
 */
#define DB_MIGRATE_LOCK_WAIT_S 60
ib_err_t db_sql_migrate_lock(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_sql_migrate_unlock(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * A statement run once on every new connection, "" when none: SQL Server
 * gets SET XACT_ABORT ON, so a run-time error always rolls back the whole
 * transaction and no doomed transaction outlives the error, and SET NOCOUNT
 * OFF, so row counts are reported whatever the server's user options.
 */
const char *db_sql_session_setup(db_dialect_t d);
/*
 * One row, one integer: how many connections the server accepts for this
 * login - PostgreSQL max_connections less the reserved slots, lowered by
 * the role's and the database's CONNECTION LIMIT; SQL Server
 * @@MAX_CONNECTIONS; MariaDB/MySQL max_connections, lowered by
 * max_user_connections. NULL for SQLite (no server).
 */
const char *db_sql_max_connections(db_dialect_t d);
/*
 * The claim of a batch: one statement inserting rows inbox rows (each row's
 * parameters as for db_sql_insert, row after row; see db_sql_claim_shared
 * for PostgreSQL) that skips every row whose key (message id or
 * idempotency key) is already taken, and returns one row (consumer,
 * message_id) per row it inserted. A row it skips is a duplicate or a
 * conflict, decided afterwards by the body hash.
 *
 *   PostgreSQL  INSERT ... SELECT FROM (VALUES (...), ...) ON CONFLICT DO
 *               NOTHING RETURNING
 *   SQLite      the same (3.35 or later for RETURNING; DO NOTHING skips only
 *               uniqueness, where INSERT OR IGNORE would also skip NOT NULL
 *               and CHECK failures)
 *   SQL Server  INSERT ... OUTPUT ... SELECT FROM (VALUES ...) WHERE NOT
 *               EXISTS (... WITH (UPDLOCK, HOLDLOCK)): the key-range lock
 *               makes a concurrent claim of the same key wait, then skip
 *   MariaDB     none: renders "" (a batch then runs one transaction per
 *               message)
 *
 * rows must be between 1 and db_sql_claim_rows_max(d). IB_E_INVAL when the
 * text does not fit in size (about 160 bytes per row are needed).
 */
ib_err_t db_sql_claim(db_dialect_t d, const char *table, size_t rows, char *buf, size_t size);
/* The most rows one claim statement carries (parameter limits); 0 = no claim statement. */
size_t db_sql_claim_rows_max(db_dialect_t d);
/*
 * True when d's claim takes the columns every row of a batch shares
 * (consumer, status, entity, error_class, error_detail: DB_CLAIM_SHARED of
 * them, in that order) once, before the rows, and then
 * DB_CLAIM_ROW_PARAMS per row (message_id, idempotency_key, body_sha256,
 * sequence_number, delivery_count, enqueued_at, received_at). Fewer
 * parameters are fewer to convert and send: the claim was the largest
 * cost of a batch in psqlODBC.
 */
#define DB_CLAIM_SHARED 5
#define DB_CLAIM_ROW_PARAMS 7
bool db_sql_claim_shared(db_dialect_t d);
/*
 * True when d has one writer at a time (SQLite): a transaction that reads
 * keys and then writes waits on another's read lock for the whole busy
 * timeout, so work that reads before it writes stays in short transactions
 * of their own there.
 */
bool db_dialect_one_writer(db_dialect_t d);
/*
 * True when d claims an HTTP batch with one INSERT that skips taken keys
 * and returns the rows it inserted, and finishes it with one UPDATE joined
 * to the rows' results (db_effect.c; PostgreSQL, SQL Server); elsewhere
 * each row has its own.
 */
bool db_dialect_effect_rows(db_dialect_t d);
/*
 * True when d's batch claim and finish carry exactly one row per item
 * (SQL Server: its claim's NOT EXISTS does not see rows the same statement
 * inserts, so a padding copy of a row would raise the unique violation);
 * false where the rows are padded to a few sizes with copies of the first
 * (PostgreSQL's ON CONFLICT DO NOTHING skips the copy).
 */
bool db_dialect_effect_rows_exact(db_dialect_t d);
/*
 * Appends row rows times, separated by ", ", at buf + *used (a VALUES list
 * of parameter rows); false when it does not fit (buf then unspecified).
 */
bool db_sql_append_rows(char *buf, size_t size, size_t *used, const char *row, size_t rows);
/*
 * A plain INSERT's parameter sets sent as one statement of several VALUES
 * rows (db_run_array): the most parameters such a statement holds on d; 0
 * where d runs the sets as a parameter array instead.
 */
size_t db_sql_insert_rows_max(db_dialect_t d);
/*
 * Where the VALUES row of sql starts when sql is exactly "INSERT INTO name
 * (columns) VALUES (?, ..., ?)" with nparams markers and nothing else (no
 * expression, RETURNING, ON CONFLICT or second statement); 0 otherwise.
 */
size_t db_sql_insert_values_at(const char *sql, size_t nparams);
/*
 * sql (as db_sql_insert_values_at accepted it at at) with rows VALUES rows
 * of nparams markers, into buf; false when it does not fit.
 */
bool db_sql_insert_rows(const char *sql, size_t at, size_t nparams, size_t rows, char *buf,
                        size_t size);
/* The current UTC time as an SQL expression. */
const char *db_sql_now(db_dialect_t d);
/* The UTC time seconds ago as an SQL expression into buf; false when it does not fit. */
bool db_sql_ago(db_dialect_t d, long long seconds, char *buf, size_t size);
/* The UTC time seconds from now (a lease's end) into buf; false when it does not fit or d is none. */
bool db_sql_later(db_dialect_t d, long seconds, char *buf, size_t size);

#endif
