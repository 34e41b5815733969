/* Get Blob's Shared Key signature (fx_blob_shared_key): the string to sign
 * for a GET with x-ms-date and x-ms-version, its canonicalized resource
 * (the account, the URL's path, the query parameters sorted, names in
 * lower case, values decoded), against HMAC-SHA256 values computed apart;
 * a key that is not base64 is refused. The fetches themselves run against
 * Azurite in e2e/claim_check_pg. */
#include <string.h>

#include "fx_blob.h"
#include "ib_test.h"

#define KEY "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DATE "Sat, 05 Dec 2026 12:00:00 GMT"

static void test_path_style(void)
{
    char out[256];
    ASSERT_TRUE(fx_blob_shared_key("http://127.0.0.1:10000/devstoreaccount1/docs/a.json",
                                   "devstoreaccount1", KEY, DATE, "2021-12-02", out, sizeof out));
    ASSERT_STREQ(out, "SharedKey devstoreaccount1:NVGAlAL2f0ZEP+6jiKI5U0AxuQocqwVAbDZQit0I4C4=");
}

static void test_query_sorted(void)
{
    char out[256];
    ASSERT_TRUE(fx_blob_shared_key(
        "https://acct.blob.core.windows.net/docs/a.json?Timeout=30&snapshot=2026-12-05T12%3A00%3A00Z",
        "acct", KEY, DATE, "2021-12-02", out, sizeof out));
    ASSERT_STREQ(out, "SharedKey acct:dqbHRe6uiH1hnAEK+V2NW1yt94Kh2vEtKkB2jAz8TUY=");
}

static void test_bad_key(void)
{
    char out[256];
    ASSERT_TRUE(!fx_blob_shared_key("https://a.blob.core.windows.net/c/b", "a", "not base64!", DATE,
                                    "2021-12-02", out, sizeof out));
    ASSERT_TRUE(!fx_blob_shared_key("https://a.blob.core.windows.net/c/b", "a", "", DATE,
                                    "2021-12-02", out, sizeof out));
}

int main(void)
{
    RUN(test_path_style);
    RUN(test_query_sorted);
    RUN(test_bad_key);
    return ib_test_done();
}
