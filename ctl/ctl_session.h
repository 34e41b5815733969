/*
 * ctl_session.h - `inboxctl session show|unpark --session S`: reads,
 * and for unpark clears, the parked record inboxd keeps in a session's
 * Service Bus session state (servicebus.session_on_dead_letter "park").
 * Called by inboxctl's main on its connection. thread: main.
 *
 * Exit status: 0 shown, or a parked session unparked; 4 the session was
 * not parked (nothing changed); 1 broker failure, or the session stayed
 * locked by a receiver for wait_s.
 */
#ifndef CTL_SESSION_H
#define CTL_SESSION_H

#include <stdbool.h>

#include "sb_send.h"

int ctl_session(sb_sender_t *s, const char *entity, const char *session_id, bool unpark,
                     long wait_s);

#endif
