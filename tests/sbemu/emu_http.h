/*
 * emu_http.h - sbemu's HTTPS management endpoint (entity descriptions with
 * their runtime counts, as the Service Bus administration clients read
 * them). See emu_http.c.
 *
 * thread: emu_http_start and emu_http_stop run on the main thread; the
 * endpoint has a thread of its own that reads the namespace under mu.
 */
#ifndef EMU_HTTP_H
#define EMU_HTTP_H

#include "emu_broker.h"

#include <pthread.h>

typedef struct emu_http emu_http_t;

typedef struct emu_http_opts {
    const char *listen;   /* HOST:PORT; port 0 picks a free one */
    const char *tls_cert; /* PEM; NULL = plain HTTP */
    const char *tls_key;
    emu_broker_t *broker; /* read under mu only */
    pthread_mutex_t *mu;  /* held by the proactor thread while it handles events */
    int status_fault;     /* answer every request with this HTTP status; 0 = off */
} emu_http_opts_t;

/* Binds and starts the thread; *bound_port gets the port. NULL with err filled. */
emu_http_t *emu_http_start(const emu_http_opts_t *opts, int *bound_port, char *err,
                           size_t errlen);
/* Stops and joins the thread, closes the socket and frees. NULL is a no-op. */
void emu_http_stop(emu_http_t *h);

#endif
