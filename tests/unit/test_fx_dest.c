/* The destination key of a URL (effect/fx_dest.c): scheme, host and port,
 * the port spelled out, userinfo left out, nothing a metric label cannot hold. */
#include <string.h>

#include "fx_dest.h"
#include "ib_test.h"

static void test_key(void)
{
    char k[FX_DEST_KEY_MAX];
    ASSERT_TRUE(fx_dest_key("https://Pay.Example/charges?x=1", k, sizeof k));
    ASSERT_STREQ(k, "https://pay.example:443");
    ASSERT_TRUE(fx_dest_key("http://127.0.0.1:8080", k, sizeof k));
    ASSERT_STREQ(k, "http://127.0.0.1:8080");
    ASSERT_TRUE(fx_dest_key("http://user:pw@h/x", k, sizeof k));
    ASSERT_STREQ(k, "http://h:80");
    ASSERT_TRUE(fx_dest_key("https://[::1]:9/x", k, sizeof k));
    ASSERT_STREQ(k, "https://[::1]:9");
    ASSERT_TRUE(fx_dest_key("https://[::1]/x", k, sizeof k));
    ASSERT_STREQ(k, "https://[::1]:443");
    ASSERT_TRUE(!fx_dest_key("pay.example/x", k, sizeof k));
    ASSERT_TRUE(!fx_dest_key("https:///x", k, sizeof k));
    ASSERT_TRUE(!fx_dest_key("https://a\"b/x", k, sizeof k)); /* never in a metric label */
}

int main(void)
{
    RUN(test_key);
    return ib_test_done();
}
