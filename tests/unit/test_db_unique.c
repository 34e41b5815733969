/*
 * db_unique_violation: which errors are unique violations in each dialect,
 * and the constraint name read from each driver's message text (SQL Server's
 * from its documented message forms, since no server runs here).
 */
#include <string.h>

#include "db_dialect.h"
#include "ib_test.h"

static bool uv(db_dialect_t d, const char *state, long native, const char *text, char *name)
{
    ib_error_t e;
    memset(&e, 0, sizeof(e));
    ib_strlcpy(e.sqlstate, state, sizeof(e.sqlstate));
    e.native = native;
    ib_strlcpy(e.text, text, sizeof(e.text));
    return db_unique_violation(d, &e, name, 128);
}

static void test_postgresql(void)
{
    char n[128];
    ASSERT_TRUE(uv(DB_DIALECT_POSTGRESQL, "23505", 1,
                   "statement 1: ERROR: duplicate key value violates unique constraint "
                   "\"ux_shipments_order\";\nError while executing the query",
                   n));
    ASSERT_STREQ(n, "ux_shipments_order");
    ASSERT_TRUE(!uv(DB_DIALECT_POSTGRESQL, "23514", 1,
                    "ERROR: new row violates check constraint \"qty_positive\"", n));
    ASSERT_STREQ(n, "");
    ASSERT_TRUE(uv(DB_DIALECT_POSTGRESQL, "23505", 1, "localized text", n));
    ASSERT_STREQ(n, "");
}

static void test_mssql(void)
{
    char n[128];
    ASSERT_TRUE(uv(DB_DIALECT_MSSQL, "23000", 2627,
                   "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Violation of UNIQUE KEY "
                   "constraint 'ux_shipments_order'. Cannot insert duplicate key in object "
                   "'dbo.shipments'. The duplicate key value is (o-1).",
                   n));
    ASSERT_STREQ(n, "ux_shipments_order");
    ASSERT_TRUE(uv(DB_DIALECT_MSSQL, "23000", 2627,
                   "[FreeTDS][SQL Server]Violation of PRIMARY KEY constraint 'PK_orders'. Cannot "
                   "insert duplicate key in object 'dbo.orders'. The duplicate key value is (7).",
                   n));
    ASSERT_STREQ(n, "PK_orders");
    ASSERT_TRUE(uv(DB_DIALECT_MSSQL, "23000", 2601,
                   "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Cannot insert duplicate "
                   "key row in object 'dbo.shipments' with unique index 'ix_ship_order'. The "
                   "duplicate key value is (o-1).",
                   n));
    ASSERT_STREQ(n, "ix_ship_order");
    /* 547 is a CHECK or FOREIGN KEY constraint: not a unique violation. */
    ASSERT_TRUE(!uv(DB_DIALECT_MSSQL, "23000", 547,
                    "The INSERT statement conflicted with the CHECK constraint 'ck_amount'.", n));
    ASSERT_TRUE(!uv(DB_DIALECT_MSSQL, "42000", 2627, "constraint 'x'", n));
}

static void test_sqlite_and_mariadb(void)
{
    char n[128];
    ASSERT_TRUE(uv(DB_DIALECT_SQLITE, "HY000", 19, "UNIQUE constraint failed: shipments.order_id",
                   n));
    ASSERT_STREQ(n, "shipments.order_id");
    ASSERT_TRUE(uv(DB_DIALECT_SQLITE, "HY000", 19,
                   "statement 2: UNIQUE constraint failed: t.a, t.b (19)", n));
    ASSERT_STREQ(n, "t.a, t.b");
    ASSERT_TRUE(!uv(DB_DIALECT_SQLITE, "HY000", 19, "CHECK constraint failed: amount >= 0", n));
    ASSERT_TRUE(!uv(DB_DIALECT_SQLITE, "HY000", 19, "NOT NULL constraint failed: t.a", n));
    ASSERT_TRUE(uv(DB_DIALECT_MARIADB, "23000", 1062,
                   "[ma-3.1.18]Duplicate entry 'o-1' for key 'shipments.ux_shipments_order'", n));
    ASSERT_STREQ(n, "ux_shipments_order");
    ASSERT_TRUE(uv(DB_DIALECT_MARIADB, "23000", 1062, "Duplicate entry 'it''s' for key 'PRIMARY'",
                   n));
    ASSERT_STREQ(n, "PRIMARY");
    ASSERT_TRUE(!uv(DB_DIALECT_MARIADB, "23000", 1452, "foreign key", n));
}

/* The catalog query that finds a route's constraint by the name its violation gives. */
static void test_probe_named(void)
{
    char sql[1024], t[64], c[128];
    int np = 0;
    ASSERT_EQ(db_sql_probe_unique_named(DB_DIALECT_MSSQL, "UX_orders", sql, sizeof sql, t, sizeof t,
                                        c, sizeof c, &np),
              IB_E_OK);
    ASSERT_EQ(np, 1);
    ASSERT_CONTAINS(sql, "sys.indexes WHERE is_unique = 1 AND name = ?");
    ASSERT_EQ(db_sql_probe_unique_named(DB_DIALECT_MARIADB, "PRIMARY", sql, sizeof sql, t, sizeof t,
                                        c, sizeof c, &np),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "non_unique = 0 AND index_name = ?");
    ASSERT_EQ(db_sql_probe_unique_named(DB_DIALECT_POSTGRESQL, "ux", sql, sizeof sql, t, sizeof t, c,
                                        sizeof c, &np),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "indisunique AND c.relname::text = ?");
    ASSERT_EQ(db_sql_probe_unique_named(DB_DIALECT_SQLITE, "t.a, t.b", sql, sizeof sql, t, sizeof t,
                                        c, sizeof c, &np),
              IB_E_OK);
    ASSERT_EQ(np, 2);
    ASSERT_STREQ(t, "t");
    ASSERT_STREQ(c, "a,b");
    ASSERT_CONTAINS(sql, "pragma_index_list(?)");
    /* Not a name SQLite's violation gives: no table, two tables, an empty column. */
    const char *bad[] = {"ux_orders", "t.a, u.b", "t.", ".a", "t.a, ", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ASSERT_EQ(db_sql_probe_unique_named(DB_DIALECT_SQLITE, bad[i], sql, sizeof sql, t, sizeof t,
                                            c, sizeof c, &np),
                  IB_E_INVAL);
}

int main(void)
{
    RUN(test_postgresql);
    RUN(test_mssql);
    RUN(test_sqlite_and_mariadb);
    RUN(test_probe_named);
    return ib_test_done();
}
