/*
 * Transient or permanent from a broker condition (sb_condition.h): what
 * the outbox relay retries and what it marks failed.
 */
#include <string.h>

#include "ib_test.h"
#include "sb_condition.h"

static void test_condition_classes(void)
{
    static const char *const permanent[] = {"amqp:not-found", "amqp:unauthorized-access",
                                            "com.microsoft:auth-failed",
                                            "amqp:link:message-size-exceeded",
                                            "com.microsoft:entity-disabled"};
    static const char *const transient[] = {
        "com.microsoft:server-busy", "com.microsoft:timeout", "amqp:connection:forced",
        "amqp:link:detach-forced",   "amqp:internal-error",   "amqp:resource-limit-exceeded",
        "x-vendor:something-new",    ""};
    for (size_t i = 0; i < sizeof(permanent) / sizeof(permanent[0]); i++)
        ASSERT_EQ(sb_condition_class(permanent[i]), IB_CLASS_PERMANENT);
    for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
        ASSERT_EQ(sb_condition_class(transient[i]), IB_CLASS_TRANSIENT);
    ASSERT_EQ(sb_condition_class(NULL), IB_CLASS_TRANSIENT);
}

static void test_send_error_classify(void)
{
    ib_error_t e;
    ib_error_set(&e, IB_E_BROKER, IB_CLASS_TRANSIENT, "refused");
    ib_strlcpy(e.condition, "amqp:link:message-size-exceeded", sizeof(e.condition));
    sb_send_error_classify(&e);
    ASSERT_EQ(e.cls, IB_CLASS_PERMANENT);
    ib_error_set(&e, IB_E_BROKER, IB_CLASS_PERMANENT, "busy");
    ib_strlcpy(e.condition, "com.microsoft:server-busy", sizeof(e.condition));
    sb_send_error_classify(&e);
    ASSERT_EQ(e.cls, IB_CLASS_TRANSIENT);
    ib_error_set(&e, IB_E_NOTFOUND, IB_CLASS_TRANSIENT, "no such entity");
    sb_send_error_classify(&e);
    ASSERT_EQ(e.cls, IB_CLASS_PERMANENT);
    ib_error_set(&e, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "no answer");
    sb_send_error_classify(&e);
    ASSERT_EQ(e.cls, IB_CLASS_TRANSIENT);
    ib_error_clear(&e);
    sb_send_error_classify(&e);
    ASSERT_EQ(e.cls, IB_CLASS_NONE);
}

int main(void)
{
    RUN(test_condition_classes);
    RUN(test_send_error_classify);
    return ib_test_done();
}
