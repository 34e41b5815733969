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

int db_dialect_parse(const char *s)
{
    static const char *const names[] = {"auto", "mssql", "postgresql", "sqlite", "mariadb"};
    if (!s)
        return -1;
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *db_dialect_name(db_dialect_t d)
{
    switch (d) {
    case DB_DIALECT_MSSQL:
        return "mssql";
    case DB_DIALECT_POSTGRESQL:
        return "postgresql";
    case DB_DIALECT_SQLITE:
        return "sqlite";
    case DB_DIALECT_MARIADB:
        return "mariadb";
    default:
        return "auto";
    }
}

db_dialect_t db_dialect_from_dbms(const char *dbms)
{
    if (!dbms)
        return DB_DIALECT_AUTO;
    if (strcasestr(dbms, "SQL Server"))
        return DB_DIALECT_MSSQL;
    if (strcasestr(dbms, "PostgreSQL"))
        return DB_DIALECT_POSTGRESQL;
    if (strcasestr(dbms, "SQLite"))
        return DB_DIALECT_SQLITE;
    if (strcasestr(dbms, "MariaDB") || strcasestr(dbms, "MySQL"))
        return DB_DIALECT_MARIADB;
    return DB_DIALECT_AUTO;
}

const db_errrule_t *db_dialect_errtable(db_dialect_t d)
{
    switch (d) {
    case DB_DIALECT_MSSQL:
        return mssql_rules;
    case DB_DIALECT_POSTGRESQL:
        return postgresql_rules;
    case DB_DIALECT_SQLITE:
        return sqlite_rules;
    case DB_DIALECT_MARIADB:
        return mariadb_rules;
    default:
        return no_rules;
    }
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

static ib_err_t check(db_dialect_t d, const char *table)
{
    if (d == DB_DIALECT_AUTO || (unsigned)d > DB_DIALECT_MARIADB || !db_table_name_valid(table))
        return IB_E_INVAL;
    return IB_E_OK;
}

const char *db_sql_now(db_dialect_t d)
{
    switch (d) {
    case DB_DIALECT_MSSQL:
        return "SYSUTCDATETIME()";
    case DB_DIALECT_POSTGRESQL:
        return "(clock_timestamp() AT TIME ZONE 'UTC')";
    case DB_DIALECT_SQLITE:
        return "strftime('%Y-%m-%d %H:%M:%f', 'now')";
    case DB_DIALECT_MARIADB:
        return "UTC_TIMESTAMP(3)";
    default:
        return "CURRENT_TIMESTAMP";
    }
}

bool db_sql_ago(db_dialect_t d, long long seconds, char *buf, size_t size)
{
    int n;
    switch (d) {
    case DB_DIALECT_MSSQL:
        n = snprintf(buf, size, "DATEADD(second, %lld, SYSUTCDATETIME())", -seconds);
        break;
    case DB_DIALECT_SQLITE:
        n = snprintf(buf, size, "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '%lld seconds')",
                     -seconds);
        break;
    case DB_DIALECT_MARIADB:
        n = snprintf(buf, size, "(UTC_TIMESTAMP(3) - INTERVAL %lld SECOND)", seconds);
        break;
    default:
        n = snprintf(buf, size, "(%s - INTERVAL '%lld seconds')", db_sql_now(d), seconds);
        break;
    }
    return n > 0 && (size_t)n < size;
}

/*
 * Column types per dialect, in the order of the DDL. Timestamps are UTC
 * without a zone everywhere; the hash is 64 hex characters.
 */
typedef struct coltypes {
    const char *text200, *text128, *text400, *text260, *text2000, *i64, *i32, *ts, *pk_clause;
    const char *key_collate; /* after consumer, message_id, idempotency_key */
} coltypes_t;

static const coltypes_t *types_of(db_dialect_t d)
{
    static const coltypes_t mssql = {"nvarchar(200)", "nvarchar(128)",  "nvarchar(400)",
                                     "nvarchar(260)", "nvarchar(2000)", "bigint",
                                     "int",           "datetime2(3)",   "PRIMARY KEY CLUSTERED",
                                     DB_MSSQL_KEY_COLLATE};
    static const coltypes_t pg = {"varchar(200)", "varchar(128)",  "varchar(400)",
                                  "varchar(260)", "varchar(2000)", "bigint",
                                  "integer",      "timestamp(3)",  "PRIMARY KEY",
                                  ""};
    static const coltypes_t lite = {"TEXT",    "TEXT",    "TEXT", "TEXT",       "TEXT",
                                    "INTEGER", "INTEGER", "TEXT", "PRIMARY KEY", ""};
    static const coltypes_t maria = {"varchar(200)", "varchar(128)",  "varchar(400)",
                                     "varchar(260)", "varchar(2000)", "bigint",
                                     "int",          "datetime(3)",   "PRIMARY KEY",
                                     ""};
    switch (d) {
    case DB_DIALECT_MSSQL:
        return &mssql;
    case DB_DIALECT_SQLITE:
        return &lite;
    case DB_DIALECT_MARIADB:
        return &maria;
    default:
        return &pg;
    }
}

static int columns(char *buf, size_t size, db_dialect_t d, const char *table)
{
    const coltypes_t *t = types_of(d);
    const char *nul = d == DB_DIALECT_SQLITE ? "" : " NULL";
    return snprintf(
        buf, size,
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
        t->text200, t->key_collate, t->text128, t->key_collate, t->text400, t->key_collate, nul,
        d == DB_DIALECT_SQLITE ? "TEXT" : "char(64)",
        d == DB_DIALECT_SQLITE ? "TEXT" : "varchar(16)", t->text260, nul, t->i64, nul, t->i32, nul,
        t->ts, nul, t->ts, t->ts, d == DB_DIALECT_SQLITE ? "TEXT" : "varchar(16)", nul, t->text2000,
        nul, d == DB_DIALECT_MSSQL ? "PK_" : "", db_table_base(table),
        d == DB_DIALECT_MSSQL ? "" : "_pk", t->pk_clause);
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
        w = columns(buf + used, size - used, d, table);                                            \
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
    /*
     * XACT_ABORT ON: any run-time error rolls the whole transaction back
     * at once, so no statement can leave a doomed or half-done transaction
     * open behind a caught error (Microsoft's ODBC drivers leave it OFF).
     * NOCOUNT OFF: a server or login whose user options include NOCOUNT
     * would make every row count -1 (SQLRowCount), and a claim or a mark
     * that counts its rows would look lost.
     */
    return d == DB_DIALECT_MSSQL ? "SET XACT_ABORT ON; SET NOCOUNT OFF" : "";
}

const char *db_sql_max_connections(db_dialect_t d)
{
    switch (d) {
    case DB_DIALECT_POSTGRESQL:
        /* reserved_connections is PostgreSQL 16's; missing_ok reads NULL before. */
        return "SELECT LEAST("
               "current_setting('max_connections')::int"
               " - current_setting('superuser_reserved_connections')::int"
               " - COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),"
               " COALESCE((SELECT NULLIF(rolconnlimit, -1) FROM pg_roles"
               " WHERE rolname = current_user), 2147483647),"
               " COALESCE((SELECT NULLIF(datconnlimit, -1) FROM pg_database"
               " WHERE datname = current_database()), 2147483647))";
    case DB_DIALECT_MSSQL:
        return "SELECT @@MAX_CONNECTIONS";
    case DB_DIALECT_MARIADB:
        return "SELECT IF(@@max_user_connections > 0 AND @@max_user_connections < "
               "@@max_connections, @@max_user_connections, @@max_connections)";
    default:
        return NULL;
    }
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

ib_err_t db_sql_probe_key(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "SELECT COUNT(*) FROM sys.indexes i WHERE i.object_id = OBJECT_ID(N'%s') "
                      "AND i.is_unique = 1 AND i.has_filter = 0 "
                      "AND (SELECT COUNT(*) FROM sys.index_columns ic WHERE ic.object_id = "
                      "i.object_id AND ic.index_id = i.index_id AND ic.is_included_column = 0) = 2 "
                      "AND (SELECT COUNT(*) FROM sys.index_columns ic JOIN sys.columns c ON "
                      "c.object_id = ic.object_id AND c.column_id = ic.column_id WHERE "
                      "ic.object_id = i.object_id AND ic.index_id = i.index_id AND "
                      "ic.is_included_column = 0 AND c.name IN (N'consumer', N'message_id')) = 2",
                      table);
    case DB_DIALECT_POSTGRESQL:
        return render(buf, size,
                      "SELECT COUNT(*) FROM pg_index i WHERE i.indrelid = to_regclass('%s') "
                      "AND i.indisunique AND i.indpred IS NULL AND i.indnatts = 2 "
                      "AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM "
                      "pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = "
                      "ANY(i.indkey)) = ARRAY['consumer', 'message_id']",
                      table);
    case DB_DIALECT_SQLITE:
        return render(buf, size,
                      "SELECT COUNT(*) FROM pragma_index_list('%s') il WHERE il.\"unique\" = 1 "
                      "AND il.partial = 0 AND (SELECT group_concat(name, ',') FROM (SELECT "
                      "name FROM pragma_index_info(il.name) ORDER BY name)) = "
                      "'consumer,message_id'",
                      db_table_base(table));
    case DB_DIALECT_MARIADB:
        return render(buf, size,
                      "SELECT COUNT(*) FROM (SELECT index_name FROM information_schema.statistics "
                      "WHERE table_schema = DATABASE() AND table_name = '%s' AND non_unique = 0 "
                      "GROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY column_name) "
                      "= 'consumer,message_id') k",
                      db_table_base(table));
    default:
        return IB_E_INVAL;
    }
}

ib_err_t db_sql_probe_idem_key(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (check(d, table) != IB_E_OK)
        return IB_E_INVAL;
    /* As probe_key, on (consumer, idempotency_key); a filter (IS NOT NULL) is allowed. */
    switch (d) {
    case DB_DIALECT_MSSQL:
        return render(buf, size,
                      "SELECT COUNT(*) FROM sys.indexes i WHERE i.object_id = OBJECT_ID(N'%s') "
                      "AND i.is_unique = 1 "
                      "AND (SELECT COUNT(*) FROM sys.index_columns ic WHERE ic.object_id = "
                      "i.object_id AND ic.index_id = i.index_id AND ic.is_included_column = 0) = 2 "
                      "AND (SELECT COUNT(*) FROM sys.index_columns ic JOIN sys.columns c ON "
                      "c.object_id = ic.object_id AND c.column_id = ic.column_id WHERE "
                      "ic.object_id = i.object_id AND ic.index_id = i.index_id AND "
                      "ic.is_included_column = 0 AND c.name IN (N'consumer', N'idempotency_key')) "
                      "= 2",
                      table);
    case DB_DIALECT_POSTGRESQL:
        return render(buf, size,
                      "SELECT COUNT(*) FROM pg_index i WHERE i.indrelid = to_regclass('%s') "
                      "AND i.indisunique AND i.indnatts = 2 "
                      "AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM "
                      "pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = "
                      "ANY(i.indkey)) = ARRAY['consumer', 'idempotency_key']",
                      table);
    case DB_DIALECT_SQLITE:
        return render(buf, size,
                      "SELECT COUNT(*) FROM pragma_index_list('%s') il WHERE il.\"unique\" = 1 "
                      "AND (SELECT group_concat(name, ',') FROM (SELECT "
                      "name FROM pragma_index_info(il.name) ORDER BY name)) = "
                      "'consumer,idempotency_key'",
                      db_table_base(table));
    case DB_DIALECT_MARIADB:
        return render(buf, size,
                      "SELECT COUNT(*) FROM (SELECT index_name FROM information_schema.statistics "
                      "WHERE table_schema = DATABASE() AND table_name = '%s' AND non_unique = 0 "
                      "GROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY column_name) "
                      "= 'consumer,idempotency_key') k",
                      db_table_base(table));
    default:
        return IB_E_INVAL;
    }
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
    /*
     * SQL Server tries to escalate a statement's row locks to a table lock
     * at 5,000 locks on one table, which would block every inbox insert
     * until the DELETE commits: stay below it.
     */
    return d == DB_DIALECT_MSSQL ? 4000 : 100000;
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
    return d == DB_DIALECT_POSTGRESQL;
}

bool db_dialect_one_writer(db_dialect_t d)
{
    return d == DB_DIALECT_SQLITE;
}

bool db_dialect_effect_rows(db_dialect_t d)
{
    return d == DB_DIALECT_POSTGRESQL;
}

size_t db_sql_claim_rows_max(db_dialect_t d)
{
    switch (d) {
    case DB_DIALECT_MSSQL:
        return 170; /* 12 parameters a row; SQL Server takes at most 2,100 per request */
    case DB_DIALECT_POSTGRESQL:
        /*
         * psqlODBC 13.02 garbles the type cast it writes after the 1,000th
         * parameter of a statement ("type timestam does not exist";
         * measured): 80 rows, 565 parameters (DB_CLAIM_SHARED +
         * DB_CLAIM_ROW_PARAMS a row).
         */
        return 80;
    case DB_DIALECT_SQLITE:
        return 1000; /* 12,000 parameters, far below SQLite's 32,766 */
    default:
        return 0;
    }
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
