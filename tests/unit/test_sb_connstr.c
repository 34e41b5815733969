/* Service Bus connection strings, well-formed and malformed. */
#include "ib_test.h"
#include "sb_connstr.h"
#include "sb_token.h"

static void test_sas_key(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    ASSERT_EQ(
        sb_connstr_parse(" Endpoint=sb://ns.servicebus.windows.net/ ; SharedAccessKeyName="
                         "RootManageSharedAccessKey;SharedAccessKey=abc=def==;EntityPath=orders;",
                         &cs, &err),
        IB_E_OK);
    ASSERT_STREQ(cs.host, "ns.servicebus.windows.net");
    ASSERT_EQ(cs.port, 5671);
    ASSERT_TRUE(!cs.port_given);
    ASSERT_STREQ(cs.endpoint, "sb://ns.servicebus.windows.net/");
    ASSERT_STREQ(cs.key_name, "RootManageSharedAccessKey");
    ASSERT_STREQ(cs.key, "abc=def==");
    ASSERT_STREQ(cs.entity_path, "orders");
    ASSERT_TRUE(!cs.emulator);
    sb_connstr_free(&cs);
}

static void test_emulator_and_port(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    ASSERT_EQ(sb_connstr_parse("Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;"
                               "UseDevelopmentEmulator=true;",
                               &cs, &err),
              IB_E_OK);
    ASSERT_EQ(cs.port, 5672);
    ASSERT_TRUE(cs.emulator);
    sb_connstr_free(&cs);
    ASSERT_EQ(sb_connstr_parse("endpoint=sb://127.0.0.1:15673/;sharedaccesskeyname=k;"
                               "sharedaccesskey=v;usedevelopmentemulator=true",
                               &cs, &err),
              IB_E_OK);
    ASSERT_EQ(cs.port, 15673);
    ASSERT_STREQ(cs.endpoint, "sb://127.0.0.1:15673/");
    sb_connstr_free(&cs);
}

static void test_sas_token(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    ASSERT_EQ(sb_connstr_parse("Endpoint=sb://h/;SharedAccessSignature=SharedAccessSignature "
                               "sr=sb%3a%2f%2fh%2f&sig=x%3d&se=1&skn=k",
                               &cs, &err),
              IB_E_OK);
    ASSERT_STREQ(cs.sas, "SharedAccessSignature sr=sb%3a%2f%2fh%2f&sig=x%3d&se=1&skn=k");
    ASSERT_TRUE(cs.key == NULL && cs.key_name == NULL);
    sb_connstr_free(&cs);
}

static void test_no_credential(void)
{
    sb_connstr_t cs;
    ib_error_t err;
    sb_token_t tok;
    /* Workload identity: the endpoint alone parses; the SAS provider refuses it. */
    ASSERT_EQ(sb_connstr_parse("Endpoint=sb://ns.servicebus.windows.net/;EntityPath=q", &cs, &err),
              IB_E_OK);
    ASSERT_TRUE(cs.key == NULL && cs.key_name == NULL && cs.sas == NULL);
    ASSERT_EQ(sb_token_from_connstr(&cs, "sb://ns.servicebus.windows.net/q", &tok, &err),
              IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "workload_identity");
    sb_token_clear(&tok);
    sb_connstr_free(&cs);
}

static void expect_bad(const char *s, const char *needle)
{
    sb_connstr_t cs;
    ib_error_t err;
    ib_err_t rc = sb_connstr_parse(s, &cs, &err);
    if (rc != IB_E_CONFIG) {
        if (rc == IB_E_OK)
            sb_connstr_free(&cs);
        IB_FAIL_("accepted: %s", s ? s : "(null)");
    }
    if (!strstr(err.text, needle))
        IB_FAIL_("'%s': error '%s' lacks '%s'", s ? s : "(null)", err.text, needle);
    /* The secret must never appear in the error text. */
    if (strstr(err.text, "SECRETKEY"))
        IB_FAIL_("error text leaks the key: %s", err.text);
}

static void test_malformed(void)
{
    expect_bad(NULL, "empty");
    expect_bad("", "empty");
    expect_bad(";;;", "Endpoint is missing");
    expect_bad("SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "Endpoint is missing");
    expect_bad("Endpoint=http://h/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "sb://");
    expect_bad("Endpoint=sb:///;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "no host");
    expect_bad("Endpoint=sb://h:0/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "port");
    expect_bad("Endpoint=sb://h:99999/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "port");
    expect_bad("Endpoint=sb://h:12x/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "port");
    expect_bad("Endpoint=sb://h/path;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "path");
    expect_bad("Endpoint=sb://h /;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "invalid");
    expect_bad("Endpoint=sb://h/;SharedAccessKey=SECRETKEY", "SharedAccessKeyName is missing");
    expect_bad("Endpoint=sb://h/;SharedAccessKeyName=k", "SharedAccessKey is missing");
    expect_bad("Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=", "empty");
    expect_bad("Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY;"
               "SharedAccessSignature=SharedAccessSignature sr=x",
               "excludes");
    expect_bad("Endpoint=sb://h/;Endpoint=sb://g/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY",
               "more than once");
    expect_bad("Endpoint=sb://h/;garbage;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "'='");
    expect_bad("Endpoint=sb://h/;=x;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "empty key");
    expect_bad("Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY;"
               "UseDevelopmentEmulator=yes",
               "true or false");
    expect_bad("Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY;EntityPath=",
               "EntityPath");
}

int main(void)
{
    RUN(test_sas_key);
    RUN(test_emulator_and_port);
    RUN(test_sas_token);
    RUN(test_no_credential);
    RUN(test_malformed);
    return ib_test_done();
}
