/*
 * ctl_status.h - `inboxctl status`: one screen answering "is it healthy,
 * and what is stuck?" from the broker (the entity's counts from the
 * management endpoint, its oldest message by peek), the database (inbox
 * rows by status in the last hour, failed and uncertain rows, the outbox's
 * pending rows) and, with --metrics URL, a running inboxd's /metrics (held
 * messages, open circuits, the database breaker, parked sessions).
 *
 *   inboxctl status --config F [--metrics URL] [--stuck-after SECONDS] [--json]
 *
 * Exit status: 0 healthy, 3 degraded (something waits for a person: dead
 * letters, failed or uncertain rows, held messages, an open circuit, a
 * parked session), 4 stuck (nothing moves: the oldest message or outbox row
 * older than --stuck-after, default 300 s, the database breaker open, or a
 * source that cannot be read), 2 usage or a config that cannot be read.
 * Each condition is named with the command that shows more.
 *
 * thread: main (a command-line tool).
 */
#ifndef CTL_STATUS_H
#define CTL_STATUS_H

/* argv[0] is the first argument after "status". */
int ctl_status(int argc, char **argv);

#endif
