/*
 * ctl_inbox.h - inboxctl's "inbox list" and "inbox resolve" (see
 * ctl_inbox.c). thread: main.
 */
#ifndef CTL_INBOX_H
#define CTL_INBOX_H

/* argv[0] is "list" or "resolve"; returns the exit status (0, 1, 2). */
int ctl_inbox(int argc, char **argv);

#endif
