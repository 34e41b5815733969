/*
 * sb_transport.h - which byte stream carries AMQP to Service Bus, for the
 * whole process: TCP on 5671 (amqp), wss:// on 443 through sb_wsb.h
 * (websockets), or auto: AMQP first and WebSockets when AMQP does not come
 * up within SB_TRANSPORT_AUTO_MS, the first one that reaches an AMQP open
 * kept for the process's life and logged once with why. A connection
 * string's TransportType=AmqpWebSockets always means WebSockets. Auto
 * never leaves AMQP for an emulator (UseDevelopmentEmulator=true) unless a
 * WebSocket port is set (the emulator's own).
 *
 * thread: sb_transport_set on the main thread before any client starts;
 * the rest from any thread.
 */
#ifndef SB_TRANSPORT_H
#define SB_TRANSPORT_H

#include <stdbool.h>

#include "ib_err.h"

typedef enum {
    SB_TRANSPORT_AUTO = 0,
    SB_TRANSPORT_AMQP,
    SB_TRANSPORT_WEBSOCKETS,
} sb_transport_mode_t;

/* How long auto gives AMQP on 5671 before it tries WebSockets. */
#define SB_TRANSPORT_AUTO_MS 5000

/* "auto", "amqp" or "websockets" into *mode; IB_E_CONFIG otherwise. */
ib_err_t sb_transport_parse(const char *s, sb_transport_mode_t *mode);
const char *sb_transport_name(sb_transport_mode_t mode);

/*
 * Sets the process's mode, proxy (copied; NULL: HTTPS_PROXY / NO_PROXY from
 * the environment, "": none) and WebSocket port (0: 443, or the Endpoint's
 * port under websockets). The proxy may hold user:password; it is
 * registered as a secret with the log.
 */
void sb_transport_set(sb_transport_mode_t mode, const char *proxy, int ws_port);
int sb_transport_ws_port(void);
sb_transport_mode_t sb_transport_mode(void);
const char *sb_transport_proxy(void);

/*
 * Whether connection attempt number attempt (0 first) goes over
 * WebSockets: connstr_ws is the connection string's TransportType,
 * emulator its UseDevelopmentEmulator. Auto with nothing kept yet takes
 * turns, AMQP first.
 */
bool sb_transport_next_ws(bool connstr_ws, bool emulator, unsigned attempt);

/* Whether auto is still choosing for such a connection (its AMQP attempts get
 * SB_TRANSPORT_AUTO_MS). */
bool sb_transport_choosing(bool connstr_ws, bool emulator);

/* Auto's choice is made: an AMQP open arrived over ws (or not); logged once with why. */
void sb_transport_keep(bool ws, const char *why);

/* Forgets auto's choice (tests). */
void sb_transport_reset(void);

#endif
