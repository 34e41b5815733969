/*
 * sb_wsb_int.h - internal to amqp/: the WebSocket bridge's state, shared by
 * its life (sb_wsb.c) and its outer leg (sb_wsb_leg.c).
 *
 * thread: the fields below the lock are the bridge thread's, except
 * last_err (under lock) and stop (atomic).
 */
#ifndef SB_WSB_INT_H
#define SB_WSB_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "sb_wsb.h"

struct sb_wsb {
    char host[256];
    char ca_file[512];
    char proxy[512]; /* secret: may hold user:password */
    char shown[512]; /* the proxy without user:password, for logs and errors */
    int ws_port;
    bool tls;
    int lfd;  /* loopback listener */
    int port; /* its port */
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock;
    ib_error_t last_err;
};

/* Records why a leg failed (for sb_wsb_error) and logs it. thread: bridge. */
void sb_wsb_fail(sb_wsb_t *wsb, const ib_error_t *why);

/* Opens the outer leg for the accepted loopback socket fd and pumps until
 * either side ends or the bridge stops. thread: bridge. */
void sb_wsb_leg_run(sb_wsb_t *wsb, int fd);

#endif
