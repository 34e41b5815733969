/*
 * db_outbox_sql.c - the outbox's statement text per dialect (DDL, claim,
 * mark, cleanup, operator queries). Pure string formatting; see
 * db_outbox.h. thread: any.
 */
#include "db_outbox.h"

#include <stdio.h>
#include <string.h>

/* IB_E_OK when snprintf's result n fitted in size. */
static ib_err_t fitted(int n, size_t size)
{
    return (n < 0 || (size_t)n >= size) ? IB_E_INVAL : IB_E_OK;
}

#define render(buf, size, ...) fitted(snprintf((buf), (size), __VA_ARGS__), (size))

static bool usable(db_dialect_t d, const char *table)
{
    return db_dialect_traits(d) && db_table_name_valid(table);
}

/* "= ?" for one parameter, else "IN (?, ...)" with n of them (n > 0). */
static ib_err_t in_list(char *buf, size_t size, size_t n)
{
    size_t used;
    if (n == 0)
        return IB_E_INVAL;
    if (n == 1)
        return render(buf, size, "= ?");
    if (render(buf, size, "IN (?") != IB_E_OK)
        return IB_E_INVAL;
    used = 5;
    for (size_t i = 1; i < n; i++, used += 3)
        if (render(buf + used, size - used, ", ?") != IB_E_OK)
            return IB_E_INVAL;
    return render(buf + used, size - used, ")");
}

static int table_ddl(char *buf, size_t size, const db_traits_t *t, const char *table)
{
    const char *const *ty = t->type, *nul = t->nullable;
    return snprintf(buf, size,
                    "CREATE TABLE %s%s (\n"
                    "    id             %s,\n"
                    "    entity         %s NOT NULL,\n"
                    "    message_id     %s NOT NULL,\n"
                    "    session_id     %s%s,\n"
                    "    subject        %s%s,\n"
                    "    correlation_id %s%s,\n"
                    "    content_type   %s%s,\n"
                    "    properties     %s%s,\n"
                    "    body           %s%s,\n"
                    "    created_at     %s NOT NULL DEFAULT %s,\n"
                    "    status         %s NOT NULL DEFAULT 'pending'\n"
                    "        CHECK (status IN ('pending', 'published', 'failed')),\n"
                    "    attempts       %s NOT NULL DEFAULT 0,\n"
                    "    last_error     %s%s,\n"
                    "    published_at   %s%s,\n"
                    "    trace_context  %s%s\n"
                    ")",
                    t->if_not_exists, table, ty[DB_COL_SERIAL], ty[DB_COL_NAME], ty[DB_COL_ID],
                    ty[DB_COL_ID], nul, ty[DB_COL_NAME], nul, ty[DB_COL_ID], nul, ty[DB_COL_NAME],
                    nul, ty[DB_COL_BIG], nul, ty[DB_COL_BIG], nul, ty[DB_COL_TS], t->now_default,
                    ty[DB_COL_WORD], ty[DB_COL_I32], ty[DB_COL_DETAIL], nul, ty[DB_COL_TS], nul,
                    ty[DB_COL_ID], nul);
}

/*
 * The outbox's indexes: partial ones where the dialect has them (each
 * holds only the rows its readers look for), else led by status.
 */
typedef struct obindex {
    const char *name, *cols, *filter;
} obindex_t;

static const obindex_t partial_indexes[] = {
    {"pending", "(id)", "status = 'pending'"},
    {"session", "(session_id, id)", "status = 'pending'"},
    {"failed", "(session_id, id)", "status = 'failed'"},
    {"published", "(published_at)", "status = 'published'"},
    {NULL, NULL, NULL},
};

static const obindex_t status_indexes[] = {
    {"pending", "(status, id)", NULL},
    {"session", "(session_id, status, id)", NULL},
    {"published", "(status, published_at)", NULL},
    {NULL, NULL, NULL},
};

ib_err_t db_outbox_sql_ddl(db_dialect_t d, const char *table, char *buf, size_t size,
                           const char **out, size_t *n)
{
    const db_traits_t *tr;
    size_t used = 0;
    int w;

    *n = 0;
    if (!usable(d, table))
        return IB_E_INVAL;
#define OB_PUT(...)                                                                                \
    do {                                                                                           \
        w = snprintf(buf + used, size - used, __VA_ARGS__);                                        \
        if (w < 0 || (size_t)w >= size - used)                                                     \
            return IB_E_INVAL;                                                                     \
        used += (size_t)w;                                                                         \
    } while (0)
#define OB_NEXT() (out[(*n)++] = buf + used)
#define OB_END() (used++)
    tr = db_dialect_traits(d);
    OB_NEXT();
    OB_PUT(tr->create_guard, table);
    w = table_ddl(buf + used, size - used, tr, table);
    if (w < 0 || (size_t)w >= size - used)
        return IB_E_INVAL;
    used += (size_t)w;
    OB_END();
    for (const obindex_t *ix = tr->partial_indexes ? partial_indexes : status_indexes; ix->name;
         ix++) {
        OB_NEXT();
        if (db_sql_index(d, table, ix->name, ix->cols, ix->filter, buf + used, size - used) !=
            IB_E_OK)
            return IB_E_INVAL;
        used += strlen(buf + used);
        OB_END();
    }
#undef OB_PUT
#undef OB_NEXT
#undef OB_END
    return IB_E_OK;
}

ib_err_t db_outbox_sql_insert(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size,
                  "INSERT INTO %s (entity, message_id, session_id, subject, correlation_id, "
                  "content_type, properties, body, trace_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  table);
}

#define OB_COLS                                                                                    \
    "id, entity, message_id, session_id, subject, correlation_id, content_type, properties, "      \
    "body, attempts, trace_context"
#define OB_COLS_HEAD                                                                               \
    "id, entity, message_id, session_id, subject, correlation_id, content_type, properties, "
#define OB_COLS_TAIL ", attempts, trace_context"
#define STR_(x) #x
#define STR(x) STR_(x)

/*
 * The claim's body column (NULL when the body is above
 * DB_OUTBOX_BODY_INLINE bytes: read apart, in parts), its size in bytes
 * and in characters, and one part (DB_OUTBOX_BODY_PART characters from a
 * 1-based position). NULL: the dialect reads every body whole.
 */
typedef struct body_sql {
    const char *inline_body, *octets, *chars, *part;
} body_sql_t;

static const body_sql_t *body_sql(db_dialect_t d)
{
    static const body_sql_t pg = {
        "CASE WHEN octet_length(body) > " STR(DB_OUTBOX_BODY_INLINE) " THEN NULL ELSE body END",
        "octet_length(body)", "char_length(body)",
        "substr(body, CAST(? AS integer), CAST(? AS integer))"};
    static const body_sql_t lite = {
        "CASE WHEN length(CAST(body AS BLOB)) > " STR(DB_OUTBOX_BODY_INLINE) " THEN NULL ELSE "
        "body END",
        "length(CAST(body AS BLOB))", "length(body)", "substr(body, ?, ?)"};
    return d == DB_DIALECT_POSTGRESQL ? &pg : d == DB_DIALECT_SQLITE ? &lite : NULL;
}

/*
 * The failed rows that hold back the outbox row aliased o: earlier rows of
 * its session that failed and were not skipped by an operator. Rows without
 * a session id are never held (NULL = NULL is not true).
 */
#define OB_BLOCKERS                                                                                \
    "f.status = 'failed' AND f.session_id = o.session_id AND f.id < o.id AND (f.last_error IS "    \
    "NULL OR f.last_error NOT LIKE '" DB_OUTBOX_SKIPPED "%%')"
#define OB_NOT_BLOCKED "NOT EXISTS (SELECT 1 FROM %s f WHERE " OB_BLOCKERS ")"

/*
 * PostgreSQL, for the round's transaction (claim, marks): its rows are
 * found through the indexes whatever the statistics say. A backlog written
 * faster than autovacuum analyzes the table (a fresh table, a burst, rows
 * published since) leaves statistics that call it nearly empty: the claim
 * then read and sorted every pending row, and each mark scanned the whole
 * table, each round's cost growing with the table (20,000 rows: 18 and 15
 * ms a round, 0.7 and 0.3 ms by the indexes).
 */
#define PG_QUEUE_PLAN                                                                              \
    "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', "   \
    "true), set_config('enable_sort', 'off', true)"

ib_err_t db_outbox_sql_claim(db_dialect_t d, const char *table, char *buf, size_t size, char *lock,
                             size_t lock_size)
{
    const db_traits_t *tr;
    if (!usable(d, table))
        return IB_E_INVAL;
    if (render(lock, lock_size, "%s", "") != IB_E_OK)
        return IB_E_INVAL;
    tr = db_dialect_traits(d);
    /*
     * One writer at a time (SQLite): a write statement first takes the
     * database's write lock, so a second relay waits there rather than
     * reading the same rows.
     */
    if (tr->one_writer &&
        render(lock, lock_size, "UPDATE %s SET attempts = attempts WHERE id < 0", table) != IB_E_OK)
        return IB_E_INVAL;
    if (d == DB_DIALECT_POSTGRESQL && render(lock, lock_size, "%s", PG_QUEUE_PLAN) != IB_E_OK)
        return IB_E_INVAL;
    const body_sql_t *bs = body_sql(d);
    return render(buf, size,
                  "SELECT %s" OB_COLS_HEAD "%s" OB_COLS_TAIL ", %s, %s FROM %s o%s WHERE o.status = "
                  "'pending' AND " OB_NOT_BLOCKED " ORDER BY o.id%s%s",
                  tr->top, bs ? bs->inline_body : "body", bs ? bs->octets : "NULL",
                  bs ? bs->chars : "NULL", table, tr->skip_locked_hint, table, tr->limit,
                  tr->skip_locked);
}

ib_err_t db_outbox_sql_body_part(db_dialect_t d, const char *table, char *buf, size_t size)
{
    const body_sql_t *bs = body_sql(d);
    if (!usable(d, table) || !bs)
        return IB_E_INVAL;
    return render(buf, size, "SELECT %s FROM %s WHERE id = ?", bs->part, table);
}

ib_err_t db_outbox_sql_session_head(db_dialect_t d, const char *table, size_t nsessions,
                                    char *buf, size_t size)
{
    size_t used;
    /* The dialect's read_locked_hint: a session's lower id still uncommitted is waited for. */
    if (!usable(d, table) ||
        render(buf, size,
               "SELECT session_id, MIN(id) FROM %s%s WHERE status = 'pending' AND session_id ",
               table, db_dialect_traits(d)->read_locked_hint) != IB_E_OK)
        return IB_E_INVAL;
    used = strlen(buf);
    if (in_list(buf + used, size - used, nsessions) != IB_E_OK)
        return IB_E_INVAL;
    used += strlen(buf + used);
    return render(buf + used, size - used, " GROUP BY session_id");
}

ib_err_t db_outbox_sql_published(db_dialect_t d, const char *table, size_t nids, char *buf,
                                 size_t size)
{
    size_t used;
    if (!usable(d, table) ||
        render(buf, size,
               "UPDATE %s SET status = 'published', published_at = %s, attempts = attempts + "
               "1, last_error = NULL WHERE id ",
               table, db_sql_now(d)) != IB_E_OK)
        return IB_E_INVAL;
    used = strlen(buf);
    return in_list(buf + used, size - used, nids);
}

ib_err_t db_outbox_sql_attempt(db_dialect_t d, const char *table, bool failed, char *buf,
                               size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size, "UPDATE %s SET %sattempts = attempts + 1, last_error = ? WHERE id = ?",
                  table, failed ? "status = 'failed', " : "");
}

ib_err_t db_outbox_sql_cleanup(db_dialect_t d, const char *table, char *buf, size_t size,
                               bool *limit_first)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return db_sql_delete_bounded(d, table, "published", "published_at", buf, size, limit_first);
}

ib_err_t db_outbox_sql_cleanup_lock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    return db_sql_try_lock(d, "outbox-cleanup", table, buf, size);
}

ib_err_t db_outbox_sql_cleanup_unlock(db_dialect_t d, const char *table, char *buf, size_t size)
{
    return db_sql_unlock(d, "outbox-cleanup", table, buf, size);
}

ib_err_t db_outbox_sql_stats(db_dialect_t d, const char *table, char *buf, size_t size)
{
    char age[256];
    if (!usable(d, table) ||
        render(age, sizeof age, db_dialect_traits(d)->age_s_fmt, "MIN(created_at)") != IB_E_OK)
        return IB_E_INVAL;
    return render(buf, size, "SELECT COUNT(*), %s FROM %s WHERE status = 'pending'", age, table);
}

ib_err_t db_outbox_sql_list(db_dialect_t d, const char *table, bool by_status, char *buf,
                            size_t size, bool *limit_first)
{
    static const char cols[] = "id, entity, message_id, session_id, status, attempts, "
                               "last_error, created_at, published_at, CASE WHEN o.status = "
                               "'pending' THEN (SELECT MIN(f.id) FROM %s f WHERE " OB_BLOCKERS
                               ") END AS blocked_by, trace_context";
    const db_traits_t *tr;
    char sel[1024];
    if (!usable(d, table) || render(sel, sizeof(sel), cols, table) != IB_E_OK)
        return IB_E_INVAL;
    tr = db_dialect_traits(d);
    *limit_first = tr->limit_first;
    return render(buf, size, "SELECT %s%s FROM %s o%s ORDER BY o.id%s", tr->top, sel, table,
                  by_status ? " WHERE o.status = ?" : "", tr->limit);
}

ib_err_t db_outbox_sql_blocked(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size,
                  "SELECT COUNT(DISTINCT o.session_id) FROM %s o WHERE o.status = 'pending' AND "
                  "EXISTS (SELECT 1 FROM %s f WHERE " OB_BLOCKERS ")",
                  table, table);
}

ib_err_t db_outbox_sql_failed_error(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size, "SELECT last_error FROM %s WHERE id = ? AND status = 'failed'", table);
}

ib_err_t db_outbox_sql_skip(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size,
                  "UPDATE %s SET last_error = ? WHERE id = ? AND status = 'failed' AND "
                  "(last_error IS NULL OR last_error NOT LIKE '" DB_OUTBOX_SKIPPED "%%')",
                  table);
}

ib_err_t db_outbox_sql_retry(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size,
                  "UPDATE %s SET status = 'pending', last_error = NULL WHERE id = ? AND status = "
                  "'failed'",
                  table);
}

ib_err_t db_outbox_sql_republish(db_dialect_t d, const char *table, long long ago_s, char *buf,
                                 size_t size)
{
    char since[256];
    if (!usable(d, table) || !db_sql_ago(d, ago_s, since, sizeof since))
        return IB_E_INVAL;
    return render(buf, size,
                  "UPDATE %s SET status = 'pending', last_error = NULL WHERE status = "
                  "'published' AND published_at >= %s",
                  table, since);
}

ib_err_t db_outbox_sql_probe(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size,
                  "SELECT " OB_COLS ", created_at, status, last_error, published_at FROM %s "
                  "WHERE 1 = 0",
                  table);
}

ib_err_t db_outbox_sql_trace_probe(db_dialect_t d, const char *table, char *buf, size_t size)
{
    if (!usable(d, table))
        return IB_E_INVAL;
    return render(buf, size, "SELECT trace_context FROM %s WHERE 1 = 0", table);
}

ib_err_t db_outbox_sql_trace_add(db_dialect_t d, const char *table, char *buf, size_t size)
{
    return db_sql_add_column(d, table, "trace_context", DB_COL_ID, true, buf, size);
}
