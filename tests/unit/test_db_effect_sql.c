/*
 * The statement text of the HTTP claim protocol in every dialect,
 * including the two no server here runs (SQL Server, MariaDB): lease
 * arithmetic by the database's clock, the conditional takeover, the
 * owner's token in every change of a claimed row, and the added columns.
 */
#include "db_effect.h"
#include "ib_test.h"

static const char *text(db_dialect_t d, db_effect_stmt_t which, long lease)
{
    static char buf[4096];
    if (db_effect_sql_text(d, "inbox", which, lease, buf, sizeof buf) != IB_E_OK)
        return "(error)";
    return buf;
}

static void test_mssql(void)
{
    db_dialect_t d = DB_DIALECT_MSSQL;
    ASSERT_CONTAINS(text(d, DB_ESQL_CLAIM_INSERT, 60), "DATEADD(second, 60, SYSUTCDATETIME())");
    ASSERT_CONTAINS(text(d, DB_ESQL_CLAIM_INSERT, 60), "'claimed'");
    ASSERT_CONTAINS(text(d, DB_ESQL_TAKEOVER, 60),
                    "status = 'claimed' AND (lease_until IS NULL OR lease_until < "
                    "SYSUTCDATETIME())");
    ASSERT_CONTAINS(text(d, DB_ESQL_LOOKUP, 60), "lease_until < SYSUTCDATETIME()");
    ASSERT_CONTAINS(text(d, DB_ESQL_HAS_COLUMN, 0), "COL_LENGTH(N'inbox', N'lease_until')");
    ASSERT_STREQ(text(d, DB_ESQL_ADD_COLUMN, 0),
                 "ALTER TABLE inbox ADD lease_until datetime2(3) NULL");
}

static void test_mariadb_postgresql_sqlite(void)
{
    ASSERT_CONTAINS(text(DB_DIALECT_MARIADB, DB_ESQL_RENEW, 30),
                    "DATE_ADD(UTC_TIMESTAMP(3), INTERVAL 30 SECOND)");
    ASSERT_CONTAINS(text(DB_DIALECT_MARIADB, DB_ESQL_ADD_COLUMN, 0),
                    "ADD COLUMN IF NOT EXISTS lease_until datetime(3) NULL");
    ASSERT_CONTAINS(text(DB_DIALECT_POSTGRESQL, DB_ESQL_RENEW, 30), "interval '30 seconds'");
    ASSERT_CONTAINS(text(DB_DIALECT_SQLITE, DB_ESQL_RENEW, 30), "'now', '+30 seconds'");
}

/* Every change of a claimed row names the owner's token; the statuses move forward only. */
static void test_guards(void)
{
    static const db_effect_stmt_t owned[] = {DB_ESQL_RENEW, DB_ESQL_FINISH, DB_ESQL_RELEASE_DELETE,
                                             DB_ESQL_RELEASE_EXPIRE};
    for (int d = DB_DIALECT_MSSQL; d <= DB_DIALECT_MARIADB; d++) {
        for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
            ASSERT_CONTAINS(text((db_dialect_t)d, owned[i], 10),
                            "status = 'claimed' AND claim_token = ?");
        ASSERT_CONTAINS(text((db_dialect_t)d, DB_ESQL_TAKE_RETRY, 10), "AND status = 'retry'");
        ASSERT_CONTAINS(text((db_dialect_t)d, DB_ESQL_RESOLVE_RETRY, 10),
                        "status IN ('uncertain', 'failed')");
        ASSERT_CONTAINS(text((db_dialect_t)d, DB_ESQL_RESOLVE_PROCESSED, 10),
                        "status IN ('uncertain', 'failed')");
    }
    char buf[64];
    ASSERT_EQ(
        db_effect_sql_text(DB_DIALECT_MSSQL, "inbox; DROP", DB_ESQL_RENEW, 1, buf, sizeof buf),
        IB_E_INVAL);
    ASSERT_EQ(db_effect_sql_text(DB_DIALECT_AUTO, "inbox", DB_ESQL_RENEW, 1, buf, sizeof buf),
              IB_E_INVAL);
    ASSERT_EQ(db_effect_sql_text(DB_DIALECT_MSSQL, "inbox", DB_ESQL_FINISH, 1, buf, 16),
              IB_E_INVAL);
}

int main(void)
{
    RUN(test_mssql);
    RUN(test_mariadb_postgresql_sqlite);
    RUN(test_guards);
    return ib_test_done();
}
