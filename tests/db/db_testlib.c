/* db_testlib.c - see db_testlib.h. */
#include "db_testlib.h"

#include <sql.h>
#include <sqlext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

db_dialect_t tl_dialect_arg(int argc, char **argv)
{
    int d = argc > 1 ? db_dialect_parse(argv[1]) : -1;
    if (d != DB_DIALECT_POSTGRESQL && d != DB_DIALECT_SQLITE) {
        fprintf(stderr, "usage: %s postgresql|sqlite\n", argv[0]);
        exit(2);
    }
    return (db_dialect_t)d;
}

double tl_timeout(double seconds)
{
    const char *m = getenv("INBOXD_TEST_TIMEOUT_MULTIPLIER");
    double k = m ? atof(m) : 1.0;
    return seconds * (k > 0 ? k : 1.0);
}

static void print_diag(SQLSMALLINT type, SQLHANDLE h, const char *what)
{
    SQLCHAR state[6], msg[512];
    SQLINTEGER native;
    SQLSMALLINT len;
    if (SQLGetDiagRec(type, h, 1, state, &native, msg, sizeof(msg), &len) == SQL_SUCCESS)
        fprintf(stderr, "%s: [%s/%d] %s\n", what, state, (int)native, msg);
    else
        fprintf(stderr, "%s: failed without diagnostics\n", what);
}

/*
 * Runs sql on connstr with autocommit on; fetches the first integer when out.
 * 0, -1 on failure (printed), 1 when out was asked for and there is no row
 * or it is NULL.
 */
static int raw_exec(const char *connstr, const char *sql, long long *out)
{
    SQLHENV env = NULL;
    SQLHDBC dbc = NULL;
    SQLHSTMT st = NULL;
    int rc = -1;

    SQLAllocHandle(SQL_HANDLE_ENV, SQL_NULL_HANDLE, &env);
    SQLSetEnvAttr(env, SQL_ATTR_ODBC_VERSION, (SQLPOINTER)SQL_OV_ODBC3, 0);
    SQLAllocHandle(SQL_HANDLE_DBC, env, &dbc);
    if (!SQL_SUCCEEDED(SQLDriverConnect(dbc, NULL, (SQLCHAR *)connstr, SQL_NTS, NULL, 0, NULL,
                                        SQL_DRIVER_NOPROMPT))) {
        print_diag(SQL_HANDLE_DBC, dbc, "test connect");
        goto out;
    }
    SQLAllocHandle(SQL_HANDLE_STMT, dbc, &st);
    SQLRETURN r = SQLExecDirect(st, (SQLCHAR *)sql, SQL_NTS);
    if (!SQL_SUCCEEDED(r) && r != SQL_NO_DATA) {
        print_diag(SQL_HANDLE_STMT, st, sql);
        goto out;
    }
    rc = 0;
    if (out) {
        SQLBIGINT v = 0;
        SQLLEN ind = 0;
        *out = 0;
        if (SQL_SUCCEEDED(SQLFetch(st)) &&
            SQL_SUCCEEDED(SQLGetData(st, 1, SQL_C_SBIGINT, &v, sizeof(v), &ind)) &&
            ind != SQL_NULL_DATA)
            *out = v;
        else
            rc = 1; /* no row, or NULL */
    }
out:
    if (st)
        SQLFreeHandle(SQL_HANDLE_STMT, st);
    SQLDisconnect(dbc);
    SQLFreeHandle(SQL_HANDLE_DBC, dbc);
    SQLFreeHandle(SQL_HANDLE_ENV, env);
    return rc;
}

void tl_db_create(tl_db_t *t, db_dialect_t d, const char *tag)
{
    static int seq;
    char sql[256];

    memset(t, 0, sizeof(*t));
    t->dialect = d;
    srand((unsigned)(time(NULL) ^ getpid()));
    if (d == DB_DIALECT_SQLITE) {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(t->path, sizeof(t->path), "%s/inboxd-%s-%d-%d-%d.db", tmp, tag, (int)getpid(),
                 seq++, rand() % 100000);
        unlink(t->path);
        snprintf(t->connstr, sizeof(t->connstr), "Driver={SQLite3};Database=%s;Timeout=%d", t->path,
                 (int)tl_timeout(10) * 1000);
        return;
    }
    const char *port = getenv("INBOXD_TEST_PG_PORT");
    if (!port || !*port) {
        const char *req = getenv("INBOXD_TEST_REQUIRE_PG");
        if (req && strcmp(req, "1") == 0) {
            fprintf(stderr, "INBOXD_TEST_PG_PORT is unset and INBOXD_TEST_REQUIRE_PG=1\n");
            exit(1);
        }
        fprintf(stderr, "skipped: INBOXD_TEST_PG_PORT is unset\n");
        exit(77);
    }
    snprintf(t->name, sizeof(t->name), "inboxd_%s_%d_%d_%d", tag, (int)getpid(), seq++,
             rand() % 100000);
    snprintf(t->admin, sizeof(t->admin),
             "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=%s;Database=postgres;Uid=postgres;"
             "Pwd=",
             port);
    snprintf(t->connstr, sizeof(t->connstr),
             "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=%s;Database=%s;Uid=postgres;Pwd=",
             port, t->name);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", t->name);
    if (raw_exec(t->admin, sql, NULL) != 0) {
        fprintf(stderr, "cannot create the test database\n");
        exit(1);
    }
}

void tl_db_drop(tl_db_t *t)
{
    char sql[256];

    if (t->dialect == DB_DIALECT_SQLITE) {
        char p[300];
        unlink(t->path);
        snprintf(p, sizeof(p), "%s-wal", t->path);
        unlink(p);
        snprintf(p, sizeof(p), "%s-shm", t->path);
        unlink(p);
        snprintf(p, sizeof(p), "%s-journal", t->path);
        unlink(p);
        return;
    }
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", t->name);
    raw_exec(t->admin, sql, NULL);
}

db_conn_t *tl_conn_opts(const tl_db_t *t, const db_options_t *extra)
{
    db_options_t o;
    ib_error_t err;
    db_conn_t *dbc;

    if (extra)
        o = *extra;
    else
        memset(&o, 0, sizeof(o));
    o.connection_string = t->connstr;
    if (!o.inbox_table)
        o.inbox_table = "inbox"; /* the table the db suites' statements name */
    if (o.dialect == DB_DIALECT_AUTO)
        o.dialect = t->dialect;
    if (!o.statement_timeout_s)
        o.statement_timeout_s = (long)tl_timeout(30);
    dbc = db_conn_new(&o, &err);
    if (!dbc) {
        fprintf(stderr, "db_conn_new: %s (%s)\n", err.text, ib_class_name(err.cls));
        exit(1);
    }
    return dbc;
}

db_conn_t *tl_conn(const tl_db_t *t)
{
    return tl_conn_opts(t, NULL);
}

int tl_exec(const tl_db_t *t, const char *sql)
{
    return raw_exec(t->connstr, sql, NULL);
}

int tl_admin_exec(const tl_db_t *t, const char *sql)
{
    return raw_exec(t->admin, sql, NULL);
}

long long tl_scalar(const tl_db_t *t, const char *sql)
{
    long long v = 0;
    int rc = raw_exec(t->connstr, sql, &v);
    if (rc != 0) {
        fprintf(stderr, "tl_scalar failed: %s%s\n", sql, rc == 1 ? ": no row, or NULL" : "");
        exit(1);
    }
    return v;
}

db_claim_t tl_claim(const char *consumer, const char *message_id, const char *idem,
                    const char *body, char hash[65])
{
    db_claim_t c;
    memset(&c, 0, sizeof(c));
    db_sha256_hex(body, strlen(body), hash);
    c.consumer = consumer;
    c.message_id = message_id;
    c.idempotency_key = idem;
    c.body_sha256 = hash;
    c.entity = "orders";
    c.sequence_number = 1;
    c.delivery_count = 1;
    c.enqueued_at_ms = 1767225600000LL; /* 2026-01-01T00:00:00Z */
    c.received_at_ms = 0;
    return c;
}

db_conn_t *tl_conn_transient(const tl_db_t *t, const char *codes)
{
    json_error_t jerr;
    json_t *arr = json_loads(codes, 0, &jerr);
    db_options_t o;
    ib_error_t err;

    memset(&o, 0, sizeof(o));
    if (!arr || db_codes_from_json(arr, "errors.transient_native", &o.transient_native, &err)) {
        fprintf(stderr, "tl_conn_transient: bad codes %s\n", codes);
        exit(1);
    }
    json_decref(arr);
    db_conn_t *dbc = tl_conn_opts(t, &o);
    db_codes_free(&o.transient_native);
    return dbc;
}

/* CHANGELOG.md read whole (malloc'd, NUL added), or NULL. */
static char *read_changelog(void)
{
    FILE *f = fopen(INBOXD_SOURCE_DIR "/CHANGELOG.md", "rb");
    char *text = NULL;
    long len;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = calloc(1, (size_t)len + 1)) && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    if (f)
        fclose(f);
    return text;
}

/* Runs one statement of a CHANGELOG block with the default table name from made table. */
static int exec_renamed(const tl_db_t *t, const char *stmt, const char *from, const char *table)
{
    char sql[4096];
    size_t o = 0, fl = strlen(from);
    for (const char *p = stmt; *p && o + strlen(table) + 2 < sizeof sql;) {
        if (strncmp(p, from, fl) == 0) {
            o += (size_t)snprintf(sql + o, sizeof sql - o, "%s", table);
            p += fl;
        } else {
            sql[o++] = *p++;
        }
    }
    sql[o] = '\0';
    return tl_exec(t, sql);
}

int tl_changelog_exec(const tl_db_t *t, const char *marker, const char *from, const char *table)
{
    const char *label = t->dialect == DB_DIALECT_SQLITE ? "\nSQLite" : "\nPostgreSQL:";
    char *text = read_changelog(), *at, *end, *stmt;
    int n = 0;
    at = text ? strstr(text, marker) : NULL;
    at = at ? strstr(at, label) : NULL;
    at = at ? strstr(at, "```sql\n") : NULL;
    end = at ? strstr(at + 7, "\n```") : NULL;
    if (!end) {
        fprintf(stderr, "CHANGELOG.md: no sql block under '%s' for %s\n", marker, label + 1);
        free(text);
        return -1;
    }
    *end = '\0';
    for (stmt = strtok(at + 7, ";"); stmt && n >= 0; stmt = strtok(NULL, ";")) {
        if (strspn(stmt, " \n") == strlen(stmt))
            continue;
        n = exec_renamed(t, stmt, from, table) == 0 ? n + 1 : -1;
    }
    free(text);
    return n;
}
