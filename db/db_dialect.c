/*
 * db_dialect.c - SQL text and error tables per dialect. Pure data and
 * string formatting; see db_dialect.h.
 */
#include "db_dialect.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define T IB_CLASS_TRANSIENT
#define P IB_CLASS_PERMANENT
#define D IB_CLASS_DUPLICATE
#define ANY DB_NATIVE_ANY
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, IB_CLASS_NONE                                                                     \
    }

/*
 * SQL Server (ODBC Driver 18 / FreeTDS): 2627 is a PRIMARY KEY or UNIQUE
 * constraint, 2601 a unique index. Transient natives, from the error list
 * Microsoft's own client retries (SqlConfigurableRetryFactory
 * .BaselineTransientErrors) and Azure SQL's transient-error guidance:
 * deadlock victim (1205), no lock resources (1204), lock request timeout
 * under SET LOCK_TIMEOUT (1222), client timeout (-2), Azure SQL
 * reconfiguration, failover and throttling (40197, 40143, 40540, 40501,
 * 40613, 49918-49920, 10928, 10929), a readable secondary still starting
 * (4221), a paused or resuming serverless database / SQL pool (42108,
 * 42109), the network (10053, 10054, 10060), and "cannot open database"
 * (4060) and "login failed" (18456) while a database fails over, and a
 * session ended by KILL (596). At start
 * 4060 and 18456 are configuration errors instead: see
 * db_dialect_is_login_refused. THROW/RAISERROR user errors arrive as 42000
 * with the user's number, so they are permanent unless configured.
 */
static const db_errrule_t mssql_rules[] = {
    {"23000", 2627, D}, {"23000", 2601, D}, {NULL, 1205, T},
    {NULL, 1204, T},    {NULL, 1222, T},    {NULL, -2, T},
    {NULL, 40197, T},   {NULL, 40143, T},   {NULL, 40540, T},
    {NULL, 40501, T},   {NULL, 40613, T},   {NULL, 49918, T},
    {NULL, 49919, T},   {NULL, 49920, T},   {NULL, 10928, T},
    {NULL, 10929, T},   {NULL, 4221, T},    {NULL, 42108, T},
    {NULL, 42109, T},   {NULL, 10053, T},   {NULL, 10054, T},
    {NULL, 10060, T},   {NULL, 596, T},     {NULL, 4060, T},
    {NULL, 18456, T},   {"08", ANY, T},     {"HYT00", ANY, T},
    {"HYT01", ANY, T},  {"40001", ANY, T},  {"22", ANY, P},
    {"23", ANY, P},     {"42", ANY, P},     END,
};

/*
 * PostgreSQL through psqlODBC: the native code is always 1, so everything
 * is decided by SQLSTATE. 57P0x is a terminated backend or a shutting down
 * server, 57014 a statement timeout, 53xxx resource exhaustion (too many
 * connections), 55P03 a lock timeout.
 */
static const db_errrule_t postgresql_rules[] = {
    {"23505", ANY, D}, {"40001", ANY, T}, {"40P01", ANY, T}, {"08", ANY, T},
    {"57P01", ANY, T}, {"57P02", ANY, T}, {"57P03", ANY, T}, {"57014", ANY, T},
    {"53", ANY, T},    {"55P03", ANY, T}, {"HYT00", ANY, T}, {"HYT01", ANY, T},
    {"22", ANY, P},    {"23", ANY, P},    {"42", ANY, P},    END,
};

/*
 * sqlite3odbc reports SQLSTATE HY000 with the SQLite result code as native:
 * 19 CONSTRAINT (any kind: the inbox insert confirms it by reading the
 * row), 5 BUSY and 6 LOCKED after the driver's Timeout, 10 IOERR, 13 FULL,
 * 15 PROTOCOL; 1 ERROR is an SQL error, 18 TOOBIG, 20 MISMATCH, 25 RANGE,
 * 8 READONLY.
 */
static const db_errrule_t sqlite_rules[] = {
    {NULL, 19, D},  {NULL, 5, T},      {NULL, 6, T},   {NULL, 10, T},  {NULL, 13, T}, {NULL, 15, T},
    {"08", ANY, T}, {"HYT00", ANY, T}, {NULL, 1, P},   {NULL, 8, P},   {NULL, 18, P}, {NULL, 20, P},
    {NULL, 25, P},  {"22", ANY, P},    {"23", ANY, P}, {"42", ANY, P}, END,
};

/*
 * MariaDB Connector/ODBC: 1062 duplicate entry; 1213 deadlock, 1205 lock
 * wait timeout, 2006/2013 server gone, 1927 connection killed, 1040 too
 * many connections, 1969 max_statement_time exceeded; 1045 access denied,
 * 1044 no access to the database and 1049 unknown database are
 * transient mid-run (a failover) and configuration errors at start (see
 * db_dialect_is_login_refused).
 */
static const db_errrule_t mariadb_rules[] = {
    {NULL, 1062, D},
    {NULL, 1213, T},
    {NULL, 1205, T},
    {NULL, 2006, T},
    {NULL, 2013, T},
    {NULL, 1927, T},
    {NULL, 1040, T},
    {NULL, 1045, T},
    {NULL, 1044, T},
    {NULL, 1049, T},
    {NULL, 1969, T},
    {"08", ANY, T},
    {"40001", ANY, T},
    {"HYT00", ANY, T},
    {"HYT01", ANY, T},
    {"22", ANY, P},
    {"23", ANY, P},
    {"42", ANY, P},
    END,
};

static const db_errrule_t no_rules[] = {END};

#undef T
#undef P
#undef D
#undef ANY
#undef END

/* ---- the traits table ------------------------------------------------------ */

/*
 * One row per dialect: everything the statement builders of db/ need to
 * know about it. The column types mirror db/schema/<dialect>.sql and
 * <dialect>_outbox.sql (tests/unit/test_db_dialect.c and test_db_outbox_sql.c
 * hold the rendered DDL against them).
 *
 * "now" is the statement's time everywhere: SYSUTCDATETIME(), strftime's
 * 'now' and UTC_TIMESTAMP(3) are read when the statement runs, and so is
 * PostgreSQL's clock_timestamp(); PostgreSQL's now() would be the start of
 * the transaction, which in a batch or a claim that waited on a lock is
 * already in the past: a lease would end early, a stale lease would look
 * alive and an age would be short by the wait.
 */
/* A bounded text column's type (db_limits.h gives n). */
#define NVARCHAR(n) "nvarchar(" DB_WIDTH(n) ")"
#define VARCHAR(n) "varchar(" DB_WIDTH(n) ")"

static const db_traits_t traits[] = {
    {
        .dialect = DB_DIALECT_MSSQL,
        .name = "mssql",
        .dbms = {"SQL Server", NULL},
        .otel_system = "microsoft.sql_server",
        .errors = mssql_rules,
        .type = {NVARCHAR(DB_MESSAGE_ID_MAX), NVARCHAR(DB_CONSUMER_MAX), NVARCHAR(DB_ENTITY_MAX),
                 NVARCHAR(DB_IDEM_KEY_MAX), NVARCHAR(DB_DETAIL_MAX), "varchar(16)", "varchar(32)",
                 "char(64)", "nvarchar(max)", "bigint", "int", "datetime2(3)",
                 "bigint IDENTITY(1,1) NOT NULL PRIMARY KEY CLUSTERED"},
        .nullable = " NULL",
        .key_collate = DB_MSSQL_KEY_COLLATE,
        .pk_clause = "PRIMARY KEY CLUSTERED",
        .pk_prefix = "PK_",
        .pk_suffix = "",
        .now = "SYSUTCDATETIME()",
        .now_default = "SYSUTCDATETIME()",
        .ago_fmt = "DATEADD(second, %lld, SYSUTCDATETIME())",
        .ago_sign = -1,
        .later_fmt = "DATEADD(second, %ld, SYSUTCDATETIME())",
        .age_s_fmt = "DATEDIFF_BIG(second, %s, SYSUTCDATETIME())",
        .limit_first = true,
        .top = "TOP (?) ",
        .limit = "",
        .skip_locked_hint = " WITH (UPDLOCK, READPAST, ROWLOCK)",
        .skip_locked = "",
        /*
         * Under read-committed snapshot (Azure SQL's default) a plain read
         * sees the last committed version and skips a row inserted by a
         * transaction still open; READCOMMITTEDLOCK waits for it.
         */
        .read_locked_hint = " WITH (READCOMMITTEDLOCK)",
        .create_guard = "IF OBJECT_ID(N'%s', N'U') IS NULL\n",
        .if_not_exists = "",
        .partial_indexes = true,
        .create_index = "CREATE NONCLUSTERED INDEX ",
        .index_prefix = "IX_",
        .index_guard_fmt = "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = "
                           "OBJECT_ID(N'%s') AND name = N'%s')\n",
        .probe_key_fmt =
            "SELECT COUNT(*) FROM sys.indexes i WHERE i.object_id = OBJECT_ID(N'%s') "
            "AND i.is_unique = 1 %s"
            "AND (SELECT COUNT(*) FROM sys.index_columns ic WHERE ic.object_id = "
            "i.object_id AND ic.index_id = i.index_id AND ic.is_included_column = 0) = 2 "
            "AND (SELECT COUNT(*) FROM sys.index_columns ic JOIN sys.columns c ON "
            "c.object_id = ic.object_id AND c.column_id = ic.column_id WHERE "
            "ic.object_id = i.object_id AND ic.index_id = i.index_id AND "
            "ic.is_included_column = 0 AND c.name IN (N'consumer', N'%s')) = 2",
        .probe_unfiltered = "AND i.has_filter = 0 ",
        .has_column_fmt = "SELECT CASE WHEN COL_LENGTH(N'%s', N'%s') IS NULL THEN 0 ELSE 1 END",
        .add_column_fmt = "ALTER TABLE %s ADD %s %s NULL",
        .column_guard_fmt = "IF COL_LENGTH(N'%s', N'%s') IS NULL\n",
        /* PRIMARY KEY and UNIQUE constraints own an index of their name */
        .unique_named_sql = "SELECT COUNT(*) FROM sys.indexes WHERE is_unique = 1 AND name = ?",
        /* 2627: "Violation of PRIMARY KEY|UNIQUE KEY constraint 'NAME'. ..."
         * 2601: "Cannot insert duplicate key row in object 'T' with unique index 'NAME'. ..." */
        .unique = {{"23000", 2627, NULL, "constraint '", '\''},
                   {"23000", 2601, NULL, "unique index '", '\''}},
        /*
         * XACT_ABORT ON: any run-time error rolls the whole transaction back
         * at once, so no statement can leave a doomed or half-done
         * transaction open behind a caught error (Microsoft's ODBC drivers
         * leave it OFF). NOCOUNT OFF: a server or login whose user options
         * include NOCOUNT would make every row count -1 (SQLRowCount), and a
         * claim or a mark that counts its rows would look lost.
         */
        .session_setup = "SET XACT_ABORT ON; SET NOCOUNT OFF",
        .max_connections = "SELECT @@MAX_CONNECTIONS",
        .trancount_sql = "SELECT @@TRANCOUNT",
        .wide_text = true,
        .dead_flag = true,
        .access_token = true,
        /*
         * SQL Server's drivers declare column size 23 with 3 digits as
         * datetime, which rounds to 1/300 s: datetime2(7) holds every
         * millisecond exactly.
         */
        .ts_size = 27,
        .ts_digits = 7,
        /* HTTP claims and finishes: one statement per batch (db_effect_sql.c) */
        .effect_rows = true,
        .effect_rows_exact = true,
        .claim_rows_max = 170, /* 12 parameters a row; SQL Server takes at most 2,100 per request */
        /*
         * SQL Server tries to escalate a statement's row locks to a table
         * lock at 5,000 locks on one table, which would block every inbox
         * insert until the DELETE commits: stay below it.
         */
        .delete_rows_max = 4000,
    },
    {
        .dialect = DB_DIALECT_POSTGRESQL,
        .name = "postgresql",
        .dbms = {"PostgreSQL", NULL},
        .otel_system = "postgresql",
        .errors = postgresql_rules,
        .type = {VARCHAR(DB_MESSAGE_ID_MAX), VARCHAR(DB_CONSUMER_MAX), VARCHAR(DB_ENTITY_MAX),
                 VARCHAR(DB_IDEM_KEY_MAX), VARCHAR(DB_DETAIL_MAX), "varchar(16)", "varchar(32)",
                 "char(64)", "text", "bigint", "integer", "timestamp(3)",
                 "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"},
        .nullable = " NULL",
        .key_collate = "",
        .pk_clause = "PRIMARY KEY",
        .pk_prefix = "",
        .pk_suffix = "_pk",
        .now = "(clock_timestamp() AT TIME ZONE 'UTC')",
        .now_default = "(clock_timestamp() AT TIME ZONE 'UTC')",
        .ago_fmt = "((clock_timestamp() AT TIME ZONE 'UTC') - INTERVAL '%lld seconds')",
        .ago_sign = 1,
        .later_fmt = "(clock_timestamp() AT TIME ZONE 'UTC') + interval '%ld seconds'",
        .age_s_fmt = "CAST(EXTRACT(EPOCH FROM ((clock_timestamp() AT TIME ZONE 'UTC') - %s)) AS "
                     "bigint)",
        .top = "",
        .limit = " LIMIT ?",
        .skip_locked_hint = "",
        .skip_locked = " FOR UPDATE SKIP LOCKED",
        .read_locked_hint = "",
        .create_guard = "",
        .if_not_exists = "IF NOT EXISTS ",
        .partial_indexes = true,
        .create_index = "CREATE INDEX IF NOT EXISTS ",
        .index_prefix = "",
        .index_guard_fmt = "",
        .probe_key_fmt = "SELECT COUNT(*) FROM pg_index i WHERE i.indrelid = to_regclass('%s') "
                         "AND i.indisunique %sAND i.indnatts = 2 "
                         "AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM "
                         "pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = "
                         "ANY(i.indkey)) = ARRAY['consumer', '%s']",
        .probe_unfiltered = "AND i.indpred IS NULL ",
        .has_column_fmt = "SELECT COUNT(*) FROM pg_attribute WHERE attrelid = to_regclass('%s') "
                          "AND attname = '%s' AND NOT attisdropped",
        .add_column_fmt = "ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s NULL",
        .column_guard_fmt = "",
        /* a unique constraint is named as its index */
        .unique_named_sql = "SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = "
                            "i.indexrelid WHERE i.indisunique AND c.relname::text = ?",
        .unique = {{"23505", DB_NATIVE_ANY, NULL, "unique constraint \"", '"'}},
        .session_setup = "",
        /* reserved_connections is PostgreSQL 16's; missing_ok reads NULL before. */
        .max_connections =
            "SELECT LEAST("
            "current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),"
            " COALESCE((SELECT NULLIF(rolconnlimit, -1) FROM pg_roles"
            " WHERE rolname = current_user), 2147483647),"
            " COALESCE((SELECT NULLIF(datconnlimit, -1) FROM pg_database"
            " WHERE datname = current_database()), 2147483647))",
        .claim_shared = true,
        .insert_rows = true,
        .effect_rows = true,
        .keep_prepared = true,
        .dead_flag = true,
        .ts_size = 23,
        .ts_digits = 3,
        /*
         * psqlODBC 13.02 garbles the type cast it writes after the 1,000th
         * parameter of a statement ("type timestam does not exist";
         * measured): 80 rows, 565 parameters (DB_CLAIM_SHARED +
         * DB_CLAIM_ROW_PARAMS a row).
         */
        .claim_rows_max = 80,
        .delete_rows_max = 100000,
    },
    {
        .dialect = DB_DIALECT_SQLITE,
        .name = "sqlite",
        .dbms = {"SQLite", NULL},
        .otel_system = "sqlite",
        .errors = sqlite_rules,
        .type = {"TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "INTEGER",
                 "INTEGER", "TEXT", "INTEGER PRIMARY KEY AUTOINCREMENT"},
        .nullable = "",
        .key_collate = "",
        .pk_clause = "PRIMARY KEY",
        .pk_prefix = "",
        .pk_suffix = "_pk",
        .now = "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        .now_default = "(strftime('%Y-%m-%d %H:%M:%f', 'now'))",
        .ago_fmt = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '%lld seconds')",
        .ago_sign = -1,
        .later_fmt = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '%+ld seconds')",
        .age_s_fmt = "CAST((julianday('now') - julianday(%s)) * 86400 AS INTEGER)",
        .top = "",
        .limit = " LIMIT ?",
        .skip_locked_hint = "",
        .skip_locked = "",
        .read_locked_hint = "",
        .create_guard = "",
        .if_not_exists = "IF NOT EXISTS ",
        .partial_indexes = true,
        .create_index = "CREATE INDEX IF NOT EXISTS ",
        .index_prefix = "",
        .index_guard_fmt = "",
        .probe_key_fmt = "SELECT COUNT(*) FROM pragma_index_list('%s') il WHERE il.\"unique\" = 1 "
                         "%sAND (SELECT group_concat(name, ',') FROM (SELECT "
                         "name FROM pragma_index_info(il.name) ORDER BY name)) = "
                         "'consumer,%s'",
        .probe_unfiltered = "AND il.partial = 0 ",
        .has_column_fmt = "SELECT COUNT(*) FROM pragma_table_info('%s') WHERE name = '%s'",
        /* no IF NOT EXISTS: a racing migrator's error is re-probed */
        .add_column_fmt = "ALTER TABLE %s ADD COLUMN %s %s",
        .column_guard_fmt = "",
        .catalog_base = true,
        /* The columns in index order, as the violation lists them. An INTEGER
         * PRIMARY KEY has no index; name the column's own unique index instead. */
        .unique_named_sql = "SELECT COUNT(*) FROM pragma_index_list(?) il WHERE il.\"unique\" = 1 "
                            "AND (SELECT group_concat(name, ',') FROM (SELECT name FROM "
                            "pragma_index_info(il.name) ORDER BY seqno)) = ?",
        .unique_by_columns = true,
        /* 19 is every constraint kind; only the text tells a unique key from a CHECK. */
        .unique_code_shared = true,
        .unique = {{NULL, 19, "UNIQUE constraint failed", NULL, 0}},
        .session_setup = "",
        .one_writer = true,
        .keep_prepared = true,
        .ts_size = 23,
        .ts_digits = 3,
        .claim_rows_max = 1000, /* 12,000 parameters, far below SQLite's 32,766 */
        .delete_rows_max = 100000,
    },
    {
        .dialect = DB_DIALECT_MARIADB,
        .name = "mariadb",
        .dbms = {"MariaDB", "MySQL"},
        .otel_system = "mariadb",
        .errors = mariadb_rules,
        .type = {VARCHAR(DB_MESSAGE_ID_MAX), VARCHAR(DB_CONSUMER_MAX), VARCHAR(DB_ENTITY_MAX),
                 VARCHAR(DB_IDEM_KEY_MAX), VARCHAR(DB_DETAIL_MAX), "varchar(16)", "varchar(32)",
                 "char(64)", "longtext", "bigint", "int", "datetime(3)",
                 "bigint NOT NULL AUTO_INCREMENT PRIMARY KEY"},
        .nullable = " NULL",
        .key_collate = "",
        .pk_clause = "PRIMARY KEY",
        .pk_prefix = "",
        .pk_suffix = "_pk",
        .now = "UTC_TIMESTAMP(3)",
        .now_default = "UTC_TIMESTAMP(3)",
        .ago_fmt = "(UTC_TIMESTAMP(3) - INTERVAL %lld SECOND)",
        .ago_sign = 1,
        .later_fmt = "DATE_ADD(UTC_TIMESTAMP(3), INTERVAL %ld SECOND)",
        .age_s_fmt = "TIMESTAMPDIFF(SECOND, %s, UTC_TIMESTAMP(3))",
        .top = "",
        .limit = " LIMIT ?",
        .skip_locked_hint = "",
        .skip_locked = " FOR UPDATE SKIP LOCKED",
        .read_locked_hint = "",
        .create_guard = "",
        .if_not_exists = "IF NOT EXISTS ",
        .partial_indexes = false,
        .create_index = "CREATE INDEX IF NOT EXISTS ",
        .index_prefix = "",
        .index_guard_fmt = "",
        .probe_key_fmt =
            "SELECT COUNT(*) FROM (SELECT index_name FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() AND table_name = '%s' AND non_unique = 0 "
            "%sGROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY column_name) "
            "= 'consumer,%s') k",
        .probe_unfiltered = "",
        .has_column_fmt = "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = "
                          "DATABASE() AND table_name = '%s' AND column_name = '%s'",
        .add_column_fmt = "ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s NULL",
        .column_guard_fmt = "",
        .catalog_base = true,
        .unique_named_sql = "SELECT COUNT(*) FROM (SELECT DISTINCT table_name FROM "
                            "information_schema.statistics WHERE table_schema = DATABASE() AND "
                            "non_unique = 0 AND index_name = ?) k",
        /* "Duplicate entry 'V' for key 'NAME'" (MariaDB 10.5+: 'table.NAME'). */
        .unique = {{NULL, 1062, NULL, "for key '", '\''}},
        .unique_strip_table = true,
        .session_setup = "",
        .max_connections = "SELECT IF(@@max_user_connections > 0 AND @@max_user_connections < "
                           "@@max_connections, @@max_user_connections, @@max_connections)",
        .ts_size = 23,
        .ts_digits = 3,
        .claim_rows_max = 0, /* no claim statement: a batch runs one transaction per message */
        .delete_rows_max = 100000,
    },
};

#undef NVARCHAR
#undef VARCHAR

const db_traits_t *db_dialect_traits(db_dialect_t d)
{
    for (size_t i = 0; i < sizeof(traits) / sizeof(traits[0]); i++)
        if (traits[i].dialect == d)
            return &traits[i];
    return NULL;
}

int db_dialect_parse(const char *s)
{
    if (!s)
        return -1;
    if (strcasecmp(s, "auto") == 0)
        return DB_DIALECT_AUTO;
    for (size_t i = 0; i < sizeof(traits) / sizeof(traits[0]); i++)
        if (strcasecmp(s, traits[i].name) == 0)
            return (int)traits[i].dialect;
    return -1;
}

const char *db_dialect_name(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->name : "auto";
}

db_dialect_t db_dialect_from_dbms(const char *dbms)
{
    if (!dbms)
        return DB_DIALECT_AUTO;
    for (size_t i = 0; i < sizeof(traits) / sizeof(traits[0]); i++)
        for (size_t k = 0; k < 2; k++)
            if (traits[i].dbms[k] && strcasestr(dbms, traits[i].dbms[k]))
                return traits[i].dialect;
    return DB_DIALECT_AUTO;
}

const db_errrule_t *db_dialect_errtable(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->errors : no_rules;
}

/* ---- configured codes ---------------------------------------------------- */

static bool sqlstate_valid(const char *s)
{
    if (strlen(s) != 5)
        return false;
    for (int i = 0; i < 5; i++)
        if (!isalnum((unsigned char)s[i]))
            return false;
    return true;
}

ib_err_t db_codes_from_json(const json_t *arr, const char *key, db_codes_t *out, ib_error_t *err)
{
    size_t i;
    json_t *el;

    memset(out, 0, sizeof(*out));
    if (!key)
        key = "errors";
    if (!arr || json_is_null(arr))
        return IB_E_OK;
    if (!json_is_array(arr))
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "%s: must be an array of native codes or SQLSTATE strings", key);
    if (json_array_size(arr) == 0)
        return IB_E_OK;
    out->v = calloc(json_array_size(arr), sizeof(*out->v));
    if (!out->v)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    json_array_foreach(arr, i, el)
    {
        db_code_t *c = &out->v[out->n];
        if (json_is_integer(el)) {
            json_int_t v = json_integer_value(el);
            if (v < -2147483647LL || v > 2147483647LL) {
                db_codes_free(out);
                return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                    "%s[%zu]: native code out of range", key, i);
            }
            c->native = (long)v;
        } else if (json_is_string(el) && sqlstate_valid(json_string_value(el))) {
            c->by_sqlstate = true;
            for (int k = 0; k < 5; k++)
                c->sqlstate[k] = (char)toupper((unsigned char)json_string_value(el)[k]);
        } else {
            db_codes_free(out);
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "%s[%zu]: must be an integer native code or a 5-character "
                                "SQLSTATE string",
                                key, i);
        }
        out->n++;
    }
    return IB_E_OK;
}

ib_err_t db_codes_copy(db_codes_t *dst, const db_codes_t *src)
{
    memset(dst, 0, sizeof(*dst));
    if (!src || src->n == 0)
        return IB_E_OK;
    dst->v = malloc(src->n * sizeof(*dst->v));
    if (!dst->v)
        return IB_E_NOMEM;
    memcpy(dst->v, src->v, src->n * sizeof(*dst->v));
    dst->n = src->n;
    return IB_E_OK;
}

void db_codes_free(db_codes_t *codes)
{
    if (!codes)
        return;
    free(codes->v);
    codes->v = NULL;
    codes->n = 0;
}

bool db_codes_match(const db_codes_t *codes, const char *sqlstate, long native)
{
    if (!codes)
        return false;
    for (size_t i = 0; i < codes->n; i++) {
        const db_code_t *c = &codes->v[i];
        if (c->by_sqlstate ? (sqlstate && strcasecmp(c->sqlstate, sqlstate) == 0)
                           : c->native == native)
            return true;
    }
    return false;
}

/* ---- classification -------------------------------------------------------- */

static bool rule_matches(const db_errrule_t *r, const char *sqlstate, long native)
{
    if (r->native != DB_NATIVE_ANY && r->native != native)
        return false;
    if (r->sqlstate) {
        size_t n = strlen(r->sqlstate);
        if (!sqlstate || strncasecmp(r->sqlstate, sqlstate, n) != 0)
            return false;
    }
    return true;
}

/*
 * Rules every dialect shares, after its own table: driver manager problems
 * (IMxxx: no such driver), authentication (28xxx) and an unknown database
 * (3D000) are configuration, not weather.
 */
static const db_errrule_t common_rules[] = {
    {"IM", DB_NATIVE_ANY, IB_CLASS_PERMANENT},
    {"28", DB_NATIVE_ANY, IB_CLASS_PERMANENT},
    {"3D", DB_NATIVE_ANY, IB_CLASS_PERMANENT},
    {NULL, 0, IB_CLASS_NONE},
};

static ib_class_t table_class(db_dialect_t d, const char *sqlstate, long native)
{
    for (const db_errrule_t *r = db_dialect_errtable(d); r->cls != IB_CLASS_NONE; r++)
        if (rule_matches(r, sqlstate, native))
            return r->cls;
    for (const db_errrule_t *r = common_rules; r->cls != IB_CLASS_NONE; r++)
        if (rule_matches(r, sqlstate, native))
            return r->cls;
    return IB_CLASS_TRANSIENT;
}

ib_class_t db_classify(db_dialect_t d, const char *sqlstate, long native,
                       const db_codes_t *transient, const db_codes_t *permanent)
{
    if (db_codes_match(permanent, sqlstate, native))
        return IB_CLASS_PERMANENT;
    if (db_codes_match(transient, sqlstate, native))
        return IB_CLASS_TRANSIENT;
    return table_class(d, sqlstate, native);
}

bool db_dialect_is_unique_violation(db_dialect_t d, const char *sqlstate, long native)
{
    return table_class(d, sqlstate, native) == IB_CLASS_DUPLICATE;
}

/*
 * Setup errors. A row matches like an error-table row, and when text is set
 * the driver's message must also contain it (SQLite reports every SQL error
 * as native 1).
 */
typedef struct setup_rule {
    const char *sqlstate;
    long native;
    const char *text;
} setup_rule_t;

#define ANY DB_NATIVE_ANY
/* 42P01 undefined table, 42703 column, 42883 function, 42704 object,
 * 3F000 schema, 42501 insufficient privilege, 25006 read-only transaction,
 * 53100 disk full. */
static const setup_rule_t postgresql_setup[] = {
    {"42P01", ANY, NULL}, {"42703", ANY, NULL}, {"42883", ANY, NULL},
    {"42704", ANY, NULL}, {"3F000", ANY, NULL}, {"42501", ANY, NULL},
    {"25006", ANY, NULL}, {"53100", ANY, NULL}, {NULL, 0, NULL},
};
/* 208 invalid object name, 207 invalid column, 2812 no such procedure,
 * 4121 no such function, 229/230/262/297/300 permission denied, 3906
 * read-only database, 1105 filegroup full, 9002 log full. */
static const setup_rule_t mssql_setup[] = {
    {NULL, 208, NULL}, {NULL, 207, NULL},  {NULL, 2812, NULL}, {NULL, 4121, NULL},
    {NULL, 229, NULL}, {NULL, 230, NULL},  {NULL, 262, NULL},  {NULL, 297, NULL},
    {NULL, 300, NULL}, {NULL, 3906, NULL}, {NULL, 1105, NULL}, {NULL, 9002, NULL},
    {NULL, 0, NULL},
};
/* 1146 no such table, 1054 unknown column, 1305 no such function, 1142/1143
 * command or column denied, 1044 database denied, 1290/1792 read-only,
 * 1021 disk full, 1114 table full. */
static const setup_rule_t mariadb_setup[] = {
    {NULL, 1146, NULL}, {NULL, 1054, NULL}, {NULL, 1305, NULL}, {NULL, 1142, NULL},
    {NULL, 1143, NULL}, {NULL, 1044, NULL}, {NULL, 1290, NULL}, {NULL, 1792, NULL},
    {NULL, 1021, NULL}, {NULL, 1114, NULL}, {NULL, 0, NULL},
};
/* 3 PERM, 8 READONLY, 13 FULL, 23 AUTH; 1 ERROR only for a missing object. */
static const setup_rule_t sqlite_setup[] = {
    {NULL, 3, NULL},
    {NULL, 8, NULL},
    {NULL, 13, NULL},
    {NULL, 23, NULL},
    {NULL, 1, "no such table"},
    {NULL, 1, "no such column"},
    {NULL, 1, "no such function"},
    {NULL, 0, NULL},
};
#undef ANY

bool db_dialect_is_setup_error(db_dialect_t d, const char *sqlstate, long native, const char *text)
{
    const setup_rule_t *r;
    switch (d) {
    case DB_DIALECT_POSTGRESQL:
        r = postgresql_setup;
        break;
    case DB_DIALECT_MSSQL:
        r = mssql_setup;
        break;
    case DB_DIALECT_MARIADB:
        r = mariadb_setup;
        break;
    case DB_DIALECT_SQLITE:
        r = sqlite_setup;
        break;
    default:
        return false;
    }
    for (; r->sqlstate || r->native; r++) {
        db_errrule_t as_rule = {r->sqlstate, r->native, IB_CLASS_PERMANENT};
        if (!rule_matches(&as_rule, sqlstate, native))
            continue;
        if (!r->text || (text && strstr(text, r->text)))
            return true;
    }
    return false;
}

bool db_dialect_is_conn_lost(db_dialect_t d, const char *sqlstate, long native)
{
    if (sqlstate && strncmp(sqlstate, "08", 2) == 0)
        return true;
    switch (d) {
    case DB_DIALECT_POSTGRESQL:
        return sqlstate && (strcmp(sqlstate, "57P01") == 0 || strcmp(sqlstate, "57P02") == 0 ||
                            strcmp(sqlstate, "57P03") == 0);
    case DB_DIALECT_MARIADB:
        return native == 2006 || native == 2013 || native == 1927;
    case DB_DIALECT_MSSQL:
        /*
         * Azure SQL reconfiguration, failover and pausing close the session;
         * 596 is a session ended by KILL; 1005x/10060 are the network.
         */
        return native == 40197 || native == 40613 || native == 4060 || native == 40143 ||
               native == 40540 || native == 42108 || native == 42109 || native == 596 ||
               native == 10053 || native == 10054 || native == 10060;
    default:
        return false;
    }
}

bool db_dialect_is_login_refused(db_dialect_t d, const char *sqlstate, long native)
{
    if (sqlstate && strncmp(sqlstate, "28", 2) == 0)
        return true;
    /* Before the first connection the dialect may still be "auto": try both tables' codes. */
    if ((d == DB_DIALECT_MSSQL || d == DB_DIALECT_AUTO) && (native == 4060 || native == 18456))
        return true;
    if ((d == DB_DIALECT_MARIADB || d == DB_DIALECT_AUTO) &&
        (native == 1045 || native == 1044 || native == 1049))
        return true;
    return d == DB_DIALECT_POSTGRESQL && sqlstate && strcmp(sqlstate, "3D000") == 0;
}

/* ---- statement text ------------------------------------------------------- */

bool db_table_name_valid(const char *table)
{
    int parts = 1;
    size_t seg = 0;

    if (!table || !*table)
        return false;
    for (const char *c = table; *c; c++) {
        if (*c == '.') {
            if (seg == 0 || ++parts > 2)
                return false;
            seg = 0;
            continue;
        }
        if (!(isalpha((unsigned char)*c) || *c == '_' || (seg > 0 && isdigit((unsigned char)*c))))
            return false;
        if (++seg > 63)
            return false;
    }
    return seg > 0;
}

const char *db_table_base(const char *table)
{
    const char *dot = strrchr(table, '.');
    return dot ? dot + 1 : table;
}

static ib_err_t render(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ib_err_t render(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= size) ? IB_E_INVAL : IB_E_OK;
}

/* Appends fmt to buf at *used; false when it does not fit. */
static bool append(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (*used >= size)
        return false;
    va_start(ap, fmt);
    w = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= size - *used)
        return false;
    *used += (size_t)w;
    return true;
}

static ib_err_t check(db_dialect_t d, const char *table)
{
    if (!db_dialect_traits(d) || !db_table_name_valid(table))
        return IB_E_INVAL;
    return IB_E_OK;
}

const char *db_sql_now(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->now : "CURRENT_TIMESTAMP";
}

bool db_sql_ago(db_dialect_t d, long long seconds, char *buf, size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    int n = tr ? snprintf(buf, size, tr->ago_fmt, tr->ago_sign * seconds)
               : snprintf(buf, size, "(CURRENT_TIMESTAMP - INTERVAL '%lld seconds')", seconds);
    return n > 0 && (size_t)n < size;
}

bool db_sql_later(db_dialect_t d, long seconds, char *buf, size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    int n = tr ? snprintf(buf, size, tr->later_fmt, seconds) : -1;
    return n > 0 && (size_t)n < size;
}

/* The inbox table's columns and key, in the order of the DDL. */
static int columns(char *buf, size_t size, const db_traits_t *t, const char *table)
{
    const char *const *ty = t->type, *nul = t->nullable, *key = t->key_collate;
    return snprintf(buf, size,
                    "(\n"
                    "    consumer        %s%s NOT NULL,\n"
                    "    message_id      %s%s NOT NULL,\n"
                    "    idempotency_key %s%s%s,\n"
                    "    body_sha256     %s NOT NULL,\n"
                    "    status          %s NOT NULL,\n"
                    "    entity          %s%s,\n"
                    "    sequence_number %s%s,\n"
                    "    delivery_count  %s%s,\n"
                    "    enqueued_at     %s%s,\n"
                    "    received_at     %s NOT NULL,\n"
                    "    processed_at    %s NOT NULL,\n"
                    "    error_class     %s%s,\n"
                    "    error_detail    %s%s,\n"
                    "    CONSTRAINT %s%s%s %s (consumer, message_id)\n"
                    ")",
                    ty[DB_COL_CONSUMER], key, ty[DB_COL_ID], key, ty[DB_COL_KEY], key, nul,
                    ty[DB_COL_HASH], ty[DB_COL_WORD], ty[DB_COL_NAME], nul, ty[DB_COL_I64], nul,
                    ty[DB_COL_I32], nul, ty[DB_COL_TS], nul, ty[DB_COL_TS], ty[DB_COL_TS],
                    ty[DB_COL_WORD], nul, ty[DB_COL_DETAIL], nul, t->pk_prefix,
                    db_table_base(table), t->pk_suffix, t->pk_clause);
}

ib_err_t db_sql_ddl(db_dialect_t d, const char *table, char *buf, size_t size, const char **out,
                    size_t *n)
{
    const char *b;
    size_t used = 0;
    int w;

    *n = 0;
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    b = db_table_base(table);

#define DDL_PUT(...)                                                                               \
    do {                                                                                           \
        w = snprintf(buf + used, size - used, __VA_ARGS__);                                        \
        if (w < 0 || (size_t)w >= size - used)                                                     \
            return IB_E_INVAL;                                                                     \
        used += (size_t)w;                                                                         \
    } while (0)
#define DDL_COLS()                                                                                 \
    do {                                                                                           \
        w = columns(buf + used, size - used, db_dialect_traits(d), table);                                            \
        if (w < 0 || (size_t)w >= size - used)                                                     \
            return IB_E_INVAL;                                                                     \
        used += (size_t)w;                                                                         \
    } while (0)
#define DDL_NEXT() (out[(*n)++] = buf + used)
#define DDL_END() (used++) /* keep the NUL snprintf wrote */

    switch (d) {
    case DB_DIALECT_MSSQL:
        DDL_NEXT();
        DDL_PUT("IF OBJECT_ID(N'%s', N'U') IS NULL\nCREATE TABLE %s ", table, table);
        DDL_COLS();
        DDL_END();
        DDL_NEXT();
        DDL_PUT("IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'%s') "
                "AND name = N'UX_%s_idem')\n"
                "CREATE UNIQUE NONCLUSTERED INDEX UX_%s_idem ON %s (consumer, idempotency_key)\n"
                "    WHERE idempotency_key IS NOT NULL",
                table, b, b, table);
        DDL_END();
        DDL_NEXT();
        DDL_PUT("IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'%s') "
                "AND name = N'IX_%s_processed')\n"
                "CREATE NONCLUSTERED INDEX IX_%s_processed ON %s (processed_at)\n"
                "    WHERE status = 'processed'",
                table, b, b, table);
        DDL_END();
        break;
    case DB_DIALECT_POSTGRESQL:
    case DB_DIALECT_SQLITE:
        DDL_NEXT();
        DDL_PUT("CREATE TABLE IF NOT EXISTS %s ", table);
        DDL_COLS();
        DDL_END();
        DDL_NEXT();
        DDL_PUT("CREATE UNIQUE INDEX IF NOT EXISTS %s_idem ON %s (consumer, idempotency_key)\n"
                "    WHERE idempotency_key IS NOT NULL",
                b, table);
        DDL_END();
        DDL_NEXT();
        DDL_PUT("CREATE INDEX IF NOT EXISTS %s_processed ON %s (processed_at)", b, table);
        DDL_END();
        break;
    case DB_DIALECT_MARIADB:
        /* A unique index admits any number of NULL keys here, so no filter is needed. */
        DDL_NEXT();
        DDL_PUT("CREATE TABLE IF NOT EXISTS %s ", table);
        DDL_COLS();
        DDL_END();
        DDL_NEXT();
        DDL_PUT("CREATE UNIQUE INDEX IF NOT EXISTS %s_idem ON %s (consumer, idempotency_key)", b,
                table);
        DDL_END();
        DDL_NEXT();
        DDL_PUT("CREATE INDEX IF NOT EXISTS %s_processed ON %s (processed_at)", b, table);
        DDL_END();
        break;
    default:
        return IB_E_INVAL;
    }
#undef DDL_PUT
#undef DDL_COLS
#undef DDL_NEXT
#undef DDL_END
    return IB_E_OK;
}

/*
 * The SQL Server lock batches leave NOCOUNT alone: it is a session
 * setting, and with it on SQLRowCount may report -1 for the sweep's DELETE,
 * whose count is how the sweep knows when to stop. The extra row-count
 * results are drained by db_run instead.
 */

/*
 * A stable 31-bit key for advisory locks derived from a name (FNV-1a), so
 * the lock of one table never blocks another's.
 */
static long lock_key(const char *what, const char *table)
{
    unsigned long h = 2166136261UL;
    for (const char *c = what; *c; c++)
        h = ((h ^ (unsigned char)*c) * 16777619UL) & 0xffffffffUL;
    for (const char *c = table; *c; c++)
        h = ((h ^ (unsigned char)tolower((unsigned char)*c)) * 16777619UL) & 0xffffffffUL;
    return (long)(h & 0x7fffffffUL);
}

/*
 * The migration lock is owned by the session, not the transaction: with
 * SQL_AUTOCOMMIT_OFF Microsoft's driver runs the session with
 * IMPLICIT_TRANSACTIONS ON, where EXEC does not open a transaction, so a
 * transaction-owned sp_getapplock sent first would fail (-999) there
 * (FreeTDS opens the transaction itself, by a transaction-manager request). Each lock
 * statement returns one row: 1 when the lock was taken.
 */
ib_err_t db_sql_migrate_lock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "DECLARE @r int;\n"
                      "EXEC @r = sp_getapplock @Resource = N'inboxd-migrate:%s', "
                      "@LockMode = N'Exclusive', @LockOwner = N'Session', "
                      "@LockTimeout = %d;\n"
                      "SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;",
                      table, DB_MIGRATE_LOCK_WAIT_S * 1000);
    case DB_DIALECT_POSTGRESQL:
        /* Released by the COMMIT or ROLLBACK of the migration transaction. */
        return render(buf, size, "SELECT 1 FROM (SELECT pg_advisory_xact_lock(%ld)) l",
                      lock_key("migrate", table));
    case DB_DIALECT_MARIADB:
        /* DDL commits implicitly here, so only a session lock spans it. */
        return render(buf, size, "SELECT GET_LOCK('inboxd-migrate:%s', %d)", table,
                      DB_MIGRATE_LOCK_WAIT_S);
    default:
        return render(buf, size, "%s", "");
    }
}

ib_err_t db_sql_migrate_unlock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "EXEC sp_releaseapplock @Resource = N'inboxd-migrate:%s', "
                      "@LockOwner = N'Session'",
                      table);
    case DB_DIALECT_MARIADB:
        return render(buf, size, "SELECT RELEASE_LOCK('inboxd-migrate:%s')", table);
    default:
        return render(buf, size, "%s", "");
    }
}

const char *db_sql_session_setup(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->session_setup : "";
}

const char *db_sql_max_connections(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->max_connections : NULL;
}

ib_err_t db_sql_insert(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size,
                  "INSERT INTO %s (consumer, message_id, idempotency_key, body_sha256, status, "
                  "entity, sequence_number, delivery_count, enqueued_at, received_at, "
                  "processed_at, error_class, error_detail) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, %s, ?, ?)",
                  table, db_sql_now(d));
}

ib_err_t db_sql_takeover(db_dialect_t d, const char *table, bool by_key, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size,
                  "UPDATE %s SET status = 'processed', error_class = NULL, error_detail = NULL, "
                  "sequence_number = ?, delivery_count = ?, processed_at = %s "
                  "WHERE consumer = ? AND %s = ? "
                  "AND body_sha256 = ? AND status IN ('failed', 'retry')",
                  table, db_sql_now(d), by_key ? "idempotency_key" : "message_id");
}

ib_err_t db_sql_select_existing(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size,
                  "SELECT body_sha256, status FROM %s WHERE consumer = ? AND message_id = ? "
                  "UNION ALL SELECT body_sha256, status FROM %s WHERE consumer = ? AND "
                  "idempotency_key = ? AND message_id <> ?",
                  table, table);
}

ib_err_t db_sql_probe_columns(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size,
                  "SELECT consumer, message_id, idempotency_key, body_sha256, status, entity, "
                  "sequence_number, delivery_count, enqueued_at, received_at, processed_at, "
                  "error_class, error_detail FROM %s WHERE 1 = 0",
                  table);
}

ib_err_t db_sql_probe_key(db_dialect_t d, const char *table, const char *column, char *buf,
                          size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    /* message_id is never NULL: its key must hold every row, so no filter. */
    bool unfiltered = strcmp(column, "message_id") == 0;
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size, tr->probe_key_fmt, tr->catalog_base ? db_table_base(table) : table,
                  unfiltered ? tr->probe_unfiltered : "", column);
}

ib_err_t db_sql_has_column(db_dialect_t d, const char *table, const char *column, char *buf,
                           size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size, tr->has_column_fmt, tr->catalog_base ? db_table_base(table) : table,
                  column);
}

ib_err_t db_sql_add_column(db_dialect_t d, const char *table, const char *column, db_col_t kind,
                           bool guarded, char *buf, size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    size_t used = 0;
    if (check(d, table) != IB_E_OK || (unsigned)kind >= DB_COL_KINDS || size == 0)
        return IB_E_INVAL;
    buf[0] = '\0';
    if (guarded && !append(buf, size, &used, tr->column_guard_fmt, table, column))
        return IB_E_INVAL;
    return append(buf, size, &used, tr->add_column_fmt, table, column, tr->type[kind])
               ? IB_E_OK
               : IB_E_INVAL;
}

ib_err_t db_sql_index(db_dialect_t d, const char *table, const char *name, const char *cols,
                      const char *filter, char *buf, size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    char ix[160];
    if (check(d, table) != IB_E_OK ||
        render(ix, sizeof ix, "%s%s_%s", tr->index_prefix, db_table_base(table), name))
        return IB_E_INVAL;
    size_t used = 0;
    if (!append(buf, size, &used, tr->index_guard_fmt, table, ix))
        return IB_E_INVAL;
    if (!append(buf, size, &used, "%s%s ON %s %s", tr->create_index, ix, table, cols))
        return IB_E_INVAL;
    if (filter && tr->partial_indexes && !append(buf, size, &used, " WHERE %s", filter))
        return IB_E_INVAL;
    return IB_E_OK;
}

ib_err_t db_sql_delete_bounded(db_dialect_t d, const char *table, const char *status,
                               const char *time_column, char *buf, size_t size, bool *limit_first)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    *limit_first = d == DB_DIALECT_MSSQL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size, "DELETE TOP (?) FROM %s WHERE status = '%s' AND %s < ?", table,
                      status, time_column);
    case DB_DIALECT_POSTGRESQL:
        return render(buf, size,
                      "DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE "
                      "status = '%s' AND %s < ? LIMIT ?))",
                      table, table, status, time_column);
    case DB_DIALECT_SQLITE:
        return render(buf, size,
                      "DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s WHERE "
                      "status = '%s' AND %s < ? LIMIT ?)",
                      table, table, status, time_column);
    default:
        return render(buf, size, "DELETE FROM %s WHERE status = '%s' AND %s < ? LIMIT ?", table,
                      status, time_column);
    }
}

size_t db_sql_delete_rows_max(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->delete_rows_max : 100000;
}

ib_err_t db_sql_sweep(db_dialect_t d, const char *table, char *buf, size_t size, bool *limit_first)
{
    return db_sql_delete_bounded(d, table, "processed", "processed_at", buf, size, limit_first);
}

ib_err_t db_sql_try_lock(db_dialect_t d, const char *purpose, const char *table, char *buf,
                         size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "DECLARE @r int;\n"
                      "EXEC @r = sp_getapplock @Resource = N'inboxd-%s:%s', "
                      "@LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 0;\n"
                      "SELECT CASE WHEN @r >= 0 THEN 1 ELSE 0 END;",
                      purpose, table);
    case DB_DIALECT_POSTGRESQL:
        return render(buf, size, "SELECT CASE WHEN pg_try_advisory_lock(%ld) THEN 1 ELSE 0 END",
                      lock_key(purpose, table));
    case DB_DIALECT_MARIADB:
        return render(buf, size, "SELECT GET_LOCK('inboxd-%s:%s', 0)", purpose, table);
    default:
        return render(buf, size, "%s", "");
    }
}

ib_err_t db_sql_unlock(db_dialect_t d, const char *purpose, const char *table, char *buf,
                       size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "EXEC sp_releaseapplock @Resource = N'inboxd-%s:%s', "
                      "@LockOwner = N'Session'",
                      purpose, table);
    case DB_DIALECT_POSTGRESQL:
        return render(buf, size, "SELECT pg_advisory_unlock(%ld)", lock_key(purpose, table));
    case DB_DIALECT_MARIADB:
        return render(buf, size, "SELECT RELEASE_LOCK('inboxd-%s:%s')", purpose, table);
    default:
        return render(buf, size, "%s", "");
    }
}

ib_err_t db_sql_sweep_lock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    return db_sql_try_lock(d, "sweep", table, buf, size);
}

ib_err_t db_sql_sweep_unlock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    return db_sql_unlock(d, "sweep", table, buf, size);
}

/* ---- the batch claim ----------------------------------------------------- */

#define INBOX_COLS                                                                                 \
    "consumer, message_id, idempotency_key, body_sha256, status, entity, sequence_number, "        \
    "delivery_count, enqueued_at, received_at, processed_at, error_class, error_detail"

/* The VALUES columns of the claim, and the SELECT list that adds processed_at (%s: now). */
#define CLAIM_VCOLS                                                                                \
    "consumer, message_id, idempotency_key, body_sha256, status, entity, sequence_number, "        \
    "delivery_count, enqueued_at, received_at, error_class, error_detail"
#define CLAIM_SELECT                                                                               \
    "v.consumer, v.message_id, v.idempotency_key, v.body_sha256, v.status, v.entity, "             \
    "v.sequence_number, v.delivery_count, v.enqueued_at, v.received_at, %s, v.error_class, "       \
    "v.error_detail"

/* The shared-column claim (db_sql_claim_shared): the batch's values once, then the rows. */
#define CLAIM_ROW_VCOLS                                                                            \
    "message_id, idempotency_key, body_sha256, sequence_number, delivery_count, enqueued_at, "     \
    "received_at"
#define CLAIM_SHARED_SELECT                                                                        \
    "?, v.message_id, v.idempotency_key, v.body_sha256, ?, ?, v.sequence_number, "                 \
    "v.delivery_count, v.enqueued_at, v.received_at, %s, ?, ?"

bool db_sql_claim_shared(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr && tr->claim_shared;
}

bool db_dialect_one_writer(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr && tr->one_writer;
}

bool db_dialect_effect_rows(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr && tr->effect_rows;
}

bool db_dialect_effect_rows_exact(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr && tr->effect_rows_exact;
}

size_t db_sql_claim_rows_max(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    return tr ? tr->claim_rows_max : 0;
}

/* ---- a plain INSERT's rows in one statement ---------------------------------- */

size_t db_sql_insert_rows_max(db_dialect_t d)
{
    const db_traits_t *tr = db_dialect_traits(d);
    /* Below the 1,000th parameter, past which psqlODBC 13.02 garbles (claim_rows_max). */
    return tr && tr->insert_rows ? 999 : 0;
}

/* Skips spaces; then true when s continues with word (any case) and a non-word character. */
static bool word_at(const char **s, const char *word)
{
    const char *p = *s;
    while (isspace((unsigned char)*p))
        p++;
    size_t n = strlen(word);
    if (strncasecmp(p, word, n) != 0 || isalnum((unsigned char)p[n]) || p[n] == '_')
        return false;
    *s = p + n;
    return true;
}

/* Skips spaces; then true when s continues with c. */
static bool char_at(const char **s, char c)
{
    while (isspace((unsigned char)**s))
        (*s)++;
    if (**s != c)
        return false;
    (*s)++;
    return true;
}

/* A table name: letters, digits, '_', '.', '"', '[' and ']' (quoted names without spaces). */
static bool name_at(const char **s)
{
    const char *p = *s;
    while (isspace((unsigned char)*p))
        p++;
    const char *from = p;
    while (isalnum((unsigned char)*p) || (*p && strchr("_.\"[]", *p)))
        p++;
    *s = p;
    return p > from;
}

size_t db_sql_insert_values_at(const char *sql, size_t nparams)
{
    const char *p = sql;
    if (!sql || nparams == 0 || !word_at(&p, "INSERT") || !word_at(&p, "INTO") || !name_at(&p) ||
        !char_at(&p, '('))
        return 0;
    p += strcspn(p, "()?'\";"); /* the column names */
    if (!char_at(&p, ')') || !word_at(&p, "VALUES"))
        return 0;
    size_t at = (size_t)(p - sql);
    if (!char_at(&p, '('))
        return 0;
    for (size_t i = 0; i < nparams; i++)
        if ((i > 0 && !char_at(&p, ',')) || !char_at(&p, '?'))
            return 0;
    if (!char_at(&p, ')'))
        return 0;
    while (isspace((unsigned char)*p))
        p++;
    return *p == '\0' ? at : 0;
}

bool db_sql_insert_rows(const char *sql, size_t at, size_t nparams, size_t rows, char *buf,
                        size_t size)
{
    size_t used = 0;
    bool fits = append(buf, size, &used, "%.*s ", (int)at, sql);
    for (size_t r = 0; fits && r < rows; r++) {
        fits = append(buf, size, &used, "%s(", r ? ", " : "");
        for (size_t i = 0; fits && i < nparams; i++)
            fits = append(buf, size, &used, i ? ", ?" : "?");
        fits = fits && append(buf, size, &used, ")");
    }
    return fits;
}

bool db_sql_append_rows(char *buf, size_t size, size_t *used, const char *row, size_t rows)
{
    bool fits = true;
    for (size_t i = 0; fits && i < rows; i++)
        fits = append(buf, size, used, "%s%s", i ? ", " : "", row);
    return fits;
}

ib_err_t db_sql_claim(db_dialect_t d, const char *table, size_t rows, char *buf, size_t size)
{
    size_t used = 0;
    bool mssql = d == DB_DIALECT_MSSQL;
    bool fits;

    if (check(d, table) != IB_E_OK || rows == 0 || rows > db_sql_claim_rows_max(d) || size == 0)
        return d == DB_DIALECT_MARIADB && size ? render(buf, size, "%s", "") : IB_E_INVAL;
    /*
     * SQLite goes through a WITH: sqlite3odbc treats a statement that starts
     * with INSERT as one without a result and drops its RETURNING rows, and
     * an INSERT ... SELECT needs "WHERE true" before ON CONFLICT.
     */
    if (mssql)
        fits =
            append(buf, size, &used,
                   "INSERT INTO %s (" INBOX_COLS ") OUTPUT inserted.consumer, inserted.message_id "
                   "SELECT " CLAIM_SELECT " FROM (VALUES ",
                   table, db_sql_now(d));
    else if (d == DB_DIALECT_SQLITE)
        fits = append(buf, size, &used, "WITH v (" CLAIM_VCOLS ") AS (VALUES ");
    else
        fits = append(buf, size, &used, "INSERT INTO %s (" INBOX_COLS ") SELECT " CLAIM_SHARED_SELECT
                      " FROM (VALUES ", table, db_sql_now(d));
    /* psqlODBC leaves a parameter's type to the server: a VALUES column needs its own. */
    fits = fits && db_sql_append_rows(buf, size, &used,
                                      db_sql_claim_shared(d)
                                          ? "(?, ?, ?, CAST(? AS bigint), CAST(? AS integer), "
                                            "CAST(? AS timestamp), CAST(? AS timestamp))"
                                          : "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                      rows);
    if (fits && mssql)
        fits = append(buf, size, &used,
                      ") AS v (" CLAIM_VCOLS ") WHERE NOT EXISTS (SELECT 1 FROM %s AS x WITH "
                      "(UPDLOCK, HOLDLOCK) WHERE x.consumer = v.consumer AND x.message_id = "
                      "v.message_id) AND NOT EXISTS (SELECT 1 FROM %s AS y WITH (UPDLOCK, "
                      "HOLDLOCK) WHERE y.consumer = v.consumer AND y.idempotency_key = "
                      "v.idempotency_key)",
                      table, table);
    else if (fits && d == DB_DIALECT_SQLITE)
        fits = append(buf, size, &used,
                      ") INSERT INTO %s (" INBOX_COLS ") SELECT " CLAIM_SELECT
                      " FROM v WHERE true ON CONFLICT DO NOTHING RETURNING consumer, message_id",
                      table, db_sql_now(d));
    else if (fits)
        fits = append(buf, size, &used,
                      ") AS v (" CLAIM_ROW_VCOLS
                      ") ON CONFLICT DO NOTHING RETURNING consumer, message_id");
    return fits ? IB_E_OK : IB_E_INVAL;
}
