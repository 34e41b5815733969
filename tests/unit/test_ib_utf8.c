/* UTF-8 validation and replacement (common/ib_utf8.c), and the logger's use
 * of it: a line holding invalid bytes still parses as JSON and as UTF-8. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "ib_test.h"
#include "ib_utf8.h"

static void test_seq_len(void)
{
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"a", 1), 1);
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xC3\xA9", 2), 2);
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xE2\x82\xAC", 3), 3);
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xF0\x9F\x98\x80", 4), 4);
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xC3", 1), 0);         /* cut */
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xC0\xAF", 2), 0);     /* overlong */
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xE0\x80\xAF", 3), 0); /* overlong */
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xED\xA0\x80", 3), 0); /* surrogate */
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xF4\x90\x80\x80", 4), 0); /* > 10FFFF */
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\xFF", 1), 0);
    ASSERT_EQ(ib_utf8_seq_len((const unsigned char *)"\x80", 1), 0);
    ASSERT_TRUE(ib_utf8_valid("caf\xC3\xA9", 5));
    ASSERT_TRUE(!ib_utf8_valid("caf\xE9", 4));
}

static void test_sanitize(void)
{
    char out[32];
    ASSERT_EQ(ib_utf8_sanitize(out, sizeof out, "ok \xC3\xA9"), 5);
    ASSERT_STREQ(out, "ok \xC3\xA9");
    ib_utf8_sanitize(out, sizeof out, "a\xFF" "b\xC3");
    ASSERT_STREQ(out, "a" IB_UTF8_REPLACEMENT "b" IB_UTF8_REPLACEMENT);
    /* Too small: never half a sequence, always terminated. */
    ASSERT_EQ(ib_utf8_sanitize(out, 5, "ab\xE2\x82\xAC"), 2);
    ASSERT_STREQ(out, "ab");
    ASSERT_TRUE(ib_utf8_valid(out, strlen(out)));
}

static void test_log_line_stays_utf8(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    json_error_t jerr;
    json_t *j;

    ib_log_set_level(IB_LOG_INFO);
    ib_log_set_stream(fp);
    IB_LOG(IB_LOG_INFO, "msg_done", IB_S("subject", "bad\xC3(\xFF\xFE"),
           IB_S("message_id", "\xED\xA0\x80id"), IB_S("fine", "caf\xC3\xA9"));
    ib_log_set_stream(NULL);
    fclose(fp);
    ASSERT_TRUE(ib_utf8_valid(buf, len));
    j = json_loads(buf, 0, &jerr); /* jansson refuses invalid UTF-8 */
    ASSERT_TRUE(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "subject")),
                 "bad" IB_UTF8_REPLACEMENT "(" IB_UTF8_REPLACEMENT IB_UTF8_REPLACEMENT);
    ASSERT_STREQ(json_string_value(json_object_get(j, "message_id")),
                 IB_UTF8_REPLACEMENT IB_UTF8_REPLACEMENT IB_UTF8_REPLACEMENT "id");
    ASSERT_STREQ(json_string_value(json_object_get(j, "fine")), "caf\xC3\xA9");
    json_decref(j);
    free(buf);
}

int main(void)
{
    RUN(test_seq_len);
    RUN(test_sanitize);
    RUN(test_log_line_stays_utf8);
    return ib_test_done();
}
