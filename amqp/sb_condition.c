/*
 * sb_condition.c - transient or permanent, from an AMQP condition symbol.
 * See sb_condition.h. thread: any.
 */
#include "sb_condition.h"

#include <string.h>

/*
 * Conditions after which sending the same message again cannot succeed
 * until someone changes the namespace, the credential or the message.
 */
static const char *const permanent_conditions[] = {
    "amqp:not-found",
    "amqp:unauthorized-access",
    "com.microsoft:auth-failed",
    "amqp:link:message-size-exceeded",
    "com.microsoft:entity-disabled",
    "amqp:decode-error",
    "amqp:invalid-field",
    "amqp:not-allowed",
    "amqp:not-implemented",
    "amqp:precondition-failed",
    "com.microsoft:argument-error",
    "com.microsoft:argument-out-of-range",
    "com.microsoft:publisher-revoked",
    "com.microsoft:no-matching-subscription",
    NULL,
};

ib_class_t sb_condition_class(const char *condition)
{
    if (!condition || !*condition)
        return IB_CLASS_TRANSIENT;
    for (size_t i = 0; permanent_conditions[i]; i++)
        if (strcmp(condition, permanent_conditions[i]) == 0)
            return IB_CLASS_PERMANENT;
    return IB_CLASS_TRANSIENT;
}

void sb_send_error_classify(ib_error_t *err)
{
    if (!err || err->code == IB_E_OK)
        return;
    if (err->code == IB_E_NOTFOUND || err->code == IB_E_AUTH) {
        err->cls = IB_CLASS_PERMANENT;
        return;
    }
    err->cls = sb_condition_class(err->condition);
}

bool sb_condition_busy(const char *condition)
{
    return condition && strcmp(condition, "com.microsoft:server-busy") == 0;
}
