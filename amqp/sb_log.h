/*
 * sb_log.h - routes Proton's own logger into inboxd's JSON log stream.
 */
#ifndef SB_LOG_H
#define SB_LOG_H

/* Installs the sink on Proton's default logger. thread: main, before any Proton use. */
void sb_log_init(void);

#endif
