/*
 * db_replicas.h - the replicas of one consumer that are alive, as the
 * database they share sees them: each replica writes its own row
 * (consumer, replica, seen_ms, demand) every few seconds and counts the
 * rows seen lately. It is how limits set for the whole cluster (an HTTP
 * route's `limit_scope: "cluster"`) are divided between replicas: by their
 * demand, the messages each holds.
 *
 * The table (one per database; its name db.replicas_table):
 *   consumer VARCHAR(200), replica VARCHAR(200), seen_ms BIGINT,
 *   demand BIGINT DEFAULT 0, PRIMARY KEY (consumer, replica)
 * seen_ms is the writing replica's wall clock in ms since the epoch; a row
 * is alive while it is newer than the reader's clock minus the window, so
 * clocks that disagree by less than the window only shift the count by a
 * heartbeat.
 *
 * thread: the owner of dbc (worker/wk_replicas.c's thread).
 */
#ifndef DB_REPLICAS_H
#define DB_REPLICAS_H

#include "db_conn.h"

#define DB_REPLICAS_DEFAULT_TABLE "inboxd_replicas"

/* Creates the table when it is missing (migrate) or checks that it is there. */
ib_err_t db_replicas_migrate(db_conn_t *dbc, const char *table, bool migrate, ib_error_t *err);

/* This replica's heartbeat row. */
typedef struct {
    const char *consumer, *replica;
    long long now_ms; /* seen_ms */
    long long demand; /* the messages it holds now */
} db_replica_t;

/* The consumer's replicas alive, as one heartbeat read them. */
typedef struct {
    long alive;       /* this one included */
    long rank;        /* how many of them sort before this replica's name */
    long long demand; /* the sum of their demand, this one's included */
} db_replicas_seen_t;

/*
 * Writes this replica's row, deletes rows of the consumer older than an
 * hour, and reads the consumer's rows newer than now_ms - window_ms into
 * *seen. One committed transaction.
 */
ib_err_t db_replicas_beat(db_conn_t *dbc, const char *table, const db_replica_t *me,
                          long long window_ms, db_replicas_seen_t *seen, ib_error_t *err);

/* Deletes this replica's row (a clean stop), committed. */
ib_err_t db_replicas_leave(db_conn_t *dbc, const char *table, const char *consumer,
                           const char *replica, ib_error_t *err);

#endif
