/*
 * db_conn.c - ODBC connections: open, reopen after a loss, run one
 * statement with bound parameters, turn diagnostics into an ib_error_t.
 */
#include "db_conn_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_connstr.h"
#include "ib_log.h"

#define DEFAULT_LOGIN_TIMEOUT_S 15
/*
 * Text longer than this (in UTF-16 units for SQL Server) is bound as a long
 * type (nvarchar(max)); shorter text is declared with this fixed size, so
 * SQL Server sees one parameter declaration (nvarchar(4000)) whatever the
 * value's length, and reuses one plan.
 */
#define SHORT_TEXT_MAX 4000

/* Held around SQLDriverConnect: see connect_with. */
static pthread_mutex_t connect_mu = PTHREAD_MUTEX_INITIALIZER;

static bool ok(SQLRETURN rc)
{
    return rc == SQL_SUCCESS || rc == SQL_SUCCESS_WITH_INFO;
}

/* Replaces every occurrence of each secret of the connection string in text. */
static void mask_secrets(const char *connstr, char *text, size_t size)
{
    db_connstr_t cs;

    if (!connstr || db_connstr_parse(connstr, &cs, NULL) != IB_E_OK)
        return;
    for (size_t k = 0; k < cs.n; k++) {
        const char *v = cs.attrs[k].value;
        size_t vl = strlen(v);
        char *hit;
        if (!db_connstr_key_is_secret(cs.attrs[k].key) || vl < 3)
            continue;
        while ((hit = strstr(text, v)) != NULL) {
            size_t tail = strlen(hit + vl);
            memcpy(hit, "***", 3);
            memmove(hit + 3, hit + vl, tail + 1);
        }
    }
    db_connstr_free(&cs);
    (void)size;
}

/* The diagnostic records found so far: the first one, and the first error (non-01xxx). */
typedef struct diag {
    SQLCHAR state[6], first_state[6];
    SQLCHAR msg[400], first_msg[400];
    SQLINTEGER native, first_native;
    bool found, have_first;
} diag_t;

/* Scans the records of one handle until the first that is not a warning. */
static void diag_scan(diag_t *dg, SQLSMALLINT htype, SQLHANDLE h)
{
    SQLSMALLINT len;
    for (SQLSMALLINT i = 1; i < 10 && !dg->found; i++) {
        SQLRETURN rc =
            SQLGetDiagRec(htype, h, i, dg->state, &dg->native, dg->msg, sizeof(dg->msg), &len);
        if (!ok(rc))
            break;
        if (!dg->have_first) {
            memcpy(dg->first_state, dg->state, sizeof(dg->state));
            memcpy(dg->first_msg, dg->msg, sizeof(dg->msg));
            dg->first_native = dg->native;
            dg->have_first = true;
        }
        if (strncmp((char *)dg->state, "01", 2) != 0)
            dg->found = true;
    }
}

ib_err_t db_diag_error(db_conn_t *dbc, SQLSMALLINT htype, SQLHANDLE h, const char *what,
                       ib_error_t *err)
{
    diag_t dg = {0};
    ib_error_t local;
    ib_class_t cls;
    bool lost;

    if (!err)
        err = &local;
    diag_scan(&dg, htype, h);
    /*
     * psqlODBC can fail a statement on a dead connection without a
     * statement record; the connection handle then holds the reason.
     */
    if (!dg.have_first && htype == SQL_HANDLE_STMT && dbc && dbc->dbc)
        diag_scan(&dg, SQL_HANDLE_DBC, dbc->dbc);
    if (!dg.found) {
        memcpy(dg.state, dg.first_state, sizeof(dg.state));
        memcpy(dg.msg, dg.first_msg, sizeof(dg.msg));
        dg.native = dg.first_native;
        if (!dg.have_first) {
            strcpy((char *)dg.state, "HY000");
            strcpy((char *)dg.msg, "no diagnostic record");
        }
    }
    mask_secrets(dbc ? dbc->connstr : NULL, (char *)dg.msg, sizeof(dg.msg));

    /* No connection yet: auto, which classifies by the rules every dialect shares. */
    db_dialect_t d = dbc ? dbc->dialect : DB_DIALECT_AUTO;
    cls = db_classify(d, (char *)dg.state, dg.native, dbc ? &dbc->transient : NULL,
                      dbc ? &dbc->permanent : NULL);

    lost = db_dialect_is_conn_lost(d, (char *)dg.state, dg.native);
    if (!lost && dbc && dbc->connected && dbc->dbc) {
        SQLUINTEGER dead = SQL_CD_FALSE;
        if (ok(SQLGetConnectAttr(dbc->dbc, SQL_ATTR_CONNECTION_DEAD, &dead, 0, NULL)) &&
            dead == SQL_CD_TRUE)
            lost = true;
    }
    if (lost) {
        cls = IB_CLASS_TRANSIENT;
        if (dbc)
            dbc->broken = true;
    }
    /* A configured code is the operator's word on the class; otherwise a
     * setup error (missing table, privilege, ...) gets its own code. */
    bool setup = !lost &&
                 !db_codes_match(dbc ? &dbc->transient : NULL, (char *)dg.state, dg.native) &&
                 !db_codes_match(dbc ? &dbc->permanent : NULL, (char *)dg.state, dg.native) &&
                 db_dialect_is_setup_error(d, (char *)dg.state, dg.native, (char *)dg.msg);
    ib_error_set(err, lost ? IB_E_DB_CONN : setup ? IB_E_DB_SETUP : IB_E_DB, cls, "%s: [%s/%ld] %s",
                 what, (char *)dg.state, (long)dg.native, (char *)dg.msg);
    ib_strlcpy(err->sqlstate, (char *)dg.state, sizeof(err->sqlstate));
    err->native = dg.native;
    return err->code;
}

static void disconnect(db_conn_t *dbc)
{
    db_stmt_forget_all(dbc);
    if (dbc->dbc) {
        if (dbc->connected) {
            SQLEndTran(SQL_HANDLE_DBC, dbc->dbc, SQL_ROLLBACK);
            SQLDisconnect(dbc->dbc);
        }
        SQLFreeHandle(SQL_HANDLE_DBC, dbc->dbc);
        dbc->dbc = NULL;
    }
    db_token_release(dbc); /* after the handle that may still read it */
    if (dbc->env) {
        SQLFreeHandle(SQL_HANDLE_ENV, dbc->env);
        dbc->env = NULL;
    }
    dbc->connected = false;
    dbc->in_txn = false;
}

static ib_err_t end_tran(db_conn_t *dbc, bool commit, ib_error_t *err);

/* Runs the dialect's per-session statement (SET XACT_ABORT ON ...) on a new connection. */
static ib_err_t session_setup(db_conn_t *dbc, ib_error_t *err)
{
    const char *sql = db_sql_session_setup(dbc->dialect);

    if (!*sql)
        return IB_E_OK;
    if (db_run(dbc, sql, NULL, 0, NULL, NULL, NULL, err) != IB_E_OK ||
        end_tran(dbc, true, err) != IB_E_OK) {
        ib_error_prefix(err, "session setup (%s)", sql);
        disconnect(dbc);
        return err->code;
    }
    return IB_E_OK;
}

/*
 * psqlODBC wraps every statement in SAVEPOINT / RELEASE by default (its
 * "statement" level of rollback on errors) so that a failed statement does
 * not abort the transaction. inboxd never continues a transaction after a
 * failed statement - it rolls back and decides from there - so it asks for
 * the "transaction" level (Protocol=7.4-1), which sends no savepoints. A
 * Protocol given in the connection string is left as it is.
 */
#define PSQLODBC_NO_SAVEPOINTS "Protocol=7.4-1"

static bool connstr_wants_psqlodbc(const char *connstr, bool *has_protocol)
{
    db_connstr_t cs;
    const char *drv;
    bool pg;

    *has_protocol = true;
    if (db_connstr_parse(connstr, &cs, NULL) != IB_E_OK)
        return false;
    drv = db_connstr_get(&cs, "Driver");
    pg = drv && (strcasestr(drv, "postgres") || strcasestr(drv, "psqlodbc"));
    *has_protocol = db_connstr_get(&cs, "Protocol") != NULL;
    db_connstr_free(&cs);
    return pg;
}

/* The connection string with PSQLODBC_NO_SAVEPOINTS added; NULL when out of memory. */
static char *connstr_no_savepoints(const char *connstr)
{
    size_t len = strlen(connstr);
    char *s = malloc(len + sizeof(PSQLODBC_NO_SAVEPOINTS) + 2);
    if (s)
        sprintf(s, "%s%s%s", connstr, len && connstr[len - 1] != ';' ? ";" : "",
                PSQLODBC_NO_SAVEPOINTS);
    return s;
}

static ib_err_t connect_with(db_conn_t *dbc, const char *connstr, ib_error_t *err);

static ib_err_t connect_once(db_conn_t *dbc, ib_error_t *err)
{
    bool has_protocol;
    bool pg = connstr_wants_psqlodbc(dbc->connstr, &has_protocol);
    char *cs = pg && !has_protocol ? connstr_no_savepoints(dbc->connstr) : NULL;
    ib_err_t rc;
    SQLCHAR drv[64] = "";
    SQLSMALLINT l = 0;

    rc = connect_with(dbc, cs ? cs : dbc->connstr, err);
    if (rc == IB_E_OK && !cs && !has_protocol &&
        ok(SQLGetInfo(dbc->dbc, SQL_DRIVER_NAME, drv, sizeof(drv), &l)) &&
        strcasestr((char *)drv, "psqlodbc")) {
        /* Found through a DSN: reconnect once with the option. */
        cs = connstr_no_savepoints(dbc->connstr);
        if (cs) {
            disconnect(dbc);
            rc = connect_with(dbc, cs, err);
        }
    }
    if (cs) {
        memset(cs, 0, strlen(cs));
        free(cs);
    }
    return rc;
}

static ib_err_t connect_with(db_conn_t *dbc, const char *connstr, ib_error_t *err)
{
    SQLCHAR out[1024];
    SQLSMALLINT outlen = 0;
    SQLCHAR dbms[128] = "";
    SQLRETURN rc;
    SQLUINTEGER parc = 0;

    if (!ok(SQLAllocHandle(SQL_HANDLE_ENV, SQL_NULL_HANDLE, &dbc->env)))
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT,
                            "ODBC environment allocation failed");
    SQLSetEnvAttr(dbc->env, SQL_ATTR_ODBC_VERSION, (SQLPOINTER)SQL_OV_ODBC3, 0);
    if (!ok(SQLAllocHandle(SQL_HANDLE_DBC, dbc->env, &dbc->dbc))) {
        disconnect(dbc);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT,
                            "ODBC connection allocation failed");
    }
    SQLSetConnectAttr(dbc->dbc, SQL_ATTR_LOGIN_TIMEOUT, (SQLPOINTER)(SQLULEN)dbc->login_timeout_s,
                      0);
    if (db_token_apply(dbc, err) != IB_E_OK) {
        disconnect(dbc);
        return err->code;
    }
    /*
     * One connect at a time in the process: psqlODBC calls setlocale()
     * while it connects, which frees the locale name another thread's
     * connect may be reading (a use-after-free seen under AddressSanitizer
     * when two db workers connected at once).
     */
    pthread_mutex_lock(&connect_mu);
    rc = SQLDriverConnect(dbc->dbc, NULL, (SQLCHAR *)connstr, SQL_NTS, out, sizeof(out), &outlen,
                          SQL_DRIVER_NOPROMPT);
    pthread_mutex_unlock(&connect_mu);
    memset(out, 0, sizeof(out)); /* the completed string may hold the password */
    if (!ok(rc)) {
        db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "connect", err);
        err->code = IB_E_DB_CONN;
        /*
         * unixODBC reports a driver library it cannot load ("Can't open
         * lib") with SQLSTATE 01000 and no error record: a configuration
         * problem, not weather.
         */
        if (strncmp(err->sqlstate, "01", 2) == 0 || strncmp(err->sqlstate, "IM", 2) == 0)
            err->cls = IB_CLASS_PERMANENT;
        disconnect(dbc);
        return IB_E_DB_CONN;
    }
    dbc->connected = true;
    rc = SQLSetConnectAttr(dbc->dbc, SQL_ATTR_AUTOCOMMIT, (SQLPOINTER)SQL_AUTOCOMMIT_OFF, 0);
    if (!ok(rc)) {
        db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "autocommit off", err);
        disconnect(dbc);
        return err->code;
    }
    if (!db_dialect_traits(dbc->want)) { /* auto: from the DBMS's name */
        SQLSMALLINT l = 0;
        SQLGetInfo(dbc->dbc, SQL_DBMS_NAME, dbms, sizeof(dbms), &l);
        dbc->dialect = db_dialect_from_dbms((char *)dbms);
        if (!db_dialect_traits(dbc->dialect)) {
            disconnect(dbc);
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "db.dialect: cannot detect the dialect of DBMS '%s'; set it",
                                (char *)dbms);
        }
    } else {
        dbc->dialect = dbc->want;
    }
    if (db_sql_insert(dbc->dialect, dbc->table, dbc->sql_insert, sizeof(dbc->sql_insert)) ||
        db_sql_select_existing(dbc->dialect, dbc->table, dbc->sql_existing,
                               sizeof(dbc->sql_existing))) {
        disconnect(dbc);
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
    }
    dbc->wide_text = db_dialect_traits(dbc->dialect)->wide_text;
    {
        SQLCHAR drv[64] = "";
        SQLSMALLINT l = 0;
        dbc->freetds = ok(SQLGetInfo(dbc->dbc, SQL_DRIVER_NAME, drv, sizeof(drv), &l)) &&
                       strcasestr((char *)drv, "tdsodbc") != NULL;
    }
    /*
     * A driver that answers SQL_PARAM_ARRAY_ROW_COUNTS takes parameter
     * arrays; sqlite3odbc answers too, and runs them in the process.
     */
    /*
     * FreeTDS answers too, but sends an array as one SQL batch with every
     * value pasted in as a literal (its "multiple query"): no parameter
     * declarations, a new plan per batch, timestamps as strings the
     * session's DATEFORMAT reads (seen at the wire, tests/tds): it gets
     * one execution per set.
     */
    dbc->param_arrays =
        !dbc->freetds &&
        ok(SQLGetInfo(dbc->dbc, SQL_PARAM_ARRAY_ROW_COUNTS, &parc, sizeof(parc), NULL)) &&
        (parc == SQL_PARC_BATCH || parc == SQL_PARC_NO_BATCH);
    dbc->broken = false;
    return session_setup(dbc, err);
}

/*
 * A first connection that the server refuses by login or database name
 * (SQL Server 18456 / 4060, MariaDB 1045 / 1049, 28xxx) is a wrong
 * connection string or a missing grant, not weather: report it as
 * configuration. A reopen mid-run (db_conn_ensure) keeps the table's
 * class, transient, since a failing-over database refuses logins a while.
 */
static void login_refused_is_config(db_dialect_t d, ib_error_t *err)
{
    if (!db_dialect_is_login_refused(d, err->sqlstate, err->native))
        return;
    err->code = IB_E_CONFIG;
    err->cls = IB_CLASS_PERMANENT;
    ib_error_prefix(err, "db.connection_string: the server refused the login or the database");
}

db_conn_t *db_conn_new(const db_options_t *opt, ib_error_t *err)
{
    db_conn_t *dbc;
    const char *table;
    db_connstr_t cs;

    ib_error_clear(err);
    if (!opt || !opt->connection_string || !*opt->connection_string) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.connection_string: empty");
        return NULL;
    }
    if (db_connstr_parse(opt->connection_string, &cs, err) != IB_E_OK) {
        ib_error_prefix(err, "db.connection_string");
        return NULL;
    }
    db_connstr_free(&cs);
    if (opt->access_token && db_dialect_traits(opt->dialect) &&
        !db_dialect_traits(opt->dialect)->access_token) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "db.auth: workload_identity works with SQL Server only, not db.dialect '%s'",
                     db_dialect_name(opt->dialect));
        return NULL;
    }
    if (opt->access_token && db_token_connstr_check(opt->connection_string, err) != IB_E_OK)
        return NULL;
    table = opt->inbox_table && *opt->inbox_table ? opt->inbox_table : DB_INBOX_DEFAULT_TABLE;
    if (!db_table_name_valid(table)) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "db.inbox_table: '%.80s' is not an identifier or schema.identifier", table);
        return NULL;
    }
    if ((unsigned)opt->dialect >= DB_DIALECTS) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.dialect: unknown value");
        return NULL;
    }
    dbc = calloc(1, sizeof(*dbc));
    if (!dbc || !(dbc->connstr = strdup(opt->connection_string)) || !(dbc->table = strdup(table)) ||
        db_codes_copy(&dbc->transient, &opt->transient_native) != IB_E_OK ||
        db_codes_copy(&dbc->permanent, &opt->permanent_native) != IB_E_OK) {
        db_conn_free(dbc);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    dbc->want = opt->dialect;
    dbc->dialect = opt->dialect;
    dbc->token_fn = opt->access_token;
    dbc->token_arg = opt->access_token_arg;
    dbc->stmt_timeout_s = opt->statement_timeout_s > 0 ? opt->statement_timeout_s : 0;
    dbc->login_timeout_s =
        opt->login_timeout_s > 0 ? opt->login_timeout_s : DEFAULT_LOGIN_TIMEOUT_S;
    if (connect_once(dbc, err) != IB_E_OK) {
        login_refused_is_config(dbc->want, err);
        db_conn_free(dbc);
        return NULL;
    }
    return dbc;
}

void db_conn_free(db_conn_t *dbc)
{
    if (!dbc)
        return;
    disconnect(dbc);
    db_token_release(dbc);
    if (dbc->connstr) {
        memset(dbc->connstr, 0, strlen(dbc->connstr));
        free(dbc->connstr);
    }
    free(dbc->table);
    free(dbc->sql_claim);
    db_codes_free(&dbc->transient);
    db_codes_free(&dbc->permanent);
    free(dbc);
}

db_dialect_t db_conn_dialect(const db_conn_t *dbc)
{
    return dbc->dialect;
}

long db_conn_reconnects(const db_conn_t *dbc)
{
    return dbc->reconnects;
}

ib_err_t db_conn_max_connections(db_conn_t *dbc, long long *limit, ib_error_t *err)
{
    const char *sql = db_sql_max_connections(dbc->dialect);
    ib_err_t rc;

    *limit = 0;
    ib_error_clear(err);
    if (!sql)
        return IB_E_OK;
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    rc = db_run(dbc, sql, NULL, 0, db_row_first_int, limit, NULL, err);
    db_rollback_quiet(dbc);
    if (rc != IB_E_OK)
        ib_error_prefix(err, "reading the server's connection limit");
    return rc;
}

void db_conn_set_phase_hook(db_conn_t *dbc, db_phase_fn fn, void *arg)
{
    dbc->phase_fn = fn;
    dbc->phase_arg = arg;
    dbc->phase_item = 0;
}

long long db_phase_now(const db_conn_t *dbc)
{
    struct timespec ts;
    if (!dbc->phase_fn)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void db_phase_report(db_conn_t *dbc, db_phase_t phase, size_t item, size_t stmt, size_t rows,
                     long long start_ns, const ib_error_t *err)
{
    db_phase_info_t info = {phase, item, stmt, rows, start_ns, 0, err};
    if (!dbc->phase_fn)
        return;
    info.end_ns = db_phase_now(dbc);
    dbc->phase_fn(dbc->phase_arg, &info);
}

ib_err_t db_conn_ensure(db_conn_t *dbc, ib_error_t *err)
{
    ib_err_t rc;

    if (dbc->connected && !dbc->broken)
        return IB_E_OK;
    disconnect(dbc);
    rc = connect_once(dbc, err);
    if (rc != IB_E_OK) {
        dbc->broken = true;
        return rc;
    }
    dbc->reconnects++;
    IB_LOG(IB_LOG_INFO, "db_reconnect", IB_MSG("database connection reopened"),
           IB_S("dialect", db_dialect_name(dbc->dialect)), IB_I("reconnects", dbc->reconnects));
    return IB_E_OK;
}

void db_rollback_quiet(db_conn_t *dbc)
{
    dbc->in_txn = false;
    if (!dbc->connected || !dbc->dbc)
        return;
    if (!ok(SQLEndTran(SQL_HANDLE_DBC, dbc->dbc, SQL_ROLLBACK))) {
        ib_error_t e;
        db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "rollback", &e);
        /*
         * A rollback that fails leaves the session in an unknown state:
         * reopen it rather than reuse a transaction that may hold locks.
         */
        dbc->broken = true;
    }
}

size_t db_utf8_to_utf16(const char *s, size_t len, SQLWCHAR *out)
{
    size_t n = 0, i = 0;
    const unsigned char *u = (const unsigned char *)s;

    while (i < len) {
        unsigned long cp;
        size_t need;
        unsigned char c = u[i];
        if (c < 0x80) {
            cp = c;
            need = 0;
        } else if ((c & 0xE0) == 0xC0) {
            cp = c & 0x1F;
            need = 1;
        } else if ((c & 0xF0) == 0xE0) {
            cp = c & 0x0F;
            need = 2;
        } else if ((c & 0xF8) == 0xF0) {
            cp = c & 0x07;
            need = 3;
        } else {
            cp = 0xFFFD;
            need = 0;
        }
        i++;
        for (size_t k = 0; k < need; k++, i++) {
            if (i >= len || (u[i] & 0xC0) != 0x80) {
                cp = 0xFFFD;
                break;
            }
            cp = (cp << 6) | (u[i] & 0x3F);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are not characters. */
        if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            cp = 0xFFFD;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            if (out) {
                out[n] = (SQLWCHAR)(0xD800 + (cp >> 10));
                out[n + 1] = (SQLWCHAR)(0xDC00 + (cp & 0x3FF));
            }
            n += 2;
        } else {
            if (out)
                out[n] = (SQLWCHAR)cp;
            n++;
        }
    }
    return n;
}

/*
 * A timestamp parameter's declared precision. SQL Server's drivers declare
 * column size 23 with 3 digits as datetime, which rounds to 1/300 s and
 * compares with datetime2 columns through a conversion: SQL Server gets
 * datetime2(7) (size 27, 7 digits), which holds every millisecond exactly.
 */
static SQLULEN ts_size(const db_conn_t *dbc)
{
    return db_dialect_traits(dbc->dialect)->ts_size;
}

static SQLSMALLINT ts_digits(const db_conn_t *dbc)
{
    return (SQLSMALLINT)db_dialect_traits(dbc->dialect)->ts_digits;
}

/*
 * The SQL type and column size of wide text of wl UTF-16 units: the fixed
 * SHORT_TEXT_MAX up to it, nvarchar(max) past it. Microsoft's driver
 * declares SQL_WLONGVARCHAR as ntext (which OPENJSON, JSON_VALUE, LEN and
 * comparisons reject) and SQL_WVARCHAR with size 0 as nvarchar(max);
 * FreeTDS (TDS 7.2 or later) declares SQL_WLONGVARCHAR as nvarchar(max),
 * and clamps SQL_WVARCHAR to 8,000 bytes whatever the size (its
 * tds_fix_column_size and tds_generic_put): each driver gets its own.
 */
static void wide_shape(const db_conn_t *dbc, size_t wl, SQLSMALLINT *type, SQLULEN *size)
{
    if (wl <= SHORT_TEXT_MAX) {
        *type = SQL_WVARCHAR;
        *size = SHORT_TEXT_MAX;
    } else if (dbc->freetds) {
        *type = SQL_WLONGVARCHAR;
        *size = wl;
    } else {
        *type = SQL_WVARCHAR;
        *size = 0;
    }
}

static ib_err_t bind_one(db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT pos, const db_bind_t *b,
                         SQLLEN *ind, SQL_TIMESTAMP_STRUCT *ts, SQLWCHAR **wide, ib_error_t *err)
{
    SQLRETURN rc;

    if (b->kind == DB_BIND_TS) {
        if (b->ts_ms <= 0) {
            *ind = SQL_NULL_DATA;
            rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_TYPE_TIMESTAMP,
                                  SQL_TYPE_TIMESTAMP, ts_size(dbc), ts_digits(dbc), ts, 0, ind);
        } else {
            time_t secs = (time_t)(b->ts_ms / 1000);
            struct tm tm;
            gmtime_r(&secs, &tm);
            ts->year = (SQLSMALLINT)(tm.tm_year + 1900);
            ts->month = (SQLUSMALLINT)(tm.tm_mon + 1);
            ts->day = (SQLUSMALLINT)tm.tm_mday;
            ts->hour = (SQLUSMALLINT)tm.tm_hour;
            ts->minute = (SQLUSMALLINT)tm.tm_min;
            ts->second = (SQLUSMALLINT)tm.tm_sec;
            ts->fraction = (SQLUINTEGER)(b->ts_ms % 1000) * 1000000u;
            *ind = sizeof(*ts);
            rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_TYPE_TIMESTAMP,
                                  SQL_TYPE_TIMESTAMP, ts_size(dbc), ts_digits(dbc), ts,
                                  sizeof(*ts), ind);
        }
    } else {
        const db_param_t *p = &b->p;
        switch (p->type) {
        case DB_PARAM_TEXT: {
            size_t len = p->text ? strlen(p->text) : 0;
            if (dbc->wide_text && p->text) {
                /*
                 * SQL Server converts narrow text through the column's code
                 * page, which mangles UTF-8 unless the collation is _UTF8:
                 * send UTF-16 to nvarchar columns instead.
                 */
                size_t wl = db_utf8_to_utf16(p->text, len, NULL);
                *wide = malloc((wl + 1) * sizeof(SQLWCHAR));
                if (!*wide)
                    return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
                db_utf8_to_utf16(p->text, len, *wide);
                (*wide)[wl] = 0;
                *ind = (SQLLEN)(wl * sizeof(SQLWCHAR));
                SQLSMALLINT wt;
                SQLULEN wsize;
                wide_shape(dbc, wl, &wt, &wsize);
                rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_WCHAR, wt, wsize, 0, *wide,
                                      (SQLLEN)(wl * sizeof(SQLWCHAR)), ind);
                break;
            }
            if (dbc->wide_text) {
                /* NULL text: declared like any short text of the column. */
                *ind = SQL_NULL_DATA;
                rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_WCHAR, SQL_WVARCHAR,
                                      SHORT_TEXT_MAX, 0, NULL, 0, ind);
                break;
            }
            if (!p->text) {
                *ind = SQL_NULL_DATA;
            } else {
                *ind = (SQLLEN)len;
            }
            rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_CHAR,
                                  len > SHORT_TEXT_MAX ? SQL_LONGVARCHAR : SQL_VARCHAR,
                                  len ? len : 1, 0, (SQLPOINTER)(p->text ? p->text : ""),
                                  (SQLLEN)len, ind);
            break;
        }
        case DB_PARAM_INT:
            *ind = 0;
            rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_SBIGINT, SQL_BIGINT, 0, 0,
                                  (SQLPOINTER)&p->i, 0, ind);
            break;
        case DB_PARAM_FLOAT:
            *ind = 0;
            rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_DOUBLE, SQL_DOUBLE, 15, 0,
                                  (SQLPOINTER)&p->f, 0, ind);
            break;
        case DB_PARAM_NULL:
        default:
            /* SQL Server: declared like text (nvarchar(4000)), one declaration null or not. */
            *ind = SQL_NULL_DATA;
            rc = dbc->wide_text ? SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_WCHAR,
                                                   SQL_WVARCHAR, SHORT_TEXT_MAX, 0, NULL, 0, ind)
                                : SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_CHAR,
                                                   SQL_VARCHAR, 1, 0, NULL, 0, ind);
            break;
        }
    }
    if (!ok(rc))
        return db_diag_error(dbc, SQL_HANDLE_STMT, st, "bind parameter", err);
    return IB_E_OK;
}

static bool same_binding(const db_binding_t *a, const db_binding_t *b)
{
    return a->ctype == b->ctype && a->sqltype == b->sqltype && a->digits == b->digits &&
           a->size == b->size && a->ptr == b->ptr && a->buflen == b->buflen;
}

/* Binds pb's storage as want says, unless that is its binding already. */
static ib_err_t bind_pbuf(db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT pos, db_pbuf_t *pb,
                          const db_binding_t *want, ib_error_t *err)
{
    if (pb->bound && same_binding(&pb->b, want))
        return IB_E_OK;
    pb->bound = false;
    if (!ok(SQLBindParameter(st, pos, SQL_PARAM_INPUT, want->ctype, want->sqltype, want->size,
                             want->digits, want->ptr, want->buflen, &pb->ind)))
        return db_diag_error(dbc, SQL_HANDLE_STMT, st, "bind parameter", err);
    pb->b = *want;
    pb->bound = true;
    return IB_E_OK;
}

/* Points pb->text at a copy of the len bytes of text; false when out of memory. */
static bool pbuf_text(db_pbuf_t *pb, const char *text, size_t len)
{
    if (pb->text_cap < len + 1) {
        size_t cap = (len + 32) & ~(size_t)31; /* what it holds, a little over: RSS */
        char *t = realloc(pb->text, cap);
        if (!t)
            return false;
        pb->text = t;
        pb->text_cap = cap;
    }
    memcpy(pb->text, text, len);
    pb->text[len] = '\0';
    return true;
}

/*
 * bind_one for a kept statement's parameter (narrow text only): the same
 * arguments, the value held in pb so that an unchanged binding stands.
 */
static ib_err_t bind_kept(db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT pos, const db_bind_t *b,
                          db_pbuf_t *pb, ib_error_t *err)
{
    db_binding_t w = {.ptr = &pb->v};
    const db_param_t *p = &b->p;

    if (b->kind == DB_BIND_TS) {
        w.ctype = SQL_C_TYPE_TIMESTAMP;
        w.sqltype = SQL_TYPE_TIMESTAMP;
        w.size = ts_size(dbc);
        w.digits = ts_digits(dbc);
        pb->ind = SQL_NULL_DATA;
        if (b->ts_ms > 0) {
            time_t secs = (time_t)(b->ts_ms / 1000);
            struct tm tm;
            gmtime_r(&secs, &tm);
            pb->v.ts = (SQL_TIMESTAMP_STRUCT){(SQLSMALLINT)(tm.tm_year + 1900),
                                              (SQLUSMALLINT)(tm.tm_mon + 1),
                                              (SQLUSMALLINT)tm.tm_mday,
                                              (SQLUSMALLINT)tm.tm_hour,
                                              (SQLUSMALLINT)tm.tm_min,
                                              (SQLUSMALLINT)tm.tm_sec,
                                              (SQLUINTEGER)(b->ts_ms % 1000) * 1000000u};
            pb->ind = sizeof(pb->v.ts);
            w.buflen = sizeof(pb->v.ts);
        }
        return bind_pbuf(dbc, st, pos, pb, &w, err);
    }
    switch (p->type) {
    case DB_PARAM_TEXT: {
        size_t len = p->text ? strlen(p->text) : 0;
        const char *text = p->text ? p->text : "";
        if (len <= DB_PBUF_TEXT_MAX) {
            if (!pbuf_text(pb, text, len))
                return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            text = pb->text;
        }
        pb->ind = p->text ? (SQLLEN)len : SQL_NULL_DATA;
        w.ctype = SQL_C_CHAR;
        w.sqltype = len > SHORT_TEXT_MAX ? SQL_LONGVARCHAR : SQL_VARCHAR;
        w.size = len ? len : 1;
        w.ptr = (SQLPOINTER)text;
        w.buflen = (SQLLEN)len;
        break;
    }
    case DB_PARAM_INT:
        pb->v.i = p->i;
        pb->ind = 0;
        w.ctype = SQL_C_SBIGINT;
        w.sqltype = SQL_BIGINT;
        break;
    case DB_PARAM_FLOAT:
        pb->v.f = p->f;
        pb->ind = 0;
        w.ctype = SQL_C_DOUBLE;
        w.sqltype = SQL_DOUBLE;
        w.size = 15;
        break;
    case DB_PARAM_NULL:
    default:
        pb->ind = SQL_NULL_DATA;
        w.ctype = SQL_C_CHAR;
        w.sqltype = SQL_VARCHAR;
        w.size = 1;
        w.ptr = NULL;
        break;
    }
    return bind_pbuf(dbc, st, pos, pb, &w, err);
}

/* Opens the transaction for a statement (reopening a lost connection only between transactions). */
static ib_err_t txn_begin(db_conn_t *dbc, ib_error_t *err)
{
    ib_err_t res;

    /*
     * Reopening in the middle of a transaction would run the rest of it
     * without its beginning (the inbox row): only between transactions.
     */
    if (dbc->broken && dbc->in_txn)
        return ib_error_set(err, IB_E_DB_CONN, IB_CLASS_TRANSIENT,
                            "the database connection was lost in a transaction");
    if ((res = db_conn_ensure(dbc, err)) != IB_E_OK)
        return res;
    dbc->in_txn = true;
    return IB_E_OK;
}

/* A statement handle in the current transaction (which it opens). */
static ib_err_t stmt_open(db_conn_t *dbc, SQLHSTMT *st, ib_error_t *err)
{
    ib_err_t res;

    if ((res = txn_begin(dbc, err)) != IB_E_OK)
        return res;
    if (!ok(SQLAllocHandle(SQL_HANDLE_STMT, dbc->dbc, st)))
        return db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "statement allocation", err);
    if (dbc->stmt_timeout_s > 0)
        SQLSetStmtAttr(*st, SQL_ATTR_QUERY_TIMEOUT, (SQLPOINTER)(SQLULEN)dbc->stmt_timeout_s, 0);
    return IB_E_OK;
}

bool db_same_text(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

bool db_text_is_long(const db_conn_t *dbc, const char *text)
{
    size_t len = strlen(text);
    return (dbc->wide_text ? db_utf8_to_utf16(text, len, NULL) : len) > SHORT_TEXT_MAX;
}

/* Per-execution buffers of db_run: on the stack for up to SCRATCH_N parameters. */
#define SCRATCH_N 16
typedef struct scratch {
    SQLLEN *ind;
    SQL_TIMESTAMP_STRUCT *ts;
    SQLWCHAR **wide;
    unsigned char *sig;
    SQLLEN ind_s[SCRATCH_N];
    SQL_TIMESTAMP_STRUCT ts_s[SCRATCH_N];
    SQLWCHAR *wide_s[SCRATCH_N];
    unsigned char sig_s[SCRATCH_N];
} scratch_t;

static bool scratch_init(scratch_t *sc, size_t n)
{
    memset(sc, 0, sizeof(*sc));
    if (n <= SCRATCH_N) {
        sc->ind = sc->ind_s;
        sc->ts = sc->ts_s;
        sc->wide = sc->wide_s;
        sc->sig = sc->sig_s;
        return true;
    }
    sc->ind = calloc(n, sizeof(*sc->ind));
    sc->ts = calloc(n, sizeof(*sc->ts));
    sc->wide = calloc(n, sizeof(*sc->wide));
    sc->sig = calloc(n, 1);
    return sc->ind && sc->ts && sc->wide && sc->sig;
}

static void scratch_free(scratch_t *sc, size_t n)
{
    for (size_t i = 0; sc->wide && i < n; i++)
        free(sc->wide[i]);
    if (sc->ind == sc->ind_s)
        return;
    free(sc->ind);
    free(sc->ts);
    free(sc->wide);
    free(sc->sig);
}

/* The statement for sql: kept prepared (keep) or a new handle for SQLExecDirect. */
static ib_err_t stmt_for(db_conn_t *dbc, const char *sql, bool keep, const db_bind_t *binds,
                         size_t nbinds, unsigned char *sig, SQLHSTMT *st, ib_error_t *err)
{
    ib_err_t res;

    if (!keep)
        return stmt_open(dbc, st, err);
    if ((res = txn_begin(dbc, err)) != IB_E_OK)
        return res;
    for (size_t i = 0; i < nbinds; i++)
        sig[i] = binds[i].kind == DB_BIND_TS ? 'T' : db_stmt_sig_param(dbc, &binds[i].p);
    return db_stmt_take(dbc, sql, sig, nbinds, st, err);
}

/* Passes each row of st's first result with columns to row_cb. */
static ib_err_t fetch_rows(db_conn_t *dbc, SQLHSTMT st, db_row_cb row_cb, void *arg,
                           ib_error_t *err)
{
    SQLSMALLINT ncols = 0;
    SQLRETURN rc;

    /* Skip leading results without columns (SQL Server batches). */
    while (ok(SQLNumResultCols(st, &ncols)) && ncols == 0) {
        rc = SQLMoreResults(st);
        if (rc == SQL_NO_DATA)
            break;
        if (!ok(rc))
            return db_diag_error(dbc, SQL_HANDLE_STMT, st, "next result", err);
    }
    while (ncols > 0) {
        rc = SQLFetch(st);
        if (rc == SQL_NO_DATA)
            break;
        if (!ok(rc))
            return db_diag_error(dbc, SQL_HANDLE_STMT, st, "fetch", err);
        if (!row_cb(st, arg))
            break;
    }
    return IB_E_OK;
}

static ib_err_t run_stmt(db_conn_t *dbc, const char *sql, bool keep, const db_bind_t *binds,
                         size_t nbinds, db_row_cb row_cb, void *arg, long long *rows,
                         ib_error_t *err)
{
    SQLHSTMT st = SQL_NULL_HSTMT;
    scratch_t sc;
    db_pbuf_t *pb;
    SQLRETURN rc;
    ib_err_t res = IB_E_OK;

    if (rows)
        *rows = 0;
    if (nbinds > 32767)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "too many parameters");
    if (!scratch_init(&sc, nbinds)) {
        res = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        goto out;
    }
    if ((res = stmt_for(dbc, sql, keep, binds, nbinds, sc.sig, &st, err)) != IB_E_OK)
        goto out;
    pb = keep && !dbc->wide_text ? db_stmt_params(dbc, st, nbinds) : NULL;
    for (size_t i = 0; i < nbinds; i++)
        if ((res = pb ? bind_kept(dbc, st, (SQLUSMALLINT)(i + 1), &binds[i], &pb[i], err)
                      : bind_one(dbc, st, (SQLUSMALLINT)(i + 1), &binds[i], &sc.ind[i], &sc.ts[i],
                                 &sc.wide[i], err)) != IB_E_OK)
            goto out;
    rc = keep ? SQLExecute(st) : SQLExecDirect(st, (SQLCHAR *)sql, SQL_NTS);
    if (!ok(rc) && rc != SQL_NO_DATA) {
        res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "execute", err);
        goto out;
    }
    if (rows && rc != SQL_NO_DATA) {
        SQLLEN n = 0;
        if (ok(SQLRowCount(st, &n)) && n > 0)
            *rows = n;
    }
    if (row_cb && (res = fetch_rows(dbc, st, row_cb, arg, err)) != IB_E_OK)
        goto out;
    /*
     * SQL Server reports an error raised later in a batch (the THROW after
     * sp_getapplock) only when its result is reached: drain every result.
     */
    while ((rc = SQLMoreResults(st)) != SQL_NO_DATA) {
        if (!ok(rc)) {
            res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "next result", err);
            goto out;
        }
    }
out:
    if (st != SQL_NULL_HSTMT && keep)
        db_stmt_give(dbc, st, res == IB_E_OK);
    else if (st != SQL_NULL_HSTMT)
        SQLFreeHandle(SQL_HANDLE_STMT, st);
    scratch_free(&sc, nbinds);
    return res;
}

ib_err_t db_run(db_conn_t *dbc, const char *sql, const db_bind_t *binds, size_t nbinds,
                db_row_cb row_cb, void *arg, long long *rows, ib_error_t *err)
{
    return run_stmt(dbc, sql, false, binds, nbinds, row_cb, arg, rows, err);
}

ib_err_t db_run_kept(db_conn_t *dbc, const char *sql, const db_bind_t *binds, size_t nbinds,
                     db_row_cb row_cb, void *arg, long long *rows, ib_error_t *err)
{
    return run_stmt(dbc, sql, db_stmt_keepable(dbc, sql), binds, nbinds, row_cb, arg, rows, err);
}

/* ---- public helpers ------------------------------------------------------ */

bool db_row_first_int(SQLHSTMT st, void *arg)
{
    long long *out = arg;
    SQLBIGINT v = 0;
    SQLLEN ind = 0;
    if (ok(SQLGetData(st, 1, SQL_C_SBIGINT, &v, sizeof(v), &ind)) && ind != SQL_NULL_DATA)
        *out = v;
    return false;
}

ib_err_t db_exec(db_conn_t *dbc, const char *sql, const db_param_t *params, size_t nparams,
                 long long *out, ib_error_t *err)
{
    db_bind_t *b = NULL;
    ib_err_t rc;

    ib_error_clear(err);
    if (out)
        *out = 0;
    if (nparams) {
        b = calloc(nparams, sizeof(*b));
        if (!b)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        for (size_t i = 0; i < nparams; i++)
            b[i] = DB_B(params[i]);
    }
    rc = db_run(dbc, sql, b, nparams, out ? db_row_first_int : NULL, out, NULL, err);
    free(b);
    if (rc != IB_E_OK && err && err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    return rc;
}

/*
 * SQL Server: how many transactions are open, asked before the commit. The
 * drivers run manual-commit mode their own way - FreeTDS (TDS 7.2 or later)
 * with transaction-manager requests, a new transaction begun by the
 * connect and by every SQLEndTran, so exactly one is open at any time;
 * Microsoft's driver with IMPLICIT_TRANSACTIONS ON, so one is open once a
 * statement touched a table, none before. Anything else means a statement
 * of a route began (BEGIN TRAN: 2) or ended (COMMIT, ROLLBACK: 0) one
 * behind the driver's back, and the commit would not commit what it
 * claims: it is refused and rolled back.
 */
static ib_err_t trancount_check(db_conn_t *dbc, ib_error_t *err)
{
    const char *sql = db_dialect_traits(dbc->dialect)->trancount_sql;
    long long n = -1;

    if (!sql)
        return IB_E_OK;
    if (db_run(dbc, sql, NULL, 0, db_row_first_int, &n, NULL, err) != IB_E_OK)
        return err->code;
    if (n == 1 || (n == 0 && !dbc->freetds))
        return IB_E_OK;
    return ib_error_set(err, IB_E_DB, IB_CLASS_PERMANENT,
                        "commit refused: %lld transactions open, expected 1 (a statement began "
                        "or ended a transaction of its own: BEGIN, COMMIT or ROLLBACK TRANSACTION "
                        "are not allowed in a route)",
                        n);
}

/*
 * SQLEndTran on the connection. SQL Server's drivers give it no timeout:
 * a COMMIT is as long as the server takes (Microsoft's guidance is that
 * ODBC applications commit through SQLEndTran, never by T-SQL, in
 * manual-commit mode; FreeTDS tracks the transaction it began itself).
 */
static ib_err_t end_tran(db_conn_t *dbc, bool commit, ib_error_t *err)
{
    if (ok(SQLEndTran(SQL_HANDLE_DBC, dbc->dbc, commit ? SQL_COMMIT : SQL_ROLLBACK)))
        return IB_E_OK;
    ib_err_t rc = db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, commit ? "commit" : "rollback", err);
    if (err && err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    if (commit)
        db_rollback_quiet(dbc);
    else
        dbc->broken = true;
    return rc;
}

/*
 * True when the driver has given the connection up. psqlODBC, having read a
 * FATAL message or lost the socket while a statement still reported
 * success, forgets its transaction: SQLEndTran(SQL_COMMIT) then returns
 * success without sending COMMIT, and the server has rolled everything
 * back. Asked of PostgreSQL's and SQL Server's drivers only (for them it
 * reads a flag; MySQL's driver would ping the server).
 */
static bool driver_says_dead(db_conn_t *dbc)
{
    SQLUINTEGER dead = SQL_CD_FALSE;
    if (!db_dialect_traits(dbc->dialect)->dead_flag)
        return false;
    return ok(SQLGetConnectAttr(dbc->dbc, SQL_ATTR_CONNECTION_DEAD, &dead, 0, NULL)) &&
           dead == SQL_CD_TRUE;
}

/* A commit on a connection the driver gave up: not committed as far as anyone knows. */
static ib_err_t lost_at_commit(db_conn_t *dbc, ib_error_t *err, const char *when)
{
    dbc->broken = true;
    return ib_error_set(err, IB_E_DB_CONN, IB_CLASS_TRANSIENT,
                        "commit: the driver lost the connection %s the commit; its success "
                        "means nothing (the inbox decides on the next attempt)",
                        when);
}

ib_err_t db_end(db_conn_t *dbc, bool commit, ib_error_t *err)
{
    bool was_open = dbc->in_txn;
    ib_error_t local;

    if (!err)
        err = &local;
    ib_error_clear(err);
    if (!dbc->connected || dbc->broken) {
        dbc->in_txn = false;
        return commit && was_open ? ib_error_set(err, IB_E_DB_CONN, IB_CLASS_TRANSIENT,
                                                 "commit: the connection was lost")
                                  : IB_E_OK;
    }
    if (commit && was_open && trancount_check(dbc, err) != IB_E_OK) {
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        db_rollback_quiet(dbc);
        /*
         * The driver's idea of the transaction no longer matches the
         * server's (FreeTDS then rolls back nothing and opens no new
         * transaction: every later statement would commit on its own).
         * A new session starts clean.
         */
        dbc->broken = true;
        return err->code;
    }
    dbc->in_txn = false;
    if (commit && was_open && driver_says_dead(dbc))
        return lost_at_commit(dbc, err, "before");
    if (end_tran(dbc, commit, err) != IB_E_OK)
        return err->code;
    if (commit && was_open && driver_says_dead(dbc))
        return lost_at_commit(dbc, err, "during");
    return IB_E_OK;
}

/* ---- parameter arrays ---------------------------------------------------- */

bool db_params_compatible(const db_param_t *a, const db_param_t *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (a[k].type != b[k].type && a[k].type != DB_PARAM_NULL && b[k].type != DB_PARAM_NULL)
            return false;
    return true;
}

/* One column of a parameter array: its values for every set, and their indicators. */
typedef struct column {
    void *buf;
    SQLLEN *ind;
} column_t;

/* The type and width (bytes or UTF-16 units, without the terminator) of column k. */
static void column_shape(const db_conn_t *dbc, size_t k, const db_param_t *const *sets,
                         size_t nsets, db_param_type_t *type, size_t *width)
{
    *type = DB_PARAM_NULL;
    *width = 1;
    for (size_t i = 0; i < nsets; i++) {
        const db_param_t *p = &sets[i][k];
        if (p->type == DB_PARAM_TEXT && !p->text)
            continue;
        if (p->type != DB_PARAM_NULL)
            *type = p->type;
        if (p->type == DB_PARAM_TEXT) {
            size_t len = strlen(p->text);
            size_t w = dbc->wide_text ? db_utf8_to_utf16(p->text, len, NULL) : len;
            if (w > *width)
                *width = w;
        }
    }
}

/* The signature code of an array column (db_stmt_take): how bind_column binds it. */
static unsigned char column_sig(db_param_type_t type, size_t width)
{
    return type == DB_PARAM_INT     ? 'I'
           : type == DB_PARAM_FLOAT ? 'F'
           : width > SHORT_TEXT_MAX ? 'L'
                                    : 'V';
}

/* Fills and binds column k of the array (thread: the owner of dbc). */
static ib_err_t bind_column(db_conn_t *dbc, SQLHSTMT st, size_t k, const db_param_t *const *sets,
                            size_t nsets, column_t *col, ib_error_t *err)
{
    db_param_type_t type;
    size_t width;
    SQLRETURN rc;

    column_shape(dbc, k, sets, nsets, &type, &width);
    size_t esize = type == DB_PARAM_INT     ? sizeof(SQLBIGINT)
                   : type == DB_PARAM_FLOAT ? sizeof(double)
                   : dbc->wide_text         ? (width + 1) * sizeof(SQLWCHAR)
                                            : width + 1;
    col->buf = calloc(nsets, esize);
    col->ind = calloc(nsets, sizeof(SQLLEN));
    if (!col->buf || !col->ind)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < nsets; i++) {
        const db_param_t *p = &sets[i][k];
        char *el = (char *)col->buf + i * esize;
        if (p->type == DB_PARAM_NULL || (p->type == DB_PARAM_TEXT && !p->text)) {
            col->ind[i] = SQL_NULL_DATA;
        } else if (type == DB_PARAM_INT) {
            SQLBIGINT v = p->i;
            memcpy(el, &v, sizeof(v));
        } else if (type == DB_PARAM_FLOAT) {
            memcpy(el, &p->f, sizeof(p->f));
        } else if (dbc->wide_text) {
            size_t wl = db_utf8_to_utf16(p->text, strlen(p->text), (SQLWCHAR *)el);
            col->ind[i] = (SQLLEN)(wl * sizeof(SQLWCHAR));
        } else {
            size_t len = strlen(p->text);
            memcpy(el, p->text, len);
            col->ind[i] = (SQLLEN)len;
        }
    }
    SQLUSMALLINT pos = (SQLUSMALLINT)(k + 1);
    if (type == DB_PARAM_INT)
        rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_SBIGINT, SQL_BIGINT, 0, 0, col->buf,
                              (SQLLEN)esize, col->ind);
    else if (type == DB_PARAM_FLOAT)
        rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_DOUBLE, SQL_DOUBLE, 15, 0, col->buf,
                              (SQLLEN)esize, col->ind);
    else if (dbc->wide_text) {
        SQLSMALLINT wt;
        SQLULEN wsize;
        wide_shape(dbc, width, &wt, &wsize);
        rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_WCHAR, wt, wsize, 0, col->buf,
                              (SQLLEN)esize, col->ind);
    }
    else
        rc = SQLBindParameter(st, pos, SQL_PARAM_INPUT, SQL_C_CHAR,
                              width > SHORT_TEXT_MAX ? SQL_LONGVARCHAR : SQL_VARCHAR, width, 0,
                              col->buf, (SQLLEN)esize, col->ind);
    if (!ok(rc))
        return db_diag_error(dbc, SQL_HANDLE_STMT, st, "bind parameter array", err);
    return IB_E_OK;
}

/* One execution per set, for drivers without parameter arrays. */
static ib_err_t run_each(db_conn_t *dbc, const char *sql, const db_param_t *const *sets,
                         size_t nsets, size_t nparams, ib_error_t *err)
{
    db_bind_t one[64];
    db_bind_t *b = nparams <= 64 ? one : calloc(nparams, sizeof(*b));
    ib_err_t rc = IB_E_OK;

    if (!b)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < nsets && rc == IB_E_OK; i++) {
        for (size_t k = 0; k < nparams; k++)
            b[k] = DB_B(sets[i][k]);
        rc = db_run_kept(dbc, sql, b, nparams, NULL, NULL, NULL, err);
    }
    if (b != one)
        free(b);
    return rc;
}

/* The largest power of two at most n (n > 0). */
static size_t pow2_floor(size_t n)
{
    size_t k = 1;
    while (k * 2 <= n)
        k *= 2;
    return k;
}

/*
 * The sets of a plain INSERT (db_sql_insert_values_at: at) as statements of
 * several VALUES rows, each kept prepared: a power of two rows each (a few
 * texts to keep, whatever the batch), as many as max parameters allow.
 * PostgreSQL then runs one statement where a parameter array ran one per
 * set, in the driver and in the server alike.
 */
static ib_err_t run_rows(db_conn_t *dbc, const char *sql, size_t at, const db_param_t *const *sets,
                         size_t nsets, size_t nparams, size_t max, ib_error_t *err)
{
    size_t cap = pow2_floor(max / nparams < nsets ? max / nparams : nsets);
    size_t size = at + 2 + cap * (3 * nparams + 2);
    char *text = malloc(size);
    db_bind_t *b = calloc(cap * nparams, sizeof(*b));
    ib_err_t rc = IB_E_OK;

    if (!text || !b)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0, k; rc == IB_E_OK && i < nsets; i += k) {
        k = pow2_floor(nsets - i < cap ? nsets - i : cap);
        for (size_t r = 0; r < k; r++)
            for (size_t c = 0; c < nparams; c++)
                b[r * nparams + c] = DB_B(sets[i + r][c]);
        if (k > 1 && !db_sql_insert_rows(sql, at, nparams, k, text, size))
            rc = ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "statement too long");
        else
            rc = db_run_kept(dbc, k > 1 ? text : sql, b, k * nparams, NULL, NULL, NULL, err);
    }
    free(text);
    free(b);
    return rc;
}

/*
 * The statement of a parameter array: kept prepared (keep; its signature
 * starts with 'A', so it never serves a single execution) or a new handle.
 */
static ib_err_t array_stmt(db_conn_t *dbc, const char *sql, bool keep,
                           const db_param_t *const *sets, size_t nsets, size_t nparams,
                           SQLHSTMT *st, ib_error_t *err)
{
    unsigned char one[65];
    unsigned char *sig;
    ib_err_t res;

    if (!keep)
        return stmt_open(dbc, st, err);
    if ((res = txn_begin(dbc, err)) != IB_E_OK)
        return res;
    sig = nparams < sizeof(one) ? one : malloc(nparams + 1);
    if (!sig)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    sig[0] = 'A';
    for (size_t k = 0; k < nparams; k++) {
        db_param_type_t type;
        size_t width;
        column_shape(dbc, k, sets, nsets, &type, &width);
        sig[k + 1] = column_sig(type, width);
    }
    res = db_stmt_take(dbc, sql, sig, nparams + 1, st, err);
    if (sig != one)
        free(sig);
    return res;
}

ib_err_t db_run_array(db_conn_t *dbc, const char *sql, const db_param_t *const *sets, size_t nsets,
                      size_t nparams, ib_error_t *err)
{
    bool keep = db_stmt_keepable(dbc, sql);
    SQLHSTMT st = SQL_NULL_HSTMT;
    column_t *cols = NULL;
    SQLUSMALLINT *status = NULL;
    SQLULEN processed = 0;
    SQLRETURN rc;
    ib_err_t res = IB_E_OK;

    size_t rows_max = db_sql_insert_rows_max(dbc->dialect), at;
    if (nsets == 0)
        return IB_E_OK;
    if (nsets > 1 && nparams > 0 && nparams <= rows_max / 2 &&
        (at = db_sql_insert_values_at(sql, nparams)) > 0)
        return run_rows(dbc, sql, at, sets, nsets, nparams, rows_max, err);
    if (nsets == 1 || nparams == 0 || !dbc->param_arrays)
        return run_each(dbc, sql, sets, nsets, nparams, err);
    if (nparams > 32767)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "too many parameters");
    cols = calloc(nparams, sizeof(*cols));
    status = calloc(nsets, sizeof(*status));
    if (!cols || !status) {
        res = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        goto out;
    }
    if ((res = array_stmt(dbc, sql, keep, sets, nsets, nparams, &st, err)) != IB_E_OK)
        goto out;
    if (!ok(SQLSetStmtAttr(st, SQL_ATTR_PARAM_BIND_TYPE, (SQLPOINTER)SQL_PARAM_BIND_BY_COLUMN,
                           0)) ||
        !ok(SQLSetStmtAttr(st, SQL_ATTR_PARAMSET_SIZE, (SQLPOINTER)(SQLULEN)nsets, 0)) ||
        !ok(SQLSetStmtAttr(st, SQL_ATTR_PARAM_STATUS_PTR, status, 0)) ||
        !ok(SQLSetStmtAttr(st, SQL_ATTR_PARAMS_PROCESSED_PTR, &processed, 0))) {
        res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "parameter array", err);
        goto out;
    }
    for (size_t k = 0; k < nparams; k++)
        if ((res = bind_column(dbc, st, k, sets, nsets, &cols[k], err)) != IB_E_OK)
            goto out;
    rc = keep ? SQLExecute(st) : SQLExecDirect(st, (SQLCHAR *)sql, SQL_NTS);
    if (!ok(rc) && rc != SQL_NO_DATA) {
        res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "execute", err);
        goto out;
    }
    /* Later sets may report their errors as further results. */
    while ((rc = SQLMoreResults(st)) != SQL_NO_DATA) {
        if (!ok(rc)) {
            res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "next result", err);
            goto out;
        }
    }
    for (size_t i = 0; i < nsets; i++)
        if (status[i] == SQL_PARAM_ERROR || status[i] == SQL_PARAM_UNUSED) {
            res = db_diag_error(dbc, SQL_HANDLE_STMT, st, "execute", err);
            ib_error_prefix(err, "parameter set %zu", i + 1);
            goto out;
        }
    if (processed != nsets)
        res = ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                           "the driver processed %lu of %zu parameter sets",
                           (unsigned long)processed, nsets);
out:
    if (st != SQL_NULL_HSTMT && keep)
        db_stmt_give(dbc, st, res == IB_E_OK);
    else if (st != SQL_NULL_HSTMT)
        SQLFreeHandle(SQL_HANDLE_STMT, st);
    for (size_t k = 0; cols && k < nparams; k++) {
        free(cols[k].buf);
        free(cols[k].ind);
    }
    free(cols);
    free(status);
    return res;
}

/* ---- text columns -------------------------------------------------------- */

/* Appends the UTF-8 form of code point cp to out (at least 4 bytes free). */
static size_t utf8_put(unsigned long cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    size_t k = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t j = k - 1; j > 0; j--, cp >>= 6)
        out[j] = (char)(0x80 | (cp & 0x3F));
    out[0] = (char)((k == 2 ? 0xC0 : k == 3 ? 0xE0 : 0xF0) | cp);
    return k;
}

size_t db_utf16_to_utf8(const SQLWCHAR *w, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned long cp = w[i];
        if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < n && w[i + 1] >= 0xDC00 && w[i + 1] < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (unsigned long)(w[i + 1] - 0xDC00);
            i++;
        } else if (cp >= 0xD800 && cp < 0xE000) {
            cp = 0xFFFD; /* a lone surrogate */
        }
        o += utf8_put(cp, out + o);
    }
    out[o] = '\0';
    return o;
}

/*
 * Reads column col in parts of unit bytes each (ctype SQL_C_CHAR or
 * SQL_C_WCHAR) into a malloc'd buffer ending in a terminator of unit
 * bytes; *bytes gets the length read. *isnull for SQL NULL.
 */
static bool get_parts(SQLHSTMT st, SQLUSMALLINT col, SQLSMALLINT ctype, size_t unit, char **out,
                      size_t *bytes, bool *isnull)
{
    size_t cap = 512, used = 0;
    char *buf = malloc(cap);

    *out = NULL;
    *isnull = false;
    if (!buf)
        return false;
    for (;;) {
        SQLLEN ind = 0;
        SQLRETURN rc = SQLGetData(st, col, ctype, buf + used, (SQLLEN)(cap - used), &ind);
        if (rc == SQL_NO_DATA)
            break;
        if (!ok(rc) || ind == SQL_NULL_DATA) {
            free(buf);
            *isnull = ok(rc);
            return ok(rc);
        }
        if (rc == SQL_SUCCESS || (ind != SQL_NO_TOTAL && (size_t)ind < cap - used)) {
            used += (size_t)ind;
            break;
        }
        /* Truncated: this part filled the buffer but its terminator. */
        used = cap - unit;
        size_t want = cap * 2;
        if (ind != SQL_NO_TOTAL && (size_t)ind + used + unit > want)
            want = (size_t)ind + used + unit;
        char *nb = realloc(buf, want);
        if (!nb) {
            free(buf);
            return false;
        }
        buf = nb;
        cap = want;
    }
    memset(buf + used, 0, unit);
    *out = buf;
    *bytes = used;
    return true;
}

bool db_get_text(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char **out, size_t *len)
{
    char *raw;
    size_t bytes = 0;
    bool isnull;

    *out = NULL;
    if (len)
        *len = 0;
    if (!dbc->wide_text) {
        if (!get_parts(st, col, SQL_C_CHAR, 1, &raw, &bytes, &isnull))
            return false;
        *out = raw;
        if (len && raw)
            *len = bytes;
        return true;
    }
    if (!get_parts(st, col, SQL_C_WCHAR, sizeof(SQLWCHAR), &raw, &bytes, &isnull))
        return false;
    if (isnull)
        return true;
    size_t n = bytes / sizeof(SQLWCHAR);
    char *u = malloc(n * 3 + 1); /* a unit is at most 3 bytes, a pair 4 */
    if (!u) {
        free(raw);
        return false;
    }
    size_t ul = db_utf16_to_utf8((const SQLWCHAR *)(void *)raw, n, u);
    free(raw);
    *out = u;
    if (len)
        *len = ul;
    return true;
}

bool db_get_text_into(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char *buf,
                      size_t size, size_t *len)
{
    SQLLEN ind = 0;

    *len = 0;
    if (dbc->wide_text) {
        if (!db_get_text_buf(dbc, st, col, buf, size))
            return false;
        *len = strlen(buf);
        return true;
    }
    buf[0] = '\0';
    if (SQLGetData(st, col, SQL_C_CHAR, buf, (SQLLEN)size, &ind) != SQL_SUCCESS || ind < 0 ||
        (size_t)ind >= size)
        return false; /* failed, NULL, or truncated: it does not fit */
    *len = (size_t)ind;
    return true;
}

bool db_get_text_buf(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char *buf, size_t size)
{
    char *t = NULL;
    size_t len = 0;

    buf[0] = '\0';
    if (!db_get_text(dbc, st, col, &t, &len))
        return false;
    if (!t)
        return true;
    bool fits = len < size;
    if (fits)
        memcpy(buf, t, len + 1);
    free(t);
    return fits;
}
