/*
 * emu_ws.h - sbemu's AMQP over WebSockets endpoint (--ws-listen): a gateway
 * from ws:// with subprotocol AMQPWSB10 to sbemu's own AMQP listener. See
 * emu_ws.c.
 *
 * thread: emu_ws_start and emu_ws_stop on the main thread; the gateway has
 * threads of its own.
 */
#ifndef EMU_WS_H
#define EMU_WS_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct emu_ws emu_ws_t;

/*
 * Listens on listen_on (HOST:PORT, port 0 picks one; *bound_port gets it),
 * with TLS when tls_cert and tls_key (PEM files) are not NULL.
 * Each connection is bridged to 127.0.0.1:*amqp_port, read when it comes
 * (the AMQP listener opens later). NULL with err filled on failure.
 */
emu_ws_t *emu_ws_start(const char *listen_on, const char *tls_cert, const char *tls_key,
                       const atomic_int *amqp_port, int *bound_port, char *err, size_t errlen);
/* Stops accepting and frees; connections in flight end with the process. */
void emu_ws_stop(emu_ws_t *ws);

#endif
