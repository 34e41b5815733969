/* ODBC connection strings: braces, escapes, malformed input, redaction. */
#include <stdlib.h>

#include "db_connstr.h"
#include "ib_test.h"

static void test_braces(void)
{
    db_connstr_t cs;
    ib_error_t err;
    ASSERT_EQ(db_connstr_parse("Driver={ODBC Driver 18 for SQL Server};Server=tcp:h,1433;"
                               "Uid=app; Pwd={a;b=c}}d} ;Encrypt=yes;",
                               &cs, &err),
              IB_E_OK);
    ASSERT_EQ(cs.n, 5);
    ASSERT_STREQ(db_connstr_get(&cs, "driver"), "ODBC Driver 18 for SQL Server");
    ASSERT_STREQ(db_connstr_get(&cs, "SERVER"), "tcp:h,1433");
    ASSERT_STREQ(db_connstr_get(&cs, "pwd"), "a;b=c}d");
    ASSERT_STREQ(db_connstr_get(&cs, "Encrypt"), "yes");
    ASSERT_TRUE(db_connstr_get(&cs, "Database") == NULL);
    db_connstr_free(&cs);
}

static void test_redact(void)
{
    char *r = db_connstr_redact("Driver={PostgreSQL Unicode};Server=127.0.0.1;Pwd={se;cret}}x}");
    ASSERT_TRUE(r != NULL);
    ASSERT_NOT_CONTAINS(r, "se;cret");
    ASSERT_CONTAINS(r, "Pwd=***");
    ASSERT_CONTAINS(r, "Driver={PostgreSQL Unicode}");
    /* The redacted string parses again. */
    db_connstr_t cs;
    ASSERT_EQ(db_connstr_parse(r, &cs, NULL), IB_E_OK);
    ASSERT_STREQ(db_connstr_get(&cs, "Driver"), "PostgreSQL Unicode");
    db_connstr_free(&cs);
    free(r);
    ASSERT_TRUE(db_connstr_redact("Pwd={open") == NULL);
}

static void expect_bad(const char *s, const char *needle)
{
    db_connstr_t cs;
    ib_error_t err;
    ib_err_t rc = db_connstr_parse(s, &cs, &err);
    if (rc != IB_E_CONFIG) {
        if (rc == IB_E_OK)
            db_connstr_free(&cs);
        IB_FAIL_("accepted: %s", s ? s : "(null)");
    }
    if (!strstr(err.text, needle))
        IB_FAIL_("'%s': error '%s' lacks '%s'", s ? s : "(null)", err.text, needle);
    if (strstr(err.text, "SECRET"))
        IB_FAIL_("error text leaks a value: %s", err.text);
}

static void test_malformed(void)
{
    expect_bad(NULL, "empty");
    expect_bad("", "empty");
    expect_bad(" ; ;", "no attributes");
    expect_bad("Driver", "no '='");
    expect_bad("Driver={SQLite3};Database", "no '='");
    expect_bad("=SECRET", "empty key");
    expect_bad("Pwd={SECRET", "never closed");
    expect_bad("Pwd={SECRET}x;Uid=a", "follows a closing");
    expect_bad("Pwd=SEC{RET", "brace inside");
    expect_bad("Uid=a;uid=b", "twice");
    expect_bad("{Dri}ver=x", "brace");
}

int main(void)
{
    RUN(test_braces);
    RUN(test_redact);
    RUN(test_malformed);
    return ib_test_done();
}
