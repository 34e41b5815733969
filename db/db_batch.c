/*
 * db_batch.c - several messages in one inbox transaction.
 *
 *   claim: one statement inserts every inbox row of the batch and skips the
 *          keys already taken (db_sql_claim); the rows it returns are this
 *          batch's, the others are duplicates or conflicts by body hash
 *   route: each route statement once for all its messages, as a parameter
 *          array (one round trip where the driver allows it)
 *   COMMIT
 *
 * Any failure on the way rolls the transaction back and applies the
 * messages one transaction each with db_inbox_apply, so every message gets
 * exactly the outcome it would get alone and a bad one never poisons its
 * neighbours. No savepoints are involved.
 *
 * thread: the owner of dbc (a db worker).
 */
#include "db_conn_int.h"

#include <stdlib.h>
#include <string.h>

typedef enum {
    ITEM_DECIDED = 0, /* outcome final before the transaction (invalid claim) */
    ITEM_CLAIM,       /* goes into the claim statement */
    ITEM_LOOKUP,      /* key taken (or repeated in this batch): decide by body hash */
    ITEM_CLAIMED,     /* inbox row inserted by this batch: run its route statements */
    ITEM_SETTLED,     /* duplicate or conflict, decided in the transaction */
    ITEM_ALONE,       /* a replay (it may take over a 'failed' row): alone, after the batch */
} item_state_t;

typedef struct batch {
    db_conn_t *dbc;
    db_batch_item_t *items;
    item_state_t *st;
    size_t n;
    size_t *chunk; /* indexes of the items of the current claim statement */
    size_t nchunk, next;
    size_t unmatched; /* returned rows that matched no item of the chunk */
    const char *const *keys; /* an order key per item (NULL: none), or NULL */
} batch_t;

/* True when items a and b compete for one inbox key. */
static bool same_key(const db_claim_t *a, const db_claim_t *b)
{
    if (!db_same_text(a->consumer, b->consumer))
        return false;
    return db_same_text(a->message_id, b->message_id) ||
           (a->idempotency_key && b->idempotency_key &&
            strcmp(a->idempotency_key, b->idempotency_key) == 0);
}

/* A row returned by the claim: the item whose (consumer, message_id) it is is claimed. */
static bool claimed_row(SQLHSTMT st, void *arg)
{
    batch_t *b = arg;
    char consumer[1024], message_id[1024];

    if (!db_get_text_buf(b->dbc, st, 1, consumer, sizeof(consumer)) ||
        !db_get_text_buf(b->dbc, st, 2, message_id, sizeof(message_id)) || !*message_id) {
        b->unmatched++;
        return true;
    }
    /* Rows usually come back in VALUES order: try the next one first. */
    for (size_t k = 0; k < b->nchunk; k++) {
        size_t pos = (b->next + k) % b->nchunk;
        const db_claim_t *c = b->items[b->chunk[pos]].claim;
        if (b->st[b->chunk[pos]] == ITEM_CLAIM && strcmp(c->message_id, message_id) == 0 &&
            strcmp(c->consumer, consumer) == 0) {
            b->st[b->chunk[pos]] = ITEM_CLAIMED;
            b->next = pos + 1;
            return true;
        }
    }
    b->unmatched++;
    return true;
}

/*
 * The parameters of the claim of the chunk's items into binds (room for
 * DB_CLAIM_NPARAMS each); returns their number, 0 with err set when the
 * dialect shares columns the items do not share (they then go alone).
 */
static size_t claim_binds(batch_t *b, db_bind_t *binds, ib_error_t *err)
{
    /* Of db_claim_binds' DB_CLAIM_NPARAMS: the shared columns, then a row's. */
    static const size_t shared[DB_CLAIM_SHARED] = {0, 4, 5, 10, 11};
    static const size_t row[DB_CLAIM_ROW_PARAMS] = {1, 2, 3, 6, 7, 8, 9};
    db_bind_t one[DB_CLAIM_NPARAMS];
    const db_claim_t *first = b->items[b->chunk[0]].claim;
    size_t n = 0;

    if (!db_sql_claim_shared(b->dbc->dialect)) {
        for (size_t k = 0; k < b->nchunk; k++)
            db_claim_binds(b->items[b->chunk[k]].claim, "processed", NULL, NULL,
                           binds + k * DB_CLAIM_NPARAMS);
        return b->nchunk * DB_CLAIM_NPARAMS;
    }
    for (size_t k = 0; k < b->nchunk; k++) {
        const db_claim_t *c = b->items[b->chunk[k]].claim;
        if (!db_same_text(c->consumer, first->consumer) ||
            !db_same_text(c->entity, first->entity)) {
            ib_error_set(err, IB_E_INVAL, IB_CLASS_TRANSIENT,
                         "inbox claim: a batch of several consumers or entities");
            return 0;
        }
        db_claim_binds(c, "processed", NULL, NULL, one);
        for (size_t q = 0; k == 0 && q < DB_CLAIM_SHARED; q++)
            binds[n++] = one[shared[q]];
        for (size_t q = 0; q < DB_CLAIM_ROW_PARAMS; q++)
            binds[n++] = one[row[q]];
    }
    return n;
}

/* Runs one claim statement for the b->nchunk items in b->chunk. */
static ib_err_t claim_chunk(batch_t *b, ib_error_t *err)
{
    db_conn_t *dbc = b->dbc;
    size_t rows = b->nchunk, matched = 0, nbinds;
    long long inserted = 0;
    db_bind_t *binds;
    ib_err_t rc;

    if (dbc->sql_claim_rows != rows) {
        size_t size = 1024 + rows * 128;
        char *sql = malloc(size);
        if (!sql)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        if (db_sql_claim(dbc->dialect, dbc->table, rows, sql, size) != IB_E_OK) {
            free(sql);
            return ib_error_set(err, IB_E_INVAL, IB_CLASS_TRANSIENT, "claim statement");
        }
        free(dbc->sql_claim);
        dbc->sql_claim = sql;
        dbc->sql_claim_rows = rows;
    }
    binds = calloc(rows * DB_CLAIM_NPARAMS, sizeof(*binds));
    if (!binds)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    nbinds = claim_binds(b, binds, err);
    b->next = 0;
    b->unmatched = 0;
    long long t0 = db_phase_now(dbc);
    rc = nbinds ? db_run_kept(dbc, dbc->sql_claim, binds, nbinds, claimed_row, b, &inserted, err)
                : err->code;
    db_phase_report(dbc, DB_PHASE_CLAIM, DB_PHASE_BATCH, 0, rows, t0, rc ? err : NULL);
    free(binds);
    if (rc != IB_E_OK) {
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        ib_error_prefix(err, "inbox claim");
        return rc;
    }
    /*
     * A row this batch inserted but could not match would later read as its
     * own duplicate and skip its route: never decide from a claim like that.
     */
    for (size_t k = 0; k < rows; k++)
        matched += b->st[b->chunk[k]] == ITEM_CLAIMED;
    if (b->unmatched || (inserted > 0 && (size_t)inserted > matched))
        return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                            "inbox claim inserted %lld rows but returned %zu of them", inserted,
                            matched);
    for (size_t k = 0; k < rows; k++)
        if (b->st[b->chunk[k]] == ITEM_CLAIM)
            b->st[b->chunk[k]] = ITEM_LOOKUP;
    return IB_E_OK;
}

int db_key_order(const void *pa, const void *pb)
{
    const db_keyed_t *a = pa, *b = pb;
    int r = strcmp(a->c->consumer, b->c->consumer);
    if (r == 0)
        r = strcmp(a->c->message_id, b->c->message_id);
    return r ? r : a->i < b->i ? -1 : a->i > b->i;
}

/*
 * Claims every ITEM_CLAIM item, at most db_sql_claim_rows_max rows per
 * statement, in key order (consumer, message_id, byte for byte as the
 * binary key collation orders them): two replicas claiming overlapping
 * batches then lock the keys they share in one order, and one waits for
 * the other instead of deadlocking. Routes still run in arrival order.
 */
static ib_err_t claim_all(batch_t *b, ib_error_t *err)
{
    size_t max = db_sql_claim_rows_max(b->dbc->dialect), n = 0;
    db_keyed_t *order = calloc(b->n ? b->n : 1, sizeof(*order));

    if (!order)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < b->n; i++)
        if (b->st[i] == ITEM_CLAIM)
            order[n++] = (db_keyed_t){b->items[i].claim, i};
    qsort(order, n, sizeof(*order), db_key_order);
    b->nchunk = 0;
    for (size_t k = 0; k < n; k++) {
        b->chunk[b->nchunk++] = order[k].i;
        if (b->nchunk == max || k + 1 == n) {
            if (claim_chunk(b, err) != IB_E_OK) {
                free(order);
                return err->code;
            }
            b->nchunk = 0;
        }
    }
    free(order);
    return IB_E_OK;
}

/* Duplicates and conflicts: read the row holding the key, in the transaction. */
static ib_err_t decide_lookups(batch_t *b, ib_error_t *err)
{
    for (size_t i = 0; i < b->n; i++) {
        db_batch_item_t *it = &b->items[i];
        int same = 0, other = 0;

        if (b->st[i] != ITEM_LOOKUP)
            continue;
        if (db_existing_lookup(b->dbc, it->claim, &same, &other, err) != IB_E_OK)
            return err->code;
        if (other > 0) {
            it->outcome = DB_CONFLICT;
            db_conflict_error(it->claim, &it->err);
        } else if (same > 0) {
            it->outcome = DB_DUPLICATE;
        } else {
            /* Skipped, yet no row: taken and released again. Alone, it would be retried. */
            return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                                "inbox key was contended and released again");
        }
        b->st[i] = ITEM_SETTLED;
    }
    return IB_E_OK;
}

/*
 * True when list j runs the same statements as the group of list first,
 * whose column types are sig (NULL where only NULLs were seen so far);
 * merges j's types in.
 */
static bool route_fits(const db_stmt_list_t *first, const db_stmt_list_t *j, db_param_type_t *sig)
{
    size_t at = 0;

    if (j->nstmts != first->nstmts)
        return false;
    for (size_t k = 0; k < j->nstmts; k++) {
        const db_stmt_t *a = &first->stmts[k], *s = &j->stmts[k];
        if (!db_same_text(a->sql, s->sql) || a->nparams != s->nparams)
            return false;
        for (size_t q = 0; q < s->nparams; q++) {
            db_param_type_t t = s->params[q].type;
            if (t != DB_PARAM_NULL && sig[at + q] != DB_PARAM_NULL && sig[at + q] != t)
                return false;
        }
        at += s->nparams;
    }
    at = 0;
    for (size_t k = 0; k < j->nstmts; k++) {
        for (size_t q = 0; q < j->stmts[k].nparams; q++)
            if (j->stmts[k].params[q].type != DB_PARAM_NULL)
                sig[at + q] = j->stmts[k].params[q].type;
        at += j->stmts[k].nparams;
    }
    return true;
}

/* Runs statement k of the group's members as one parameter array. */
static ib_err_t run_group_stmt(db_conn_t *dbc, const db_stmt_list_t *lists, const size_t *members,
                               size_t m, size_t k, ib_error_t *err)
{
    const db_stmt_t *s = &lists[members[0]].stmts[k];
    const db_param_t **sets = calloc(m, sizeof(*sets));
    ib_err_t rc;

    if (!sets)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; i < m; i++)
        sets[i] = lists[members[i]].stmts[k].params;
    if (!s->sql || (s->nparams && !s->params))
        rc = ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "statement %zu: no SQL or params",
                          k + 1);
    else {
        long long t0 = db_phase_now(dbc);
        rc = db_run_array(dbc, s->sql, sets, m, s->nparams, err);
        db_phase_report(dbc, DB_PHASE_STMT, DB_PHASE_BATCH, k, m, t0, rc ? err : NULL);
    }
    free(sets);
    if (rc != IB_E_OK) {
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        ib_error_prefix(err, "statement %zu", k + 1);
    }
    return rc;
}

/* True when key is one of the n in keys (NULL is never). */
static bool key_in(const char *const *keys, size_t n, const char *key)
{
    for (size_t i = 0; key && i < n; i++)
        if (strcmp(keys[i], key) == 0)
            return true;
    return false;
}

/*
 * The members of the group of list i (not yet done), in order. With keys
 * (an order key per list, NULL for none), a list never joins a group ahead
 * of an earlier list of its key left out of it, and a route of several
 * statements takes one list per key, so the statements of one key's
 * messages run exactly in their order. Returns how many; 0 out of memory.
 */
static size_t group_of(const db_stmt_list_t *lists, const char *const *keys, size_t n, size_t i,
                       bool *done, db_param_type_t *sig, size_t *members)
{
    const db_stmt_list_t *first = &lists[i];
    const char **in = keys ? calloc(n, sizeof(*in)) : NULL;
    const char **left = keys ? calloc(n, sizeof(*left)) : NULL;
    size_t m = 0, nin = 0, nleft = 0;
    if (keys && (!in || !left)) {
        free(in);
        free(left);
        return 0;
    }
    for (size_t j = i; j < n; j++) {
        const char *key = keys ? keys[j] : NULL;
        if (done[j])
            continue;
        bool ok = !key_in(left, nleft, key) && !(first->nstmts > 1 && key_in(in, nin, key)) &&
                  route_fits(first, &lists[j], sig);
        if (ok) {
            members[m++] = j;
            done[j] = true;
            if (key)
                in[nin++] = key;
        } else if (key) {
            left[nleft++] = key;
        }
    }
    free(in);
    free(left);
    return m;
}

/* db_batch_run_stmts, with an order key per list (keys may be NULL). */
static ib_err_t run_stmts_keyed(db_conn_t *dbc, const db_stmt_list_t *lists,
                                const char *const *keys, size_t n, ib_error_t *err)
{
    bool *done = calloc(n ? n : 1, sizeof(*done));
    size_t *members = calloc(n ? n : 1, sizeof(*members));
    db_param_type_t *sig = NULL;
    ib_err_t rc = IB_E_OK;

    if (!done || !members)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (size_t i = 0; rc == IB_E_OK && i < n; i++) {
        const db_stmt_list_t *first = &lists[i];
        size_t m, total = 0;

        if (done[i] || first->nstmts == 0)
            continue;
        for (size_t k = 0; k < first->nstmts; k++)
            total += first->stmts[k].nparams;
        free(sig);
        sig = calloc(total + 1, sizeof(*sig)); /* DB_PARAM_NULL is 0 */
        if (!sig || (m = group_of(lists, keys, n, i, done, sig, members)) == 0) {
            rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            break;
        }
        for (size_t k = 0; rc == IB_E_OK && k < first->nstmts; k++)
            rc = run_group_stmt(dbc, lists, members, m, k, err);
    }
    free(sig);
    free(done);
    free(members);
    return rc;
}

ib_err_t db_batch_run_stmts(db_conn_t *dbc, const db_stmt_list_t *lists, size_t n,
                            ib_error_t *err)
{
    return run_stmts_keyed(dbc, lists, NULL, n, err);
}

/* The route statements of every claimed item, grouped by route into parameter arrays. */
static ib_err_t run_routes(batch_t *b, ib_error_t *err)
{
    db_stmt_list_t *lists = calloc(b->n, sizeof(*lists));
    const char **keys = b->keys ? calloc(b->n, sizeof(*keys)) : NULL;
    size_t m = 0;

    if (!lists || (b->keys && !keys)) {
        free(lists);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    for (size_t i = 0; i < b->n; i++)
        if (b->st[i] == ITEM_CLAIMED) {
            if (keys)
                keys[m] = b->keys[i];
            lists[m++] = (db_stmt_list_t){b->items[i].stmts, b->items[i].nstmts};
        }
    ib_err_t rc = run_stmts_keyed(b->dbc, lists, keys, m, err);
    free(lists);
    free(keys);
    return rc;
}

/* True when items a and b carry the same order key. */
static bool same_order(const batch_t *b, size_t i, size_t j)
{
    return b->keys && b->keys[i] && b->keys[j] && strcmp(b->keys[i], b->keys[j]) == 0;
}

/*
 * A key conflict (its message dead-lettered) ahead of a claimed item of its
 * order key: the later one must not commit ahead of it. The batch falls
 * back, where held_back keeps it out.
 */
static ib_err_t conflict_ahead(batch_t *b, ib_error_t *err)
{
    for (size_t i = 0; b->keys && i < b->n; i++)
        for (size_t j = 0; j < i && b->st[i] == ITEM_CLAIMED; j++)
            if (b->items[j].outcome == DB_CONFLICT && b->st[j] == ITEM_SETTLED &&
                same_order(b, i, j))
                return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                                    "a key conflict ahead of a later message of its order key");
    return IB_E_OK;
}

/*
 * Whether item i waits: an earlier item of its order key ended other than
 * applied or duplicate (failed, conflict, held). Then i is not run: its
 * outcome is DB_FAILED with IB_E_AGAIN (transient), and it is for the
 * caller to run it again after the earlier one, or to hand it back.
 */
static bool held_back(batch_t *b, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (same_order(b, i, j) && b->items[j].outcome != DB_APPLIED &&
            b->items[j].outcome != DB_DUPLICATE) {
            b->items[i].outcome = DB_FAILED;
            ib_error_set(&b->items[i].err, IB_E_AGAIN, IB_CLASS_TRANSIENT,
                         "held: an earlier message of its order key did not apply");
            return true;
        }
    return false;
}

/* The batch transaction; IB_E_OK when committed. */
static ib_err_t run_batch(batch_t *b, ib_error_t *err)
{
    db_conn_t *dbc = b->dbc;

    if (db_sql_claim_rows_max(dbc->dialect) == 0)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_TRANSIENT,
                            "no claim statement for this dialect");
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    /*
     * A key repeated inside the batch is left out of the claim and decided
     * by the row its first holder leaves, as if they ran one after another.
     */
    for (size_t i = 0; i < b->n; i++)
        for (size_t j = 0; j < i && b->st[i] == ITEM_CLAIM; j++)
            if (b->st[j] == ITEM_CLAIM && same_key(b->items[i].claim, b->items[j].claim))
                b->st[i] = ITEM_LOOKUP;
    if (claim_all(b, err) != IB_E_OK || decide_lookups(b, err) != IB_E_OK ||
        conflict_ahead(b, err) != IB_E_OK || run_routes(b, err) != IB_E_OK)
        return err->code;
    long long t0 = db_phase_now(dbc);
    ib_err_t rc = db_end(dbc, true, err);
    db_phase_report(dbc, DB_PHASE_COMMIT, DB_PHASE_BATCH, 0, b->n, t0, rc ? err : NULL);
    if (rc != IB_E_OK) {
        ib_error_prefix(err, "commit");
        return err->code;
    }
    return IB_E_OK;
}

/* After a rolled-back batch: each undecided item in a transaction of its own. */
static void apply_alone(batch_t *b)
{
    const ib_error_t *down = NULL;

    for (size_t i = 0; i < b->n; i++) {
        db_batch_item_t *it = &b->items[i];
        if (b->st[i] == ITEM_DECIDED || held_back(b, i))
            continue;
        if (down) {
            /* The database could not be reopened just now: the same for the rest. */
            it->outcome = DB_FAILED;
            it->err = *down;
            continue;
        }
        b->dbc->phase_item = i;
        it->outcome = db_inbox_apply(b->dbc, it->claim, it->stmts, it->nstmts, &it->err);
        b->dbc->phase_item = 0;
        if (it->outcome == DB_FAILED && it->err.code == IB_E_DB_CONN && !b->dbc->connected)
            down = &it->err;
    }
}

size_t db_inbox_apply_batch(db_conn_t *dbc, db_batch_item_t *items, size_t n, ib_error_t *fallback)
{
    return db_inbox_apply_batch_ordered(dbc, items, NULL, n, fallback);
}

size_t db_inbox_apply_batch_ordered(db_conn_t *dbc, db_batch_item_t *items,
                                    const char *const *keys, size_t n, ib_error_t *fallback)
{
    batch_t b = {dbc, items, NULL, n, NULL, 0, 0, 0, keys};
    ib_error_t err;
    size_t applied = 0, todo = 0;

    if (fallback)
        ib_error_clear(fallback);
    if (!items || n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        ib_error_clear(&items[i].err);
    if (n == 1) {
        items[0].outcome =
            db_inbox_apply(dbc, items[0].claim, items[0].stmts, items[0].nstmts, &items[0].err);
        return items[0].outcome == DB_APPLIED;
    }
    b.st = calloc(n, sizeof(*b.st));
    b.chunk = calloc(n, sizeof(*b.chunk));
    for (size_t i = 0; i < n; i++) {
        items[i].outcome = DB_FAILED;
        if (!b.st || !b.chunk) {
            ib_error_set(&items[i].err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        } else if (db_claim_check(items[i].claim, &items[i].err) != IB_E_OK) {
            b.st[i] = ITEM_DECIDED;
        } else if (items[i].nstmts && !items[i].stmts) {
            ib_error_set(&items[i].err, IB_E_INVAL, IB_CLASS_PERMANENT,
                         "inbox apply: no statements");
            b.st[i] = ITEM_DECIDED;
        } else {
            b.st[i] = items[i].claim->replay ? ITEM_ALONE : ITEM_CLAIM;
            todo++;
        }
        /* After a replay of its order key, an item goes alone too, in order;
         * after an invalid one it waits. */
        for (size_t j = 0; b.st && j < i && b.st[i] != ITEM_DECIDED; j++) {
            if (!same_order(&b, i, j))
                continue;
            if (b.st[j] == ITEM_ALONE)
                b.st[i] = ITEM_ALONE;
            if (b.st[j] == ITEM_DECIDED && held_back(&b, i)) {
                b.st[i] = ITEM_DECIDED;
                todo--;
            }
        }
    }
    if (!b.st || !b.chunk) {
        free(b.st);
        free(b.chunk);
        return 0;
    }
    if (todo && db_conn_ensure(dbc, &err) != IB_E_OK) {
        /* Not reaching the database is never a message's fault (as in db_inbox_apply). */
        err.cls = IB_CLASS_TRANSIENT;
        for (size_t i = 0; i < n; i++)
            if (b.st[i] != ITEM_DECIDED)
                items[i].err = err;
    } else if (todo && run_batch(&b, &err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        if (fallback)
            *fallback = err;
        apply_alone(&b);
    } else {
        for (size_t i = 0; i < n; i++)
            if (b.st[i] == ITEM_CLAIMED) {
                items[i].outcome = DB_APPLIED;
                ib_error_clear(&items[i].err);
            } else if (b.st[i] == ITEM_ALONE && !held_back(&b, i)) {
                dbc->phase_item = i;
                items[i].outcome = db_inbox_apply(dbc, items[i].claim, items[i].stmts,
                                                  items[i].nstmts, &items[i].err);
                dbc->phase_item = 0;
            }
    }
    for (size_t i = 0; i < n; i++)
        applied += items[i].outcome == DB_APPLIED;
    free(b.st);
    free(b.chunk);
    return applied;
}
