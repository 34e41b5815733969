/* The JSON logger: every line parses as JSON, levels filter before
 * formatting, and registered secrets never reach the output. */
#include <jansson.h>
#include <stdlib.h>

#include "ib_err.h"
#include "ib_log.h"
#include "ib_test.h"

static char *capture_buf;
static size_t capture_len;
static FILE *capture;

static void capture_start(void)
{
    capture = open_memstream(&capture_buf, &capture_len);
    ib_log_set_stream(capture);
}

static char *capture_end(void)
{
    ib_log_set_stream(NULL);
    fclose(capture);
    return capture_buf;
}

static int evaluated;
static const char *side_effect(void)
{
    evaluated++;
    return "x";
}

static void test_line_is_json_with_fields(void)
{
    json_error_t jerr;
    json_t *j;
    char *out;

    ib_log_set_level(IB_LOG_INFO);
    capture_start();
    IB_LOG(IB_LOG_INFO, "connect", IB_MSG("quote \" backslash \\ newline \n tab \t"),
           IB_S("host", "h"), IB_I("port", 5671), IB_B("tls", 1), IB_D("ratio", 0.5),
           IB_S("none", NULL), IB_J("raw", "{\"a\":1}"));
    out = capture_end();
    j = json_loads(out, 0, &jerr);
    ASSERT_TRUE(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "level")), "info");
    ASSERT_STREQ(json_string_value(json_object_get(j, "event")), "connect");
    ASSERT_STREQ(json_string_value(json_object_get(j, "msg")),
                 "quote \" backslash \\ newline \n tab \t");
    ASSERT_EQ(json_integer_value(json_object_get(j, "port")), 5671);
    ASSERT_TRUE(json_is_true(json_object_get(j, "tls")));
    ASSERT_TRUE(json_is_null(json_object_get(j, "none")));
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "raw"), "a")), 1);
    /* ts is RFC 3339 UTC with milliseconds: 2026-12-02T11:47:54.123Z */
    const char *ts = json_string_value(json_object_get(j, "ts"));
    ASSERT_TRUE(ts && strlen(ts) == 24 && ts[10] == 'T' && ts[19] == '.' && ts[23] == 'Z');
    json_decref(j);
    free(out);
}

static void test_level_checked_before_formatting(void)
{
    char *out;
    evaluated = 0;
    ib_log_set_level(IB_LOG_WARN);
    capture_start();
    IB_LOG(IB_LOG_INFO, "noise", IB_MSG(side_effect()));
    IB_LOG(IB_LOG_ERROR, "kept", IB_MSG(side_effect()));
    out = capture_end();
    ASSERT_EQ(evaluated, 1);
    ASSERT_NOT_CONTAINS(out, "noise");
    ASSERT_CONTAINS(out, "\"kept\"");
    free(out);
    ib_log_set_level(IB_LOG_INFO);
}

static void test_secrets_masked(void)
{
    char *out;
    ib_log_add_secret("hunter2-secret");
    capture_start();
    IB_LOG(IB_LOG_ERROR, "oops", IB_MSG("password was hunter2-secret, twice hunter2-secret"),
           IB_S("detail", "Pwd=hunter2-secret;"));
    out = capture_end();
    ASSERT_NOT_CONTAINS(out, "hunter2");
    ASSERT_CONTAINS(out, "password was ***, twice ***");
    free(out);
    ib_log_clear_secrets();
}

static void test_huge_field_still_valid_json(void)
{
    char *big = malloc(100000), *out;
    json_error_t jerr;
    json_t *j;
    memset(big, 'a', 99999);
    big[99999] = '\0';
    capture_start();
    IB_LOG(IB_LOG_ERROR, "big", IB_MSG(big), IB_S("a", big), IB_S("b", big), IB_S("c", big),
           IB_S("d", big), IB_S("e", big));
    out = capture_end();
    j = json_loads(out, 0, &jerr);
    ASSERT_TRUE(j != NULL);
    json_decref(j);
    free(out);
    free(big);
}

static void test_error_names(void)
{
    ib_error_t err;
    ASSERT_STREQ(ib_err_name(IB_E_LOCK_LOST), "IB_E_LOCK_LOST");
    ASSERT_STREQ(ib_err_str(IB_E_OK), "success");
    ASSERT_STREQ(ib_err_name((ib_err_t)9999), "IB_E_UNKNOWN");
    ASSERT_STREQ(ib_class_name(IB_CLASS_TRANSIENT), "transient");
    ASSERT_EQ(ib_error_set(&err, IB_E_DB, IB_CLASS_PERMANENT, "bad %d", 7), IB_E_DB);
    ASSERT_STREQ(err.text, "bad 7");
    ib_error_prefix(&err, "insert");
    ASSERT_STREQ(err.text, "insert: bad 7");
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    for (int c = 0; c < IB_E__COUNT; c++)
        ASSERT_TRUE(strncmp(ib_err_name((ib_err_t)c), "IB_E_", 5) == 0);
}

int main(void)
{
    RUN(test_line_is_json_with_fields);
    RUN(test_level_checked_before_formatting);
    RUN(test_secrets_masked);
    RUN(test_huge_field_still_valid_json);
    RUN(test_error_names);
    return ib_test_done();
}
