/*
 * The outbox statement text per dialect (SQL Server and MariaDB have no
 * server here, so their text is checked only here): row locking of the
 * claim, bounded cleanup, the single-cleaner lock, refusal of bad table
 * names, and db/schema/<dialect>_outbox.sql equal to what db.migrate runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_outbox.h"
#include "ib_err.h"
#include "ib_test.h"

static const db_dialect_t all[] = {DB_DIALECT_MSSQL, DB_DIALECT_POSTGRESQL, DB_DIALECT_SQLITE,
                                   DB_DIALECT_MARIADB};
#define NALL (sizeof(all) / sizeof(all[0]))

/* A large body is left out of the claim and read in parts (PostgreSQL, SQLite), or read whole. */
static void test_claim_body_parts(void)
{
    char sql[2048], lock[512];
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_POSTGRESQL, "ob", sql, sizeof(sql), lock,
                                  sizeof(lock)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "properties, CASE WHEN octet_length(body) > 1048576 THEN NULL ELSE body "
                         "END, attempts, trace_context, octet_length(body), char_length(body) FROM");
    /* The round's statements go by the indexes even when the statistics call the table empty. */
    ASSERT_STREQ(lock, "SELECT set_config('enable_seqscan', 'off', true), set_config("
                       "'enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)");
    ASSERT_EQ(db_outbox_sql_body_part(DB_DIALECT_POSTGRESQL, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "SELECT substr(body, CAST(? AS integer), CAST(? AS integer)) FROM ob "
                      "WHERE id = ?");
    ASSERT_EQ(db_outbox_sql_body_part(DB_DIALECT_SQLITE, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "SELECT substr(body, ?, ?) FROM ob WHERE id = ?");
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_MSSQL, "ob", sql, sizeof(sql), lock, sizeof(lock)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "properties, body, attempts, trace_context, NULL, NULL FROM");
    ASSERT_EQ(db_outbox_sql_body_part(DB_DIALECT_MSSQL, "ob", sql, sizeof(sql)), IB_E_INVAL);
}

static void test_claim_locks_rows(void)
{
    char sql[2048], lock[512];
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql), lock,
                                  sizeof(lock)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "SELECT TOP (?)");
    ASSERT_CONTAINS(sql, "FROM dbo.ob o WITH (UPDLOCK, READPAST, ROWLOCK)");
    ASSERT_CONTAINS(sql, "WHERE o.status = 'pending' AND NOT EXISTS (SELECT 1 FROM dbo.ob f WHERE "
                         "f.status = 'failed' AND f.session_id = o.session_id AND f.id < o.id "
                         "AND (f.last_error IS NULL OR f.last_error NOT LIKE 'inboxd:skipped%')) "
                         "ORDER BY o.id");
    ASSERT_STREQ(lock, "");
    /* The head of a session reads with locks even under read-committed snapshot. */
    ASSERT_EQ(db_outbox_sql_session_head(DB_DIALECT_MSSQL, "dbo.ob", 1, sql, sizeof(sql)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "FROM dbo.ob WITH (READCOMMITTEDLOCK) WHERE status = 'pending'");
    ASSERT_CONTAINS(sql, "session_id = ? GROUP BY session_id");
    ASSERT_EQ(db_outbox_sql_session_head(DB_DIALECT_POSTGRESQL, "ob", 2, sql, sizeof(sql)),
              IB_E_OK);
    ASSERT_STREQ(sql, "SELECT session_id, MIN(id) FROM ob WHERE status = 'pending' AND "
                      "session_id IN (?, ?) GROUP BY session_id");
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_POSTGRESQL, "ob", sql, sizeof(sql), lock,
                                  sizeof(lock)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "ORDER BY o.id LIMIT ? FOR UPDATE SKIP LOCKED");
    ASSERT_CONTAINS(lock, "set_config('enable_seqscan', 'off', true)");
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_MARIADB, "ob", sql, sizeof(sql), lock, sizeof(lock)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "FOR UPDATE SKIP LOCKED");
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_SQLITE, "ob", sql, sizeof(sql), lock, sizeof(lock)),
              IB_E_OK);
    ASSERT_NOT_CONTAINS(sql, "FOR UPDATE");
    ASSERT_CONTAINS(lock, "UPDATE ob SET");
    for (size_t i = 0; i < NALL; i++) {
        ASSERT_EQ(db_outbox_sql_claim(all[i], "ob", sql, sizeof(sql), lock, sizeof(lock)),
                  IB_E_OK);
        ASSERT_CONTAINS(sql, "id, entity, message_id, session_id, subject, correlation_id, "
                             "content_type, properties, ");
        ASSERT_CONTAINS(sql, ", attempts, trace_context, ");
        /* A failed, not skipped, earlier row of the session holds a row back. */
        ASSERT_CONTAINS(sql, "FROM ob o ");
        ASSERT_CONTAINS(sql, "NOT EXISTS (SELECT 1 FROM ob f WHERE f.status = 'failed' AND "
                             "f.session_id = o.session_id AND f.id < o.id");
        ASSERT_EQ(db_outbox_sql_blocked(all[i], "ob", sql, sizeof(sql)), IB_E_OK);
        ASSERT_CONTAINS(sql, "SELECT COUNT(DISTINCT o.session_id) FROM ob o WHERE o.status = "
                             "'pending' AND EXISTS (SELECT 1 FROM ob f WHERE f.status = 'failed'");
        ASSERT_EQ(db_outbox_sql_skip(all[i], "ob", sql, sizeof(sql)), IB_E_OK);
        ASSERT_STREQ(sql, "UPDATE ob SET last_error = ? WHERE id = ? AND status = 'failed' AND "
                          "(last_error IS NULL OR last_error NOT LIKE 'inboxd:skipped%')");
        ASSERT_EQ(db_outbox_sql_failed_error(all[i], "ob", sql, sizeof(sql)), IB_E_OK);
        ASSERT_STREQ(sql, "SELECT last_error FROM ob WHERE id = ? AND status = 'failed'");
    }
}

static void test_cleanup_is_bounded(void)
{
    char sql[2048];
    bool limit_first = false;
    ASSERT_EQ(db_outbox_sql_cleanup(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql), &limit_first),
              IB_E_OK);
    ASSERT_TRUE(limit_first);
    ASSERT_STREQ(sql, "DELETE TOP (?) FROM dbo.ob WHERE status = 'published' AND published_at < ?");
    for (size_t i = 0; i < NALL; i++) {
        ASSERT_EQ(db_outbox_sql_cleanup(all[i], "ob", sql, sizeof(sql), &limit_first), IB_E_OK);
        ASSERT_CONTAINS(sql, "status = 'published' AND published_at < ?");
        ASSERT_TRUE(strstr(sql, "LIMIT ?") || strstr(sql, "TOP (?)"));
        ASSERT_EQ(limit_first, all[i] == DB_DIALECT_MSSQL);
    }
    ASSERT_EQ(db_outbox_sql_cleanup_lock(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "sp_getapplock @Resource = N'inboxd-outbox-cleanup:dbo.ob'");
    ASSERT_CONTAINS(sql, "@LockTimeout = 0");
    ASSERT_EQ(db_outbox_sql_cleanup_lock(DB_DIALECT_POSTGRESQL, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "pg_try_advisory_lock(");
    ASSERT_EQ(db_outbox_sql_cleanup_lock(DB_DIALECT_MARIADB, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "GET_LOCK('inboxd-outbox-cleanup:ob', 0)");
    ASSERT_EQ(db_outbox_sql_cleanup_lock(DB_DIALECT_SQLITE, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "");
    ASSERT_EQ(db_outbox_sql_cleanup_unlock(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql)),
              IB_E_OK);
    ASSERT_CONTAINS(sql, "sp_releaseapplock");
}

static void test_marks_and_operator_text(void)
{
    char sql[2048];
    bool limit_first;
    ASSERT_EQ(db_outbox_sql_published(DB_DIALECT_MSSQL, "dbo.ob", 1, sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "status = 'published', published_at = SYSUTCDATETIME()");
    ASSERT_CONTAINS(sql, "WHERE id = ?");
    ASSERT_EQ(db_outbox_sql_published(DB_DIALECT_POSTGRESQL, "ob", 3, sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "WHERE id IN (?, ?, ?)");
    ASSERT_EQ(db_outbox_sql_published(DB_DIALECT_SQLITE, "ob", DB_OUTBOX_LIST_MAX, sql,
                                      sizeof(sql)),
              IB_E_OK);
    ASSERT_EQ(db_outbox_sql_published(DB_DIALECT_SQLITE, "ob", 0, sql, sizeof(sql)), IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_published(DB_DIALECT_SQLITE, "ob", 3, sql, 60), IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_attempt(DB_DIALECT_POSTGRESQL, "ob", true, sql, sizeof(sql)),
              IB_E_OK);
    ASSERT_STREQ(sql, "UPDATE ob SET status = 'failed', attempts = attempts + 1, last_error = ? "
                      "WHERE id = ?");
    ASSERT_EQ(db_outbox_sql_attempt(DB_DIALECT_POSTGRESQL, "ob", false, sql, sizeof(sql)),
              IB_E_OK);
    ASSERT_NOT_CONTAINS(sql, "status");
    ASSERT_EQ(db_outbox_sql_list(DB_DIALECT_MSSQL, "dbo.ob", true, sql, sizeof(sql),
                                 &limit_first),
              IB_E_OK);
    ASSERT_TRUE(limit_first);
    ASSERT_CONTAINS(sql, "SELECT TOP (?) id,");
    ASSERT_CONTAINS(sql, "FROM dbo.ob o WHERE o.status = ? ORDER BY o.id");
    ASSERT_CONTAINS(sql, "CASE WHEN o.status = 'pending' THEN (SELECT MIN(f.id) FROM dbo.ob f "
                         "WHERE f.status = 'failed'");
    ASSERT_CONTAINS(sql, "END AS blocked_by, trace_context FROM");
    ASSERT_EQ(db_outbox_sql_list(DB_DIALECT_SQLITE, "ob", false, sql, sizeof(sql), &limit_first),
              IB_E_OK);
    ASSERT_TRUE(!limit_first);
    ASSERT_CONTAINS(sql, "FROM ob o ORDER BY o.id LIMIT ?");
    ASSERT_EQ(db_outbox_sql_retry(DB_DIALECT_MARIADB, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "WHERE id = ? AND status = 'failed'");
    ASSERT_EQ(db_outbox_sql_stats(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_CONTAINS(sql, "DATEDIFF_BIG(second, MIN(created_at), SYSUTCDATETIME())");
    ASSERT_EQ(db_outbox_sql_insert(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "INSERT INTO dbo.ob (entity, message_id, session_id, subject, "
                      "correlation_id, content_type, properties, body, trace_context) VALUES "
                      "(?, ?, ?, ?, ?, ?, ?, ?, ?)");
}

/* trace_context reaches tables created before it, in every dialect, and the claim reads it. */
static void test_trace_context_column(void)
{
    char sql[2048], lock[512];
    ASSERT_EQ(db_outbox_sql_trace_add(DB_DIALECT_POSTGRESQL, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "ALTER TABLE ob ADD COLUMN IF NOT EXISTS trace_context varchar(128) NULL");
    ASSERT_EQ(db_outbox_sql_trace_add(DB_DIALECT_MARIADB, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "ALTER TABLE ob ADD COLUMN IF NOT EXISTS trace_context varchar(128) NULL");
    ASSERT_EQ(db_outbox_sql_trace_add(DB_DIALECT_SQLITE, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "ALTER TABLE ob ADD COLUMN trace_context TEXT");
    ASSERT_EQ(db_outbox_sql_trace_add(DB_DIALECT_MSSQL, "dbo.ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "IF COL_LENGTH(N'dbo.ob', N'trace_context') IS NULL\n"
                      "ALTER TABLE dbo.ob ADD trace_context nvarchar(128) NULL");
    ASSERT_EQ(db_outbox_sql_trace_probe(DB_DIALECT_SQLITE, "ob", sql, sizeof(sql)), IB_E_OK);
    ASSERT_STREQ(sql, "SELECT trace_context FROM ob WHERE 1 = 0");
    ASSERT_EQ(db_outbox_sql_trace_add(DB_DIALECT_SQLITE, "o'b", sql, sizeof(sql)), IB_E_INVAL);
    for (size_t i = 0; i < NALL; i++) {
        ASSERT_EQ(db_outbox_sql_claim(all[i], "ob", sql, sizeof(sql), lock, sizeof(lock)), IB_E_OK);
        ASSERT_CONTAINS(sql, ", attempts, trace_context, ");
        ASSERT_EQ(db_outbox_sql_probe(all[i], "ob", sql, sizeof(sql)), IB_E_OK);
        ASSERT_CONTAINS(sql, "trace_context");
    }
}

static void test_bad_names_and_small_buffers(void)
{
    char sql[2048], lock[512], tiny[16];
    const char *ddl[DB_DDL_MAX];
    size_t n;
    bool lf;
    ASSERT_EQ(db_outbox_sql_insert(DB_DIALECT_POSTGRESQL, "ob; DROP TABLE x", sql, sizeof(sql)),
              IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_claim(DB_DIALECT_AUTO, "ob", sql, sizeof(sql), lock, sizeof(lock)),
              IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_cleanup(DB_DIALECT_SQLITE, "o'b", sql, sizeof(sql), &lf), IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_ddl(DB_DIALECT_SQLITE, "", sql, sizeof(sql), ddl, &n), IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_ddl(DB_DIALECT_SQLITE, "ob", tiny, sizeof(tiny), ddl, &n),
              IB_E_INVAL);
    ASSERT_EQ(db_outbox_sql_stats(DB_DIALECT_SQLITE, "ob", tiny, sizeof(tiny)), IB_E_INVAL);
}

/* The file without its comment lines and blank lines. */
static void strip_comments(const char *in, char *out, size_t size)
{
    size_t o = 0;
    for (const char *line = in; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        bool keep = len > 1 && strncmp(line, "--", 2) != 0;
        if (keep && o + len < size) {
            memcpy(out + o, line, len);
            o += len;
        }
        line += len;
    }
    out[o] = '\0';
}

/* db/schema/<dialect>_outbox.sql is exactly what db.migrate runs, statement for statement. */
static void test_shipped_schema_files(void)
{
    char root[1024], path[1200];
    const char *slash;

    ib_strlcpy(root, __FILE__, sizeof(root));
    slash = strstr(root, "tests/unit/test_db_outbox_sql.c");
    ASSERT_TRUE(slash != NULL);
    root[slash - root] = '\0';
    for (size_t i = 0; i < NALL; i++) {
        static char buf[16384], want[16384], got[16384], text[16384];
        const char *ddl[DB_DDL_MAX];
        size_t n = 0, used = 0, len;
        bool go = all[i] == DB_DIALECT_MSSQL;
        const char *table = go ? "dbo.inboxd_outbox" : "inboxd_outbox";
        FILE *f;
        snprintf(path, sizeof(path), "%sdb/schema/%s_outbox.sql", root, db_dialect_name(all[i]));
        f = fopen(path, "rb");
        ASSERT_TRUE(f != NULL);
        len = fread(text, 1, sizeof(text) - 1, f);
        text[len] = '\0';
        fclose(f);
        ASSERT_EQ(db_outbox_sql_ddl(all[i], table, buf, sizeof(buf), ddl, &n), IB_E_OK);
        ASSERT_EQ(n, all[i] == DB_DIALECT_MARIADB ? 4 : 5); /* MariaDB: the session index serves */
        if (go) /* filtered indexes need it, and sqlcmd leaves it OFF */
            used = (size_t)snprintf(want, sizeof(want), "SET QUOTED_IDENTIFIER ON\nGO\n");
        for (size_t k = 0; k < n; k++)
            used += (size_t)snprintf(want + used, sizeof(want) - used, "%s%s\n", ddl[k],
                                     go ? "\nGO" : ";");
        strip_comments(text, got, sizeof(got));
        if (strcmp(want, got) != 0)
            fprintf(stderr, "%s differs from db_outbox_sql_ddl:\n%s\n---\n%s\n", path, got, want);
        ASSERT_STREQ(got, want);
    }
}

int main(void)
{
    RUN(test_claim_locks_rows);
    RUN(test_claim_body_parts);
    RUN(test_cleanup_is_bounded);
    RUN(test_marks_and_operator_text);
    RUN(test_bad_names_and_small_buffers);
    RUN(test_trace_context_column);
    RUN(test_shipped_schema_files);
    return ib_test_done();
}
