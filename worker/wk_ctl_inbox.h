/*
 * wk_ctl_inbox.h - inboxctl's "inbox list" and "inbox resolve" (see
 * wk_ctl_inbox.c). thread: main.
 */
#ifndef WK_CTL_INBOX_H
#define WK_CTL_INBOX_H

/* argv[0] is "list" or "resolve"; returns the exit status (0, 1, 2). */
int wk_ctl_inbox(int argc, char **argv);

#endif
