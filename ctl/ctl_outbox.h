/*
 * ctl_outbox.h - `inboxctl outbox list|retry`, called by inboxctl's
 * main with the arguments after "outbox". Returns the exit status
 * (0 ok, 1 database failure or nothing to retry, 2 usage). thread: main.
 */
#ifndef CTL_OUTBOX_H
#define CTL_OUTBOX_H

int ctl_outbox(int argc, char **argv);

#endif
