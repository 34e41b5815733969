/*
 * wk_replicas.h - the consumer's live replicas, for what is set for the
 * whole cluster (db.pool_scope "cluster": the db workers that take jobs; an
 * HTTP route's limit_scope "cluster": its limits): a thread of its own
 * writes this process's heartbeat into db.replicas_table every
 * WK_REPLICAS_BEAT_MS on a connection of its own and reads how many
 * replicas are alive, where this one ranks among them and the messages
 * they hold (their demand); the daemon divides its db workers by that
 * (wk_replicas_part) and the db workers a route's rate_per_s and
 * max_concurrent (wk_replicas_share).
 *
 * Until the first heartbeat is read, and while the database cannot be
 * reached, the last count holds (1 at first: the limits as set). A replica
 * that joins is counted by the others within a heartbeat, one that stops
 * cleanly at once (its row deleted), one that dies after WK_REPLICAS_WINDOW_MS.
 */
#ifndef WK_REPLICAS_H
#define WK_REPLICAS_H

#include "db_conn.h"
#include "ib_err.h"
#include "wk_dest.h"

#define WK_REPLICAS_BEAT_MS 2000
#define WK_REPLICAS_WINDOW_MS 10000 /* a row older than this is a replica gone */

typedef struct wk_replicas wk_replicas_t;

/*
 * Makes (migrate) or checks the table, writes the first heartbeat and starts
 * the thread. NULL with err set when the table cannot be made or found.
 * thread: main.
 */
wk_replicas_t *wk_replicas_start(const db_options_t *opt, const char *table, const char *consumer,
                                 bool migrate, ib_error_t *err);
/* Stops the thread and deletes this replica's row. thread: main. */
void wk_replicas_stop(wk_replicas_t *rp);

/* Replicas alive at the last heartbeat (this one included). thread: any. */
long wk_replicas_alive(const wk_replicas_t *rp);

/*
 * This replica's part of total divided among the replicas alive, by rank,
 * so that the parts add up to total (some may be 0 when total < N). NULL
 * rp, or one replica: total. thread: any.
 */
long wk_replicas_part(const wk_replicas_t *rp, long total);

/*
 * The messages this replica holds now (in flight, held for a limit
 * included): its demand, written with the next heartbeat. NULL rp: nothing.
 * thread: any (the daemon's, as its in-flight count changes).
 */
void wk_replicas_demand(wk_replicas_t *rp, long long held);

/*
 * The part of a cluster's rate for a replica holding mine of all the
 * messages the n replicas alive hold (all includes mine): (mine + 1) /
 * (all + n). The parts of the n add up to 1; with no demand anywhere each
 * is 1 / n; a replica holding none keeps a little, so that its first
 * message goes until the next heartbeat counts it. thread: any.
 */
double wk_replicas_weight(long n, long long mine, long long all);

/*
 * This replica's share of limits set for the cluster: rate_per_s by its
 * weight (wk_replicas_weight, from the demand the last heartbeat wrote and
 * read), so that a replica with the backlog gets most of the rate; and
 * max_concurrent split by rank so that the shares add up to it (a replica
 * whose share is none gets -1: no call goes). NULL rp: unchanged.
 * thread: any.
 */
void wk_replicas_share(const wk_replicas_t *rp, wk_dest_limits_t *lim);

#endif
