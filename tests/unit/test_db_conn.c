/*
 * Opening connections without a server: option checks, dialect detection
 * (SQLite file), and connection failures classified without leaking the
 * password into the error text.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "db_inbox.h"
#include "ib_test.h"

static void test_bad_options(void)
{
    ib_error_t err;
    db_options_t o;

    ASSERT_TRUE(db_conn_new(NULL, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    memset(&o, 0, sizeof(o));
    o.connection_string = "";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "db.connection_string");
    o.connection_string = "Driver={SQLite3;Database=x";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    o.connection_string = "Driver={SQLite3};Database=/nonexistent/dir/x.db";
    o.inbox_table = "inbox; DROP TABLE users";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "db.inbox_table");
}

static void test_unknown_driver_is_permanent(void)
{
    ib_error_t err;
    db_options_t o;
    memset(&o, 0, sizeof(o));
    o.connection_string = "Driver={No Such Driver 99};Server=x;Uid=app;Pwd=sekrit-pw-1";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_DB_CONN);
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    /* unixODBC says 01000 "Can't open lib"; other managers say IM002. */
    ASSERT_TRUE(strcmp(err.sqlstate, "01000") == 0 || strcmp(err.sqlstate, "IM002") == 0);
    ASSERT_NOT_CONTAINS(err.text, "sekrit-pw-1");
}

static void test_refused_is_transient_without_secret(void)
{
    ib_error_t err;
    db_options_t o;
    memset(&o, 0, sizeof(o));
    o.dialect = DB_DIALECT_POSTGRESQL;
    o.login_timeout_s = 2;
    /* Port 1 on loopback: nothing listens. */
    o.connection_string = "Driver={PostgreSQL Unicode};Server=127.0.0.1;Port=1;Database=x;"
                          "Uid=app;Pwd={sekrit;pw=2}";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_DB_CONN);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_TRUE(strncmp(err.sqlstate, "08", 2) == 0);
    ASSERT_NOT_CONTAINS(err.text, "sekrit");
    ASSERT_NOT_CONTAINS(err.text, "Pwd");
}

static void test_sqlite_autodetect(void)
{
    char path[256], connstr[400];
    ib_error_t err;
    db_options_t o;
    memset(&o, 0, sizeof(o));
    snprintf(path, sizeof(path), "/tmp/inboxd-unit-conn-%d.db", (int)getpid());
    snprintf(connstr, sizeof(connstr), "Driver={SQLite3};Database=%s;Timeout=2000", path);
    o.connection_string = connstr;
    db_conn_t *dbc = db_conn_new(&o, &err);
    ASSERT_TRUE(dbc != NULL);
    ASSERT_EQ(db_conn_dialect(dbc), DB_DIALECT_SQLITE);
    ASSERT_EQ(db_conn_reconnects(dbc), 0);
    /* migrate false on an empty file: a configuration error naming the table. */
    ASSERT_EQ(db_migrate(dbc, false, &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "'" DB_INBOX_DEFAULT_TABLE "'");
    long long one = 0;
    ASSERT_EQ(db_exec(dbc, "SELECT 1", NULL, 0, &one, &err), IB_E_OK);
    ASSERT_EQ(one, 1);
    ASSERT_EQ(db_end(dbc, false, &err), IB_E_OK);
    db_conn_free(dbc);
    unlink(path);
}

int main(void)
{
    RUN(test_bad_options);
    RUN(test_unknown_driver_is_permanent);
    RUN(test_refused_is_transient_without_secret);
    RUN(test_sqlite_autodetect);
    return ib_test_done();
}
