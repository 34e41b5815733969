/*
 * db.auth "workload_identity" on the db side: the ACCESSTOKEN layout handed
 * to SQL_COPT_SS_ACCESS_TOKEN, the connection-string checks (a driver that
 * takes no token is a configuration error naming it), and the token
 * function asked before every connect.
 */
#include <stdio.h>
#include <string.h>

#include "db_inbox.h"
#include "ib_test.h"

static void test_layout(void)
{
    unsigned char buf[64];
    static const unsigned char want[] = {6, 0, 0, 0, 'e', 0, 'y', 0, 'J', 0};

    ASSERT_EQ(db_access_token_build("eyJ", 3, NULL, 0), 10);
    memset(buf, 0xAA, sizeof(buf));
    ASSERT_EQ(db_access_token_build("eyJ", 3, buf, sizeof(buf)), 10);
    ASSERT_EQ(memcmp(buf, want, sizeof(want)), 0);
    ASSERT_EQ(buf[10], 0xAA); /* no terminator written */
    /* Too small: nothing written. */
    memset(buf, 0xAA, sizeof(buf));
    ASSERT_EQ(db_access_token_build("eyJ", 3, buf, 9), 0);
    ASSERT_EQ(buf[0], 0xAA);
}

static void test_length_is_little_endian(void)
{
    static char token[70001];
    static unsigned char buf[4 + 2 * 70000];

    memset(token, 'A', 70000);
    ASSERT_EQ(db_access_token_build(token, 70000, buf, sizeof(buf)), 4 + 140000);
    /* 140000 = 0x000222E0 */
    ASSERT_EQ(buf[0], 0xE0);
    ASSERT_EQ(buf[1], 0x22);
    ASSERT_EQ(buf[2], 0x02);
    ASSERT_EQ(buf[3], 0x00);
    ASSERT_EQ(buf[4 + 2 * 69999], 'A');
    ASSERT_EQ(buf[4 + 2 * 69999 + 1], 0);
}

static void test_connstr_checks(void)
{
    ib_error_t err;

    ASSERT_EQ(db_token_connstr_check("Driver={ODBC Driver 18 for SQL Server};Server=tcp:x,1433;"
                                     "Database=orders;Encrypt=yes",
                                     &err),
              IB_E_OK);
    ASSERT_EQ(db_token_connstr_check("DSN=orders", &err), IB_E_OK);
    ASSERT_EQ(db_token_connstr_check("Driver={FreeTDS};Server=x;Port=1433", &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "db.auth");
    ASSERT_CONTAINS(err.text, "'FreeTDS'");
    ASSERT_CONTAINS(err.text, "SQL_COPT_SS_ACCESS_TOKEN");
    ASSERT_EQ(db_token_connstr_check("Driver={PostgreSQL Unicode};Server=x", &err), IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "'PostgreSQL Unicode'");
    ASSERT_EQ(db_token_connstr_check(
                  "Driver={ODBC Driver 18 for SQL Server};Server=x;Uid=app;Pwd=sekrit-9", &err),
              IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "remove UID");
    ASSERT_NOT_CONTAINS(err.text, "sekrit-9");
    ASSERT_EQ(db_token_connstr_check("Driver={ODBC Driver 17 for SQL Server};Server=x;"
                                     "Authentication=ActiveDirectoryMsi",
                                     &err),
              IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "Authentication");
}

typedef struct fake {
    int calls;
    ib_err_t rc;
} fake_t;

static ib_err_t fake_token(void *arg, char *buf, size_t size, ib_error_t *err)
{
    fake_t *f = arg;
    f->calls++;
    if (f->rc != IB_E_OK)
        return ib_error_set(err, f->rc, IB_CLASS_TRANSIENT, "first token pending");
    snprintf(buf, size, "eyJ0eXAiOiJKV1QifQ.e30.sig");
    return IB_E_OK;
}

static void test_conn_new(void)
{
    db_options_t o;
    ib_error_t err;
    fake_t f = {0, IB_E_OK};

    memset(&o, 0, sizeof(o));
    o.access_token = fake_token;
    o.access_token_arg = &f;
    /* A driver without the attribute: a configuration error before any connect. */
    o.connection_string = "Driver={FreeTDS};Server=127.0.0.1;Port=1;Database=x";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "'FreeTDS'");
    ASSERT_EQ(f.calls, 0);
    o.connection_string = "Driver={SQLite3};Database=/tmp/x.db";
    o.dialect = DB_DIALECT_SQLITE;
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_CONTAINS(err.text, "SQL Server only");
    /*
     * Microsoft's driver (not installed here): the token is asked for and
     * set before the connect, which then fails to load the driver.
     */
    o.dialect = DB_DIALECT_AUTO;
    o.connection_string = "Driver={ODBC Driver 18 for SQL Server};Server=tcp:127.0.0.1,1";
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(f.calls, 1);
    ASSERT_NOT_CONTAINS(err.text, "eyJ0");
    /* No token yet: the failure says so and stays transient (retried at start). */
    f.rc = IB_E_AGAIN;
    ASSERT_TRUE(db_conn_new(&o, &err) == NULL);
    ASSERT_EQ(f.calls, 2);
    ASSERT_CONTAINS(err.text, "db.auth: no access token yet");
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
}

int main(void)
{
    RUN(test_layout);
    RUN(test_length_is_little_endian);
    RUN(test_connstr_checks);
    RUN(test_conn_new);
    return ib_test_done();
}
