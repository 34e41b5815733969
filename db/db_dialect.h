/*
 * db_dialect.h - what differs between the databases inboxd speaks to: the
 * inbox DDL, the statement text of the inbox transaction, the current-time
 * expression, and the error table that maps SQLSTATE plus
 * native code to a class.
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

#include "ib_err.h"

typedef enum {
    DB_DIALECT_AUTO = 0, /* detect from SQL_DBMS_NAME at connect */
    DB_DIALECT_MSSQL,
    DB_DIALECT_POSTGRESQL,
    DB_DIALECT_SQLITE,
    DB_DIALECT_MARIADB,
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
 * (or primary keys) on exactly (consumer, message_id): 0 means no key.
 */
ib_err_t db_sql_probe_columns(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_sql_probe_key(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * probe_idem_key: the same count for unique indexes on exactly (consumer,
 * idempotency_key), filtered or not (the shipped schemas filter out NULL).
 */
ib_err_t db_sql_probe_idem_key(db_dialect_t d, const char *table, char *buf, size_t size);
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
 * to the rows' results (db_effect.c); elsewhere each row has its own.
 */
bool db_dialect_effect_rows(db_dialect_t d);
/*
 * Appends row rows times, separated by ", ", at buf + *used (a VALUES list
 * of parameter rows); false when it does not fit (buf then unspecified).
 */
bool db_sql_append_rows(char *buf, size_t size, size_t *used, const char *row, size_t rows);
/* The current UTC time as an SQL expression. */
const char *db_sql_now(db_dialect_t d);
/* The UTC time seconds ago as an SQL expression into buf; false when it does not fit. */
bool db_sql_ago(db_dialect_t d, long long seconds, char *buf, size_t size);

#endif
