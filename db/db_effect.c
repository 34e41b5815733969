/*
 * db_effect.c - the claim protocol of effects beyond the database, its
 * statement text per dialect, the columns it adds to the inbox table, and
 * the operator's list and resolve. See db_effect.h.
 *
 * thread: the owner of dbc.
 */
#include "db_effect.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_conn_int.h"
#include "ib_backoff.h"
#include "ib_enc.h"
#include "ib_log.h"

#define DETAIL_MAX 2000

const char *db_claim_outcome_name(db_claim_outcome_t o)
{
    static const char *const names[] = {"new",      "taken_over", "retry",  "done",
                                        "busy",     "conflict",   "failed", "replay"};
    return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "unknown";
}

/* ---- statement text ------------------------------------------------------ */

/* The columns HTTP routes add to the inbox table, and their kinds (db_traits_t types). */
typedef struct newcol {
    const char *name;
    db_col_t kind;
} newcol_t;

static const newcol_t new_columns[] = {
    {"lease_until", DB_COL_TS},          {"claim_token", DB_COL_TOKEN},
    {"remote_id", DB_COL_TEXT400},       {"remote_status", DB_COL_I32},
    {"attempts", DB_COL_I32},            {"resolution", DB_COL_WORD},
    {"resolution_note", DB_COL_TEXT2000}, {"resolved_at", DB_COL_TS},
};
#define NEW_COLUMNS (sizeof(new_columns) / sizeof(new_columns[0]))

typedef db_effect_stmt_t effect_sql_t;

#define WHERE_ROW "WHERE consumer = ? AND message_id = ?"
#define WHERE_OURS WHERE_ROW " AND status = 'claimed' AND claim_token = ?"

/* Statement text; lease_s is pasted in as an integer (never user text). */
static ib_err_t effect_sql(db_dialect_t d, const char *t, effect_sql_t which, long lease_s,
                           char *buf, size_t size);

/* effect_sql for dbc's dialect and table; a text that does not fit is a permanent error. */
static ib_err_t conn_sql(db_conn_t *dbc, effect_sql_t which, long lease_s, char *buf, size_t size,
                         ib_error_t *err)
{
    if (effect_sql(dbc->dialect, dbc->table, which, lease_s, buf, size) != IB_E_OK)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT,
                            "inbox statement %d for table '%s' does not fit", (int)which,
                            dbc->table);
    return IB_E_OK;
}

ib_err_t db_effect_sql_text(db_dialect_t d, const char *table, db_effect_stmt_t which, long lease_s,
                            char *buf, size_t size)
{
    if (!db_dialect_traits(d))
        return IB_E_INVAL;
    if (which == DB_ESQL_HAS_COLUMN)
        return db_sql_has_column(d, table, new_columns[0].name, buf, size);
    if (which == DB_ESQL_ADD_COLUMN)
        return db_sql_add_column(d, table, new_columns[0].name, new_columns[0].kind, false, buf,
                                 size);
    return effect_sql(d, table, which, lease_s, buf, size);
}

static ib_err_t effect_sql(db_dialect_t d, const char *t, effect_sql_t which, long lease_s,
                           char *buf, size_t size)
{
    char lease[160];
    const char *now = db_sql_now(d);
    int n = -1;
    if (!db_table_name_valid(t) || !db_sql_later(d, lease_s, lease, sizeof lease))
        return IB_E_INVAL;
    switch (which) {
    case DB_ESQL_CLAIM_INSERT:
        n = snprintf(buf, size,
                     "INSERT INTO %s (consumer, message_id, idempotency_key, body_sha256, status, "
                     "entity, sequence_number, delivery_count, enqueued_at, received_at, "
                     "processed_at, lease_until, claim_token, attempts) VALUES (?, ?, ?, ?, "
                     "'claimed', ?, ?, ?, ?, ?, %s, %s, ?, 1)",
                     t, now, lease);
        break;
    case DB_ESQL_LOOKUP:
        /* Two arms, each on a whole unique key: a plan cached while the
         * table was empty cannot scan the consumer's rows (db_key_arm_binds). */
        n = snprintf(buf, size,
                     "SELECT message_id, body_sha256, status, CASE WHEN lease_until IS NULL OR "
                     "lease_until < %s THEN 1 ELSE 0 END, remote_id, attempts, remote_status FROM "
                     "%s WHERE consumer = ? AND message_id = ? UNION ALL "
                     "SELECT message_id, body_sha256, status, CASE WHEN lease_until IS NULL OR "
                     "lease_until < %s THEN 1 ELSE 0 END, remote_id, attempts, remote_status FROM "
                     "%s WHERE consumer = ? AND idempotency_key = ? AND message_id <> ?",
                     now, t, now, t);
        break;
    case DB_ESQL_TAKEOVER:
        n = snprintf(buf, size,
                     "UPDATE %s SET claim_token = ?, lease_until = %s, attempts = "
                     "COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'claimed' AND "
                     "(lease_until IS NULL OR lease_until < %s)",
                     t, lease, now);
        break;
    case DB_ESQL_TAKE_RETRY:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'claimed', claim_token = ?, lease_until = %s, "
                     "attempts = COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'retry'",
                     t, lease);
        break;
    case DB_ESQL_TAKE_FAILED:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'claimed', claim_token = ?, lease_until = %s, "
                     "attempts = COALESCE(attempts, 0) + 1 " WHERE_ROW " AND status = 'failed'",
                     t, lease);
        break;
    case DB_ESQL_RENEW:
        n = snprintf(buf, size, "UPDATE %s SET lease_until = %s " WHERE_OURS, t, lease);
        break;
    case DB_ESQL_FINISH:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = ?, remote_id = ?, remote_status = ?, error_class = ?, "
                     "error_detail = ?, processed_at = %s, lease_until = NULL " WHERE_OURS,
                     t, now);
        break;
    case DB_ESQL_RELEASE_DELETE:
        n = snprintf(buf, size, "DELETE FROM %s " WHERE_OURS, t);
        break;
    case DB_ESQL_RELEASE_EXPIRE:
        n = snprintf(buf, size, "UPDATE %s SET lease_until = %s " WHERE_OURS, t, now);
        break;
    case DB_ESQL_LIST:
        n = snprintf(buf, size,
                     "SELECT consumer, message_id, idempotency_key, status, error_class, "
                     "error_detail, remote_id, remote_status, attempts, processed_at, "
                     "lease_until, resolution, resolution_note FROM %s WHERE status = ?%s "
                     "ORDER BY processed_at, consumer, message_id",
                     t, lease_s ? " AND consumer = ?" : "");
        break;
    case DB_ESQL_RESOLVE_PROCESSED:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'processed', remote_id = COALESCE(?, remote_id), "
                     "resolution = 'processed', resolution_note = ?, resolved_at = %s, "
                     "lease_until = NULL " WHERE_ROW " AND status IN ('uncertain', 'failed')",
                     t, now);
        break;
    case DB_ESQL_RESOLVE_RETRY:
        n = snprintf(buf, size,
                     "UPDATE %s SET status = 'retry', resolution = 'retry', resolution_note = ?, "
                     "resolved_at = %s, lease_until = NULL " WHERE_ROW
                     " AND status IN ('uncertain', 'failed') AND claim_token IS NOT NULL",
                     t, now);
        break;
    default:
        return IB_E_INVAL;
    }
    return (n < 0 || (size_t)n >= size) ? IB_E_INVAL : IB_E_OK;
}

/* ---- migration ------------------------------------------------------------- */

/*
 * The ALTER statements for the columns table lacks, into stmts (pointing
 * into buf). Returns the number, or -1 with err filled. Ends the read
 * transaction.
 */
static int missing_columns(db_conn_t *dbc, char *buf, size_t size, const char **stmts,
                           const char **first, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    size_t used = 0;
    int n = 0;
    *first = NULL;
    for (size_t i = 0; i < NEW_COLUMNS; i++) {
        long long has = 0;
        if (db_sql_has_column(dbc->dialect, dbc->table, new_columns[i].name, sql, sizeof sql) !=
            IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
            return -1;
        }
        if (db_run(dbc, sql, NULL, 0, db_row_first_int, &has, NULL, err) != IB_E_OK) {
            db_rollback_quiet(dbc);
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            return -1;
        }
        if (has)
            continue;
        if (!*first)
            *first = new_columns[i].name;
        if (db_sql_add_column(dbc->dialect, dbc->table, new_columns[i].name, new_columns[i].kind,
                              false, buf + used, size - used) != IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
            return -1;
        }
        stmts[n++] = buf + used;
        used += strlen(buf + used) + 1;
    }
    db_rollback_quiet(dbc);
    return n;
}

ib_err_t db_effect_migrate(db_conn_t *dbc, bool create, ib_error_t *err)
{
    char buf[NEW_COLUMNS * 160];
    const char *stmts[NEW_COLUMNS], *first;
    ib_rand_t seed = 0; /* the backoff's state, seeded on first use */
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    for (int attempt = 1;; attempt++) {
        int n = -1;
        if (db_conn_ensure(dbc, err) == IB_E_OK)
            n = missing_columns(dbc, buf, sizeof buf, stmts, &first, err);
        if (n == 0)
            return IB_E_OK;
        if (n > 0 && !create)
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "db.inbox_table: table '%s' lacks column %s, which HTTP routes "
                                "need (set db.migrate true, or add the columns db.migrate adds)",
                                dbc->table, first);
        /* Under the migration lock; a racing migrator's column shows on the re-probe. */
        if (n > 0 && db_migrate_ddl(dbc, dbc->table, stmts, (size_t)n, err) == IB_E_OK) {
            IB_LOG(IB_LOG_INFO, "db_migrate", IB_MSG("inbox columns added"),
                   IB_S("table", dbc->table), IB_I("columns", n));
            continue;
        }
        if (attempt >= 8) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "db.migrate: inbox columns of '%s'", dbc->table);
            return err->code;
        }
        ib_sleep_ms(ib_backoff_ms(50, 800, attempt, &seed), NULL);
    }
}

/* ---- the claim ------------------------------------------------------------- */

static void new_token(char out[33])
{
    unsigned char r[16];
    if (RAND_bytes(r, sizeof r) != 1) {
        /* Only an exhausted entropy source gets here; uniqueness still comes
         * from the clock and the address of out. */
        long long v = ib_now_ms() ^ (long long)(size_t)out;
        memcpy(r, &v, sizeof v);
        memcpy(r + 8, &v, sizeof v);
    }
    ib_enc_hex(out, r, sizeof r);
}

/* Column col as UTF-8 ("" for NULL or what does not fit): db_get_text_buf. */
static void get_text(const db_conn_t *dbc, SQLHSTMT st, SQLUSMALLINT col, char *buf, size_t size)
{
    db_get_text_buf(dbc, st, col, buf, size);
}

static long long get_int(SQLHSTMT st, SQLUSMALLINT col)
{
    SQLBIGINT v = 0;
    SQLLEN ind = 0;
    SQLRETURN rc = SQLGetData(st, col, SQL_C_SBIGINT, &v, sizeof v, &ind);
    return (rc == SQL_SUCCESS || rc == SQL_SUCCESS_WITH_INFO) && ind != SQL_NULL_DATA ? v : 0;
}

typedef struct found {
    const db_conn_t *dbc;
    bool any;
    char message_id[513], hash[80], status[17], remote_id[1601];
    bool expired;
    long long attempts;
    long remote_status;
} found_t;

static bool found_row(SQLHSTMT st, void *arg)
{
    found_t *f = arg;
    f->any = true;
    get_text(f->dbc, st, 1, f->message_id, sizeof f->message_id);
    get_text(f->dbc, st, 2, f->hash, sizeof f->hash);
    get_text(f->dbc, st, 3, f->status, sizeof f->status);
    f->expired = get_int(st, 4) != 0;
    get_text(f->dbc, st, 5, f->remote_id, sizeof f->remote_id);
    f->attempts = get_int(st, 6);
    f->remote_status = (long)get_int(st, 7);
    return false; /* (message_id, key) pairs belong to one row per consumer */
}

static db_claim_outcome_t claim_failed(db_conn_t *dbc, ib_error_t *err, const char *what)
{
    db_rollback_quiet(dbc);
    if (err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    if (err->code == IB_E_DB_CONN)
        err->cls = IB_CLASS_TRANSIENT; /* never the message's fault */
    ib_error_prefix(err, "%s", what);
    return DB_CLAIM_FAILED;
}

/* One conditional UPDATE; the row count says whether we won. */
static db_claim_outcome_t take(db_conn_t *dbc, const db_claim_t *c, effect_sql_t which,
                               long lease_s, db_claim_row_t *row, db_claim_outcome_t won,
                               ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    new_token(row->token);
    if (conn_sql(dbc, which, lease_s, sql, sizeof sql, err) != IB_E_OK)
        return DB_CLAIM_FAILED;
    db_bind_t b[3] = {DB_B(DB_TEXT(row->token)), DB_B(DB_TEXT(c->consumer)),
                      DB_B(DB_TEXT(row->message_id))};
    if (db_run(dbc, sql, b, 3, NULL, NULL, &n, err) != IB_E_OK || db_end(dbc, true, err) != IB_E_OK)
        return claim_failed(dbc, err, "claim takeover");
    if (n != 1) {
        row->token[0] = '\0';
        return DB_CLAIM_BUSY; /* another taker won */
    }
    row->attempts++;
    return won;
}

/* The binds of DB_ESQL_CLAIM_INSERT for claim c with claim token token. */
static void insert_binds(const db_claim_t *c, const char *token, long long *received,
                         db_bind_t b[10])
{
    *received = c->received_at_ms > 0 ? c->received_at_ms : ib_now_ms();
    db_bind_t v[10] = {DB_B(DB_TEXT(c->consumer)),
                       DB_B(DB_TEXT(c->message_id)),
                       DB_B(c->idempotency_key ? DB_TEXT(c->idempotency_key) : DB_NULL()),
                       DB_B(DB_TEXT(c->body_sha256)),
                       DB_B(c->entity ? DB_TEXT(c->entity) : DB_NULL()),
                       DB_B(DB_INT(c->sequence_number)),
                       DB_B(DB_INT(c->delivery_count)),
                       DB_B_TS(c->enqueued_at_ms),
                       DB_B_TS(*received),
                       DB_B(DB_TEXT(token))};
    memcpy(b, v, sizeof v);
}

/* The row of a fresh claim of c, ours with token. */
static void fresh_row(db_claim_row_t *row, const db_claim_t *c)
{
    ib_strlcpy(row->message_id, c->message_id, sizeof row->message_id);
    row->status = DB_ROW_CLAIMED;
    row->attempts = 1;
}

static db_claim_outcome_t insert_claim(db_conn_t *dbc, const db_claim_t *c, long lease_s,
                                       db_claim_row_t *row, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long received;
    db_bind_t b[10];
    if (effect_sql(dbc->dialect, dbc->table, DB_ESQL_CLAIM_INSERT, lease_s, sql, sizeof sql) !=
        IB_E_OK) {
        ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "claim statement too long");
        return DB_CLAIM_FAILED;
    }
    new_token(row->token);
    insert_binds(c, row->token, &received, b);
    if (db_run(dbc, sql, b, 10, NULL, NULL, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return DB_CLAIM_FAILED;
    }
    if (db_end(dbc, true, err) != IB_E_OK)
        return claim_failed(dbc, err, "claim commit");
    fresh_row(row, c);
    return DB_CLAIM_NEW;
}

/* The row that holds our message id or key decides what happens next. */
static db_claim_outcome_t existing(db_conn_t *dbc, const db_claim_t *c, long lease_s,
                                   db_claim_row_t *row, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    found_t f = {.dbc = dbc};
    if (conn_sql(dbc, DB_ESQL_LOOKUP, lease_s, sql, sizeof sql, err) != IB_E_OK)
        return DB_CLAIM_FAILED;
    db_bind_t b[DB_KEY_ARMS_NPARAMS];
    db_key_arm_binds(c, b);
    if (db_run(dbc, sql, b, DB_KEY_ARMS_NPARAMS, found_row, &f, NULL, err) != IB_E_OK)
        return claim_failed(dbc, err, "claim lookup");
    db_rollback_quiet(dbc);
    if (!f.any) {
        ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                     "inbox key was contended and released again; retry");
        return DB_CLAIM_FAILED;
    }
    if (strncmp(f.hash, c->body_sha256, 64) != 0) {
        ib_error_set(err, IB_E_CONFLICT, IB_CLASS_PERMANENT,
                     "idempotency key already used by a message with another body");
        return DB_CLAIM_CONFLICT;
    }
    ib_strlcpy(row->message_id, f.message_id, sizeof row->message_id);
    row->status = db_row_status_parse(f.status);
    ib_strlcpy(row->remote_id, f.remote_id, sizeof row->remote_id);
    row->attempts = f.attempts;
    row->remote_status = f.remote_status;
    if (row->status == DB_ROW_RETRY)
        return take(dbc, c, DB_ESQL_TAKE_RETRY, lease_s, row, DB_CLAIM_RETRY, err);
    if (row->status == DB_ROW_FAILED && c->replay)
        return take(dbc, c, DB_ESQL_TAKE_FAILED, lease_s, row, DB_CLAIM_REPLAY, err);
    if (row->status != DB_ROW_CLAIMED)
        return DB_CLAIM_DONE;
    if (!f.expired)
        return DB_CLAIM_BUSY;
    return take(dbc, c, DB_ESQL_TAKEOVER, lease_s, row, DB_CLAIM_TAKEN_OVER, err);
}

db_claim_outcome_t db_effect_claim(db_conn_t *dbc, const db_claim_t *c, long lease_s,
                                   db_claim_row_t *row, ib_error_t *err)
{
    memset(row, 0, sizeof(*row));
    ib_error_clear(err);
    if (!c || !c->consumer || !c->message_id || !c->body_sha256 || lease_s <= 0) {
        ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "claim: missing identity or lease");
        return DB_CLAIM_FAILED;
    }
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return DB_CLAIM_FAILED;
    }
    db_claim_outcome_t o = insert_claim(dbc, c, lease_s, row, err);
    if (o != DB_CLAIM_FAILED)
        return o;
    if (err->code == IB_E_DB_CONN ||
        !db_dialect_is_unique_violation(dbc->dialect, err->sqlstate, err->native))
        return claim_failed(dbc, err, "claim insert");
    return existing(dbc, c, lease_s, row, err);
}

/* True when a and b compete for one inbox row (message id or key). */
static bool same_key(const db_claim_t *a, const db_claim_t *b)
{
    if (strcmp(a->message_id, b->message_id) == 0)
        return true;
    return a->idempotency_key && b->idempotency_key &&
           strcmp(a->idempotency_key, b->idempotency_key) == 0;
}

/*
 * Whether item i may be claimed in the batch: a plain, fresh-looking claim
 * whose key no item before it holds (earlier[k] true for those taken).
 */
static bool batchable(const db_effect_claim_item_t *items, size_t i, const bool *earlier)
{
    const db_claim_t *c = items[i].claim;
    if (!c || !c->consumer || !c->message_id || !c->body_sha256 || items[i].lease_s <= 0 ||
        c->replay)
        return false;
    for (size_t k = 0; k < i; k++)
        if (earlier[k] && strcmp(items[k].claim->consumer, c->consumer) == 0 &&
            same_key(items[k].claim, c))
            return false;
    return true;
}

/* Inserts item's claim in the open transaction unless its key holds a row already. */
static ib_err_t claim_one_in_txn(db_conn_t *dbc, db_effect_claim_item_t *it, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    const db_claim_t *c = it->claim;
    found_t f = {.dbc = dbc};
    long long received;
    db_bind_t b[10];

    if (conn_sql(dbc, DB_ESQL_LOOKUP, it->lease_s, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t lb[DB_KEY_ARMS_NPARAMS];
    db_key_arm_binds(c, lb);
    if (db_run(dbc, sql, lb, DB_KEY_ARMS_NPARAMS, found_row, &f, NULL, err) != IB_E_OK)
        return err->code;
    if (f.any)
        return IB_E_OK; /* decided alone by db_effect_claim (duplicate, takeover, ...) */
    if (conn_sql(dbc, DB_ESQL_CLAIM_INSERT, it->lease_s, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    memset(&it->row, 0, sizeof it->row);
    new_token(it->row.token);
    insert_binds(c, it->row.token, &received, b);
    if (db_run_kept(dbc, sql, b, 10, NULL, NULL, NULL, err) != IB_E_OK)
        return err->code;
    fresh_row(&it->row, c);
    it->claimed = true;
    return IB_E_OK;
}

/* ---- the batch claim: one INSERT for the batch (db_dialect_effect_rows) --- */

/* 10 parameters a row, below the 1,000 psqlODBC handles (db_sql_claim_rows_max). */
#define CLAIM_ROWS_MAX 64

/*
 * The claim of rows rows as one INSERT that skips every taken key (either
 * unique index) and returns the message ids it inserted.
 */
static bool claim_rows_sql(const db_conn_t *dbc, size_t rows, long lease_s, char *buf,
                           size_t size)
{
    char lease[160];
    size_t used;
    if (!db_sql_later(dbc->dialect, lease_s, lease, sizeof lease))
        return false;
    int w = snprintf(buf, size,
                     "INSERT INTO %s (consumer, message_id, idempotency_key, body_sha256, status, "
                     "entity, sequence_number, delivery_count, enqueued_at, received_at, "
                     "processed_at, lease_until, claim_token, attempts) SELECT v.c, v.m, v.k, v.h, "
                     "'claimed', v.e, v.s, v.d, v.q, v.r, %s, %s, v.t, 1 FROM (VALUES ",
                     dbc->table, db_sql_now(dbc->dialect), lease);
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    /* psqlODBC leaves a parameter's type to the server: a VALUES column needs its own. */
    if (!db_sql_append_rows(buf, size, &used,
                            "(?, ?, ?, ?, ?, CAST(? AS bigint), CAST(? AS integer), CAST(? AS "
                            "timestamp), CAST(? AS timestamp), ?)",
                            rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") AS v (c, m, k, h, e, s, d, q, r, t) ON CONFLICT DO NOTHING RETURNING "
                 "message_id");
    return w >= 0 && (size_t)w < size - used;
}

/*
 * The row count of a statement for n items: rounded up to a power of two
 * (at least 2) with copies of the first item, so that a few statement
 * texts serve every batch size and stay prepared.
 */
static size_t padded_rows(size_t n)
{
    size_t rows = 2;
    while (rows < n)
        rows *= 2;
    return rows;
}

typedef struct chunk {
    db_conn_t *dbc;
    db_effect_claim_item_t *items;
    const db_keyed_t *keys;
    size_t n;
    size_t next; /* where the next returned row is looked for first */
    size_t matched, unmatched;
} chunk_t;

/* A row the claim returned: the item of its message id is claimed. */
static bool chunk_row(SQLHSTMT st, void *arg)
{
    chunk_t *ch = arg;
    char mid[512];
    get_text(ch->dbc, st, 1, mid, sizeof mid);
    /* Rows usually come back in VALUES order: the one after the last match first. */
    for (size_t j = 0; j < ch->n; j++) {
        size_t k = (ch->next + j) % ch->n;
        db_effect_claim_item_t *it = &ch->items[ch->keys[k].i];
        if (!it->claimed && strcmp(it->claim->message_id, mid) == 0) {
            it->claimed = true;
            fresh_row(&it->row, it->claim);
            ch->matched++;
            ch->next = k + 1;
            return true;
        }
    }
    ch->unmatched++;
    return true;
}

/*
 * One claim statement for the n items of keys, padded_rows(n) rows (a
 * copy's key is taken by the row itself and skipped).
 */
static ib_err_t claim_chunk(db_conn_t *dbc, db_effect_claim_item_t *items, const db_keyed_t *keys,
                            size_t n, long lease_s, ib_error_t *err)
{
    size_t rows = padded_rows(n);
    size_t size = 1024 + rows * 128;
    char *sql = malloc(size);
    db_bind_t *b = calloc(rows * 10, sizeof *b);
    chunk_t ch = {.dbc = dbc, .items = items, .keys = keys, .n = n};
    long long received, inserted = 0;
    ib_err_t rc;
    if (!sql || !b || !claim_rows_sql(dbc, rows, lease_s, sql, size)) {
        free(sql);
        free(b);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "batch claim statement");
    }
    for (size_t k = 0; k < rows; k++) {
        db_effect_claim_item_t *it = &items[keys[k < n ? k : 0].i];
        if (k < n) {
            memset(&it->row, 0, sizeof it->row);
            new_token(it->row.token);
        }
        insert_binds(it->claim, it->row.token, &received, b + k * 10);
    }
    rc = db_run_kept(dbc, sql, b, rows * 10, chunk_row, &ch, &inserted, err);
    free(sql);
    free(b);
    if (rc != IB_E_OK)
        return rc;
    /* A row inserted but not matched would read later as its own duplicate. */
    if (ch.unmatched || (inserted > 0 && (size_t)inserted != ch.matched))
        return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                            "batch claim inserted %lld rows but returned %zu of them", inserted,
                            ch.matched);
    return IB_E_OK;
}

/*
 * Claims the batchable items of one lease (the first's) in key order
 * (consumer, message_id): two replicas claiming overlapping batches then
 * lock the keys they share in one order, and one waits for the other.
 */
static ib_err_t claim_rows(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n,
                           ib_error_t *err)
{
    db_keyed_t *keys = calloc(n, sizeof *keys);
    bool *picked = calloc(n, sizeof *picked);
    size_t m = 0;
    long lease_s = 0;
    ib_err_t rc = IB_E_OK;
    if (!keys || !picked) {
        free(keys);
        free(picked);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        picked[i] = batchable(items, i, picked) && (!lease_s || items[i].lease_s == lease_s);
        if (!picked[i])
            continue;
        lease_s = items[i].lease_s;
        keys[m++] = (db_keyed_t){items[i].claim, i};
    }
    qsort(keys, m, sizeof *keys, db_key_order);
    for (size_t at = 0; rc == IB_E_OK && at < m; at += CLAIM_ROWS_MAX)
        rc = claim_chunk(dbc, items, keys + at, m - at < CLAIM_ROWS_MAX ? m - at : CLAIM_ROWS_MAX,
                         lease_s, err);
    free(keys);
    free(picked);
    return rc;
}

/* Each batchable item's lookup and insert in the open transaction (MariaDB, SQL Server). */
static ib_err_t claim_each(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n,
                           ib_error_t *err)
{
    bool *taken = calloc(n ? n : 1, sizeof *taken);
    if (!taken)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!batchable(items, i, taken))
            continue;
        if (claim_one_in_txn(dbc, &items[i], err) != IB_E_OK) {
            free(taken);
            return err->code;
        }
        taken[i] = items[i].claimed;
    }
    free(taken);
    return IB_E_OK;
}

size_t db_effect_claim_batch(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n,
                             ib_error_t *err)
{
    size_t claimed = 0;
    ib_error_clear(err);
    for (size_t i = 0; i < n; i++)
        items[i].claimed = false;
    /* Reading a batch's keys and then inserting: each claim alone instead. */
    if (db_dialect_one_writer(dbc->dialect))
        return 0;
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return 0;
    }
    if ((db_dialect_effect_rows(dbc->dialect) ? claim_rows : claim_each)(dbc, items, n, err) !=
        IB_E_OK)
        goto fail;
    for (size_t i = 0; i < n; i++)
        claimed += items[i].claimed;
    if (claimed == 0) {
        db_rollback_quiet(dbc);
        return 0;
    }
    if (db_end(dbc, true, err) != IB_E_OK)
        goto fail;
    return claimed;
fail:
    /* A key inserted meanwhile by another worker, a deadlock, the connection:
     * nothing of the batch is claimed, each message is claimed alone. */
    claim_failed(dbc, err, "batch claim");
    for (size_t i = 0; i < n; i++) {
        items[i].claimed = false;
        memset(&items[i].row, 0, sizeof items[i].row);
    }
    return 0;
}

/* Runs one statement on our claimed row; IB_E_LOCK_LOST when it is not ours. */
static ib_err_t on_ours(db_conn_t *dbc, effect_sql_t which, long lease_s, const char *consumer,
                        const db_claim_row_t *row, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return err->code;
    }
    if (conn_sql(dbc, which, lease_s, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t b[3] = {DB_B(DB_TEXT(consumer)), DB_B(DB_TEXT(row->message_id)),
                      DB_B(DB_TEXT(row->token))};
    if (db_run(dbc, sql, b, 3, NULL, NULL, &n, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        return err->code;
    }
    if (n != 1)
        return ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                            "inbox claim was taken over by another worker");
    return IB_E_OK;
}

ib_err_t db_effect_renew(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                         long lease_s, ib_error_t *err)
{
    return on_ours(dbc, DB_ESQL_RENEW, lease_s, consumer, row, err);
}

ib_err_t db_effect_release(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                           bool reached, ib_error_t *err)
{
    return on_ours(dbc, reached ? DB_ESQL_RELEASE_EXPIRE : DB_ESQL_RELEASE_DELETE, 1, consumer, row,
                   err);
}

/* Runs the route's finishing statements in the open transaction. */
static ib_err_t run_route(db_conn_t *dbc, const db_stmt_t *stmts, size_t nstmts, ib_error_t *err)
{
    for (size_t i = 0; i < nstmts; i++) {
        db_bind_t *b = stmts[i].nparams ? calloc(stmts[i].nparams, sizeof(*b)) : NULL;
        if (stmts[i].nparams && !b)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        for (size_t k = 0; k < stmts[i].nparams; k++)
            b[k] = DB_B(stmts[i].params[k]);
        ib_err_t rc = db_run_kept(dbc, stmts[i].sql, b, stmts[i].nparams, NULL, NULL, NULL, err);
        free(b);
        if (rc != IB_E_OK) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "statement %zu", i + 1);
            return rc;
        }
    }
    return IB_E_OK;
}

/* True when res's error detail is longer than the column keeps (DETAIL_MAX bytes). */
static bool detail_long(const db_effect_result_t *res)
{
    return res->error_detail && strnlen(res->error_detail, DETAIL_MAX + 1) > DETAIL_MAX;
}

/*
 * res's error detail as bound: itself, or when detail_long cut into buf
 * at DETAIL_MAX bytes, never inside a UTF-8 character. NULL when none.
 */
static const char *detail_of(const db_effect_result_t *res, char buf[DETAIL_MAX + 1])
{
    if (!detail_long(res))
        return res->error_detail;
    ib_strlcpy(buf, res->error_detail, DETAIL_MAX + 1);
    size_t end = DETAIL_MAX;
    while (end > 0 && ((unsigned char)res->error_detail[end] & 0xC0) == 0x80)
        buf[--end] = '\0';
    return buf;
}

/* The first five parameters of a finish: res's columns (detail: detail_of's). */
static void result_binds(const db_effect_result_t *res, const char *detail, db_bind_t *b)
{
    b[0] = DB_B(DB_TEXT(db_row_status_name(res->status)));
    b[1] = DB_B(res->remote_id && *res->remote_id ? DB_TEXT(res->remote_id) : DB_NULL());
    b[2] = DB_B(res->remote_status ? DB_INT(res->remote_status) : DB_NULL());
    b[3] = DB_B(res->error_class ? DB_TEXT(res->error_class) : DB_NULL());
    b[4] = DB_B(detail ? DB_TEXT(detail) : DB_NULL());
}

/* Our row gets res, in the open transaction; IB_E_LOCK_LOST when it is not ours. */
static ib_err_t finish_row(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                           const db_effect_result_t *res, ib_error_t *err)
{
    char sql[DB_SQL_MAX], cut[DETAIL_MAX + 1];
    long long n = 0;
    db_bind_t b[8];
    if (conn_sql(dbc, DB_ESQL_FINISH, 1, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    result_binds(res, detail_of(res, cut), b);
    b[5] = DB_B(DB_TEXT(consumer));
    b[6] = DB_B(DB_TEXT(row->message_id));
    b[7] = DB_B(DB_TEXT(row->token));
    if (db_run_kept(dbc, sql, b, 8, NULL, NULL, &n, err) != IB_E_OK)
        return err->code;
    if (n != 1)
        return ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                            "inbox claim was taken over by another worker");
    return IB_E_OK;
}

/* The finish of rows rows as one UPDATE joined to their values (PostgreSQL). */
static bool finish_rows_sql(const db_conn_t *dbc, size_t rows, char *buf, size_t size)
{
    size_t used;
    int w = snprintf(buf, size,
                     "UPDATE %s AS x SET status = v.s, remote_id = v.ri, remote_status = v.rs, "
                     "error_class = v.ec, error_detail = v.ed, processed_at = %s, lease_until = "
                     "NULL FROM (VALUES ",
                     dbc->table, db_sql_now(dbc->dialect));
    if (w < 0 || (size_t)w >= size)
        return false;
    used = (size_t)w;
    if (!db_sql_append_rows(buf, size, &used, "(?, ?, CAST(? AS integer), ?, ?, ?, ?)", rows))
        return false;
    w = snprintf(buf + used, size - used,
                 ") AS v (s, ri, rs, ec, ed, m, t) WHERE x.consumer = ? AND x.message_id = v.m "
                 "AND x.status = 'claimed' AND x.claim_token = v.t");
    return w >= 0 && (size_t)w < size - used;
}

/*
 * Items [0, n) finished by one statement of padded_rows(n) rows (a row
 * joined twice is updated once). IB_E_LOCK_LOST when fewer than n rows
 * were still ours.
 */
static ib_err_t finish_chunk(db_conn_t *dbc, const char *consumer,
                             const db_effect_finish_item_t *items, size_t n, ib_error_t *err)
{
    size_t rows = padded_rows(n), nlong = 0;
    for (size_t k = 0; k < n; k++)
        nlong += detail_long(items[k].res);
    size_t size = 1024 + rows * 64;
    char *sql = malloc(size);
    db_bind_t *b = calloc(rows * 7 + 1, sizeof *b);
    char(*cut)[DETAIL_MAX + 1] = nlong ? malloc(nlong * sizeof *cut) : NULL;
    long long updated = 0;
    ib_err_t rc = IB_E_OK;
    if (!sql || !b || (nlong && !cut) || !finish_rows_sql(dbc, rows, sql, size))
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "batch finish statement");
    for (size_t k = 0, c = 0; rc == IB_E_OK && k < rows; k++) {
        const db_effect_finish_item_t *it = &items[k < n ? k : 0];
        if (k < n) {
            char *buf = detail_long(it->res) ? cut[c++] : NULL; /* detail_of's room, if needed */
            result_binds(it->res, detail_of(it->res, buf), b + k * 7);
        } else
            memcpy(b + k * 7, b, 5 * sizeof *b); /* the first row's result again */
        b[k * 7 + 5] = DB_B(DB_TEXT(it->row->message_id));
        b[k * 7 + 6] = DB_B(DB_TEXT(it->row->token));
    }
    if (rc == IB_E_OK) {
        b[rows * 7] = DB_B(DB_TEXT(consumer));
        rc = db_run_kept(dbc, sql, b, rows * 7 + 1, NULL, NULL, &updated, err);
    }
    if (rc == IB_E_OK && updated != (long long)n)
        rc = ib_error_set(err, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                          "%zu of %zu inbox claims were taken over by another worker",
                          n - (size_t)updated, n);
    free(sql);
    free(b);
    free(cut);
    return rc;
}

/* Every item's row gets its result, in the open transaction. */
static ib_err_t finish_rows(db_conn_t *dbc, const char *consumer,
                            const db_effect_finish_item_t *items, size_t n, ib_error_t *err)
{
    ib_err_t rc = IB_E_OK;
    if (db_dialect_effect_rows(dbc->dialect) && n > 1) {
        for (size_t at = 0; rc == IB_E_OK && at < n; at += CLAIM_ROWS_MAX)
            rc = finish_chunk(dbc, consumer, items + at,
                              n - at < CLAIM_ROWS_MAX ? n - at : CLAIM_ROWS_MAX, err);
        return rc;
    }
    for (size_t i = 0; rc == IB_E_OK && i < n; i++)
        rc = finish_row(dbc, consumer, items[i].row, items[i].res, err);
    return rc;
}

/* Every item's route statements, those of one shape as parameter arrays. */
static ib_err_t finish_stmts(db_conn_t *dbc, const db_effect_finish_item_t *items, size_t n,
                             ib_error_t *err)
{
    if (n == 1)
        return run_route(dbc, items[0].stmts, items[0].nstmts, err);
    db_stmt_list_t *lists = calloc(n, sizeof *lists);
    if (!lists)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < n; i++)
        lists[i] = (db_stmt_list_t){items[i].stmts, items[i].nstmts};
    ib_err_t rc = db_batch_run_stmts(dbc, lists, n, err);
    free(lists);
    return rc;
}

/* After a failed finishing transaction: rolled back, err classified. */
static db_outcome_t finish_failed(db_conn_t *dbc, ib_error_t *err)
{
    db_rollback_quiet(dbc);
    if (err->code == IB_E_LOCK_LOST)
        return DB_FAILED;
    if (err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    if (err->code == IB_E_DB_CONN)
        err->cls = IB_CLASS_TRANSIENT;
    return DB_FAILED;
}

db_outcome_t db_effect_finish(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                              const db_effect_result_t *res, const db_stmt_t *stmts, size_t nstmts,
                              ib_error_t *err)
{
    db_effect_finish_item_t one = {row, res, stmts, nstmts};
    return db_effect_finish_batch(dbc, consumer, &one, 1, err);
}

db_outcome_t db_effect_finish_batch(db_conn_t *dbc, const char *consumer,
                                    const db_effect_finish_item_t *items, size_t n,
                                    ib_error_t *err)
{
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK) {
        err->cls = IB_CLASS_TRANSIENT;
        return DB_FAILED;
    }
    if (finish_rows(dbc, consumer, items, n, err) != IB_E_OK ||
        finish_stmts(dbc, items, n, err) != IB_E_OK)
        return finish_failed(dbc, err);
    if (db_end(dbc, true, err) != IB_E_OK)
        return finish_failed(dbc, err);
    return DB_APPLIED;
}

/* ---- operators ------------------------------------------------------------- */

typedef struct lister {
    db_effect_list_cb cb;
    void *arg;
    long limit, count;
    const db_conn_t *dbc;
} lister_t;

static bool list_row(SQLHSTMT st, void *arg)
{
    lister_t *l = arg;
    char c[13][2001];
    for (SQLUSMALLINT i = 0; i < 13; i++)
        get_text(l->dbc, st, i + 1, c[i], sizeof c[i]);
    db_effect_listed_t r = {c[0],       c[1],  c[2][0] ? c[2] : NULL,
                            c[3],       c[4],  c[5],
                            c[6],       c[9],  c[10],
                            c[11],      c[12], atol(c[7]),
                            atoll(c[8])};
    l->count++;
    if (!l->cb(&r, l->arg))
        return false;
    return l->limit <= 0 || l->count < l->limit;
}

long db_effect_list(db_conn_t *dbc, const char *status, const char *consumer, long limit,
                    db_effect_list_cb cb, void *arg, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    lister_t l = {cb, arg, limit, 0, dbc};
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return -1;
    /* lease_s carries "with a consumer filter" for this statement. */
    if (conn_sql(dbc, DB_ESQL_LIST, consumer ? 1 : 0, sql, sizeof sql, err) != IB_E_OK)
        return -1;
    db_bind_t b[2] = {DB_B(DB_TEXT(status)), DB_B(DB_TEXT(consumer ? consumer : ""))};
    ib_err_t rc = db_run(dbc, sql, b, consumer ? 2 : 1, list_row, &l, NULL, err);
    db_rollback_quiet(dbc);
    return rc == IB_E_OK ? l.count : -1;
}

ib_err_t db_effect_resolve(db_conn_t *dbc, const char *consumer, const char *message_id,
                           const char *as, const char *remote_id, const char *note, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    bool retry = strcmp(as, "retry") == 0;
    ib_error_clear(err);
    if (!retry && strcmp(as, "processed") != 0)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "--as must be processed or retry");
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    if (conn_sql(dbc, retry ? DB_ESQL_RESOLVE_RETRY : DB_ESQL_RESOLVE_PROCESSED, 1, sql,
                 sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t b[4];
    size_t nb = 0;
    if (!retry)
        b[nb++] = DB_B(remote_id ? DB_TEXT(remote_id) : DB_NULL());
    b[nb++] = DB_B(note ? DB_TEXT(note) : DB_NULL());
    b[nb++] = DB_B(DB_TEXT(consumer));
    b[nb++] = DB_B(DB_TEXT(message_id));
    if (db_run(dbc, sql, b, nb, NULL, NULL, &n, err) != IB_E_OK ||
        db_end(dbc, true, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return err->code;
    }
    /* A SQL route's failed row (no claim token) comes back with a replay instead. */
    if (n != 1)
        return ib_error_set(err, IB_E_NOTFOUND, IB_CLASS_PERMANENT,
                            "no uncertain or failed %sinbox row for consumer '%.64s' message "
                            "'%.64s'%s",
                            retry ? "HTTP-route " : "", consumer, message_id,
                            retry ? " (a SQL route's failed row is replayed with inboxctl dlq "
                                    "replay, not resolved as retry)"
                                  : "");
    return IB_E_OK;
}
