/*
 * db_inbox.h - the transactional inbox: its table and the inbox
 * transaction. Connections, options and parameters are db_conn.h's;
 * db_effect.h and db_outbox.h are db/'s other public headers.
 *
 * A db worker thread owns one db_conn_t and runs every message through
 * db_inbox_apply():
 *
 *   BEGIN; INSERT inbox row; run the route's statements; COMMIT
 *
 * The unique key on the inbox row, not this code, decides which of two
 * concurrent copies wins: the second copy's INSERT waits for the first
 * transaction and then fails with a unique violation (or proceeds when the
 * first rolled back). There is never a check-then-insert.
 *
 * Threads and errors as in db_conn.h: a db_conn_t belongs to one thread at
 * a time, and every failure fills an ib_error_t whose class is all the
 * caller needs.
 */
#ifndef DB_INBOX_H
#define DB_INBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "db_conn.h"
#include "db_dialect.h"
#include "db_limits.h"
#include "ib_err.h"

/* ---- the inbox table --------------------------------------------------- */

/*
 * create true: creates the inbox table and its indexes when absent, in one
 * transaction serialised across replicas (advisory lock / sp_getapplock);
 * safe to run any number of times, concurrently.
 * create false: checks that the table exists with its key; IB_E_CONFIG
 * (permanent) with a message naming the table when not.
 * thread: the owner of dbc.
 */
ib_err_t db_migrate(db_conn_t *dbc, bool create, ib_error_t *err);
/*
 * Checks that a unique constraint or index named as the dialect's unique
 * violation names it (db_unique_violation: "ux_orders" in PostgreSQL, SQL
 * Server and MariaDB, "orders.order_id" in SQLite) exists; IB_E_CONFIG
 * (permanent) naming it when not. For a route's "constraints" at start.
 * thread: the owner of dbc.
 */
ib_err_t db_migrate_check_unique(db_conn_t *dbc, const char *name, ib_error_t *err);

/* ---- the inbox transaction ------------------------------------------- */

typedef enum {
    DB_APPLIED = 0, /* committed: inbox row + statements */
    DB_DUPLICATE,   /* the key exists with the same body hash: nothing done */
    DB_CONFLICT,    /* the key exists with another body hash: nothing done, row untouched */
    DB_FAILED,      /* rolled back; err->cls says transient / permanent / ambiguous */
} db_outcome_t;

/* "applied", "duplicate", "conflict", "failed". */
const char *db_outcome_name(db_outcome_t o);

/*
 * The inbox row's status: the states db/ hands the worker (db_effect.h
 * draws how they move). A `processed` row is what the outcome `applied`
 * leaves (also a duplicate found later); `uncertain` records the error
 * class `ambiguous` (it may have acted).
 */
typedef enum {
    DB_ROW_PROCESSED = 0, /* "processed" */
    DB_ROW_FAILED,        /* "failed": a permanent failure recorded */
    DB_ROW_UNCERTAIN,     /* "uncertain": may have acted, cannot tell */
    DB_ROW_CLAIMED,       /* "claimed": an HTTP route's call under a lease */
    DB_ROW_RETRY,         /* "retry": an operator asked for another call */
    DB_ROW_UNKNOWN,       /* a status this version does not know */
} db_row_status_t;

/* The column's text ("processed", ...); "unknown" for DB_ROW_UNKNOWN. */
const char *db_row_status_name(db_row_status_t s);
/* The state of the column's text; DB_ROW_UNKNOWN for any other. */
db_row_status_t db_row_status_parse(const char *text);

/* The identity and bookkeeping of one message. All pointers are borrowed. */
typedef struct db_claim {
    const char *consumer;        /* required, <= DB_CONSUMER_MAX bytes */
    const char *message_id;      /* required, <= DB_MESSAGE_ID_MAX bytes */
    const char *idempotency_key; /* NULL when the route defines none; <= DB_IDEM_KEY_MAX bytes */
    const char *body_sha256;     /* 64 lowercase hex characters (db_sha256_hex) */
    const char *entity;          /* may be NULL */
    long long sequence_number;
    long long delivery_count;
    long long enqueued_at_ms; /* ms since the epoch, UTC; 0 = unknown (NULL) */
    long long received_at_ms; /* ms since the epoch, UTC; 0 = now */
    bool replay; /* an operator's replay (inboxd-replay-count): a row recorded 'failed' (or
                    resolved 'retry') with the same body is taken over, see db_inbox_apply */
} db_claim_t;

/*
 * The inbox transaction for one message: INSERT the inbox row (status
 * 'processed'), run stmts in order, COMMIT.
 *
 *   DB_APPLIED    committed.
 *   DB_DUPLICATE  unique violation on (consumer, message_id) or
 *                 (consumer, idempotency_key) and the existing row has the
 *                 same body hash (whatever its status: a 'failed' row
 *                 recorded earlier is also a duplicate).
 *   DB_CONFLICT   unique violation and an existing row has another hash.
 *   With claim->replay, a unique violation on a row whose status is
 *   'failed' or 'retry' and whose body hash is the same is not a duplicate:
 *   in a new transaction one conditional UPDATE takes the row over (status
 *   'processed', error columns cleared), stmts run, COMMIT: DB_APPLIED. Of
 *   two concurrent replays the row lock lets one win; the other then sees
 *   'processed' and is a DB_DUPLICATE.
 *   DB_FAILED     err filled: transient (deadlock, serialization, timeout,
 *                 lost connection: retry), permanent (data error, SQL error,
 *                 a constraint that is not the inbox key, a configured
 *                 permanent code: dead-letter or record). A database that
 *                 cannot be reached or reopened is always transient here,
 *                 whatever the cause: it is never the message's fault.
 *
 * Every outcome but DB_APPLIED leaves no open transaction: it was rolled
 * back before returning (DB_APPLIED committed). err is cleared on
 * DB_APPLIED and DB_DUPLICATE; on DB_CONFLICT it holds IB_E_CONFLICT
 * (permanent) with a text fit for a dead-letter description.
 * thread: the owner of dbc.
 */
db_outcome_t db_inbox_apply(db_conn_t *dbc, const db_claim_t *claim, const db_stmt_t *stmts,
                            size_t nstmts, ib_error_t *err);

/*
 * The on_permanent:"record" path: a short transaction of its own that
 * inserts the inbox row with status 'failed' (or 'uncertain' when cls is
 * IB_CLASS_AMBIGUOUS), error_class = ib_class_name(cls) and detail (cut to
 * DB_DETAIL_MAX bytes; may be NULL). A redelivery then meets the row and is a
 * DB_DUPLICATE without running the route again.
 *
 *   DB_APPLIED    recorded.
 *   DB_DUPLICATE  the key was already there with the same hash (recorded
 *                 or applied earlier).
 *   DB_CONFLICT   the key is there with another hash.
 *   DB_FAILED     as for db_inbox_apply.
 * thread: the owner of dbc.
 */
db_outcome_t db_inbox_record_failure(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                     const char *detail, ib_error_t *err);
/*
 * The same, running stmts (a route's rejection events: outbox inserts)
 * after the row's insert and before the COMMIT, so they commit with the
 * failure or not at all; nothing runs when the row is already there
 * (DB_DUPLICATE / DB_CONFLICT). A failing statement rolls the whole
 * transaction back: DB_FAILED (a setup error, a missing table, transient).
 */
db_outcome_t db_inbox_record_failure_with(db_conn_t *dbc, const db_claim_t *claim, ib_class_t cls,
                                          const char *detail, const db_stmt_t *stmts,
                                          size_t nstmts, ib_error_t *err);

/*
 * Retention: deletes 'processed' inbox rows whose processed_at is older
 * than days ('failed' and 'uncertain' rows are kept for reconciliation), at
 * most batch rows per statement and transaction, until a batch comes back
 * short. Only one sweeper runs at a time across replicas (pg advisory lock,
 * sp_getapplock, GET_LOCK; SQLite serialises writers itself): when another
 * holds the lock this returns 0 at once. Returns the rows deleted, or -1
 * with err filled. thread: the owner of dbc.
 */
long long db_inbox_sweep(db_conn_t *dbc, long days, long batch, ib_error_t *err);

/*
 * Several messages in one transaction: one claim statement inserts every
 * inbox row (skipping keys already taken), each route statement runs once
 * for all its messages as a parameter array, one COMMIT. Each item ends
 * with exactly the outcome db_inbox_apply would give it alone:
 *
 *   - a key already taken is a duplicate or a conflict by body hash, decided
 *     in the batch without disturbing the others; two items with one key:
 *     the first claims it, the second is a duplicate (or conflict) of it;
 *   - any failure (a route statement, a deadlock, a lost connection, the
 *     COMMIT) rolls the whole transaction back and every item is then
 *     applied in a transaction of its own, so a failure belongs to the
 *     message that caused it. fallback (may be NULL) then holds the failure
 *     that rolled the batch back; its code is IB_E_OK when there was none. When the
 *     database cannot be reopened the remaining items fail transient
 *     without being tried.
 *
 * A replay claim goes alone (db_inbox_apply: it may take over a 'failed'
 * row), after the batch. A batch of one is db_inbox_apply. MariaDB has no claim statement: its
 * batches always run one transaction per item. Returns the number of items
 * applied. thread: the owner of dbc.
 */
typedef struct db_batch_item {
    const db_claim_t *claim; /* in, borrowed */
    const db_stmt_t *stmts;  /* in, borrowed */
    size_t nstmts;           /* in */
    db_outcome_t outcome;    /* out */
    ib_error_t err;          /* out: filled when outcome is DB_FAILED or DB_CONFLICT */
} db_batch_item_t;

size_t db_inbox_apply_batch(db_conn_t *dbc, db_batch_item_t *items, size_t n, ib_error_t *fallback);

/*
 * db_inbox_apply_batch where keys[i] (NULL: none) is item i's order key
 * (its session): the items of one key take effect in their order in the
 * array (their statements never run ahead of an earlier one's), and once
 * one of them ends other than applied or duplicate, the later ones of its
 * key are not run: DB_FAILED with IB_E_AGAIN (transient), to be run again
 * after it or handed back.
 */
size_t db_inbox_apply_batch_ordered(db_conn_t *dbc, db_batch_item_t *items,
                                    const char *const *keys, size_t n, ib_error_t *fallback);

/* ---- helpers ----------------------------------------------------------- */

/* SHA-256 of len bytes at data as 64 lowercase hex characters + NUL into hex. */
void db_sha256_hex(const void *data, size_t len, char hex[65]);

#endif
