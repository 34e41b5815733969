/*
 * sb_condition.h - what an AMQP error condition from Service Bus means for
 * the sender: try again later (transient) or never (permanent).
 *
 * Transient: the connection or link went away (amqp:connection:forced,
 * amqp:link:detach-forced), the service is busy or timed out
 * (com.microsoft:server-busy, com.microsoft:timeout, amqp:internal-error),
 * the entity is full for now (amqp:resource-limit-exceeded), and anything
 * unknown. Permanent: the entity does not exist or is disabled, the
 * credential is refused, the message is too large or malformed.
 *
 * thread: any. Pure functions over strings.
 */
#ifndef SB_CONDITION_H
#define SB_CONDITION_H

#include <stdbool.h>

#include "ib_err.h"

/* The class of a condition symbol; NULL or "" (no condition) is transient. */
ib_class_t sb_condition_class(const char *condition);

/* The broker is throttling: com.microsoft:server-busy. NULL is not. */
bool sb_condition_busy(const char *condition);

/*
 * Sets err->cls from err->condition for a failed send (IB_E_NOTFOUND and
 * IB_E_AUTH are permanent whatever the condition). Leaves a cleared err alone.
 */
void sb_send_error_classify(ib_error_t *err);

#endif
