/*
 * wk_daemon.h - the inboxd daemon: the proactor thread, the db workers and
 * the pipeline between them.
 */
#ifndef WK_DAEMON_H
#define WK_DAEMON_H

#include <stdbool.h>

#include "wk_config.h"

/*
 * Runs until drained or failed; returns the process exit status. relay_only
 * (inboxd --relay-only): only the outbox relay and the http server run, for
 * applications that write outbox rows themselves. thread: main.
 */
int wk_daemon_run(const wk_config_t *cfg, bool relay_only);

#endif
