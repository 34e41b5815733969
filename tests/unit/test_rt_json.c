/*
 * The checked JSON scan of body fields (route/rt_json.c): it accepts the
 * bodies inboxd meets, reads their fields as jansson would, and leaves
 * whatever it does not prove to jansson. (tests/fuzz/fuzz_rt_json.c
 * compares it with jansson on every corpus input.)
 */
#include <stdlib.h>

#include "ib_test.h"
#include "rt_json.h"

static bool checked(const char *s)
{
    return rt_json_checked(s, strlen(s));
}

/* The span at steps of a checked text; kind -1 when there is none. */
static rt_json_span_t at(const char *text, const rt_json_step_t *steps, size_t n)
{
    rt_json_span_t v = {(rt_json_kind_t)-1, NULL, 0, false};
    if (!checked(text) || !rt_json_find(text, strlen(text), steps, n, &v))
        v.kind = (rt_json_kind_t)-1;
    return v;
}

static void test_accepts_what_jansson_accepts(void)
{
    static const char *const valid[] = {
        "{\"id\":\"a-1\",\"n\":1,\"pad\":\"000\"}",
        " {\"a\" : [1, 2.5, -3e2, true, false, null, {}, []] }\n",
        "{\"s\":\"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\ \\/ \\n\"}",
        "\"scalar\"", "42", "-0.5", "null",
        "[9223372036854775807,-9223372036854775808,1e-400]",
    };
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        json_t *j = json_loads(valid[i], JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        ASSERT_TRUE(j != NULL);
        ASSERT_TRUE(checked(valid[i]));
        json_decref(j);
    }
}

static void test_refuses_what_jansson_refuses(void)
{
    static const char *const invalid[] = {
        "", " ", "{", "{\"a\":1,}", "[1,]", "{\"a\":1} x", "{'a':1}", "[01]", "[1.]",
        "[1e]", "[-]", "[+1]", "[tru]", "[NaN]", "{\"a\":1,\"a\":2}",
        "{\"x\":{\"k\":1,\"k\":2}}", "[\"\\u0000\"]", "[\"\\udc00\"]", "[\"\\ud800x\"]",
        "[\"\\x\"]", "[\"a\tb\"]", "[\"\xc0\xaf\"]", "[\"\xed\xa0\x80\"]", "[\"\xe2\x82\"]",
        "[9223372036854775808]", "[-9223372036854775809]", "[1e400]",
    };
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        json_t *j = json_loads(invalid[i], JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        ASSERT_TRUE(j == NULL);
        ASSERT_TRUE(!checked(invalid[i]));
    }
    /* Valid, but left to jansson: an escaped key could repeat another one. */
    ASSERT_TRUE(!checked("{\"a\":1,\"\\u0062\":2}"));
}

static void test_find(void)
{
    const char *body = "{\"id2\":0,\"id\":\"o-\\u00e9\",\"n\":7,\"r\":2.5,\"order\":{\"lines\":"
                       "[{\"sku\":\"a\"},{\"sku\":\"b\",\"qty\":-3}]},\"t\":true,\"z\":null}";
    rt_json_step_t id[] = {{"id", 0}}, n[] = {{"n", 0}}, r[] = {{"r", 0}}, t[] = {{"t", 0}},
                   z[] = {{"z", 0}}, lines[] = {{"order", 0}, {"lines", 0}},
                   qty[] = {{"order", 0}, {"lines", 0}, {NULL, 1}, {"qty", 0}},
                   past[] = {{"order", 0}, {"lines", 0}, {NULL, 2}},
                   into[] = {{"n", 0}, {"x", 0}}, absent[] = {{"i", 0}};
    rt_json_span_t v = at(body, id, 1);
    char *s = rt_json_string(&v);
    ASSERT_EQ(v.kind, RT_JV_STRING);
    ASSERT_STREQ(s, "o-\xc3\xa9");
    free(s);
    ASSERT_EQ(at(body, n, 1).kind, RT_JV_INTEGER);
    ASSERT_EQ(at(body, n, 1).len, 1);
    ASSERT_EQ(at(body, r, 1).kind, RT_JV_REAL);
    ASSERT_EQ(at(body, t, 1).kind, RT_JV_TRUE);
    ASSERT_EQ(at(body, z, 1).kind, RT_JV_NULL);
    ASSERT_EQ(at(body, lines, 2).kind, RT_JV_ARRAY);
    v = at(body, qty, 4);
    ASSERT_EQ(v.kind, RT_JV_INTEGER);
    ASSERT_TRUE(v.len == 2 && memcmp(v.at, "-3", 2) == 0);
    ASSERT_TRUE(!rt_json_find(body, strlen(body), past, 3, &v));
    ASSERT_TRUE(!rt_json_find(body, strlen(body), into, 2, &v));
    ASSERT_TRUE(!rt_json_find(body, strlen(body), absent, 1, &v));
}

int main(void)
{
    RUN(test_accepts_what_jansson_accepts);
    RUN(test_refuses_what_jansson_refuses);
    RUN(test_find);
    return ib_test_done();
}
