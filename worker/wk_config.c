#include "wk_config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db_connstr.h"
#include "db_inbox.h"
#include "db_outbox.h"
#include "db_replicas.h"
#include "ib_json.h"
#include "ib_log.h"
#include "ib_problems.h"
#include "sb_connstr.h"
#include "sb_transport.h"
#include "wk_health.h"

#define OFF(field) offsetof(wk_config_t, field)

static void resolve_max_deliveries(wk_config_t *cfg);
#define NOLIM 0, 0

const wk_setting_t wk_settings[] = {
    {"consumer", WK_CT_STR, "", NOLIM, NULL, WK_CF_REQUIRED,
     "Name of this consumer; part of the inbox key, so several consumers can share one table.",
     OFF(consumer)},
    {"servicebus.connection_string", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE | WK_CF_REQUIRED,
     "Service Bus connection string "
     "(Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...).",
     OFF(servicebus.connection_string)},
    {"servicebus.entity", WK_CT_STR, "", NOLIM, NULL, 0,
     "Queue name or topic/Subscriptions/subscription; defaults to the connection string's "
     "EntityPath.",
     OFF(servicebus.entity)},
    {"servicebus.auth", WK_CT_ENUM, "sas", NOLIM, "sas|workload_identity", 0,
     "How to authenticate: sas (from the connection string) or workload_identity (Azure AD).",
     OFF(servicebus.auth)},
    {"servicebus.sessions", WK_CT_BOOL, "false", NOLIM, NULL, 0,
     "Receive from a session-enabled entity, each session's messages in order.",
     OFF(servicebus.sessions)},
    {"servicebus.prefetch", WK_CT_INT, "20", 0, 10000, NULL, 0,
     "Messages buffered beyond those in flight.", OFF(servicebus.prefetch)},
    {"servicebus.max_concurrent_calls", WK_CT_INT, "256", 1, 1024, NULL, 0,
     "Messages in flight at once (locks held and renewed), shared by the db workers, whose "
     "batches form from them; with sessions, beyond each session's next message.",
     OFF(servicebus.max_concurrent_calls)},
    {"servicebus.max_held_mb", WK_CT_INT, "64", 0, 65536, NULL, 0,
     "Memory of received messages (arriving, buffered and in flight, each counted at twice "
     "its size) and claim-checked blobs held at most, in MiB: while it is spent no credit is "
     "given and an arriving message is not read on; a larger message is taken alone, a larger "
     "blob is dead-lettered ClaimCheckTooLarge (0 = no byte bound).",
     OFF(servicebus.max_held_mb)},
    {"servicebus.max_concurrent_sessions", WK_CT_INT, "32", 1, 1024, NULL, 0,
     "Sessions processed at once when sessions is true.",
     OFF(servicebus.max_concurrent_sessions)},
    {"servicebus.session_prefetch", WK_CT_INT, "4", 1, 1000, NULL, 0,
     "Messages of one session fetched ahead (per drain) when sessions is true.",
     OFF(servicebus.session_prefetch)},
    {"servicebus.max_auto_lock_renewal_s", WK_CT_INT, "300", 0, 86400, NULL, 0,
     "How long a message's lock is renewed while it is processed (0 = never renew).",
     OFF(servicebus.max_auto_lock_renewal_s)},
    {"servicebus.session_idle_timeout_s", WK_CT_INT, "60", 1, 3600, NULL, 0,
     "Upper bound before a session whose drain the broker leaves unanswered is given back.",
     OFF(servicebus.session_idle_timeout_s)},
    {"servicebus.session_on_dead_letter", WK_CT_ENUM, "continue", NOLIM, "continue|park", 0,
     "When inboxd dead-letters a message of a session: continue with the session's next "
     "message, or park the session (its Service Bus session state records why; its later "
     "messages wait untouched until inboxctl session unpark).",
     OFF(servicebus.session_on_dead_letter)},
    {"servicebus.reconnect_max_ms", WK_CT_INT, "30000", 100, 600000, NULL, 0,
     "Upper bound of the reconnect backoff.", OFF(servicebus.reconnect_max_ms)},
    {"servicebus.settle_timeout_ms", WK_CT_INT, "10000", 100, 600000, NULL, 0,
     "A settlement the broker has not answered after this long is reported settlement_unknown "
     "and its receive link recycled; it never holds a worker meanwhile.",
     OFF(servicebus.settle_timeout_ms)},
    {"servicebus.stall_timeout_ms", WK_CT_INT, "60000", 1000, 3600000, NULL, 0,
     "A receive link with credit out and no message for this long, while the entity poller "
     "(servicebus.entity_poll_s) counts messages waiting, is recycled; a second stall in a row "
     "recycles the connection.",
     OFF(servicebus.stall_timeout_ms)},
    {"servicebus.max_delivery_count", WK_CT_INT, "0", 0, 2000, NULL, 0,
     "The entity's MaxDeliveryCount, when known (0 = unknown); --check-config warns when "
     "retry.max_deliveries is not below it, or when it differs from the one Service Bus gives.",
     OFF(servicebus.max_delivery_count)},
    {"servicebus.duplicate_detection_window_s", WK_CT_INT, "0", 0, 31536000, NULL, 0,
     "The entity's duplicate-detection history, when known (0 = unknown or off); "
     "--check-config warns when db.inbox_retention_days is shorter.",
     OFF(servicebus.duplicate_detection_window_s)},
    {"servicebus.message_ttl_s", WK_CT_INT, "0", 0, 3153600000LL, NULL, 0,
     "The entity's default message time to live, when known (0 = unknown); --check-config "
     "warns when db.inbox_retention_days is shorter.",
     OFF(servicebus.message_ttl_s)},
    {"servicebus.entity_poll_s", WK_CT_INT, "30", 0, 3600, NULL, 0,
     "How often to read the entity's counts, MaxDeliveryCount and LockDuration from Service "
     "Bus's management endpoint, and peek its oldest message (0 = off).",
     OFF(servicebus.entity_poll_s)},
    {"servicebus.management_endpoint", WK_CT_STR, "", NOLIM, NULL, 0,
     "Base URL of the management endpoint (empty = https://HOST/ of the connection string).",
     OFF(servicebus.management_endpoint)},
    {"servicebus.sas_token_lifetime_s", WK_CT_INT, "3600", 5, 86400, NULL, 0,
     "How long the SAS tokens inboxd signs with the connection string's SharedAccessKey last; "
     "each is put again on $cbs a quarter of its lifetime (at least 2 min, at most half) "
     "before it expires.",
     OFF(servicebus.sas_token_lifetime_s)},
    {"servicebus.ca_file", WK_CT_STR, "", NOLIM, NULL, 0,
     "PEM file of CA certificates to trust instead of the system store.", OFF(servicebus.ca_file)},
    {"servicebus.transport", WK_CT_ENUM, "auto", NOLIM, "auto|amqp|websockets", 0,
     "amqp: TCP 5671; websockets: wss:// on 443 (through a proxy if one is set); auto: AMQP "
     "first, WebSockets when AMQP is not up within 5 s, the first to work kept for the "
     "process's life. TransportType=AmqpWebSockets in the connection string means websockets.",
     OFF(servicebus.transport)},
    {"servicebus.proxy", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE,
     "HTTP proxy for WebSockets, http://[user:password@]host:port (CONNECT, Basic auth); "
     "empty: HTTPS_PROXY / https_proxy unless NO_PROXY names the namespace.",
     OFF(servicebus.proxy)},
    {"servicebus.websocket_port", WK_CT_INT, "0", 0, 65535, NULL, 0,
     "Port of the wss:// endpoint (a gateway's or an emulator's); 0: 443, or the Endpoint's "
     "port when the transport is websockets.",
     OFF(servicebus.websocket_port)},
    {"db.connection_string", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE | WK_CF_REQUIRED,
     "ODBC connection string (Driver={ODBC Driver 18 for SQL Server};Server=...).",
     OFF(db.connection_string)},
    {"db.dialect", WK_CT_ENUM, "auto", NOLIM, "auto|mssql|postgresql|sqlite|mariadb", 0,
     "SQL dialect; auto detects it from the driver's SQL_DBMS_NAME.", OFF(db.dialect)},
    {"db.auth", WK_CT_ENUM, "password", NOLIM, "password|workload_identity", 0,
     "How to log in: password (credentials in the connection string) or workload_identity (an "
     "Azure AD token for Azure SQL; needs Microsoft's ODBC Driver 18 for SQL Server).",
     OFF(db.auth)},
    {"db.pool_size", WK_CT_INT, "8", 0, 256, NULL, 0,
     "Database worker threads, one connection each (0 = max_concurrent_calls, at most 8).",
     OFF(db.pool_size)},
    {"db.pool_scope", WK_CT_ENUM, "cluster", NOLIM, "cluster|process", 0,
     "cluster: pool_size is for all the consumer's replicas together; each takes jobs on its "
     "share of the workers among the replicas alive in db.replicas_table (its heartbeat), so "
     "more replicas do not mean more transactions at once. process: every replica uses all of "
     "pool_size.",
     OFF(db.pool_scope)},
    {"db.batch_max", WK_CT_INT, "32", 1, 1000, NULL, 0,
     "Most messages a db worker applies in one transaction: those already waiting, a "
     "session's in its order (1 = one transaction per message). Outcomes and guarantees are "
     "the same.",
     OFF(db.batch_max)},
    {"db.batch_linger_ms", WK_CT_INT, "0", 0, 1000, NULL, 0,
     "How long a db worker waits for more messages before applying a batch smaller than "
     "batch_max (0 = never: a lone message is not held back).",
     OFF(db.batch_linger_ms)},
    {"db.inbox_table", WK_CT_STR, DB_INBOX_DEFAULT_TABLE, NOLIM, NULL, 0,
     "Name of the inbox table (may be schema-qualified).", OFF(db.inbox_table)},
    {"db.migrate", WK_CT_BOOL, "true", NOLIM, NULL, 0,
     "Create the inbox table if absent; when false, check that it exists.", OFF(db.migrate)},
    {"db.statement_timeout_s", WK_CT_INT, "30", 1, 3600, NULL, 0, "Timeout of each statement.",
     OFF(db.statement_timeout_s)},
    {"db.inbox_retention_days", WK_CT_INT, "0", 0, 3650, NULL, 0,
     "Delete processed inbox rows older than this many days, in small batches; failed and "
     "uncertain rows are kept (0 = keep forever).",
     OFF(db.inbox_retention_days)},
    {"db.replicas_table", WK_CT_STR, DB_REPLICAS_DEFAULT_TABLE, NOLIM, NULL, 0,
     "Table where each replica writes a heartbeat, made (or checked, as the inbox table) when "
     "db.pool_scope is cluster or a route sets http.limit_scope cluster: the live replicas "
     "divide the pool and those limits.",
     OFF(db.replicas_table)},
    {"routes", WK_CT_JSON, "[]", NOLIM, NULL, 0,
     "Routes, first match wins: {match, sql, params, idempotency_key, on_permanent} or "
     "{match, action}.",
     OFF(routes)},
    {"outbox.enabled", WK_CT_ENUM, "auto", NOLIM, "auto|true|false", 0,
     "Use the outbox table (created or checked like the inbox table). auto: when a route "
     "emits or outbox.relay is true.",
     OFF(outbox.enabled)},
    {"outbox.relay", WK_CT_ENUM, "auto", NOLIM, "auto|true|false", 0,
     "Publish pending outbox rows from this process. auto: whenever the outbox is enabled; "
     "inboxd --relay-only runs the relay alone.",
     OFF(outbox.relay)},
    {"outbox.table", WK_CT_STR, DB_OUTBOX_DEFAULT_TABLE, NOLIM, NULL, 0,
     "Name of the outbox table (may be schema-qualified); applications may insert rows too.",
     OFF(outbox.table)},
    {"outbox.poll_ms", WK_CT_INT, "1000", 10, 600000, NULL, 0,
     "How often the relay looks for rows other processes wrote; local commits wake it at once.",
     OFF(outbox.poll_ms)},
    {"outbox.batch", WK_CT_INT, "100", 1, 1000, NULL, 0,
     "Rows the relay claims, sends and marks per transaction.", OFF(outbox.batch)},
    {"outbox.retention_s", WK_CT_INT, "86400", 0, 31536000, NULL, 0,
     "Published rows are deleted this long after publishing (small batches, one replica at a "
     "time).",
     OFF(outbox.retention_s)},
    {"outbox.backoff_max_ms", WK_CT_INT, "10000", 200, 600000, NULL, 0,
     "Longest wait before the relay tries again after a transient send failure.",
     OFF(outbox.backoff_max_ms)},
    {"outbox.claim_check_over_bytes", WK_CT_INT, "0", 0, 1073741824, NULL, 0,
     "A row whose body is larger than this is uploaded to outbox.claim_check_container and "
     "published with its reference (blob-url, blob-sha256, blob-size) instead of the body "
     "(0 = off; e.g. 196608 under the Standard tier's 256 KB).",
     OFF(outbox.claim_check_over_bytes)},
    {"outbox.claim_check_container", WK_CT_STR, "", NOLIM, NULL, 0,
     "The container the relay uploads claim-checked bodies to, as a URL without query "
     "(https://ACCOUNT.blob.core.windows.net/CONTAINER); each blob is named after its row's "
     "message id.",
     OFF(outbox.claim_check_container)},
    {"outbox.claim_check_auth", WK_CT_ENUM, "sas", NOLIM, "sas|shared_key|workload_identity", 0,
     "How the relay authenticates its uploads: sas (outbox.claim_check_sas), shared_key "
     "(account and account_key) or workload_identity (a token for https://storage.azure.com/).",
     OFF(outbox.claim_check_auth)},
    {"outbox.claim_check_sas", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE,
     "auth sas: the container SAS's query (without '?'), with create and write permission.",
     OFF(outbox.claim_check_sas)},
    {"outbox.claim_check_read_sas", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE,
     "A read SAS query appended to each published blob-url, for consumers that read with "
     "claim_check auth sas (\"\" = the URL alone: consumers bring their own credential).",
     OFF(outbox.claim_check_read_sas)},
    {"outbox.claim_check_account", WK_CT_STR, "", NOLIM, NULL, 0,
     "auth shared_key: the storage account's name.", OFF(outbox.claim_check_account)},
    {"outbox.claim_check_account_key", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE,
     "auth shared_key: the storage account's key (base64).", OFF(outbox.claim_check_account_key)},
    {"outbox.claim_check_timeout_ms", WK_CT_INT, "30000", 100, 600000, NULL, 0,
     "Each upload request (Put Blob, each Put Block, Put Block List), connect included.",
     OFF(outbox.claim_check_timeout_ms)},
    {"outbox.claim_check_ca_file", WK_CT_STR, "", NOLIM, NULL, 0,
     "PEM bundle that verifies the storage endpoint (\"\" = the system store).",
     OFF(outbox.claim_check_ca_file)},
    {"retry.attempts", WK_CT_INT, "3", 0, 100, NULL, 0,
     "In-process attempts after a transient failure before the message is abandoned.",
     OFF(retry.attempts)},
    {"retry.base_ms", WK_CT_INT, "200", 1, 600000, NULL, 0,
     "First backoff step; doubled each attempt, with full jitter.", OFF(retry.base_ms)},
    {"retry.max_ms", WK_CT_INT, "10000", 1, 3600000, NULL, 0, "Largest backoff step.",
     OFF(retry.max_ms)},
    {"retry.max_deliveries", WK_CT_INT, "-1", -1, 2000, NULL, 0,
     "From this delivery on, a transient failure that outlasts the attempts (or a held "
     "message's lock renewal) dead-letters RetryBudgetExhausted naming the last error, before "
     "the broker's MaxDeliveryCount (-1 = one below the entity's MaxDeliveryCount once read from "
     "Service Bus (servicebus.entity_poll_s), until then one below servicebus.max_delivery_count "
     "when known, else 9, one below Service Bus's default of 10; 0 = off).",
     OFF(retry.max_deliveries)},
    {"retry.max_age_s", WK_CT_INT, "0", 0, 31536000, NULL, 0,
     "A transient failure of a message enqueued longer ago than this dead-letters it "
     "MaxAgeExceeded (0 = off).",
     OFF(retry.max_age_s)},
    {"errors.transient_native", WK_CT_JSON, "[]", NOLIM, NULL, 0,
     "Extra errors to treat as transient: native codes (integers) or SQLSTATEs (strings).",
     OFF(errors.transient_native)},
    {"errors.permanent_native", WK_CT_JSON, "[]", NOLIM, NULL, 0,
     "Extra errors to treat as permanent (e.g. 50400 from THROW 50400): native codes or "
     "SQLSTATEs.",
     OFF(errors.permanent_native)},
    {"errors.circuit_breaker", WK_CT_BOOL, "true", NOLIM, NULL, 0,
     "Stop receiving while the database's setup (a missing table, a revoked privilege, a "
     "read-only or full database) fails every message; probe it with backoff and resume.",
     OFF(errors.circuit_breaker)},
    {"shutdown.drain_timeout_s", WK_CT_INT, "30", 0, 3600, NULL, 0,
     "On SIGTERM, how long in-flight work may take to finish.", OFF(shutdown.drain_timeout_s)},
    {"http.listen", WK_CT_STR, "0.0.0.0:9090", NOLIM, NULL, 0,
     "Address of /healthz, /readyz and /metrics (empty disables).", OFF(http.listen)},
    {"log.level", WK_CT_ENUM, "info", NOLIM, NULL, 0, "debug, info, warn or error.",
     OFF(log.level)},
    {"otel.endpoint", WK_CT_STR, "", NOLIM, NULL, 0,
     "OTLP/HTTP base URL of the trace collector; /v1/traces is appended (empty: "
     "OTEL_EXPORTER_OTLP_ENDPOINT; tracing is off when no endpoint is set).",
     OFF(otel.endpoint)},
    {"otel.traces_endpoint", WK_CT_STR, "", NOLIM, NULL, 0,
     "OTLP/HTTP URL of the traces, used as it is (empty: "
     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).",
     OFF(otel.traces_endpoint)},
    {"otel.protocol", WK_CT_STR, "", NOLIM, NULL, 0,
     "http/protobuf or http/json (empty: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).",
     OFF(otel.protocol)},
    {"otel.headers", WK_CT_STR, "", NOLIM, NULL, WK_CF_SENSITIVE,
     "Headers of each export request, key=value,... (empty: OTEL_EXPORTER_OTLP_HEADERS).",
     OFF(otel.headers)},
    {"otel.service_name", WK_CT_STR, "", NOLIM, NULL, 0,
     "service.name of the spans (empty: OTEL_SERVICE_NAME, else inboxd).",
     OFF(otel.service_name)},
    {"otel.resource_attributes", WK_CT_STR, "", NOLIM, NULL, 0,
     "Resource attributes, key=value,... (empty: OTEL_RESOURCE_ATTRIBUTES).",
     OFF(otel.resource_attributes)},
    {"otel.sampler", WK_CT_STR, "", NOLIM, NULL, 0,
     "always_on, always_off, traceidratio or parentbased_* of those (empty: "
     "OTEL_TRACES_SAMPLER, else parentbased_traceidratio at 0.01: a sender's "
     "decision followed, 1 in 100 messages without trace context traced).",
     OFF(otel.sampler)},
    {"otel.sampler_arg", WK_CT_STR, "", NOLIM, NULL, 0,
     "The ratio of the traceidratio samplers, 0 to 1 (empty: OTEL_TRACES_SAMPLER_ARG, else "
     "1; 0.01 when no sampler is named).",
     OFF(otel.sampler_arg)},
    {NULL, 0, NULL, NOLIM, NULL, 0, NULL, 0},
};

/* log.level takes its choices from the logger itself. */
static const char *choices_of(const wk_setting_t *s)
{
    if (s->type == WK_CT_ENUM && !s->choices)
        return "debug|info|warn|error";
    return s->choices;
}

static const char *type_name(wk_config_type_t t)
{
    switch (t) {
    case WK_CT_STR:
        return "string";
    case WK_CT_INT:
        return "integer";
    case WK_CT_BOOL:
        return "boolean";
    case WK_CT_ENUM:
        return "enum";
    default:
        return "json";
    }
}

static const wk_setting_t *find_setting(const char *name)
{
    for (const wk_setting_t *s = wk_settings; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

static bool enum_has(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *c = choices;
    while (c && *c) {
        const char *bar = strchr(c, '|');
        size_t l = bar ? (size_t)(bar - c) : strlen(c);
        if (l == n && strncmp(c, v, n) == 0)
            return true;
        c = bar ? bar + 1 : NULL;
    }
    return false;
}

/* Stores a value given as text (defaults and environment). */
static void set_from_text(wk_config_t *cfg, const wk_setting_t *s, const char *text,
                          const char *origin, ib_problems_t *p)
{
    void *slot = (char *)cfg + s->offset;

    switch (s->type) {
    case WK_CT_STR:
    case WK_CT_ENUM: {
        char *dup;
        if (s->type == WK_CT_ENUM && !enum_has(choices_of(s), text)) {
            ib_problem(p, s->name, "%s: must be one of %s", origin, choices_of(s));
            return;
        }
        dup = strdup(text);
        if (!dup) {
            ib_problem(p, s->name, "out of memory");
            return;
        }
        free(*(char **)slot);
        *(char **)slot = dup;
        return;
    }
    case WK_CT_INT: {
        char *end;
        long long v;
        errno = 0;
        v = strtoll(text, &end, 10);
        if (!*text || *end || errno) {
            ib_problem(p, s->name, "%s: wrong type, expected an integer", origin);
            return;
        }
        if (v < s->min || v > s->max) {
            ib_problem(p, s->name, "%s: %lld is out of range [%lld, %lld]", origin, v, s->min,
                       s->max);
            return;
        }
        *(long long *)slot = v;
        return;
    }
    case WK_CT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            *(bool *)slot = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            *(bool *)slot = false;
        else
            ib_problem(p, s->name, "%s: wrong type, expected true or false", origin);
        return;
    case WK_CT_JSON: {
        json_error_t jerr;
        json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);
        if (!v) {
            char why[128];
            /* Never jansson's text: it quotes the value, which may be a secret. */
            ib_problem(p, s->name, "%s: invalid JSON: %s", origin,
                       ib_json_error_describe(&jerr, why, sizeof(why)));
            return;
        }
        if (!json_is_array(v)) {
            json_decref(v);
            ib_problem(p, s->name, "%s: wrong type, expected an array", origin);
            return;
        }
        json_decref(*(json_t **)slot);
        *(json_t **)slot = v;
        return;
    }
    }
}

/* Stores a value from the JSON file, checking its JSON type. */
static void set_from_json(wk_config_t *cfg, const wk_setting_t *s, json_t *v, ib_problems_t *p)
{
    void *slot = (char *)cfg + s->offset;
    char num[32];

    switch (s->type) {
    case WK_CT_STR:
    case WK_CT_ENUM:
        if (!json_is_string(v)) {
            ib_problem(p, s->name, "wrong type, expected a string");
            return;
        }
        set_from_text(cfg, s, json_string_value(v), "file", p);
        return;
    case WK_CT_INT:
        if (!json_is_integer(v)) {
            ib_problem(p, s->name, "wrong type, expected an integer");
            return;
        }
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        set_from_text(cfg, s, num, "file", p);
        return;
    case WK_CT_BOOL:
        if (!json_is_boolean(v)) {
            ib_problem(p, s->name, "wrong type, expected true or false");
            return;
        }
        *(bool *)slot = json_is_true(v);
        return;
    case WK_CT_JSON:
        if (!json_is_array(v)) {
            ib_problem(p, s->name, "wrong type, expected an array");
            return;
        }
        json_decref(*(json_t **)slot);
        *(json_t **)slot = json_incref(v);
        return;
    }
}

static bool is_section(const char *key)
{
    size_t n = strlen(key);
    for (const wk_setting_t *s = wk_settings; s->name; s++)
        if (strncmp(s->name, key, n) == 0 && s->name[n] == '.')
            return true;
    return false;
}

/*
 * Applies the file's settings; false when the file cannot be read or parsed
 * (one problem naming the path, in fp; the settings' own go to p), so that
 * the checks which would only repeat it as missing settings are skipped.
 */
static bool load_file(wk_config_t *cfg, const char *path, ib_problems_t *fp, ib_problems_t *p)
{
    json_error_t jerr;
    json_t *root;
    const char *key;
    json_t *v;
    struct stat st;

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        ib_problem(fp, path, "cannot load: it is a directory, not a JSON file");
        return false;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char why[128];
        if (json_error_code(&jerr) == json_error_cannot_open_file)
            ib_problem(fp, path, "cannot load: %s", jerr.text);
        else
            ib_problem(fp, path, "cannot load: %s",
                       ib_json_error_describe(&jerr, why, sizeof(why)));
        return false;
    }
    if (!json_is_object(root)) {
        ib_problem(fp, path, "the top level must be a JSON object");
        json_decref(root);
        return false;
    }
    json_object_foreach(root, key, v)
    {
        const wk_setting_t *s = find_setting(key);
        if (s) {
            set_from_json(cfg, s, v, p);
        } else if (is_section(key)) {
            const char *sub;
            json_t *sv;
            if (!json_is_object(v)) {
                ib_problem(p, key, "wrong type, expected an object");
                continue;
            }
            json_object_foreach(v, sub, sv)
            {
                char full[256];
                snprintf(full, sizeof(full), "%s.%s", key, sub);
                s = find_setting(full);
                if (s)
                    set_from_json(cfg, s, sv, p);
                else
                    ib_problem(p, full, "unknown key");
            }
        } else {
            ib_problem(p, key, "unknown key");
        }
    }
    json_decref(root);
    return true;
}

void wk_config_env_name(const char *name, char *buf, size_t size)
{
    size_t i = 0;
    int n = snprintf(buf, size, "INBOXD_");
    for (i = (size_t)n; *name && i + 1 < size; name++, i++)
        buf[i] = *name == '.' ? '_' : (char)toupper((unsigned char)*name);
    buf[i] = '\0';
}

static void register_secrets(const wk_config_t *cfg)
{
    const char *blob[] = {cfg->outbox.claim_check_sas, cfg->outbox.claim_check_read_sas,
                          cfg->outbox.claim_check_account_key};
    for (size_t i = 0; i < sizeof blob / sizeof blob[0]; i++)
        if (blob[i] && *blob[i])
            ib_log_add_secret(blob[i]);
    sb_connstr_t sb;
    db_connstr_t dbc;

    if (cfg->servicebus.connection_string && *cfg->servicebus.connection_string) {
        ib_log_add_secret(cfg->servicebus.connection_string);
        if (sb_connstr_parse(cfg->servicebus.connection_string, &sb, NULL) == IB_E_OK) {
            ib_log_add_secret(sb.key);
            ib_log_add_secret(sb.sas);
            sb_connstr_free(&sb);
        }
    }
    if (cfg->db.connection_string && *cfg->db.connection_string) {
        ib_log_add_secret(cfg->db.connection_string);
        if (db_connstr_parse(cfg->db.connection_string, &dbc, NULL) == IB_E_OK) {
            for (size_t k = 0; k < dbc.n; k++)
                if (db_connstr_key_is_secret(dbc.attrs[k].key))
                    ib_log_add_secret(dbc.attrs[k].value);
            db_connstr_free(&dbc);
        }
    }
}

/*
 * db.auth workload_identity: SQL Server only, and a connection string that
 * can carry an access token (Microsoft's driver, no UID/PWD/...). The db
 * layer's text names its key ("db.auth: ..." or "db.connection_string: ...").
 */
static void check_db_auth(const wk_config_t *cfg, ib_problems_t *p)
{
    ib_error_t err;
    const char *dialect = cfg->db.dialect ? cfg->db.dialect : "auto";

    if (!cfg->db.auth || strcmp(cfg->db.auth, "workload_identity") != 0)
        return;
    if (strcmp(dialect, "auto") != 0 && strcmp(dialect, "mssql") != 0)
        ib_problem(p, "db.auth", "workload_identity works with SQL Server only, not db.dialect %s",
                   dialect);
    if (!cfg->db.connection_string || !*cfg->db.connection_string ||
        db_token_connstr_check(cfg->db.connection_string, &err) == IB_E_OK)
        return;
    const char *colon = strstr(err.text, ": ");
    if (colon && (size_t)(colon - err.text) < 32) {
        char key[32];
        snprintf(key, sizeof(key), "%.*s", (int)(colon - err.text), err.text);
        ib_problem(p, key, "%s", colon + 2);
    } else {
        ib_problem(p, "db.auth", "%s", err.text);
    }
}

static void check_native_list(json_t *list, const char *name, ib_problems_t *p)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        if (json_is_integer(e))
            continue;
        if (json_is_string(e) && strlen(json_string_value(e)) == 5)
            continue;
        ib_problem(p, name, "element %zu must be a native error code or a 5-character SQLSTATE", i);
    }
}

/*
 * The inbox must remember a message as long as a copy of it can still
 * arrive: a copy enqueued just before the original was applied can wait in
 * the entity for its time to live, and a producer's re-send is only caught
 * by the broker within its duplicate-detection history. A row swept before
 * then lets that copy apply again.
 */
static void warn_retention(const wk_config_t *cfg, ib_problems_t *p)
{
    long long keep = cfg->db.inbox_retention_days * 86400LL;
    const struct {
        const char *key;
        long long s;
    } windows[] = {{"servicebus.message_ttl_s", cfg->servicebus.message_ttl_s},
                   {"servicebus.duplicate_detection_window_s",
                    cfg->servicebus.duplicate_detection_window_s}};
    if (keep <= 0 || !p->errs) /* 0: rows are kept forever */
        return;
    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++)
        if (windows[i].s > keep)
            fprintf(p->errs,
                    "config: warning: db.inbox_retention_days: %lld days (%lld s) is shorter than "
                    "%s (%lld s): a copy of a message can still arrive after its inbox row is "
                    "swept, and would apply again\n",
                    cfg->db.inbox_retention_days, keep, windows[i].key, windows[i].s);
}

/* The outbox's claim check: a container to upload to, and the credential its auth needs. */
static void validate_claim_check(const wk_config_t *cfg, ib_problems_t *p)
{
    const char *u = cfg->outbox.claim_check_container, *auth = cfg->outbox.claim_check_auth;
    if (cfg->outbox.claim_check_over_bytes == 0)
        return;
    if (!u || (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) ||
        strchr(u, '?') || strchr(u, '#'))
        ib_problem(p, "outbox.claim_check_container",
                   "claim_check_over_bytes is set: an http:// or https:// container URL without "
                   "query is needed");
    if (strcmp(auth, "shared_key") == 0 &&
        (!*cfg->outbox.claim_check_account || !*cfg->outbox.claim_check_account_key))
        ib_problem(p, "outbox.claim_check_auth",
                   "shared_key needs outbox.claim_check_account and claim_check_account_key");
    if (strcmp(auth, "sas") == 0 && !*cfg->outbox.claim_check_sas)
        ib_problem(p, "outbox.claim_check_sas",
                   "claim_check_auth sas needs the container SAS (its query, without '?')");
}

static void validate(wk_config_t *cfg, ib_problems_t *p)
{
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        if (!(s->flags & WK_CF_REQUIRED))
            continue;
        const char *v = *(char **)((char *)cfg + s->offset);
        if (!v || !*v) {
            char env[128];
            wk_config_env_name(s->name, env, sizeof(env));
            ib_problem(p, s->name, "missing required setting (set it in the file or %s)", env);
        }
    }
    if (cfg->servicebus.connection_string && *cfg->servicebus.connection_string) {
        sb_connstr_t sb;
        ib_error_t err;
        if (sb_connstr_parse(cfg->servicebus.connection_string, &sb, &err) != IB_E_OK) {
            ib_problem(p, "servicebus.connection_string", "%s", err.text);
        } else {
            if (sb.entity_path && !*cfg->servicebus.entity) {
                free(cfg->servicebus.entity);
                cfg->servicebus.entity = strdup(sb.entity_path);
            } else if (sb.entity_path && strcmp(sb.entity_path, cfg->servicebus.entity) != 0) {
                ib_problem(p, "servicebus.entity",
                           "'%s' differs from the connection string's EntityPath '%s'",
                           cfg->servicebus.entity, sb.entity_path);
            }
            if (!sb.sas && !sb.key && strcmp(cfg->servicebus.auth, "sas") == 0)
                ib_problem(p, "servicebus.connection_string",
                           "has no SharedAccessKeyName/SharedAccessKey or SharedAccessSignature "
                           "(required with servicebus.auth sas; use workload_identity for Azure "
                           "AD)");
            sb_connstr_free(&sb);
        }
    }
    if (cfg->db.connection_string && *cfg->db.connection_string) {
        db_connstr_t dbc;
        ib_error_t err;
        if (db_connstr_parse(cfg->db.connection_string, &dbc, &err) != IB_E_OK)
            ib_problem(p, "db.connection_string", "%s", err.text);
        else
            db_connstr_free(&dbc);
    }
    check_db_auth(cfg, p);
    warn_retention(cfg, p);
    if (cfg->consumer && strlen(cfg->consumer) > 200)
        ib_problem(p, "consumer", "longer than 200 characters");
    if (cfg->retry.base_ms > cfg->retry.max_ms)
        ib_problem(p, "retry.base_ms", "%lld is larger than retry.max_ms (%lld)",
                   cfg->retry.base_ms, cfg->retry.max_ms);
    resolve_max_deliveries(cfg);
    if (cfg->retry.max_deliveries > 0 && cfg->servicebus.max_delivery_count > 0 &&
        cfg->retry.max_deliveries >= cfg->servicebus.max_delivery_count && p->errs)
        fprintf(p->errs,
                "config: warning: retry.max_deliveries: %lld is not below the entity's "
                "MaxDeliveryCount (servicebus.max_delivery_count %lld): the broker may dead-letter "
                "first (a lost lock or a restart on the last delivery), as "
                "MaxDeliveryCountExceeded without the last error\n",
                cfg->retry.max_deliveries, cfg->servicebus.max_delivery_count);
    check_native_list(cfg->errors.transient_native, "errors.transient_native", p);
    check_native_list(cfg->errors.permanent_native, "errors.permanent_native", p);
    if (cfg->db.pool_size == 0)
        cfg->db.pool_size = cfg->servicebus.max_concurrent_calls < 8
                                ? cfg->servicebus.max_concurrent_calls
                                : 8;
    if (cfg->db.batch_max > 1 && !cfg->servicebus.sessions &&
        cfg->servicebus.max_concurrent_calls <= cfg->db.pool_size && p->errs)
        fprintf(p->errs,
                "config: warning: db.batch_max: batches cannot form: servicebus.max_concurrent_calls "
                "(%lld) is not above db.pool_size (%lld), so each db worker gets one message at a "
                "time; raise max_concurrent_calls (default 256) for batch speed\n",
                cfg->servicebus.max_concurrent_calls, cfg->db.pool_size);
    {
        ib_error_t err;
        if (wk_health_listen_check(cfg->http.listen, &err) != IB_E_OK)
            ib_problem(p, "http.listen", "%s", err.text);
    }
    {
        ib_error_t err;
        ot_options_t o = wk_config_otel(cfg);
        if (!ot_options_check(&o, &err))
            ib_problem(p, "otel", "%s", err.text);
    }
    validate_claim_check(cfg, p);
    for (const char *c = cfg->outbox.table; c && *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.') {
            ib_problem(p, "outbox.table", "only letters, digits, '_' and '.' are allowed");
            break;
        }
    for (const char *c = cfg->db.inbox_table; c && *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.') {
            ib_problem(p, "db.inbox_table", "only letters, digits, '_' and '.' are allowed");
            break;
        }
    for (const char *c = cfg->db.replicas_table; c && *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.') {
            ib_problem(p, "db.replicas_table", "only letters, digits, '_' and '.' are allowed");
            break;
        }
}

/*
 * retry.max_deliveries -1 (the default): one below the entity's
 * MaxDeliveryCount, so that inboxd, not the broker, dead-letters a message
 * whose transient failures outlast every delivery, with its reason and
 * context. --check-config says which value it took and why.
 */
static void resolve_max_deliveries(wk_config_t *cfg)
{
    long long mdc = cfg->servicebus.max_delivery_count;
    if (cfg->retry.max_deliveries != -1)
        return;
    cfg->retry.max_deliveries_auto = true;
    cfg->retry.max_deliveries =
        mdc > 1 ? mdc - 1 : mdc == 1 ? 0 : WK_SB_DEFAULT_MAX_DELIVERY_COUNT - 1;
}

void wk_config_explain_budget(const wk_config_t *cfg, FILE *out)
{
    long long mdc = cfg->servicebus.max_delivery_count;
    long long md = cfg->retry.max_deliveries;
    if (!cfg->retry.max_deliveries_auto) {
        fprintf(out, "retry.max_deliveries: %lld (set)%s\n", md, md ? "" : ": off, the broker's MaxDeliveryCount dead-letters without inboxd's context");
        return;
    }
    fprintf(out,
            "retry.max_deliveries: %lld, one below %s %lld: from that delivery on, a message whose "
            "transient failures outlast its retries (or its hold) is dead-lettered "
            "RetryBudgetExhausted with its last error, before the broker's "
            "MaxDeliveryCountExceeded (which carries none)%s\n",
            md, mdc > 0 ? "servicebus.max_delivery_count" : "Service Bus's default MaxDeliveryCount",
            mdc > 0 ? mdc : WK_SB_DEFAULT_MAX_DELIVERY_COUNT,
            mdc > 0 ? "" : "; set servicebus.max_delivery_count when the entity's differs");
}

/* wk_config_load, with the file's own problem (unreadable, not JSON) written to file_errs. */
static int load(wk_config_t *cfg, const char *path, FILE *errs, FILE *file_errs, bool *file_ok)
{
    ib_problems_t p = {.errs = errs}, fp = {.errs = file_errs};

    *file_ok = true;
    memset(cfg, 0, sizeof(*cfg));
    for (const wk_setting_t *s = wk_settings; s->name; s++)
        set_from_text(cfg, s, s->def, "default", &p);
    if (!path || !*path)
        path = getenv("INBOXD_CONFIG");
    if (path && *path) {
        *file_ok = load_file(cfg, path, &fp, &p);
        p.n += fp.n;
    }
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        char env[128];
        const char *v;
        wk_config_env_name(s->name, env, sizeof(env));
        v = getenv(env);
        if (v)
            set_from_text(cfg, s, v, env, &p);
    }
    /* Settings the unread file would have given are not missing: its error is the news. */
    if (*file_ok)
        validate(cfg, &p);
    register_secrets(cfg);
    return p.n;
}

int wk_config_load(wk_config_t *cfg, const char *path, FILE *errs)
{
    bool file_ok;
    return load(cfg, path, errs, errs, &file_ok);
}

bool wk_config_load_file(wk_config_t *cfg, const char *path, FILE *errs)
{
    bool file_ok;
    load(cfg, path, NULL, errs, &file_ok);
    return file_ok;
}

/* True when name (up to '=') is the variable of a setting or INBOXD_CONFIG. */
static bool env_is_known(const char *entry, size_t n)
{
    char env[128];
    if (n == strlen("INBOXD_CONFIG") && strncmp(entry, "INBOXD_CONFIG", n) == 0)
        return true;
    /* The test suite's own variables, never read by inboxd. */
    if (strncmp(entry, "INBOXD_TEST_", 12) == 0)
        return true;
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        wk_config_env_name(s->name, env, sizeof(env));
        if (strlen(env) == n && strncmp(entry, env, n) == 0)
            return true;
    }
    return false;
}

int wk_config_unknown_env(FILE *errs, bool fatal)
{
    extern char **environ;
    int n = 0;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (strncmp(*e, "INBOXD_", 7) != 0 || env_is_known(*e, len))
            continue;
        char name[128];
        n++;
        /* The name only: the value may be a secret. */
        snprintf(name, sizeof(name), "%.*s", (int)len, *e);
        if (errs)
            fprintf(errs, "config: %s: %sunknown environment variable (no such setting; a typo?)\n",
                    name, fatal ? "" : "warning: ");
        else
            IB_LOG(IB_LOG_WARN, "config_unknown_env",
                   IB_MSG("environment variable is not an inboxd setting (a typo?)"),
                   IB_S("name", name));
    }
    return n;
}

int wk_config_check_entity(const wk_config_t *cfg, FILE *errs)
{
    ib_problems_t p = {.errs = errs};
    if (cfg->servicebus.connection_string && *cfg->servicebus.connection_string &&
        (!cfg->servicebus.entity || !*cfg->servicebus.entity))
        ib_problem(&p, "servicebus.entity",
                   "missing required setting (or give EntityPath in the connection string)");
    return p.n;
}

void wk_config_transport_apply(const wk_config_t *cfg)
{
    const char *mode = cfg ? cfg->servicebus.transport : getenv("INBOXD_SERVICEBUS_TRANSPORT");
    const char *proxy = cfg ? cfg->servicebus.proxy : getenv("INBOXD_SERVICEBUS_PROXY");
    const char *port = getenv("INBOXD_SERVICEBUS_WEBSOCKET_PORT");
    int ws_port = cfg ? (int)cfg->servicebus.websocket_port : port ? atoi(port) : 0;
    sb_transport_mode_t m = SB_TRANSPORT_AUTO;

    if (mode && *mode)
        sb_transport_parse(mode, &m); /* the config's enum was checked; an env typo stays auto */
    sb_transport_set(m, proxy && *proxy ? proxy : NULL, ws_port > 0 && ws_port < 65536 ? ws_port : 0);
}

void wk_config_free(wk_config_t *cfg)
{
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        void *slot = (char *)cfg + s->offset;
        if (s->type == WK_CT_STR || s->type == WK_CT_ENUM) {
            free(*(char **)slot);
            *(char **)slot = NULL;
        } else if (s->type == WK_CT_JSON) {
            json_decref(*(json_t **)slot);
            *(json_t **)slot = NULL;
        }
    }
}

/* Finds (creating) the object a dotted name lives in; sets *leaf. */
static json_t *section_of(json_t *root, const char *name, const char **leaf)
{
    const char *dot = strchr(name, '.');
    char sec[64];
    json_t *obj;

    if (!dot) {
        *leaf = name;
        return root;
    }
    snprintf(sec, sizeof(sec), "%.*s", (int)(dot - name), name);
    obj = json_object_get(root, sec);
    if (!obj) {
        obj = json_object();
        json_object_set_new(root, sec, obj);
    }
    *leaf = dot + 1;
    return obj;
}

json_t *wk_config_to_json(const wk_config_t *cfg)
{
    json_t *root = json_object();

    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        const void *slot = (const char *)cfg + s->offset;
        const char *leaf;
        json_t *obj = section_of(root, s->name, &leaf), *v = NULL;

        switch (s->type) {
        case WK_CT_STR:
        case WK_CT_ENUM: {
            const char *str = *(char *const *)slot;
            if ((s->flags & WK_CF_SENSITIVE) && str && *str)
                v = json_string("<redacted>");
            else
                v = json_string(str ? str : "");
            break;
        }
        case WK_CT_INT:
            v = json_integer(*(const long long *)slot);
            break;
        case WK_CT_BOOL:
            v = json_boolean(*(const bool *)slot);
            break;
        case WK_CT_JSON:
            v = *(json_t *const *)slot ? json_deep_copy(*(json_t *const *)slot) : json_array();
            break;
        }
        json_object_set_new(obj, leaf, v);
    }
    return root;
}

static void range_text(const wk_setting_t *s, char *buf, size_t size)
{
    if (s->type == WK_CT_INT)
        snprintf(buf, size, "%lld..%lld", s->min, s->max);
    else if (s->type == WK_CT_ENUM)
        snprintf(buf, size, "%s", choices_of(s));
    else if (s->type == WK_CT_BOOL)
        snprintf(buf, size, "true|false");
    else
        buf[0] = '\0';
}

void wk_config_print_help(FILE *fp)
{
    fprintf(fp, "Usage: inboxd [--config PATH] [--relay-only] [--check-config | --print-config | "
                "--help]\n\n"
                "  --config PATH    JSON configuration file (default: $INBOXD_CONFIG)\n"
                "  --relay-only     run only the outbox relay (no receiver): for applications\n"
                "                   that insert outbox rows themselves\n"
                "  --check-config   validate the configuration and exit (0 valid, 2 invalid)\n"
                "  --print-config   print the effective configuration as JSON, secrets redacted\n"
                "  --config-reference  print every setting as a markdown table\n"
                "  --route-reference   print every route key as markdown tables\n"
                "  --version        print the version\n\n"
                "Settings (file key; environment variable overrides the file):\n\n");
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        char env[128], range[96];
        wk_config_env_name(s->name, env, sizeof(env));
        range_text(s, range, sizeof(range));
        fprintf(fp, "  %s (%s%s%s)%s%s\n      %s\n      default: %s%s%s  env: %s\n", s->name,
                type_name(s->type), *range ? " " : "", range,
                (s->flags & WK_CF_REQUIRED) ? " required" : "",
                (s->flags & WK_CF_SENSITIVE) ? " sensitive" : "", s->doc, *s->def ? "" : "\"",
                *s->def ? s->def : "", *s->def ? "" : "\"", env);
    }
    fprintf(fp, "\nExit status: 0 success, 1 runtime failure, 2 invalid configuration.\n");
}

void wk_config_print_markdown(FILE *fp)
{
    fprintf(fp, "| key | type | default | range | env | description |\n"
                "|---|---|---|---|---|---|\n");
    for (const wk_setting_t *s = wk_settings; s->name; s++) {
        char env[128], range[96];
        wk_config_env_name(s->name, env, sizeof(env));
        range_text(s, range, sizeof(range));
        for (char *c = range; *c; c++)
            if (*c == '|')
                *c = '/';
        fprintf(fp, "| `%s` | %s%s%s | `%s` | %s | `%s` | %s |\n", s->name, type_name(s->type),
                (s->flags & WK_CF_REQUIRED) ? ", required" : "",
                (s->flags & WK_CF_SENSITIVE) ? ", secret" : "", s->def, range, env, s->doc);
    }
}

ot_options_t wk_config_otel(const wk_config_t *cfg)
{
    return (ot_options_t){
        .endpoint = cfg->otel.endpoint,
        .traces_endpoint = cfg->otel.traces_endpoint,
        .protocol = cfg->otel.protocol,
        .headers = cfg->otel.headers,
        .service_name = cfg->otel.service_name,
        .resource_attributes = cfg->otel.resource_attributes,
        .sampler = cfg->otel.sampler,
        .sampler_arg = cfg->otel.sampler_arg,
    };
}
