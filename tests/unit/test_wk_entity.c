/*
 * The entity description parser (worker/wk_entity.c): the Atom entry of a
 * queue as Service Bus writes it (prefixed CountDetails, ISO 8601
 * durations), an empty feed (no such entity) and a body without counts.
 */
#include <string.h>

#include "ib_test.h"
#include "wk_entity.h"

static const char *queue_entry =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?><entry xmlns=\"http://www.w3.org/2005/Atom\">"
    "<id>https://ns.servicebus.windows.net/orders?api-version=2021-05</id><title "
    "type=\"text\">orders</title><content type=\"application/xml\"><QueueDescription "
    "xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\" "
    "xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\"><LockDuration>PT1M30S</LockDuration>"
    "<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><RequiresSession>true</RequiresSession>"
    "<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>"
    "<MaxDeliveryCount>7</MaxDeliveryCount><MessageCount>66</MessageCount>"
    "<CountDetails xmlns:d2p1=\"http://schemas.microsoft.com/netservices/2011/06/servicebus\">"
    "<d2p1:ActiveMessageCount>12</d2p1:ActiveMessageCount>"
    "<d2p1:DeadLetterMessageCount>50</d2p1:DeadLetterMessageCount>"
    "<d2p1:ScheduledMessageCount>3</d2p1:ScheduledMessageCount>"
    "<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount>"
    "<d2p1:TransferDeadLetterMessageCount>1</d2p1:TransferDeadLetterMessageCount>"
    "</CountDetails></QueueDescription></content></entry>";

static void test_parses_a_queue_entry(void)
{
    wk_entity_info_t info;
    ib_error_t err;
    ASSERT_EQ(wk_entity_parse(queue_entry, &info, &err), IB_E_OK);
    ASSERT_EQ(info.active, 12);
    ASSERT_EQ(info.dead_letter, 50);
    ASSERT_EQ(info.scheduled, 3);
    ASSERT_EQ(info.transfer_dead_letter, 1);
    ASSERT_EQ(info.max_delivery_count, 7);
    ASSERT_EQ(info.lock_duration_ms, 90000);
    ASSERT_TRUE(info.requires_session);
}

static void test_empty_feed_is_not_found_and_no_counts_is_an_error(void)
{
    wk_entity_info_t info;
    ib_error_t err;
    ASSERT_EQ(wk_entity_parse("<?xml version=\"1.0\"?><feed xmlns=\"http://www.w3.org/2005/Atom\">"
                              "<title type=\"text\">Publicly Listed Services</title></feed>",
                              &info, &err),
              IB_E_NOTFOUND);
    ASSERT_EQ(wk_entity_parse("<entry><content><QueueDescription><MaxDeliveryCount>3"
                              "</MaxDeliveryCount></QueueDescription></content></entry>",
                              &info, &err),
              IB_E_DECODE);
    /* A closing tag alone is not a value. */
    ASSERT_EQ(wk_entity_parse("<entry><CountDetails></d2p1:ActiveMessageCount>"
                              "</d2p1:DeadLetterMessageCount></CountDetails></entry>",
                              &info, &err),
              IB_E_DECODE);
}

static void test_durations(void)
{
    ASSERT_EQ(wk_entity_duration_ms("PT1M"), 60000);
    ASSERT_EQ(wk_entity_duration_ms("PT30S"), 30000);
    ASSERT_EQ(wk_entity_duration_ms("PT0.5S"), 500);
    ASSERT_EQ(wk_entity_duration_ms("P1DT2H"), 93600000);
    ASSERT_EQ(wk_entity_duration_ms("P10675199DT2H48M5.4775807S"), 922337203685478LL);
    ASSERT_EQ(wk_entity_duration_ms("PT"), -1);
    ASSERT_EQ(wk_entity_duration_ms("P1H"), -1); /* H only after T */
    ASSERT_EQ(wk_entity_duration_ms("1M"), -1);
    ASSERT_EQ(wk_entity_duration_ms(""), -1);
}

int main(void)
{
    RUN(test_parses_a_queue_entry);
    RUN(test_empty_feed_is_not_found_and_no_counts_is_an_error);
    RUN(test_durations);
    return ib_test_done();
}
