/* The configuration table: defaults, file, environment, validation,
 * redaction, and a round trip of every entry. */
#include <stdlib.h>
#include <unistd.h>

#include "ib_log.h"
#include "ib_test.h"
#include "wk_config.h"

#define SB_CS                                                                                      \
    "Endpoint=sb://127.0.0.1:5672/;SharedAccessKeyName=root;SharedAccessKey=TopSecretKey123=;"     \
    "UseDevelopmentEmulator=true"
#define DB_CS "Driver={SQLite3};Database=/tmp/inboxd-test.db;Pwd={pa;ss}}word99}"

static char *write_tmp(const char *text)
{
    static int n;
    char *path = malloc(64);
    FILE *fp;
    snprintf(path, 64, "/tmp/inboxd-cfg-%d-%d.json", (int)getpid(), n++);
    fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
    return path;
}

static char *load_errors(const char *json, int *problems, wk_config_t *cfg)
{
    char *buf = NULL, *path = write_tmp(json);
    size_t len = 0;
    FILE *errs = open_memstream(&buf, &len);
    *problems = wk_config_load(cfg, path, errs);
    fclose(errs);
    unlink(path);
    free(path);
    return buf;
}

static void clear_env(void)
{
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        char env[128];
        wk_config_env_name(s->name, env, sizeof(env));
        unsetenv(env);
    }
    unsetenv("INBOXD_CONFIG");
}

static void test_defaults_parse(void)
{
    wk_config_t cfg;
    int n;
    char *errs = load_errors("{}", &n, &cfg);
    /* Only the required settings are missing from an empty file. */
    ASSERT_EQ(n, 3);
    ASSERT_CONTAINS(errs, "config: consumer: missing required");
    ASSERT_CONTAINS(errs, "config: servicebus.connection_string: missing required");
    ASSERT_CONTAINS(errs, "config: db.connection_string: missing required");
    ASSERT_EQ(cfg.servicebus.prefetch, 20);
    /* Defaults under which batches form: more in flight than db workers. */
    ASSERT_EQ(cfg.servicebus.max_concurrent_calls, 256);
    ASSERT_EQ(cfg.db.pool_size, 8);
    ASSERT_EQ(cfg.servicebus.max_held_mb, 64);
    ASSERT_STREQ(cfg.db.inbox_table, "inboxd_inbox");
    ASSERT_TRUE(cfg.db.migrate);
    ASSERT_TRUE(json_is_array(cfg.routes));
    free(errs);
    wk_config_free(&cfg);
}

static void test_three_problems_named(void)
{
    wk_config_t cfg;
    int n;
    char *errs = load_errors("{\"servicebus\":{\"prefetch\":-1,\"connection_string\":\"" SB_CS
                             "\",\"entity\":\"orders\"},\"db\":{\"connection_string\":\"" DB_CS
                             "\"},\"colour\":\"blue\"}",
                             &n, &cfg);
    ASSERT_EQ(n, 3);
    ASSERT_CONTAINS(errs, "config: colour: unknown key");
    ASSERT_CONTAINS(errs, "config: servicebus.prefetch:");
    ASSERT_CONTAINS(errs, "out of range");
    ASSERT_CONTAINS(errs, "config: consumer: missing required");
    free(errs);
    wk_config_free(&cfg);
}

static void test_wrong_types_and_enums(void)
{
    wk_config_t cfg;
    int n;
    char *errs = load_errors(
        "{\"consumer\":7,\"servicebus\":{\"sessions\":\"yes\",\"prefetch\":\"5\",\"bogus\":1,"
        "\"session_on_dead_letter\":\"stop\"},"
        "\"db\":{\"dialect\":\"oracle\"},\"retry\":{\"base_ms\":5000,\"max_ms\":100},"
        "\"routes\":{},\"errors\":{\"permanent_native\":[50400,\"HY000\",\"nope\"]},\"log\":5}",
        &n, &cfg);
    ASSERT_CONTAINS(errs, "config: consumer: wrong type");
    ASSERT_CONTAINS(errs, "config: servicebus.sessions: wrong type");
    ASSERT_CONTAINS(errs, "config: servicebus.prefetch: wrong type");
    ASSERT_CONTAINS(errs, "config: servicebus.bogus: unknown key");
    ASSERT_CONTAINS(errs, "config: servicebus.session_on_dead_letter: file: must be one of continue|park");
    ASSERT_CONTAINS(errs, "config: db.dialect:");
    ASSERT_CONTAINS(errs, "must be one of");
    ASSERT_CONTAINS(errs, "config: retry.base_ms:");
    ASSERT_CONTAINS(errs, "config: routes: wrong type");
    ASSERT_CONTAINS(errs, "config: errors.permanent_native: element 2");
    ASSERT_CONTAINS(errs, "config: log: wrong type");
    free(errs);
    wk_config_free(&cfg);
    errs = load_errors("{\"consumer\": ", &n, &cfg);
    ASSERT_EQ(n >= 1, 1);
    ASSERT_CONTAINS(errs, "cannot load");
    free(errs);
    wk_config_free(&cfg);
}

static void test_env_overrides_file(void)
{
    wk_config_t cfg;
    int n;
    char *errs;
    setenv("INBOXD_SERVICEBUS_PREFETCH", "7", 1);
    setenv("INBOXD_CONSUMER", "from-env", 1);
    setenv("INBOXD_DB_MIGRATE", "false", 1);
    setenv("INBOXD_ROUTES", "[{\"match\":\"*\",\"action\":\"complete\"}]", 1);
    errs = load_errors("{\"consumer\":\"from-file\",\"servicebus\":{\"prefetch\":3,"
                       "\"connection_string\":\"" SB_CS ";EntityPath=orders\"},"
                       "\"db\":{\"connection_string\":\"" DB_CS "\"}}",
                       &n, &cfg);
    ASSERT_EQ(n, 0);
    ASSERT_EQ(cfg.servicebus.prefetch, 7);
    ASSERT_STREQ(cfg.consumer, "from-env");
    ASSERT_TRUE(!cfg.db.migrate);
    ASSERT_EQ(json_array_size(cfg.routes), 1);
    ASSERT_STREQ(cfg.servicebus.entity, "orders"); /* from EntityPath */
    free(errs);
    wk_config_free(&cfg);
    setenv("INBOXD_SERVICEBUS_PREFETCH", "-3", 1);
    errs = load_errors("{}", &n, &cfg);
    ASSERT_CONTAINS(errs,
                    "config: servicebus.prefetch: INBOXD_SERVICEBUS_PREFETCH: -3 is out of range");
    free(errs);
    wk_config_free(&cfg);
    clear_env();
}

static void test_redaction_and_log_mask(void)
{
    wk_config_t cfg;
    int n;
    char *errs, *text, *logbuf = NULL;
    size_t loglen = 0;
    FILE *logfp;

    errs = load_errors("{\"consumer\":\"c\",\"servicebus\":{\"entity\":\"q\",\"connection_string\":"
                       "\"" SB_CS "\"},\"db\":{\"connection_string\":\"" DB_CS "\"}}",
                       &n, &cfg);
    ASSERT_EQ(n, 0);
    json_t *j = wk_config_to_json(&cfg);
    text = json_dumps(j, 0);
    ASSERT_NOT_CONTAINS(text, "TopSecretKey123");
    ASSERT_NOT_CONTAINS(text, "word99");
    ASSERT_CONTAINS(text, "<redacted>");
    free(text);
    json_decref(j);
    /* Loading registered the secrets with the logger: a careless line is masked. */
    logfp = open_memstream(&logbuf, &loglen);
    ib_log_set_stream(logfp);
    IB_LOG(IB_LOG_ERROR, "careless", IB_MSG(cfg.servicebus.connection_string),
           IB_S("db", cfg.db.connection_string), IB_S("key", "TopSecretKey123="),
           IB_S("pwd", "pa;ss}word99"));
    ib_log_set_stream(NULL);
    fclose(logfp);
    ASSERT_NOT_CONTAINS(logbuf, "TopSecretKey123");
    ASSERT_NOT_CONTAINS(logbuf, "word99");
    free(logbuf);
    free(errs);
    wk_config_free(&cfg);
    ib_log_clear_secrets();
}

static void test_auth_and_credentials(void)
{
    wk_config_t cfg;
    int n;
    char *errs;
    const char *base = "{\"consumer\":\"c\",\"db\":{\"connection_string\":\"" DB_CS "\"},"
                       "\"servicebus\":{\"connection_string\":"
                       "\"Endpoint=sb://ns.servicebus.windows.net/;EntityPath=orders\"";
    char text[1024];

    /* Azure AD: a connection string without a key is what the chart passes. */
    snprintf(text, sizeof(text), "%s,\"auth\":\"workload_identity\"}}", base);
    errs = load_errors(text, &n, &cfg);
    ASSERT_EQ(n, 0);
    ASSERT_STREQ(cfg.servicebus.entity, "orders");
    free(errs);
    wk_config_free(&cfg);
    /* SAS without a key cannot authenticate. */
    snprintf(text, sizeof(text), "%s}}", base);
    errs = load_errors(text, &n, &cfg);
    ASSERT_EQ(n, 1);
    ASSERT_CONTAINS(errs, "config: servicebus.connection_string: has no SharedAccessKeyName");
    free(errs);
    wk_config_free(&cfg);
    ib_log_clear_secrets();
}

/* outbox.claim_check_*: a threshold needs a container and the credential its auth names. */
static void test_outbox_claim_check(void)
{
    wk_config_t cfg;
    int n;
    char *errs;
    const char *base = "{\"consumer\":\"c\",\"db\":{\"connection_string\":\"" DB_CS "\"},"
                       "\"servicebus\":{\"connection_string\":"
                       "\"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
                       "SharedAccessKey=a2V5;EntityPath=orders\"},\"outbox\":";
    char text[1024];

    snprintf(text, sizeof(text), "%s{\"claim_check_over_bytes\":262144}}", base);
    errs = load_errors(text, &n, &cfg);
    ASSERT_EQ(n, 2);
    ASSERT_CONTAINS(errs, "config: outbox.claim_check_container:");
    ASSERT_CONTAINS(errs, "config: outbox.claim_check_sas:");
    free(errs);
    wk_config_free(&cfg);
    snprintf(text, sizeof(text),
             "%s{\"claim_check_over_bytes\":262144,\"claim_check_container\":"
             "\"https://a.blob.core.windows.net/c?sv=1\",\"claim_check_auth\":\"shared_key\","
             "\"claim_check_account\":\"a\"}}", base);
    errs = load_errors(text, &n, &cfg);
    ASSERT_EQ(n, 2);
    ASSERT_CONTAINS(errs, "without query");
    ASSERT_CONTAINS(errs, "config: outbox.claim_check_auth: shared_key needs");
    free(errs);
    wk_config_free(&cfg);
    snprintf(text, sizeof(text),
             "%s{\"claim_check_over_bytes\":262144,\"claim_check_container\":"
             "\"https://a.blob.core.windows.net/c\",\"claim_check_auth\":\"workload_identity\"}}",
             base);
    errs = load_errors(text, &n, &cfg);
    ASSERT_EQ(n, 0);
    ASSERT_EQ(cfg.outbox.claim_check_over_bytes, 262144);
    free(errs);
    wk_config_free(&cfg);
    ib_log_clear_secrets();
}

/* One config with db.auth workload_identity and the given db connection string and dialect. */
static char *load_db_auth(const char *db_cs, const char *dialect, int *n, wk_config_t *cfg)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"consumer\":\"c\",\"servicebus\":{\"connection_string\":"
             "\"Endpoint=sb://ns.servicebus.windows.net/;EntityPath=orders\",\"auth\":"
             "\"workload_identity\"},\"db\":{\"auth\":\"workload_identity\",\"dialect\":\"%s\","
             "\"connection_string\":\"%s\"}}",
             dialect, db_cs);
    return load_errors(text, n, cfg);
}

/* db.auth workload_identity: checked at load, naming the driver or the key that must go. */
static void test_db_auth(void)
{
    wk_config_t cfg;
    int n;
    char *errs;

    errs = load_db_auth("Driver={ODBC Driver 18 for SQL Server};Server=tcp:x.database.windows.net,"
                        "1433;Database=orders;Encrypt=yes",
                        "mssql", &n, &cfg);
    ASSERT_EQ(n, 0);
    ASSERT_STREQ(cfg.db.auth, "workload_identity");
    free(errs);
    wk_config_free(&cfg);
    errs = load_db_auth("Driver={FreeTDS};Server=x;Port=1433;Database=orders", "auto", &n, &cfg);
    ASSERT_EQ(n, 1);
    ASSERT_CONTAINS(errs, "config: db.auth: workload_identity hands the driver an Azure AD access "
                          "token (SQL_COPT_SS_ACCESS_TOKEN), which the ODBC driver 'FreeTDS'");
    free(errs);
    wk_config_free(&cfg);
    errs = load_db_auth("Driver={ODBC Driver 18 for SQL Server};Server=x;Uid=app;Pwd=pw-77",
                        "mssql", &n, &cfg);
    ASSERT_EQ(n, 1);
    ASSERT_CONTAINS(errs, "config: db.connection_string: remove UID");
    ASSERT_NOT_CONTAINS(errs, "pw-77");
    free(errs);
    wk_config_free(&cfg);
    errs = load_db_auth("Driver={PostgreSQL Unicode};Server=x", "postgresql", &n, &cfg);
    ASSERT_EQ(n, 2);
    ASSERT_CONTAINS(errs, "config: db.auth: workload_identity works with SQL Server only");
    free(errs);
    wk_config_free(&cfg);
    ib_log_clear_secrets();
}

/* Every entry survives print -> file -> load unchanged (the redacted
 * secrets aside, which a real file supplies). */
static void test_round_trip_every_entry(void)
{
    wk_config_t a, b;
    int n;
    char *errs, *text, *path;
    json_t *ja, *jb;

    errs = load_errors("{\"consumer\":\"c\",\"servicebus\":{\"entity\":\"q\",\"prefetch\":99,"
                       "\"sessions\":true,\"connection_string\":\"" SB_CS "\"},\"db\":"
                       "{\"connection_string\":\"" DB_CS "\",\"dialect\":\"sqlite\"},"
                       "\"log\":{\"level\":\"debug\"},\"errors\":{\"transient_native\":[1205]}}",
                       &n, &a);
    ASSERT_EQ(n, 0);
    free(errs);
    ja = wk_config_to_json(&a);
    json_object_set_new(json_object_get(ja, "servicebus"), "connection_string", json_string(SB_CS));
    json_object_set_new(json_object_get(ja, "db"), "connection_string", json_string(DB_CS));
    text = json_dumps(ja, 0);
    path = write_tmp(text);
    ASSERT_EQ(wk_config_load(&b, path, stderr), 0);
    jb = wk_config_to_json(&b);
    json_object_set_new(json_object_get(jb, "servicebus"), "connection_string", json_string(SB_CS));
    json_object_set_new(json_object_get(jb, "db"), "connection_string", json_string(DB_CS));
    ASSERT_TRUE(json_equal(ja, jb));
    /* Each table entry is present in the printed config. */
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        char sec[64];
        const char *dot = strchr(s->name, '.');
        json_t *v;
        if (dot) {
            snprintf(sec, sizeof(sec), "%.*s", (int)(dot - s->name), s->name);
            v = json_object_get(json_object_get(jb, sec), dot + 1);
        } else {
            v = json_object_get(jb, s->name);
        }
        if (!v)
            fprintf(stderr, "missing from print-config: %s\n", s->name);
        ASSERT_TRUE(v != NULL);
    }
    unlink(path);
    free(path);
    free(text);
    json_decref(ja);
    json_decref(jb);
    wk_config_free(&a);
    wk_config_free(&b);
    ib_log_clear_secrets();
}

int main(void)
{
    clear_env();
    RUN(test_defaults_parse);
    RUN(test_three_problems_named);
    RUN(test_wrong_types_and_enums);
    RUN(test_env_overrides_file);
    RUN(test_redaction_and_log_mask);
    RUN(test_auth_and_credentials);
    RUN(test_db_auth);
    RUN(test_outbox_claim_check);
    RUN(test_round_trip_every_entry);
    return ib_test_done();
}
