/*
 * db_effect.h - the inbox row as the durable state of an effect beyond the
 * database (an HTTP call): claim with a lease, renew, finish, release, and
 * the operator's list and resolve. Part of db/'s public surface beside
 * db_inbox.h.
 *
 * The row's status only moves forward:
 *
 *   (none) --claim--> claimed --finish--> processed | failed | uncertain
 *   claimed, lease expired --takeover (one conditional UPDATE)--> claimed
 *   uncertain | failed --resolve retry--> retry --claim--> claimed
 *   failed --claim of an operator's replay (claim->replay)--> claimed
 *   uncertain | failed --resolve processed--> processed
 *
 * Every change of an owned claim names its claim token in the WHERE clause,
 * so a worker whose claim was taken over changes nothing: the database, not
 * this code, decides who owns a row.
 *
 * thread: the owner of dbc, like every db_ call.
 */
#ifndef DB_EFFECT_H
#define DB_EFFECT_H

#include <stdbool.h>
#include <stddef.h>

#include "db_inbox.h"
#include "db_limits.h"

typedef enum {
    DB_CLAIM_NEW = 0,    /* a fresh row, claimed by us: call */
    DB_CLAIM_TAKEN_OVER, /* an expired claim, now ours: the earlier call may have acted */
    DB_CLAIM_RETRY,      /* an operator asked for another call: call */
    DB_CLAIM_DONE,       /* processed, failed or uncertain: no call (uncertain: dead-letter) */
    DB_CLAIM_BUSY,       /* another worker holds a live lease: do not call */
    DB_CLAIM_CONFLICT,   /* the key holds another body hash: dead-letter */
    DB_CLAIM_FAILED,     /* err filled (transient or permanent) */
    DB_CLAIM_REPLAY,     /* an operator's replay took a failed row over: row.remote_status says
                            what the last call answered (0: none) */
} db_claim_outcome_t;

/* "new", "taken_over", "retry", "done", "busy", "conflict", "failed", "replay". */
const char *db_claim_outcome_name(db_claim_outcome_t o);

/* What a claim found or made; the handle of every later call on the row. */
typedef struct db_claim_row {
    char message_id[129]; /* the row's (another copy's, when it came by the key) */
    char token[33];       /* our claim token while we own the row */
    db_row_status_t status; /* the status found (DB_CLAIM_DONE) */
    char remote_id[DB_IDEM_KEY_MAX + 1]; /* the remote id recorded, "" when none */
    long remote_status;   /* the HTTP status recorded, 0 when none */
    long long attempts;   /* claims of this row so far, ours included */
} db_claim_row_t;

/*
 * The new columns on the inbox table (lease_until, claim_token, remote_id,
 * remote_status, attempts, resolution, resolution_note, resolved_at),
 * added when absent. db_migrate(create=true) runs it; with create=false it
 * only checks and fails with IB_E_CONFIG naming the missing column.
 */
ib_err_t db_effect_migrate(db_conn_t *dbc, bool create, ib_error_t *err);

/*
 * Claims the row of claim in a committed transaction of its own, with
 * lease_until = now + lease_s by the database's clock. With claim->replay
 * a row recorded 'failed' with the same body is taken over
 * (DB_CLAIM_REPLAY); without, it is DB_CLAIM_DONE. row is filled for
 * every outcome but DB_CLAIM_FAILED and DB_CLAIM_CONFLICT.
 */
db_claim_outcome_t db_effect_claim(db_conn_t *dbc, const db_claim_t *claim, long lease_s,
                                   db_claim_row_t *row, ib_error_t *err);

/* One message of a batch claim (db_effect_claim_batch). */
typedef struct db_effect_claim_item {
    const db_claim_t *claim;
    long lease_s;
    bool claimed;       /* out: inserted claimed by this batch (DB_CLAIM_NEW), row filled */
    db_claim_row_t row; /* out, when claimed */
} db_effect_claim_item_t;

/*
 * The claims of several messages in one committed transaction: each item
 * whose message id and key hold no row yet gets a fresh row, claimed with
 * its own token and lease, exactly as db_effect_claim would insert it
 * (claimed = true: DB_CLAIM_NEW). An item whose row exists (a duplicate, a
 * takeover, a retry, a conflict), a replay, an invalid claim or a second
 * item of one key is left unclaimed for db_effect_claim, which decides it
 * alone. On any failure (a key inserted meanwhile, a deadlock, the
 * connection) the transaction is rolled back and no item is claimed, err
 * filled. On SQLite nothing is claimed (one writer: each claim stays a
 * short transaction of its own), err clear. Returns how many items were
 * claimed.
 */
size_t db_effect_claim_batch(db_conn_t *dbc, db_effect_claim_item_t *items, size_t n,
                             ib_error_t *err);

/*
 * Extends our lease before another call. IB_E_LOCK_LOST (transient) when
 * the claim is no longer ours: do not call.
 */
ib_err_t db_effect_renew(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                         long lease_s, ib_error_t *err);

/* The outcome written by db_effect_finish. */
typedef struct db_effect_result {
    db_row_status_t status;   /* DB_ROW_PROCESSED, DB_ROW_FAILED or DB_ROW_UNCERTAIN */
    const char *remote_id;    /* may be NULL */
    long remote_status;       /* HTTP status; 0 = none (NULL) */
    const char *error_class;  /* may be NULL */
    const char *error_detail; /* may be NULL; cut to DB_DETAIL_MAX bytes */
} db_effect_result_t;

/*
 * One transaction: our claimed row gets res, then stmts run (the route's
 * finishing SQL), COMMIT. DB_APPLIED on success; DB_FAILED with
 * IB_E_LOCK_LOST (transient) when the claim was taken over meanwhile
 * (nothing written); DB_FAILED with err classified otherwise.
 */
db_outcome_t db_effect_finish(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                              const db_effect_result_t *res, const db_stmt_t *stmts, size_t nstmts,
                              ib_error_t *err);

/* One row's finish in db_effect_finish_batch. */
typedef struct db_effect_finish_item {
    const db_claim_row_t *row;
    const db_effect_result_t *res;
    const db_stmt_t *stmts;
    size_t nstmts;
} db_effect_finish_item_t;

/*
 * db_effect_finish of several rows in one transaction: all are written or
 * none (rolled back, err says why for the first that failed: IB_E_LOCK_LOST
 * when a claim was taken over). On DB_FAILED the caller finishes each row
 * alone (db_effect_finish), so a bad one never poisons its neighbours.
 */
db_outcome_t db_effect_finish_batch(db_conn_t *dbc, const char *consumer,
                                    const db_effect_finish_item_t *items, size_t n,
                                    ib_error_t *err);

/*
 * Gives our claim up without an outcome. reached false: no call of this
 * claim can have acted, so the row is deleted and the next delivery starts
 * afresh. reached true: the lease is expired at once and the row kept, so
 * the next delivery takes it over as possibly applied.
 */
ib_err_t db_effect_release(db_conn_t *dbc, const char *consumer, const db_claim_row_t *row,
                           bool reached, ib_error_t *err);

/*
 * The statement text of the claim protocol, for tests of the dialects no
 * server here runs (SQL Server, MariaDB). DB_ESQL_HAS_COLUMN / DB_ESQL_ADD_COLUMN
 * render for the first new column (lease_until). IB_E_INVAL for an unknown
 * dialect, a bad table name or text that does not fit.
 */
typedef enum {
    DB_ESQL_CLAIM_INSERT,
    DB_ESQL_LOOKUP,
    DB_ESQL_TAKEOVER,
    DB_ESQL_TAKE_RETRY,
    DB_ESQL_RENEW,
    DB_ESQL_FINISH,
    DB_ESQL_RELEASE_DELETE,
    DB_ESQL_RELEASE_EXPIRE,
    DB_ESQL_LIST,
    DB_ESQL_RESOLVE_PROCESSED,
    DB_ESQL_RESOLVE_RETRY,
    DB_ESQL_TAKE_FAILED,
    DB_ESQL_HAS_COLUMN,
    DB_ESQL_ADD_COLUMN,
} db_effect_stmt_t;
ib_err_t db_effect_sql_text(db_dialect_t d, const char *table, db_effect_stmt_t which, long lease_s,
                            char *buf, size_t size);

/* ---- operators ----------------------------------------------------------- */

typedef struct db_effect_listed {
    const char *consumer, *message_id, *idempotency_key, *status, *error_class, *error_detail,
        *remote_id, *processed_at, *lease_until, *resolution, *resolution_note;
    long remote_status;
    long long attempts;
} db_effect_listed_t;

/* Called per row; return false to stop. Strings are valid during the call only. */
typedef bool (*db_effect_list_cb)(const db_effect_listed_t *row, void *arg);

/*
 * Rows with status (any of "claimed", "uncertain", "failed", "retry",
 * "processed"), of consumer when not NULL, oldest first, at most limit.
 * Returns the number of rows passed to cb, or -1 with err filled.
 */
long db_effect_list(db_conn_t *dbc, const char *status, const char *consumer, long limit,
                    db_effect_list_cb cb, void *arg, ib_error_t *err);

/*
 * An operator's decision on an uncertain or failed row, recorded on it
 * (resolution, resolution_note, resolved_at): as "processed" (remote_id
 * kept unless given) or "retry" (the next delivery or a replay calls
 * again; HTTP-route rows only, those with a claim token: a SQL route's
 * failed row is retried by replaying its message). IB_E_NOTFOUND
 * (permanent) when no such row.
 */
ib_err_t db_effect_resolve(db_conn_t *dbc, const char *consumer, const char *message_id,
                           const char *as, const char *remote_id, const char *note,
                           ib_error_t *err);

#endif
