/*
 * db_effect_claim.c - the claim of the HTTP routes' protocol: a message's
 * inbox row made 'claimed' under a lease and a token of its own, alone
 * (db_effect_claim) or for a batch in one transaction
 * (db_effect_claim_batch). See db_effect.h.
 *
 * thread: the owner of dbc.
 */
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_effect_int.h"
#include "ib_enc.h"
#include "ib_time.h"

/* ---- the claim ------------------------------------------------------------- */

/* The random bytes of n claim tokens (16 each) into r, drawn at once. */
static void token_bytes(unsigned char *r, size_t n, const void *salt)
{
    if (RAND_bytes(r, (int)(16 * n)) == 1)
        return;
    /* Only an exhausted entropy source gets here; uniqueness still comes
     * from the clock, the address of salt and the token's place. */
    for (size_t i = 0; i < n; i++) {
        long long v = ib_now_ms() ^ (long long)(size_t)salt, w = v ^ (long long)i;
        memcpy(r + 16 * i, &v, sizeof v);
        memcpy(r + 16 * i + 8, &w, sizeof w);
    }
}

static void new_token(char out[33])
{
    unsigned char r[16];
    token_bytes(r, 1, out);
    ib_enc_hex(out, r, sizeof r);
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
    db_get_text_buf(f->dbc, st, 1, f->message_id, sizeof f->message_id);
    db_get_text_buf(f->dbc, st, 2, f->hash, sizeof f->hash);
    db_get_text_buf(f->dbc, st, 3, f->status, sizeof f->status);
    f->expired = get_int(st, 4) != 0;
    db_get_text_buf(f->dbc, st, 5, f->remote_id, sizeof f->remote_id);
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
static db_claim_outcome_t take(db_conn_t *dbc, const db_claim_t *c, db_effect_stmt_t which,
                               long lease_s, db_claim_row_t *row, db_claim_outcome_t won,
                               ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long n = 0;
    new_token(row->token);
    if (db_effect_conn_sql(dbc, which, lease_s, sql, sizeof sql, err) != IB_E_OK)
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

/* A time bound as milliseconds since the epoch; NULL for none, as DB_B_TS binds it. */
static db_bind_t ms_bind(long long ms)
{
    return DB_B(ms > 0 ? DB_INT(ms) : DB_NULL());
}

/*
 * A row's binds of the shared-value batch claim (db_sql_claim_shared), from
 * insert_binds': all but the consumer (0) and entity (4), the times as ms.
 */
static void lean_binds(const db_claim_t *c, const db_bind_t full[10], long long received,
                       db_bind_t b[DB_EFFECT_LEAN_ROW_PARAMS])
{
    db_bind_t v[DB_EFFECT_LEAN_ROW_PARAMS] = {full[1], full[2], full[3], full[5], full[6],
                                              ms_bind(c->enqueued_at_ms), ms_bind(received),
                                              full[9]};
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
    if (db_effect_sql_text(dbc->dialect, dbc->table, DB_ESQL_CLAIM_INSERT, lease_s, sql,
                           sizeof sql) != IB_E_OK) {
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
    if (db_effect_conn_sql(dbc, DB_ESQL_LOOKUP, lease_s, sql, sizeof sql, err) != IB_E_OK)
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

    if (db_effect_conn_sql(dbc, DB_ESQL_LOOKUP, it->lease_s, sql, sizeof sql, err) != IB_E_OK)
        return err->code;
    db_bind_t lb[DB_KEY_ARMS_NPARAMS];
    db_key_arm_binds(c, lb);
    if (db_run(dbc, sql, lb, DB_KEY_ARMS_NPARAMS, found_row, &f, NULL, err) != IB_E_OK)
        return err->code;
    if (f.any)
        return IB_E_OK; /* decided alone by db_effect_claim (duplicate, takeover, ...) */
    if (db_effect_conn_sql(dbc, DB_ESQL_CLAIM_INSERT, it->lease_s, sql, sizeof sql, err) != IB_E_OK)
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
    db_get_text_buf(ch->dbc, st, 1, mid, sizeof mid);
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
 * One claim statement for the n items of keys, db_effect_stmt_rows(n) rows
 * (where they are padded, a copy's key is taken by the row itself and
 * skipped).
 */
static ib_err_t claim_chunk(db_conn_t *dbc, db_effect_claim_item_t *items, const db_keyed_t *keys,
                            size_t n, long lease_s, ib_error_t *err)
{
    size_t rows = db_effect_stmt_rows(dbc, n);
    size_t size = 2048 + rows * 128;
    bool lean = db_sql_claim_shared(dbc->dialect);
    size_t head = lean ? 2 : 0, per = lean ? DB_EFFECT_LEAN_ROW_PARAMS : 10;
    char *sql = malloc(size);
    db_bind_t *b = calloc(head + rows * per, sizeof *b), full[10];
    chunk_t ch = {.dbc = dbc, .items = items, .keys = keys, .n = n};
    long long received, inserted = 0;
    ib_err_t rc;
    if (!sql || !b || !db_effect_claim_rows_sql(dbc, rows, lease_s, sql, size)) {
        free(sql);
        free(b);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "batch claim statement");
    }
    /* One draw for the chunk's tokens: OpenSSL's DRBG costs as much per
     * call as for 1 KiB. */
    unsigned char r[16 * DB_EFFECT_ROWS_MAX];
    token_bytes(r, n, r);
    for (size_t k = 0; k < rows; k++) {
        db_effect_claim_item_t *it = &items[keys[k < n ? k : 0].i];
        if (k < n) {
            memset(&it->row, 0, sizeof it->row);
            ib_enc_hex(it->row.token, r + 16 * k, 16);
        }
        insert_binds(it->claim, it->row.token, &received, lean ? full : b + k * per);
        if (lean)
            lean_binds(it->claim, full, received, b + head + k * per);
        if (lean && k == 0) { /* the chunk's consumer and entity (claim_rows) */
            b[0] = full[0];
            b[1] = full[4];
        }
    }
    rc = db_run_kept(dbc, sql, b, head + rows * per, chunk_row, &ch, &inserted, err);
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
 * Claims the batchable items of one lease, consumer and entity (the
 * first's: the others are claimed alone) in key order (consumer,
 * message_id): two replicas claiming overlapping batches then lock the
 * keys they share in one order, and one waits for the other.
 */
static ib_err_t claim_rows(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n, ib_error_t *err)
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
        const db_claim_t *c = items[i].claim, *c0 = m ? keys[0].c : c;
        picked[i] = batchable(items, i, picked) && (!lease_s || items[i].lease_s == lease_s) &&
                    db_same_text(c->consumer, c0->consumer) && db_same_text(c->entity, c0->entity);
        if (!picked[i])
            continue;
        lease_s = items[i].lease_s;
        keys[m++] = (db_keyed_t){c, i};
    }
    qsort(keys, m, sizeof *keys, db_key_order);
    for (size_t at = 0; rc == IB_E_OK && at < m; at += DB_EFFECT_ROWS_MAX)
        rc = claim_chunk(dbc, items, keys + at,
                         m - at < DB_EFFECT_ROWS_MAX ? m - at : DB_EFFECT_ROWS_MAX, lease_s, err);
    free(keys);
    free(picked);
    return rc;
}

/* Each batchable item's lookup and insert in the open transaction (MariaDB). */
static ib_err_t claim_each(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n, ib_error_t *err)
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
