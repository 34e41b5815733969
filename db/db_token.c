/*
 * db_token.c - passwordless SQL Server (db.auth "workload_identity"): the
 * checks a connection string must pass to carry an Azure AD access token,
 * and the ACCESSTOKEN buffer handed to the driver before it connects.
 *
 * Microsoft's ODBC Driver 17/18 for SQL Server take the token through the
 * pre-connect attribute SQL_COPT_SS_ACCESS_TOKEN (1256) as an ACCESSTOKEN:
 * a 4-byte little-endian byte count followed by that many bytes, the token
 * with a zero byte after each of its (ASCII) bytes, no terminator. The
 * connection string must then hold no UID, PWD, Authentication or
 * Trusted_Connection. ("Using Microsoft Entra ID with the ODBC Driver",
 * "Authenticating with an access token".)
 *
 * thread: the caller's; nothing here keeps state.
 */
#include "db_conn_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db_connstr.h"

size_t db_access_token_build(const char *token, size_t len, unsigned char *out, size_t cap)
{
    size_t need = 4 + 2 * len;

    if (!out)
        return need;
    if (cap < need || 2 * len > 0xffffffffu)
        return 0;
    out[0] = (unsigned char)((2 * len) & 0xff);
    out[1] = (unsigned char)(((2 * len) >> 8) & 0xff);
    out[2] = (unsigned char)(((2 * len) >> 16) & 0xff);
    out[3] = (unsigned char)(((2 * len) >> 24) & 0xff);
    for (size_t i = 0; i < len; i++) {
        out[4 + 2 * i] = (unsigned char)token[i];
        out[4 + 2 * i + 1] = 0;
    }
    return need;
}

/* Microsoft's drivers are named "ODBC Driver NN for SQL Server" (13 and later take tokens). */
static bool driver_takes_token(const char *driver)
{
    return strncasecmp(driver, "ODBC Driver ", 12) == 0 && strcasestr(driver, "for SQL Server");
}

ib_err_t db_token_connstr_check(const char *connstr, ib_error_t *err)
{
    static const char *const forbidden[] = {"UID", "PWD", "Authentication", "Trusted_Connection"};
    db_connstr_t cs;
    const char *driver;
    ib_err_t rc = IB_E_OK;

    if (db_connstr_parse(connstr, &cs, err) != IB_E_OK) {
        ib_error_prefix(err, "db.connection_string");
        return err->code;
    }
    driver = db_connstr_get(&cs, "Driver");
    if (driver && !driver_takes_token(driver))
        rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                          "db.auth: workload_identity hands the driver an Azure AD access token "
                          "(SQL_COPT_SS_ACCESS_TOKEN), which the ODBC driver '%.100s' does not "
                          "take; use Microsoft's 'ODBC Driver 18 for SQL Server'",
                          driver);
    for (size_t i = 0; rc == IB_E_OK && i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (db_connstr_get(&cs, forbidden[i]))
            rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                              "db.connection_string: remove %s; with db.auth workload_identity "
                              "the access token is the credential",
                              forbidden[i]);
    db_connstr_free(&cs);
    return rc;
}

ib_err_t db_token_apply(db_conn_t *dbc, ib_error_t *err)
{
    char *token;
    size_t len;
    SQLRETURN rc;

    if (!dbc->token_fn)
        return IB_E_OK;
    token = calloc(1, DB_ACCESS_TOKEN_MAX + 1);
    if (!token)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    if (dbc->token_fn(dbc->token_arg, token, DB_ACCESS_TOKEN_MAX + 1, err) != IB_E_OK) {
        free(token);
        ib_error_prefix(err, "db.auth: no access token yet");
        return err->code;
    }
    len = strnlen(token, DB_ACCESS_TOKEN_MAX + 1);
    dbc->token_len = db_access_token_build(token, len, NULL, 0);
    dbc->token_buf = len && len <= DB_ACCESS_TOKEN_MAX ? malloc(dbc->token_len) : NULL;
    if (dbc->token_buf)
        db_access_token_build(token, len, dbc->token_buf, dbc->token_len);
    memset(token, 0, DB_ACCESS_TOKEN_MAX + 1);
    free(token);
    if (!dbc->token_buf)
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT,
                            "db.auth: empty or oversized token");
    /*
     * The buffer stays alive as long as the connection handle (released by
     * disconnect): Microsoft's driver may log in again with it when it
     * restores a broken idle connection (connection resiliency).
     */
    rc = SQLSetConnectAttr(dbc->dbc, DB_SQL_COPT_SS_ACCESS_TOKEN, dbc->token_buf, SQL_IS_POINTER);
    if (rc != SQL_SUCCESS && rc != SQL_SUCCESS_WITH_INFO) {
        db_diag_error(dbc, SQL_HANDLE_DBC, dbc->dbc, "access token", err);
        db_token_release(dbc);
        err->code = IB_E_CONFIG;
        err->cls = IB_CLASS_PERMANENT;
        ib_error_prefix(err, "db.auth: the ODBC driver refused SQL_COPT_SS_ACCESS_TOKEN");
        return IB_E_CONFIG;
    }
    return IB_E_OK;
}

void db_token_release(db_conn_t *dbc)
{
    if (!dbc->token_buf)
        return;
    memset(dbc->token_buf, 0, dbc->token_len);
    free(dbc->token_buf);
    dbc->token_buf = NULL;
    dbc->token_len = 0;
}
