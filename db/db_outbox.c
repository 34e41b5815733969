/*
 * db_outbox.c - running the outbox statements: create or check the table,
 * the relay's claim/mark transaction, cleanup, and the operator queries.
 * thread: the owner of the db_conn_t passed in.
 */
#include "db_conn_int.h"
#include "db_outbox.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "ib_utf8.h"

#define CLEANUP_BATCH_DEFAULT 1000
#define CLEANUP_BATCH_MAX 10000
#define CLAIM_MAX 1000

static bool ok(SQLRETURN rc)
{
    return rc == SQL_SUCCESS || rc == SQL_SUCCESS_WITH_INFO;
}

static ib_err_t bad_table(ib_error_t *err)
{
    return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "outbox.table: invalid name");
}

static long long get_int(SQLHSTMT st, SQLUSMALLINT col)
{
    SQLBIGINT v = 0;
    SQLLEN ind = 0;
    if (ok(SQLGetData(st, col, SQL_C_SBIGINT, &v, sizeof(v), &ind)) && ind != SQL_NULL_DATA)
        return v;
    return 0;
}

static void row_clear(db_outbox_row_t *r)
{
    free(r->entity);
    free(r->message_id);
    free(r->session_id);
    free(r->subject);
    free(r->correlation_id);
    free(r->content_type);
    free(r->properties);
    free(r->body);
    free(r->trace_context);
    free(r->status);
    free(r->last_error);
    free(r->created_at);
    free(r->published_at);
    memset(r, 0, sizeof(*r));
}

void db_outbox_row_clear(db_outbox_row_t *row)
{
    row_clear(row);
}

void db_outbox_rows_free(db_outbox_row_t *rows, size_t n)
{
    if (!rows)
        return;
    for (size_t i = 0; i < n; i++)
        row_clear(&rows[i]);
    free(rows);
}

/* Rows collected by a row callback; failed is set when one could not be read. */
typedef struct rowset {
    db_outbox_row_t *v;
    size_t n, cap;
    bool failed;
    bool list; /* the operator columns, not the relay's */
    const db_conn_t *dbc;
} rowset_t;

/* A body left out of the claim (above DB_OUTBOX_BODY_INLINE): its sizes, for read_parts. */
static bool claim_sizes(SQLHSTMT st, db_outbox_row_t *r)
{
    long long octets = get_int(st, 12);
    if (!r->body && octets > DB_OUTBOX_BODY_INLINE) {
        r->body_octets = octets;
        r->body_chars = get_int(st, 13);
    }
    return true;
}

/*
 * Columns are read in their order: SQL Server's ODBC driver reads a row
 * forward only (SQLGetData without SQL_GD_ANY_ORDER).
 */
static bool read_claim_row(const db_conn_t *dbc, SQLHSTMT st, db_outbox_row_t *r)
{
    r->id = get_int(st, 1);
    if (!db_get_text(dbc, st, 2, &r->entity, NULL) || !db_get_text(dbc, st, 3, &r->message_id, NULL) ||
        !db_get_text(dbc, st, 4, &r->session_id, NULL) || !db_get_text(dbc, st, 5, &r->subject, NULL) ||
        !db_get_text(dbc, st, 6, &r->correlation_id, NULL) ||
        !db_get_text(dbc, st, 7, &r->content_type, NULL) || !db_get_text(dbc, st, 8, &r->properties, NULL) ||
        !db_get_text(dbc, st, 9, &r->body, &r->body_len))
        return false;
    r->attempts = get_int(st, 10);
    return db_get_text(dbc, st, 11, &r->trace_context, NULL) && claim_sizes(st, r);
}

static bool read_list_row(const db_conn_t *dbc, SQLHSTMT st, db_outbox_row_t *r)
{
    r->id = get_int(st, 1);
    if (!db_get_text(dbc, st, 2, &r->entity, NULL) || !db_get_text(dbc, st, 3, &r->message_id, NULL) ||
        !db_get_text(dbc, st, 4, &r->session_id, NULL) || !db_get_text(dbc, st, 5, &r->status, NULL))
        return false;
    r->attempts = get_int(st, 6);
    if (!db_get_text(dbc, st, 7, &r->last_error, NULL) || !db_get_text(dbc, st, 8, &r->created_at, NULL) ||
        !db_get_text(dbc, st, 9, &r->published_at, NULL))
        return false;
    r->blocked_by = get_int(st, 10);
    return db_get_text(dbc, st, 11, &r->trace_context, NULL);
}

static bool collect_row(SQLHSTMT st, void *arg)
{
    rowset_t *rs = arg;
    db_outbox_row_t *r;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 16;
        db_outbox_row_t *v = realloc(rs->v, cap * sizeof(*v));
        if (!v) {
            rs->failed = true;
            return false;
        }
        rs->v = v;
        rs->cap = cap;
    }
    r = &rs->v[rs->n];
    memset(r, 0, sizeof(*r));
    if (!(rs->list ? read_list_row(rs->dbc, st, r) : read_claim_row(rs->dbc, st, r))) {
        row_clear(r);
        rs->failed = true;
        return false;
    }
    rs->n++;
    return true;
}

/* ---- migrate -------------------------------------------------------------- */

static ib_err_t create_once(db_conn_t *dbc, const char *table, ib_error_t *err)
{
    char buf[3 * DB_SQL_MAX];
    const char *ddl[DB_DDL_MAX];
    size_t n = 0;

    if (db_outbox_sql_ddl(dbc->dialect, table, buf, sizeof(buf), ddl, &n) != IB_E_OK)
        return bad_table(err);
    return db_migrate_ddl(dbc, table, ddl, n, err);
}

/*
 * Adds trace_context to a table created before it. SQLite cannot say IF NOT
 * EXISTS: a racing migrator's duplicate-column error is left to the probe.
 */
static ib_err_t add_trace_column(db_conn_t *dbc, const char *table, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    const char *ddl[1] = {sql};
    if (db_outbox_sql_trace_probe(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (db_run(dbc, sql, NULL, 0, NULL, NULL, NULL, err) == IB_E_OK) {
        db_rollback_quiet(dbc);
        return IB_E_OK;
    }
    db_rollback_quiet(dbc);
    if (err->code == IB_E_DB_CONN || err->cls == IB_CLASS_TRANSIENT)
        return err->code;
    if (db_outbox_sql_trace_add(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (db_migrate_ddl(dbc, table, ddl, 1, err) != IB_E_OK)
        IB_LOG(IB_LOG_WARN, "db_outbox", IB_MSG("adding trace_context failed; probing"),
               IB_S("table", table), IB_S("error", err->text));
    ib_error_clear(err);
    return IB_E_OK;
}

static ib_err_t probe(db_conn_t *dbc, const char *table, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    if (db_outbox_sql_probe(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (db_run(dbc, sql, NULL, 0, NULL, NULL, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        if (err->code == IB_E_DB_CONN || err->cls == IB_CLASS_TRANSIENT)
            return err->code;
        ib_error_t e = *err;
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "outbox.table: table '%s' is missing or lacks outbox columns (create it "
                     "from db/schema/%s_outbox.sql, or add the column trace_context to a table "
                     "from before it as that file says, or set db.migrate true): %s",
                     table, db_dialect_name(dbc->dialect), e.text);
        ib_strlcpy(err->sqlstate, e.sqlstate, sizeof(err->sqlstate));
        err->native = e.native;
        return IB_E_CONFIG;
    }
    db_rollback_quiet(dbc);
    return IB_E_OK;
}

ib_err_t db_outbox_migrate(db_conn_t *dbc, const char *table, bool create, ib_error_t *err)
{
    ib_error_t local;
    if (!err)
        err = &local;
    ib_error_clear(err);
    if (!db_table_name_valid(table))
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    for (int attempt = 1; create; attempt++) {
        if (create_once(dbc, table, err) == IB_E_OK)
            break;
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        if (attempt >= 8 || err->cls != IB_CLASS_TRANSIENT) {
            ib_error_prefix(err, "db.migrate: creating table '%s'", table);
            return err->code;
        }
        db_conn_ensure(dbc, err);
    }
    if (create && add_trace_column(dbc, table, err) != IB_E_OK)
        return err->code;
    return probe(dbc, table, err);
}

/* ---- the relay transaction ------------------------------------------------ */

/* The statement width for n values: the least of 1, 8, 32 and DB_OUTBOX_LIST_MAX holding them. */
static size_t list_width(size_t n)
{
    static const size_t widths[] = {1, 8, 32, DB_OUTBOX_LIST_MAX};
    size_t i = 0;
    while (i + 1 < sizeof(widths) / sizeof(widths[0]) && widths[i] < n)
        i++;
    return widths[i];
}

/* The claim's sessions: each distinct session id, its first row in the claim, its head. */
typedef struct heads {
    const db_conn_t *dbc;
    const char **ids;     /* distinct session ids, in claim order */
    long long *first;     /* the id of each one's first row in the claim */
    long long *head;      /* MIN(id) of its pending rows (0: not read) */
    size_t n, from, take; /* all of them; the statement under way lists [from, from + take) */
    bool failed;
} heads_t;

static bool head_row(SQLHSTMT st, void *arg)
{
    heads_t *h = arg;
    char *sid = NULL;
    if (!db_get_text(h->dbc, st, 1, &sid, NULL) || !sid) {
        free(sid);
        h->failed = true;
        return false;
    }
    for (size_t k = h->from; k < h->from + h->take; k++)
        if (strcmp(h->ids[k], sid) == 0)
            h->head[k] = get_int(st, 2);
    free(sid);
    return true;
}

/* Reads every session's head, DB_OUTBOX_LIST_MAX session ids a statement. */
static ib_err_t read_heads(db_conn_t *dbc, const char *table, heads_t *h, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    db_bind_t b[DB_OUTBOX_LIST_MAX];
    for (h->from = 0; h->from < h->n; h->from += h->take) {
        size_t width;
        h->take = h->n - h->from < DB_OUTBOX_LIST_MAX ? h->n - h->from : DB_OUTBOX_LIST_MAX;
        width = list_width(h->take);
        if (db_outbox_sql_session_head(dbc->dialect, table, width, sql, sizeof(sql)) != IB_E_OK)
            return bad_table(err);
        for (size_t k = 0; k < width; k++) /* the last id again fills the width */
            b[k] = DB_B(DB_TEXT(h->ids[h->from + (k < h->take ? k : h->take - 1)]));
        if (db_run_kept(dbc, sql, b, width, head_row, h, NULL, err) != IB_E_OK)
            return err->code;
        if (h->failed)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT,
                                "outbox claim: a session head could not be read");
    }
    return IB_E_OK;
}

/*
 * Drops from rs the rows of sessions whose oldest pending row is not in the
 * claim (another relay holds it): sending them now would overtake it.
 */
static ib_err_t keep_session_order(db_conn_t *dbc, const char *table, rowset_t *rs,
                                   ib_error_t *err)
{
    heads_t h = {.dbc = dbc};
    size_t kept = 0, *sess;
    ib_err_t rc = IB_E_OK;

    if (rs->n == 0)
        return IB_E_OK;
    h.ids = calloc(rs->n, sizeof(*h.ids));
    h.first = calloc(rs->n, sizeof(*h.first));
    h.head = calloc(rs->n, sizeof(*h.head));
    sess = calloc(rs->n, sizeof(*sess)); /* each row's index in h.ids; h.n: none */
    if (!h.ids || !h.first || !h.head || !sess)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; rc == IB_E_OK && i < rs->n; i++) {
        const char *sid = rs->v[i].session_id;
        size_t k = 0;
        while (sid && k < h.n && strcmp(h.ids[k], sid) != 0)
            k++;
        if (sid && k == h.n) { /* rows come in id order: this is the session's first */
            h.ids[h.n] = sid;
            h.first[h.n++] = rs->v[i].id;
        }
        sess[i] = sid ? k : SIZE_MAX;
    }
    if (rc == IB_E_OK && h.n)
        rc = read_heads(dbc, table, &h, err);
    for (size_t i = 0; rc == IB_E_OK && i < rs->n; i++) {
        size_t k = sess[i];
        if (k != SIZE_MAX && h.head[k] != 0 && h.head[k] < h.first[k]) {
            row_clear(&rs->v[i]); /* h.ids is not read after this */
            continue;
        }
        if (kept != i)
            rs->v[kept] = rs->v[i];
        kept++;
    }
    if (rc == IB_E_OK)
        rs->n = kept;
    free(h.ids);
    free(h.first);
    free(h.head);
    free(sess);
    return rc;
}

/* A body being read in parts into one buffer of its size. */
typedef struct parts {
    const db_conn_t *dbc;
    char *buf;
    size_t len, cap;
    bool failed;
} parts_t;

static bool append_part(SQLHSTMT st, void *arg)
{
    parts_t *p = arg;
    size_t n = 0;
    /* Straight into the body's buffer (its size + 1 for the terminator). */
    if (!db_get_text_into(p->dbc, st, 1, p->buf + p->len, p->cap - p->len + 1, &n)) {
        p->failed = true;
        return false;
    }
    p->len += n;
    return true;
}

/*
 * Reads r's body, left out of the claim, in parts of DB_OUTBOX_BODY_PART
 * characters (the row is locked by the claim) into one buffer of its size:
 * the body once, plus a part at a time in the driver.
 */
static ib_err_t read_parts(db_conn_t *dbc, const char *table, db_outbox_row_t *r, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    parts_t p = {.dbc = dbc, .cap = (size_t)r->body_octets};
    if (db_outbox_sql_body_part(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (!(p.buf = malloc(p.cap + 1)))
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT,
                            "no memory for row %lld's body of %zu bytes", r->id, p.cap);
    for (long long at = 1; at <= r->body_chars && !p.failed; at += DB_OUTBOX_BODY_PART) {
        db_bind_t b[3] = {DB_B(DB_INT(at)), DB_B(DB_INT(DB_OUTBOX_BODY_PART)), DB_B(DB_INT(r->id))};
        if (db_run(dbc, sql, b, 3, append_part, &p, NULL, err) != IB_E_OK) {
            free(p.buf);
            return err->code;
        }
    }
    if (p.failed || p.len != p.cap) {
        free(p.buf);
        return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                            "row %lld's body read in parts came to %zu bytes, not %zu", r->id,
                            p.len, p.cap);
    }
    p.buf[p.len] = '\0';
    r->body = p.buf;
    r->body_len = p.len;
    r->body_octets = r->body_chars = 0;
    return IB_E_OK;
}

/* The bodies the claim left out, read in parts. */
static ib_err_t read_left_out(db_conn_t *dbc, const char *table, rowset_t *rs, ib_error_t *err)
{
    for (size_t i = 0; i < rs->n; i++)
        if (rs->v[i].body_octets && read_parts(dbc, table, &rs->v[i], err) != IB_E_OK)
            return err->code;
    return IB_E_OK;
}

ib_err_t db_outbox_claim(db_conn_t *dbc, const char *table, int max, db_outbox_row_t **rows,
                         size_t *n, ib_error_t *err)
{
    char sql[DB_SQL_MAX], lock[DB_SQL_MAX];
    rowset_t rs = {.dbc = dbc};
    db_bind_t b;

    *rows = NULL;
    *n = 0;
    ib_error_clear(err);
    if (max <= 0 || max > CLAIM_MAX)
        max = max <= 0 ? 1 : CLAIM_MAX;
    if (db_outbox_sql_claim(dbc->dialect, table, sql, sizeof(sql), lock, sizeof(lock)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (lock[0] && db_run(dbc, lock, NULL, 0, NULL, NULL, NULL, err) != IB_E_OK)
        goto fail;
    b = DB_B(DB_INT(max));
    if (db_run(dbc, sql, &b, 1, collect_row, &rs, NULL, err) != IB_E_OK)
        goto fail;
    if (rs.failed) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "outbox claim: a row could not be read");
        goto fail;
    }
    if (keep_session_order(dbc, table, &rs, err) != IB_E_OK || read_left_out(dbc, table, &rs, err) != IB_E_OK)
        goto fail;
    if (rs.n == 0) {
        free(rs.v);
        return db_end(dbc, false, err);
    }
    *rows = rs.v;
    *n = rs.n;
    return IB_E_OK;
fail:
    db_rollback_quiet(dbc);
    db_outbox_rows_free(rs.v, rs.n);
    if (err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    ib_error_prefix(err, "outbox claim");
    return err->code ? err->code : IB_E_DB;
}

ib_err_t db_outbox_mark(db_conn_t *dbc, const char *table, long long id, db_outbox_mark_t mark,
                        const char *error, ib_error_t *err)
{
    char sql[DB_SQL_MAX], text[2001];
    db_bind_t b[2];
    size_t nb = 0;
    ib_err_t rc;

    if (mark == DB_OUTBOX_PUBLISHED)
        rc = db_outbox_sql_published(dbc->dialect, table, 1, sql, sizeof(sql));
    else
        rc = db_outbox_sql_attempt(dbc->dialect, table, mark == DB_OUTBOX_FAILED, sql,
                                   sizeof(sql));
    if (rc != IB_E_OK)
        return bad_table(err);
    if (mark != DB_OUTBOX_PUBLISHED) {
        /* Cut at a character boundary so the column's limit holds. */
        size_t len = ib_strlcpy(text, error ? error : "", sizeof(text));
        if (len >= sizeof(text)) {
            len = sizeof(text) - 1;
            while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
                len--;
            text[len] = '\0';
        }
        b[nb++] = DB_B(DB_TEXT(text));
    }
    b[nb++] = DB_B(DB_INT(id));
    if (db_run(dbc, sql, b, nb, NULL, NULL, NULL, err) != IB_E_OK) {
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        ib_error_prefix(err, "outbox mark");
        return err->code;
    }
    return IB_E_OK;
}

ib_err_t db_outbox_mark_published(db_conn_t *dbc, const char *table, const long long *ids,
                                  size_t n, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    db_bind_t b[DB_OUTBOX_LIST_MAX];
    ib_error_t local;

    if (!err)
        err = &local;
    ib_error_clear(err);
    for (size_t from = 0; from < n;) {
        size_t take = n - from < DB_OUTBOX_LIST_MAX ? n - from : DB_OUTBOX_LIST_MAX;
        size_t width = list_width(take);
        if (db_outbox_sql_published(dbc->dialect, table, width, sql, sizeof(sql)) != IB_E_OK)
            return bad_table(err);
        for (size_t k = 0; k < width; k++) /* the last id again fills the width */
            b[k] = DB_B(DB_INT(ids[from + (k < take ? k : take - 1)]));
        if (db_run_kept(dbc, sql, b, width, NULL, NULL, NULL, err) != IB_E_OK) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "outbox mark");
            return err->code;
        }
        from += take;
    }
    return IB_E_OK;
}

/* ---- cleanup and operator queries ----------------------------------------- */

/* Takes (lock true) or releases the single-cleaner lock; *got says whether it is held. */
static ib_err_t cleaner_lock(db_conn_t *dbc, const char *table, bool lock, bool *got,
                             ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long v = 0;
    ib_err_t rc = lock ? db_outbox_sql_cleanup_lock(dbc->dialect, table, sql, sizeof(sql))
                       : db_outbox_sql_cleanup_unlock(dbc->dialect, table, sql, sizeof(sql));
    if (rc != IB_E_OK)
        return bad_table(err);
    *got = true;
    if (!sql[0])
        return IB_E_OK;
    if (db_run(dbc, sql, NULL, 0, lock ? db_row_first_int : NULL, &v, NULL, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return err->code;
    }
    *got = !lock || v == 1;
    return IB_E_OK;
}

/* One cleanup batch in its own transaction; the rows deleted or -1. */
static long long cleanup_batch(db_conn_t *dbc, const char *sql, bool limit_first,
                               long long cutoff_ms, long batch, ib_error_t *err)
{
    db_bind_t b[2];
    long long rows = 0;
    b[limit_first ? 0 : 1] = DB_B(DB_INT(batch));
    b[limit_first ? 1 : 0] = DB_B_TS(cutoff_ms);
    if (db_run(dbc, sql, b, 2, NULL, NULL, &rows, err) == IB_E_OK &&
        db_end(dbc, true, err) == IB_E_OK)
        return rows;
    db_rollback_quiet(dbc);
    ib_error_prefix(err, "outbox cleanup");
    return -1;
}

long long db_outbox_cleanup(db_conn_t *dbc, const char *table, long long retention_s, long batch,
                            long max_batches, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    bool limit_first = false, got = false;
    long long total = 0, rows, cutoff = ib_now_ms() - retention_s * 1000LL;
    long done = 0;

    ib_error_clear(err);
    batch = batch <= 0 ? CLEANUP_BATCH_DEFAULT : batch > CLEANUP_BATCH_MAX ? CLEANUP_BATCH_MAX : batch;
    if ((size_t)batch > db_sql_delete_rows_max(dbc->dialect))
        batch = (long)db_sql_delete_rows_max(dbc->dialect);
    if (db_outbox_sql_cleanup(dbc->dialect, table, sql, sizeof(sql), &limit_first) != IB_E_OK) {
        bad_table(err);
        return -1;
    }
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (cleaner_lock(dbc, table, true, &got, err) != IB_E_OK) {
        ib_error_prefix(err, "outbox cleanup lock");
        return -1;
    }
    if (!got)
        return 0; /* another replica is cleaning */
    do {
        rows = cleanup_batch(dbc, sql, limit_first, cutoff, batch, err);
        total = rows < 0 ? -1 : total + rows;
    } while (rows == batch && (max_batches <= 0 || ++done < max_batches));
    if (!dbc->broken) {
        ib_error_t e;
        cleaner_lock(dbc, table, false, &got, &e);
    }
    return total;
}

typedef struct stats_row {
    long long pending, oldest_s;
} stats_row_t;

static bool stats_cb(SQLHSTMT st, void *arg)
{
    stats_row_t *s = arg;
    s->pending = get_int(st, 1);
    s->oldest_s = get_int(st, 2);
    return false;
}

ib_err_t db_outbox_stats(db_conn_t *dbc, const char *table, long long *pending,
                         long long *oldest_s, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    stats_row_t s = {0, 0};

    ib_error_clear(err);
    if (db_outbox_sql_stats(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, NULL, 0, stats_cb, &s, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "outbox stats");
        return err->code;
    }
    db_rollback_quiet(dbc);
    *pending = s.pending;
    *oldest_s = s.oldest_s > 0 ? s.oldest_s : 0;
    return IB_E_OK;
}

ib_err_t db_outbox_list(db_conn_t *dbc, const char *table, const char *status, int max,
                        db_outbox_row_t **rows, size_t *n, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    bool limit_first = false;
    rowset_t rs = {.dbc = dbc};
    db_bind_t b[2];
    size_t nb = 0;

    *rows = NULL;
    *n = 0;
    ib_error_clear(err);
    rs.list = true;
    if (db_outbox_sql_list(dbc->dialect, table, status != NULL, sql, sizeof(sql),
                           &limit_first) != IB_E_OK)
        return bad_table(err);
    if (limit_first)
        b[nb++] = DB_B(DB_INT(max));
    if (status)
        b[nb++] = DB_B(DB_TEXT(status));
    if (!limit_first)
        b[nb++] = DB_B(DB_INT(max));
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, b, nb, collect_row, &rs, NULL, err) != IB_E_OK || rs.failed) {
        if (rs.failed)
            ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "a row could not be read");
        db_rollback_quiet(dbc);
        db_outbox_rows_free(rs.v, rs.n);
        ib_error_prefix(err, "outbox list");
        return err->code;
    }
    db_rollback_quiet(dbc);
    *rows = rs.v;
    *n = rs.n;
    return IB_E_OK;
}

ib_err_t db_outbox_retry(db_conn_t *dbc, const char *table, long long id, long long *changed,
                         ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    db_bind_t b = DB_B(DB_INT(id));

    *changed = 0;
    ib_error_clear(err);
    if (db_outbox_sql_retry(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, &b, 1, NULL, NULL, changed, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "outbox retry");
        return err->code;
    }
    return IB_E_OK;
}

ib_err_t db_outbox_republish(db_conn_t *dbc, const char *table, long long ago_s,
                             long long *changed, ib_error_t *err)
{
    char sql[DB_SQL_MAX];

    *changed = 0;
    ib_error_clear(err);
    if (db_outbox_sql_republish(dbc->dialect, table, ago_s, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, NULL, 0, NULL, NULL, changed, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "outbox republish");
        return err->code;
    }
    return IB_E_OK;
}

ib_err_t db_outbox_blocked(db_conn_t *dbc, const char *table, long long *sessions,
                           ib_error_t *err)
{
    char sql[DB_SQL_MAX];

    *sessions = 0;
    ib_error_clear(err);
    if (db_outbox_sql_blocked(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, NULL, 0, db_row_first_int, sessions, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "outbox blocked sessions");
        return err->code;
    }
    db_rollback_quiet(dbc);
    return IB_E_OK;
}

/* The first row's first column as text (a failed row's last_error). */
typedef struct first_text {
    const db_conn_t *dbc;
    char *text;
} first_text_t;

static bool first_text(SQLHSTMT st, void *arg)
{
    first_text_t *ft = arg;
    if (!db_get_text(ft->dbc, st, 1, &ft->text, NULL))
        ft->text = NULL;
    return false;
}

ib_err_t db_outbox_skip(db_conn_t *dbc, const char *table, long long id, const char *note,
                        long long *changed, ib_error_t *err)
{
    char sql[DB_SQL_MAX], text[2001], full[2600];
    first_text_t was = {dbc, NULL};
    db_bind_t key = DB_B(DB_INT(id)), b[2];

    *changed = 0;
    ib_error_clear(err);
    if (db_outbox_sql_failed_error(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_run(dbc, sql, &key, 1, first_text, &was, NULL, err) != IB_E_OK)
        goto fail;
    snprintf(full, sizeof(full), "%s (%s); was: %s", DB_OUTBOX_SKIPPED,
             note && *note ? note : "by an operator", was.text ? was.text : "");
    free(was.text);
    ib_utf8_sanitize(text, sizeof(text), full); /* the column's limit, whole characters */
    if (db_outbox_sql_skip(dbc->dialect, table, sql, sizeof(sql)) != IB_E_OK)
        return bad_table(err);
    b[0] = DB_B(DB_TEXT(text));
    b[1] = key;
    if (db_run(dbc, sql, b, 2, NULL, NULL, changed, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK)
        goto fail;
    return IB_E_OK;
fail:
    db_rollback_quiet(dbc);
    ib_error_prefix(err, "outbox skip");
    return err->code;
}
