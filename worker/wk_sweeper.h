/*
 * wk_sweeper.h - the retention sweeper: a thread of its own that deletes
 * inbox rows older than db.inbox_retention_days, in small batches, on a
 * database connection of its own.
 */
#ifndef WK_SWEEPER_H
#define WK_SWEEPER_H

#include "db_conn.h"

typedef struct wk_sweeper wk_sweeper_t;

/*
 * Starts the sweeper thread: its first sweep 5 s from now, then one every
 * 10 minutes. opt is copied, not its contents: they must outlive the
 * sweeper. Returns NULL when days <= 0 or the thread cannot start (the
 * daemon then runs without a sweep). thread: main.
 */
wk_sweeper_t *wk_sweeper_start(const db_options_t *opt, long days);
/* Stops and joins the thread, then frees sw; NULL is a no-op. thread: main. */
void wk_sweeper_stop(wk_sweeper_t *sw);

#endif
