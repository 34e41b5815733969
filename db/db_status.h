/*
 * db_status.h - what the inbox holds, counted for an operator's
 * `inboxctl status`: rows written within a recent window by status, and the
 * failed and uncertain rows of all time (each waits for a person).
 * Read-only; thread: the owner of dbc.
 */
#ifndef DB_STATUS_H
#define DB_STATUS_H

#include "db_conn.h"

typedef struct db_status_inbox {
    long long window_s; /* the window the first four count */
    long long processed, failed, uncertain, claimed;
    long long failed_all, uncertain_all; /* any age: rows an operator must resolve */
} db_status_inbox_t;

/*
 * Counts consumer's inbox rows (the connection's inbox table) whose
 * processed_at lies within the last window_s seconds, by status, and its
 * failed and uncertain rows of any age. A status no row has counts 0.
 */
ib_err_t db_status_inbox(db_conn_t *dbc, const char *consumer, long long window_s,
                         db_status_inbox_t *out, ib_error_t *err);

#endif
