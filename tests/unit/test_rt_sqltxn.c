/*
 * Transaction control in a route's SQL (route/rt_sqltxn.c): each keyword
 * found as a statement in any case, and none found inside string literals,
 * quoted identifiers, comments, qualified names or a CASE's END; the route
 * compiler's error names the route, the statement and the keyword.
 */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_int.h"
#include "rt_route_test.h"

#define KW(sql) rt_sql_txn_keyword(sql)

static void test_found_as_statements(void)
{
    ASSERT_STREQ(KW("INSERT INTO t VALUES (?); COMMIT"), "COMMIT");
    ASSERT_STREQ(KW("insert into t values (?) commit tran"), "COMMIT"); /* T-SQL: no ';' needed */
    ASSERT_STREQ(KW("UPDATE t SET a = 1\nRollBack"), "ROLLBACK");
    ASSERT_STREQ(KW("begin; insert into t values (1)"), "BEGIN");
    ASSERT_STREQ(KW("BEGIN TRANSACTION; INSERT INTO t VALUES (1)"), "BEGIN TRANSACTION");
    ASSERT_STREQ(KW("SET NOCOUNT ON BEGIN TRAN INSERT INTO t VALUES (1)"), "BEGIN TRANSACTION");
    ASSERT_STREQ(KW("begin distributed transaction"), "BEGIN TRANSACTION");
    ASSERT_STREQ(KW("INSERT INTO t VALUES (1) SAVE TRAN s1"), "SAVE TRANSACTION");
    ASSERT_STREQ(KW("Save Transaction s1"), "SAVE TRANSACTION");
    ASSERT_STREQ(KW("start transaction; insert into t values (1)"), "START TRANSACTION");
    ASSERT_STREQ(KW("INSERT INTO t VALUES (1);\n  end"), "END");
    ASSERT_STREQ(KW("savepoint a; insert into t values (1)"), "SAVEPOINT");
    ASSERT_STREQ(KW("insert into t values (1); release savepoint a"), "RELEASE");
    ASSERT_STREQ(KW("/* first */ abort"), "ABORT");
    ASSERT_STREQ(KW("-- a note\nCOMMIT"), "COMMIT");
}

static void test_not_found_elsewhere(void)
{
    ASSERT_TRUE(KW("INSERT INTO t (note) VALUES ('please COMMIT; ROLLBACK')") == NULL);
    ASSERT_TRUE(KW("INSERT INTO t (note) VALUES ('it''s; commit')") == NULL);
    ASSERT_TRUE(KW("SELECT \"commit\", [rollback], `begin` FROM t") == NULL);
    ASSERT_TRUE(KW("UPDATE t SET a = CASE WHEN b THEN 1 ELSE 2 END WHERE id = ?") == NULL);
    ASSERT_TRUE(KW("SELECT t.commit, t.end FROM t; SELECT release.x FROM release") == NULL);
    ASSERT_TRUE(KW("INSERT INTO commits (committed_at, begin_at) VALUES (?, ?)") == NULL);
    ASSERT_TRUE(KW("-- COMMIT\nINSERT INTO t VALUES (1) /* ROLLBACK; END */") == NULL);
    ASSERT_TRUE(KW("IF @x = 1 BEGIN UPDATE t SET a = 1 END") == NULL); /* a T-SQL block */
    ASSERT_TRUE(KW("DO $$BEGIN UPDATE t SET a = 1; END$$") == NULL);
    ASSERT_TRUE(KW("DO $f$ BEGIN UPDATE t SET a = 1; END $f$") == NULL);
    ASSERT_TRUE(KW("SELECT @commit, #begin FROM t") == NULL);
    ASSERT_TRUE(KW("INSERT INTO t VALUES ('unterminated; COMMIT") == NULL);
    ASSERT_TRUE(KW("") == NULL);
}

static void test_route_refused(void)
{
    rt_routes_t rs;
    int n;
    char *e = compile_errors(
        "[{\"match\":\"*\",\"sql\":\"INSERT INTO t VALUES (?); COMMIT\",\"params\":[\"$.a\"]},"
        "{\"match\":\"*\",\"sql\":[\"INSERT INTO t VALUES (1)\",\"savepoint s\"]},"
        "{\"match\":\"*\",\"sql\":\"INSERT INTO t VALUES ('COMMIT')\"}]",
        &n, &rs);
    ASSERT_CONTAINS(e, "config: routes[0].sql: holds the transaction statement COMMIT");
    ASSERT_CONTAINS(e, "config: routes[1].sql[1]: holds the transaction statement SAVEPOINT");
    ASSERT_NOT_CONTAINS(e, "routes[2]");
    ASSERT_EQ(n, 2);
    free(e);
    rt_routes_free(&rs);
}

int main(void)
{
    RUN(test_found_as_statements);
    RUN(test_not_found_elsewhere);
    RUN(test_route_refused);
    return ib_test_done();
}
