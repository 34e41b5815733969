/*
 * sb_wsb.h - the WebSocket bridge: AMQP to Service Bus over wss:// (port
 * 443, optionally through an HTTP CONNECT proxy) for a client that only
 * speaks plain AMQP over TCP.
 *
 * A bridge listens on 127.0.0.1 (an ephemeral port); the connection core
 * connects its proactor there with TLS off. For each loopback connection
 * the bridge's thread opens the outer leg with libcurl (TCP, proxy tunnel
 * with Basic auth, TLS verified against the namespace's name), speaks the
 * RFC 6455 handshake with subprotocol AMQPWSB10 (sb_ws.h) and pumps bytes:
 * loopback reads become masked binary frames, frames become loopback
 * writes, pings are answered. When either leg ends, both end, and the
 * proactor's reconnect makes the next loopback connection.
 *
 * thread: sb_wsb_new, sb_wsb_port, sb_wsb_error and sb_wsb_free from the
 * thread that owns the connection core; the bridge has one thread of its
 * own.
 */
#ifndef SB_WSB_H
#define SB_WSB_H

#include <stdbool.h>

#include "ib_err.h"

typedef struct sb_wsb sb_wsb_t;

typedef struct sb_wsb_opts {
    const char *host;    /* the namespace's name: Host, SNI and the certificate's name */
    int port;            /* 443, or the emulator's WebSocket port */
    bool tls;            /* wss:// (false only for the emulator) */
    const char *ca_file; /* NULL: the system's CA bundle */
    const char *proxy;   /* http://[user:password@]host:port, "" for none, NULL: the environment */
} sb_wsb_opts_t;

/* Starts a bridge (listener and thread). NULL with err set on failure. */
sb_wsb_t *sb_wsb_new(const sb_wsb_opts_t *opts, ib_error_t *err);

/* The loopback port the proactor connects to. */
int sb_wsb_port(const sb_wsb_t *wsb);

/*
 * Why the last outer leg failed (handshake refused, proxy 407, TLS), taken
 * once: true and *why filled when there is such an error.
 */
bool sb_wsb_error(sb_wsb_t *wsb, ib_error_t *why);

/* Stops the thread, closes both legs and frees. NULL is a no-op. */
void sb_wsb_free(sb_wsb_t *wsb);

/*
 * The proxy a connection to host would use: opts_proxy when not NULL
 * ("" for none), else HTTPS_PROXY / https_proxy unless NO_PROXY / no_proxy
 * names host. Writes it to proxy (may be ""), and the same without any
 * user:password to shown. thread: any.
 */
void sb_wsb_proxy_pick(const char *opts_proxy, const char *host, char *proxy, size_t psize,
                       char *shown, size_t ssize);

/* Registers a proxy URL's user:password (if any) as a secret with the log. NULL is a no-op. */
void sb_wsb_proxy_secret(const char *proxy);

#endif
