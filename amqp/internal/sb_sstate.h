/*
 * sb_sstate.h - Service Bus session state (com.microsoft:get-session-state /
 * set-session-state on the entity's $management) and the parked record
 * inboxd keeps in it. Internal to amqp/. thread: the proactor of the client
 * or of the blocking sender that owns the connection.
 */
#ifndef SB_SSTATE_H
#define SB_SSTATE_H

#include <stdbool.h>
#include <stddef.h>

#include <proton/message.h>

#include "ib_err.h"

/*
 * A get (set false) or set request for session_id; link is the session
 * receiver's name (associated-link-name), state/len the bytes to store, or
 * NULL to clear (AMQP null, as .NET does).
 */
pn_message_t *sb_sstate_request(const char *session_id, const char *link, bool set,
                                const char *state, size_t len);
/*
 * Reads a 200 answer to get-session-state: *state malloc'd (NUL added, len
 * without it), or NULL when the session has no state. Returns false when
 * the answer has no session-state entry or memory ran out.
 */
bool sb_sstate_parse(pn_message_t *resp, char **state, size_t *len);
/* Whether state is inboxd's parked record. */
bool sb_sstate_is_parked(const char *state, size_t len);
/*
 * The parked record, malloc'd JSON: {"parked":true,"reason":...,
 * "message_id":...,"sequence_number":...,"parked_at":...}. NULL when out
 * of memory.
 */
char *sb_sstate_record(const char *reason, const char *message_id, long long sequence_number,
                       long long now_ms);

#endif
