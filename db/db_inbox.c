/*
 * db_inbox.c - the inbox transaction, the failure record, and the
 * duplicate / conflict decision after a unique violation.
 */
#include "db_conn_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "ib_enc.h"
#include "ib_log.h"

const char *db_outcome_name(db_outcome_t o)
{
    switch (o) {
    case DB_APPLIED:
        return "applied";
    case DB_DUPLICATE:
        return "duplicate";
    case DB_CONFLICT:
        return "conflict";
    default:
        return "failed";
    }
}

static const char *const row_status_names[] = {"processed", "failed", "uncertain", "claimed",
                                               "retry"};

const char *db_row_status_name(db_row_status_t s)
{
    return (unsigned)s < DB_ROW_UNKNOWN ? row_status_names[s] : "unknown";
}

db_row_status_t db_row_status_parse(const char *text)
{
    for (unsigned i = 0; text && i < DB_ROW_UNKNOWN; i++)
        if (strcmp(text, row_status_names[i]) == 0)
            return (db_row_status_t)i;
    return DB_ROW_UNKNOWN;
}

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

/* Fetched once: EVP_sha256() makes every digest look the algorithm up again. */
static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void db_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;

    pthread_once(&sha256_once, sha256_fetch);
    if (!EVP_Digest(data ? data : "", data ? len : 0, md, &mdlen,
                    sha256_md ? sha256_md : EVP_sha256(), NULL) ||
        mdlen != 32) {
        /* Only an allocation failure inside OpenSSL gets here. */
        memset(hex, '0', 64);
        hex[64] = '\0';
        return;
    }
    ib_enc_hex(hex, md, 32);
}

static bool is_hex64(const char *s)
{
    unsigned char md[32];
    return s && strlen(s) == 64 && ib_dec_hex(md, s, 32, IB_HEX_LOWER);
}

ib_err_t db_claim_check(const db_claim_t *c, ib_error_t *err)
{
    const char *why = NULL;

    if (!c)
        why = "no claim";
    else if (!c->consumer || !*c->consumer || strlen(c->consumer) > DB_CONSUMER_MAX)
        why = "consumer is empty or longer than " DB_WIDTH(DB_CONSUMER_MAX) " bytes";
    else if (!c->message_id || !*c->message_id || strlen(c->message_id) > DB_MESSAGE_ID_MAX)
        why = "message_id is empty or longer than " DB_WIDTH(DB_MESSAGE_ID_MAX) " bytes";
    else if (c->idempotency_key &&
             (!*c->idempotency_key || strlen(c->idempotency_key) > DB_IDEM_KEY_MAX))
        why = "idempotency_key is empty or longer than " DB_WIDTH(DB_IDEM_KEY_MAX) " bytes";
    else if (!is_hex64(c->body_sha256))
        why = "body_sha256 is not 64 lowercase hex characters";
    else if (c->entity && strlen(c->entity) > DB_ENTITY_MAX)
        why = "entity is longer than " DB_WIDTH(DB_ENTITY_MAX) " bytes";
    if (why)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "inbox claim: %s", why);
    return IB_E_OK;
}

void db_claim_binds(const db_claim_t *c, const char *status, const char *error_class,
                    const char *detail, db_bind_t *b)
{
    long long received = c->received_at_ms > 0 ? c->received_at_ms : ib_now_ms();

    b[0] = DB_B(DB_TEXT(c->consumer));
    b[1] = DB_B(DB_TEXT(c->message_id));
    b[2] = DB_B(c->idempotency_key ? DB_TEXT(c->idempotency_key) : DB_NULL());
    b[3] = DB_B(DB_TEXT(c->body_sha256));
    b[4] = DB_B(DB_TEXT(status));
    b[5] = DB_B(c->entity ? DB_TEXT(c->entity) : DB_NULL());
    b[6] = DB_B(DB_INT(c->sequence_number));
    b[7] = DB_B(DB_INT(c->delivery_count));
    b[8] = DB_B_TS(c->enqueued_at_ms);
    b[9] = DB_B_TS(received);
    b[10] = DB_B(error_class ? DB_TEXT(error_class) : DB_NULL());
    b[11] = DB_B(detail ? DB_TEXT(detail) : DB_NULL());
}

/* Runs the inbox INSERT for claim with the given status and error columns. */
static ib_err_t insert_row(db_conn_t *dbc, const db_claim_t *c, const char *status,
                           const char *error_class, const char *detail, ib_error_t *err)
{
    db_bind_t b[DB_CLAIM_NPARAMS];

    db_claim_binds(c, status, error_class, detail, b);
    return db_run_kept(dbc, dbc->sql_insert, b, DB_CLAIM_NPARAMS, NULL, NULL, NULL, err);
}

/*
 * A setup error (missing table, privilege, read-only, full) in one of the
 * inbox's own statements is never the message's fault: it stays transient
 * whatever the error table says, so no message is dead-lettered for it.
 */
static void inbox_setup_transient(ib_error_t *err)
{
    if (err->code == IB_E_DB_SETUP)
        err->cls = IB_CLASS_TRANSIENT;
}

typedef struct existing {
    const char *want_hash;
    int rows;
    int same;
    int other;
    const db_conn_t *dbc;
} existing_t;

static bool existing_row(SQLHSTMT st, void *arg)
{
    existing_t *ex = arg;
    char hash[80] = "";

    ex->rows++;
    if (db_get_text_buf(ex->dbc, st, 1, hash, sizeof(hash)) && strncmp(hash, ex->want_hash, 64) == 0)
        ex->same++;
    else
        ex->other++;
    return true;
}

void db_key_arm_binds(const db_claim_t *c, db_bind_t *b)
{
    b[0] = DB_B(DB_TEXT(c->consumer));
    b[1] = DB_B(DB_TEXT(c->message_id));
    b[2] = DB_B(DB_TEXT(c->consumer));
    b[3] = DB_B(c->idempotency_key ? DB_TEXT(c->idempotency_key) : DB_NULL());
    b[4] = DB_B(DB_TEXT(c->message_id));
}

void db_conflict_error(const db_claim_t *c, ib_error_t *err)
{
    ib_error_set(err, IB_E_CONFLICT, IB_CLASS_PERMANENT,
                 "inbox key of consumer '%.64s' message '%.64s' holds a different body hash",
                 c->consumer, c->message_id);
}

ib_err_t db_existing_lookup(db_conn_t *dbc, const db_claim_t *c, int *same, int *other,
                            ib_error_t *err)
{
    existing_t ex = {c->body_sha256, 0, 0, 0, dbc};
    db_bind_t b[DB_KEY_ARMS_NPARAMS];
    db_key_arm_binds(c, b);
    ib_err_t rc = db_run(dbc, dbc->sql_existing, b, DB_KEY_ARMS_NPARAMS, existing_row, &ex, NULL,
                         err);

    if (rc != IB_E_OK) {
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        inbox_setup_transient(err);
        ib_error_prefix(err, "inbox lookup in %s", dbc->table);
    }
    *same = ex.same;
    *other = ex.other;
    return rc;
}

/*
 * After a unique violation on the inbox insert (already rolled back): read
 * the rows holding either key and decide duplicate or conflict. A key that
 * is gone again (the other copy rolled back between our insert and this
 * read) is a transient failure: the retry will insert it.
 */
static db_outcome_t decide_existing(db_conn_t *dbc, const db_claim_t *c, const ib_error_t *viol,
                                    ib_error_t *err)
{
    int same = 0, other = 0;

    if (db_existing_lookup(dbc, c, &same, &other, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return DB_FAILED;
    }
    db_rollback_quiet(dbc);
    if (other > 0) {
        db_conflict_error(c, err);
        return DB_CONFLICT;
    }
    if (same > 0) {
        ib_error_clear(err);
        return DB_DUPLICATE;
    }
    /*
     * SQLite reports every constraint as 19; with no row on either key the
     * violation was not the inbox key (a NOT NULL or CHECK on a column).
     */
    if (db_dialect_traits(dbc->dialect)->unique_code_shared && viol) {
        *err = *viol;
        err->cls = IB_CLASS_PERMANENT;
        return DB_FAILED;
    }
    ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                 "inbox key was contended and released again; retry");
    if (viol) {
        ib_strlcpy(err->sqlstate, viol->sqlstate, sizeof(err->sqlstate));
        err->native = viol->native;
    }
    return DB_FAILED;
}

/* The inbox insert failed: duplicate / conflict, or a plain failure. */
static db_outcome_t insert_failed(db_conn_t *dbc, const db_claim_t *c, ib_error_t *err)
{
    ib_error_t viol = *err;

    db_rollback_quiet(dbc);
    if (err->code != IB_E_DB_CONN &&
        db_dialect_is_unique_violation(dbc->dialect, err->sqlstate, err->native))
        return decide_existing(dbc, c, &viol, err);
    if (err->cls == IB_CLASS_DUPLICATE)
        err->cls = IB_CLASS_PERMANENT;
    inbox_setup_transient(err);
    ib_error_prefix(err, "inbox insert into %s", dbc->table);
    return DB_FAILED;
}

static db_outcome_t commit_or_fail(db_conn_t *dbc, ib_error_t *err);
static ib_err_t run_stmts(db_conn_t *dbc, const db_stmt_t *stmts, size_t nstmts, ib_error_t *err);

/* The takeover UPDATE on the row of c's message id, or of its key when by_key. */
static ib_err_t take_over_by(db_conn_t *dbc, const db_claim_t *c, bool by_key, long long *rows,
                             ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    db_bind_t b[5] = {DB_B(DB_INT(c->sequence_number)), DB_B(DB_INT(c->delivery_count)),
                      DB_B(DB_TEXT(c->consumer)),
                      DB_B(DB_TEXT(by_key ? c->idempotency_key : c->message_id)),
                      DB_B(DB_TEXT(c->body_sha256))};
    if (db_sql_takeover(dbc->dialect, dbc->table, by_key, sql, sizeof(sql)) != IB_E_OK)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "takeover statement does not fit");
    return db_run(dbc, sql, b, 5, NULL, NULL, rows, err);
}

/*
 * A replay met an existing row: take it over when it is 'failed' or
 * 'retry' with the same body (one conditional UPDATE, which the row lock
 * serialises), then run the statements in that transaction. Anything else
 * is decided as for a plain redelivery.
 */
static db_outcome_t take_over(db_conn_t *dbc, const db_claim_t *c, const db_stmt_t *stmts,
                              size_t nstmts, ib_error_t *err)
{
    long long rows = 0;
    ib_error_t viol = *err;

    db_rollback_quiet(dbc);
    for (int by_key = 0; by_key < 2 && rows == 0; by_key++) {
        if (by_key && !c->idempotency_key)
            break;
        if (take_over_by(dbc, c, by_key, &rows, err) != IB_E_OK) {
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            ib_error_prefix(err, "replay takeover");
            db_rollback_quiet(dbc);
            return DB_FAILED;
        }
    }
    if (rows != 1) {
        *err = viol;
        return insert_failed(dbc, c, err);
    }
    if (run_stmts(dbc, stmts, nstmts, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return DB_FAILED;
    }
    return commit_or_fail(dbc, err);
}

static db_outcome_t commit_or_fail(db_conn_t *dbc, ib_error_t *err)
{
    long long t0 = db_phase_now(dbc);
    ib_err_t rc = db_end(dbc, true, err);
    db_phase_report(dbc, DB_PHASE_COMMIT, dbc->phase_item, 0, 1, t0, rc ? err : NULL);
    if (rc != IB_E_OK) {
        /*
         * A lost connection during COMMIT leaves the outcome unknown, but a
         * retry is safe: the inbox row turns a committed first attempt into
         * a duplicate. So it stays transient.
         */
        inbox_setup_transient(err);
        ib_error_prefix(err, "commit");
        return DB_FAILED;
    }
    return DB_APPLIED;
}

/*
 * Runs the route's statements in the open transaction. On failure err is
 * filled (a constraint in the route's own tables is permanent, never a
 * duplicate) and nothing is rolled back here.
 */
static ib_err_t run_stmts(db_conn_t *dbc, const db_stmt_t *stmts, size_t nstmts, ib_error_t *err)
{
    for (size_t i = 0; i < nstmts; i++) {
        db_bind_t *b = NULL;
        ib_err_t rc;

        if (!stmts[i].sql || (stmts[i].nparams && !stmts[i].params))
            return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT,
                                "statement %zu: no SQL or params", i + 1);
        if (stmts[i].nparams) {
            b = calloc(stmts[i].nparams, sizeof(*b));
            if (!b)
                return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            for (size_t k = 0; k < stmts[i].nparams; k++)
                b[k] = DB_B(stmts[i].params[k]);
        }
        long long t0 = db_phase_now(dbc);
        rc = db_run_kept(dbc, stmts[i].sql, b, stmts[i].nparams, NULL, NULL, NULL, err);
        db_phase_report(dbc, DB_PHASE_STMT, dbc->phase_item, i, 1, t0, rc ? err : NULL);
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

/*
 * The opening of every inbox transaction: a caller's leftover transaction
 * is rolled back (it must not join this one) and the connection is
 * (re)established. Not reaching the database is never the message's fault,
 * even when the cause is permanent (a rotated password), so a failure here
 * is always transient: it must never dead-letter the message.
 */
static ib_err_t conn_ready(db_conn_t *dbc, ib_error_t *err)
{
    ib_err_t rc;
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if ((rc = db_conn_ensure(dbc, err)) != IB_E_OK)
        err->cls = IB_CLASS_TRANSIENT;
    return rc;
}

db_outcome_t db_inbox_apply(db_conn_t *dbc, const db_claim_t *claim, const db_stmt_t *stmts,
                            size_t nstmts, ib_error_t *err)
{
    ib_error_t local;

    if (!err)
        err = &local;
    ib_error_clear(err);
    if (db_claim_check(claim, err) != IB_E_OK)
        return DB_FAILED;
    if (nstmts && !stmts) {
        ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "inbox apply: no statements");
        return DB_FAILED;
    }
    if (conn_ready(dbc, err) != IB_E_OK)
        return DB_FAILED;
    long long t0 = db_phase_now(dbc);
    ib_err_t rc = insert_row(dbc, claim, "processed", NULL, NULL, err);
    db_phase_report(dbc, DB_PHASE_CLAIM, dbc->phase_item, 0, 1, t0, rc ? err : NULL);
    if (rc != IB_E_OK) {
        if (claim->replay && err->code != IB_E_DB_CONN &&
            db_dialect_is_unique_violation(dbc->dialect, err->sqlstate, err->native))
            return take_over(dbc, claim, stmts, nstmts, err);
        return insert_failed(dbc, claim, err);
    }

    if (run_stmts(dbc, stmts, nstmts, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return DB_FAILED;
    }
    return commit_or_fail(dbc, err);
}

db_outcome_t db_inbox_record_failure(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                     const char *detail, ib_error_t *err)
{
    return db_inbox_record_failure_with(dbc, claim, cls, detail, NULL, 0, err);
}

db_outcome_t db_inbox_record_failure_with(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                          const char *detail, const db_stmt_t *stmts,
                                          size_t nstmts, ib_error_t *err)
{
    ib_error_t local;
    char cut[DB_DETAIL_MAX + 1];
    const char *status =
        db_row_status_name(cls == IB_CLASS_AMBIGUOUS ? DB_ROW_UNCERTAIN : DB_ROW_FAILED);

    if (!err)
        err = &local;
    ib_error_clear(err);
    if (db_claim_check(claim, err) != IB_E_OK)
        return DB_FAILED;
    if (detail) {
        /* Cut on a byte count, backing off a partial UTF-8 sequence. */
        size_t n = ib_strlcpy(cut, detail, sizeof(cut));
        if (n > DB_DETAIL_MAX) {
            size_t end = DB_DETAIL_MAX;
            /* detail[end] is the first byte left out: never split its character. */
            while (end > 0 && ((unsigned char)detail[end] & 0xC0) == 0x80)
                end--;
            cut[end] = '\0';
        }
        detail = cut;
    }
    if (conn_ready(dbc, err) != IB_E_OK)
        return DB_FAILED;
    if (insert_row(dbc, claim, status, ib_class_name(cls), detail, err) != IB_E_OK)
        return insert_failed(dbc, claim, err);
    if (run_stmts(dbc, stmts, nstmts, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        inbox_setup_transient(err); /* the outbox's table, not the message */
        return DB_FAILED;
    }
    return commit_or_fail(dbc, err);
}
