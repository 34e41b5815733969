/*
 * db_outbox.h - the transactional outbox table (outbox.table, default
 * inboxd_outbox) and the statements its relay runs.
 *
 * A route's emitted messages, and rows that applications insert in their
 * own transactions, are rows of this table with status 'pending'. The relay
 * (relay/rl_relay.c) claims pending rows in id order in a short
 * transaction, sends them, and marks them 'published' (or 'failed' with the
 * broker's condition) before committing. Replicas share the table through
 * row locks only: PostgreSQL and MariaDB FOR UPDATE SKIP LOCKED, SQL Server
 * WITH (UPDLOCK, READPAST, ROWLOCK); SQLite has one writer at a time, so
 * there one relay works at a time. Published rows are deleted after the
 * retention in small batches by one replica at a time.
 *
 * The text functions (db_outbox_sql_*) touch no handle and are unit-tested
 * for every dialect; the others run on a db_conn_t owned by the calling
 * thread, like everything in db_inbox.h.
 */
#ifndef DB_OUTBOX_H
#define DB_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "db_dialect.h"
#include "db_conn.h"
#include "ib_err.h"

#define DB_OUTBOX_DEFAULT_TABLE "inboxd_outbox"

/*
 * Session order after a failure: a failed row with a session id holds back
 * every later row of its session (they stay pending, left out of the claim)
 * until an operator retries it (db_outbox_retry: pending again, sent first)
 * or skips it (db_outbox_skip: it stays failed, its last_error starts with
 * DB_OUTBOX_SKIPPED, and the session's later rows go on). Rows without a
 * session id are never held.
 */
#define DB_OUTBOX_SKIPPED "inboxd:skipped"

/* ---- statement text (thread: any) ------------------------------------- */

/* The outbox DDL, each statement idempotent; strings point into buf. */
ib_err_t db_outbox_sql_ddl(db_dialect_t d, const char *table, char *buf, size_t size,
                           const char **out, size_t *n);
/*
 * INSERT of one pending row. Parameters in order: entity, message_id,
 * session_id, subject, correlation_id, content_type, properties (a JSON
 * object as text), body, trace_context (the W3C traceparent of the span
 * that wrote the row, or NULL). The other columns take their defaults. This is the
 * statement a route's emit adds to its inbox transaction.
 */
ib_err_t db_outbox_sql_insert(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * The claim: pending rows in id order, at most ? (the only parameter),
 * locked for this transaction and skipping rows other relays hold, leaving
 * out rows a failed row holds back (DB_OUTBOX_SKIPPED). Columns:
 * id, entity, message_id, session_id, subject, correlation_id, content_type,
 * properties, body, attempts, trace_context, body_octets, body_chars.
 * PostgreSQL and SQLite: body is NULL when it is above
 * DB_OUTBOX_BODY_INLINE bytes (read apart by db_outbox_sql_body_part:
 * the driver would hold the whole row two or three times over), and
 * body_octets / body_chars give its size; other dialects: the body whole,
 * the sizes NULL. *lock receives a statement to run first in
 * the transaction ("" when none; SQLite: take the write lock, so a second
 * relay waits instead of reading the same rows; PostgreSQL: plan the
 * transaction's statements by the indexes, whatever the statistics say).
 */
ib_err_t db_outbox_sql_claim(db_dialect_t d, const char *table, char *buf, size_t size,
                             char *lock, size_t lock_size);
#define DB_OUTBOX_BODY_INLINE 1048576 /* bytes: a larger claimed body is read in parts */
#define DB_OUTBOX_BODY_PART 4194304   /* characters per part */
/*
 * One part of a claimed row's body: parameters the 1-based character
 * position, the characters (DB_OUTBOX_BODY_PART), the row's id; one column.
 * IB_E_INVAL for a dialect that reads bodies whole.
 */
ib_err_t db_outbox_sql_body_part(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * Per session id: session_id and MIN(id) of its pending rows, for nsessions
 * session ids (the parameters; "= ?" for one, else "IN (?, ...)").
 */
ib_err_t db_outbox_sql_session_head(db_dialect_t d, const char *table, size_t nsessions,
                                    char *buf, size_t size);
/*
 * Marks nids rows published (parameters: nids ids; "id = ?" for one, else
 * "id IN (?, ...)").
 */
ib_err_t db_outbox_sql_published(db_dialect_t d, const char *table, size_t nids, char *buf,
                                 size_t size);
/*
 * Counts one failed attempt (parameters: last_error, id); with failed the
 * row leaves the pending set as 'failed', otherwise it stays pending.
 */
ib_err_t db_outbox_sql_attempt(db_dialect_t d, const char *table, bool failed, char *buf,
                               size_t size);
/*
 * One cleanup batch: published rows whose published_at is before the
 * cutoff. Parameters: cutoff (timestamp) and batch size; *limit_first says
 * the batch size comes first.
 */
ib_err_t db_outbox_sql_cleanup(db_dialect_t d, const char *table, char *buf, size_t size,
                               bool *limit_first);
/* The single-cleaner lock (one row: 1 taken, 0 held elsewhere) and its release; "" for SQLite. */
ib_err_t db_outbox_sql_cleanup_lock(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_outbox_sql_cleanup_unlock(db_dialect_t d, const char *table, char *buf, size_t size);
/* One row: the number of pending rows and the age in seconds of the oldest (NULL when none). */
ib_err_t db_outbox_sql_stats(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * Rows for operators in id order, newest last: id, entity, message_id,
 * session_id, status, attempts, last_error, created_at, published_at,
 * blocked_by (for a pending row held back by a failed row: that row's id).
 * Parameters: [status,] limit, in the order *limit_first says.
 */
ib_err_t db_outbox_sql_list(db_dialect_t d, const char *table, bool by_status, char *buf,
                            size_t size, bool *limit_first);
/*
 * One row: how many session ids have pending rows held back by a failed
 * row (see DB_OUTBOX_SKIPPED).
 */
ib_err_t db_outbox_sql_blocked(db_dialect_t d, const char *table, char *buf, size_t size);
/* The last_error of one failed row (parameter: id); no row when it is not failed. */
ib_err_t db_outbox_sql_failed_error(db_dialect_t d, const char *table, char *buf, size_t size);
/* Marks a failed row skipped (parameters: the new last_error, id). */
ib_err_t db_outbox_sql_skip(db_dialect_t d, const char *table, char *buf, size_t size);
/* A failed row back to pending (parameter: id). */
ib_err_t db_outbox_sql_retry(db_dialect_t d, const char *table, char *buf, size_t size);
/* Every row published in the last ago_s seconds back to pending (no parameters). */
ib_err_t db_outbox_sql_republish(db_dialect_t d, const char *table, long long ago_s, char *buf,
                                 size_t size);
/* Selects every outbox column with no rows: fails when the table or a column is missing. */
ib_err_t db_outbox_sql_probe(db_dialect_t d, const char *table, char *buf, size_t size);
/*
 * trace_context (added after the first release): a probe of that column
 * alone, and the ALTER TABLE adding it to an older table (idempotent but
 * for SQLite, which has no ADD COLUMN IF NOT EXISTS).
 */
ib_err_t db_outbox_sql_trace_probe(db_dialect_t d, const char *table, char *buf, size_t size);
ib_err_t db_outbox_sql_trace_add(db_dialect_t d, const char *table, char *buf, size_t size);

/* ---- running them (thread: the owner of dbc) ------------------------- */

/*
 * create true: creates the table and its indexes when absent (serialised
 * across replicas like the inbox's); false: checks that it exists with
 * every column. IB_E_CONFIG naming outbox.table when not.
 */
ib_err_t db_outbox_migrate(db_conn_t *dbc, const char *table, bool create, ib_error_t *err);

/* One outbox row as read back. Strings are owned (NULL for SQL NULL). */
typedef struct db_outbox_row {
    long long id;
    char *entity, *message_id, *session_id, *subject, *correlation_id, *content_type;
    char *properties; /* JSON object text */
    char *body;
    size_t body_len;
    long long body_octets, body_chars; /* claim: a body read in parts, else 0 */
    long long attempts;
    char *trace_context; /* traceparent of the span that wrote the row, or NULL */
    char *status, *last_error, *created_at, *published_at; /* list only */
    long long blocked_by; /* list only: the failed row holding this pending row back, or 0 */
} db_outbox_row_t;

void db_outbox_rows_free(db_outbox_row_t *rows, size_t n);
/* Frees one row's strings and zeroes it (a row dropped from a claim's array). */
void db_outbox_row_clear(db_outbox_row_t *row);

/*
 * Begins a relay transaction and claims up to max pending rows in id order
 * (*rows malloc'd, *n of them; free with db_outbox_rows_free). A row whose
 * session id has an earlier pending row that this claim does not hold
 * (another relay has it) is left out, with every later row of that
 * session, so one session's rows leave in order across replicas. The
 * transaction stays open: mark rows, then db_end(dbc, true) to commit, or
 * db_end(dbc, false) to give every row back. With nothing to claim the
 * transaction is already ended and *n is 0.
 */
ib_err_t db_outbox_claim(db_conn_t *dbc, const char *table, int max, db_outbox_row_t **rows,
                         size_t *n, ib_error_t *err);

typedef enum {
    DB_OUTBOX_PUBLISHED, /* sent and accepted */
    DB_OUTBOX_RETRY,     /* a transient failure: attempts + 1, stays pending */
    DB_OUTBOX_FAILED,    /* a permanent failure: status failed */
} db_outbox_mark_t;

/* Marks one claimed row inside the relay transaction; error may be NULL. */
ib_err_t db_outbox_mark(db_conn_t *dbc, const char *table, long long id, db_outbox_mark_t mark,
                        const char *error, ib_error_t *err);

/*
 * The most ids (or session ids) one statement of the relay lists: marks and
 * the claim's session heads run a statement per DB_OUTBOX_LIST_MAX, each of
 * a few fixed widths (1, 8, 32 or DB_OUTBOX_LIST_MAX, the last value
 * repeated to fill one), so a handful of texts stay prepared.
 */
#define DB_OUTBOX_LIST_MAX 128
/* Marks n claimed rows published inside the relay transaction; err may be NULL. */
ib_err_t db_outbox_mark_published(db_conn_t *dbc, const char *table, const long long *ids,
                                  size_t n, ib_error_t *err);

/*
 * Deletes published rows older than retention_s, batch rows per statement
 * and transaction, until a batch comes back short or max_batches batches
 * ran (0: no limit), under the single-cleaner lock (0 at once when another
 * replica holds it). Returns the rows deleted or -1 with err filled.
 */
long long db_outbox_cleanup(db_conn_t *dbc, const char *table, long long retention_s, long batch,
                            long max_batches, ib_error_t *err);

/* The pending count and the oldest pending row's age in seconds (0 when none). */
ib_err_t db_outbox_stats(db_conn_t *dbc, const char *table, long long *pending,
                         long long *oldest_s, ib_error_t *err);

/* Rows for operators (status NULL: any), at most max, oldest first; read-only. */
ib_err_t db_outbox_list(db_conn_t *dbc, const char *table, const char *status, int max,
                        db_outbox_row_t **rows, size_t *n, ib_error_t *err);

/* The number of session ids whose pending rows a failed row holds back. */
ib_err_t db_outbox_blocked(db_conn_t *dbc, const char *table, long long *sessions,
                           ib_error_t *err);

/*
 * Skips a failed row: it stays failed, its last_error becomes
 * DB_OUTBOX_SKIPPED plus note and the error it had, and its session's later
 * rows are no longer held back. *changed is 1 when the row was failed and
 * not yet skipped, else 0. Commits.
 */
ib_err_t db_outbox_skip(db_conn_t *dbc, const char *table, long long id, const char *note,
                        long long *changed, ib_error_t *err);

/* A failed row back to pending; *changed is 1 when the row was failed, else 0. Commits. */
ib_err_t db_outbox_retry(db_conn_t *dbc, const char *table, long long id, long long *changed,
                         ib_error_t *err);

/*
 * Every row published in the last ago_s seconds back to pending: the relay
 * sends each again, with its message id (after a forced Geo-Replication
 * promotion, what the old primary had not replicated). *changed: how many.
 * Commits.
 */
ib_err_t db_outbox_republish(db_conn_t *dbc, const char *table, long long ago_s,
                             long long *changed, ib_error_t *err);

#endif
