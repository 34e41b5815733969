/*
 * wk_config.h - inboxd's configuration: one table declares every setting
 * (name, type, default, bounds, SENSITIVE flag, doc line); --help,
 * --print-config, --check-config and the reference in docs/configuration.md come from it.
 *
 * Sources, later overriding earlier: built-in defaults, the JSON file
 * (--config PATH or INBOXD_CONFIG), then environment variables named
 * INBOXD_<SECTION>_<KEY> (INBOXD_DB_CONNECTION_STRING, INBOXD_CONSUMER).
 *
 * The config is loaded and validated once at start, then handed to threads
 * as an immutable struct.
 */
#ifndef WK_CONFIG_H
#define WK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "ot_trace.h"

typedef struct wk_config {
    char *consumer;
    struct {
        char *connection_string;
        char *entity;
        char *auth;
        bool sessions;
        long long prefetch;
        long long max_concurrent_calls;
        long long max_held_mb; /* byte budget of received messages, MiB; 0 = none */
        long long max_concurrent_sessions;
        long long max_auto_lock_renewal_s;
        long long session_idle_timeout_s;
        long long session_prefetch;
        char *session_on_dead_letter; /* "continue" or "park" */
        long long reconnect_max_ms;
        long long settle_timeout_ms;
        long long stall_timeout_ms;
        char *ca_file;
        char *transport; /* "auto" | "amqp" | "websockets" (sb_transport.h) */
        char *proxy;     /* secret: may hold user:password; "" = the environment's */
        long long websocket_port; /* 0 = 443, or the Endpoint's under websockets */
        long long max_delivery_count; /* the entity's, when known; 0 = unknown */
        long long duplicate_detection_window_s; /* the entity's history, when known; 0 = unknown */
        long long message_ttl_s;      /* the entity's default TTL, when known; 0 = unknown */
        long long entity_poll_s;      /* wk_entity.c; 0 = off */
        char *management_endpoint;    /* "" = https://HOST/ */
        long long sas_token_lifetime_s; /* SAS tokens signed with the connection string's key */
    } servicebus;
    struct {
        char *connection_string;
        char *dialect;
        char *auth;          /* "password" or "workload_identity" */
        long long pool_size;       /* 0 = servicebus.max_concurrent_calls, at most 8 */
        char *pool_scope;          /* "cluster" (the live replicas divide pool_size) or "process" */
        long long batch_max;       /* messages per transaction, at most */
        long long batch_linger_ms; /* wait for more before a short batch (0 = never) */
        char *inbox_table;
        char *replicas_table;
        bool migrate;
        long long statement_timeout_s;
        long long inbox_retention_days;
    } db;
    json_t *routes; /* array; validated by the worker's route compiler */
    struct {
        char *enabled; /* "auto" | "true" | "false" */
        char *relay;   /* "auto" | "true" | "false" */
        char *table;
        long long poll_ms;
        long long batch;
        long long retention_s;
        long long backoff_max_ms;
        long long claim_check_over_bytes; /* 0 = off */
        char *claim_check_container;      /* URL without query */
        char *claim_check_auth;           /* "sas" | "shared_key" | "workload_identity" */
        char *claim_check_sas;            /* secret */
        char *claim_check_read_sas;       /* secret */
        char *claim_check_account;
        char *claim_check_account_key; /* secret */
        long long claim_check_timeout_ms;
        char *claim_check_ca_file;
    } outbox;
    struct {
        long long attempts;
        long long base_ms;
        long long max_ms;
        long long max_deliveries; /* 0 = off; -1 in the file: resolved at load */
        bool max_deliveries_auto; /* resolved from servicebus.max_delivery_count (or 10) */
        long long max_age_s;      /* 0 = off */
    } retry;
    struct {
        json_t *transient_native; /* array of native codes or SQLSTATE strings */
        json_t *permanent_native;
        bool circuit_breaker;
    } errors;
    struct {
        long long drain_timeout_s;
    } shutdown;
    struct {
        char *listen;
    } http;
    struct {
        char *level;
    } log;
    struct { /* OpenTelemetry traces; "" = the OTEL_* variable, then the default */
        char *endpoint;
        char *traces_endpoint;
        char *protocol;
        char *headers;
        char *service_name;
        char *resource_attributes;
        char *sampler;
        char *sampler_arg;
    } otel;
} wk_config_t;

typedef enum { WK_CT_STR, WK_CT_INT, WK_CT_BOOL, WK_CT_ENUM, WK_CT_JSON } wk_config_type_t;

#define WK_CF_SENSITIVE 0x1 /* never printed or logged */
#define WK_CF_REQUIRED 0x2  /* must be non-empty after all sources */

typedef struct wk_setting {
    const char *name; /* "section.key", or "key" at the top level */
    wk_config_type_t type;
    const char *def;     /* default, as text, parsed like user input */
    long long min, max;  /* WK_CT_INT bounds */
    const char *choices; /* WK_CT_ENUM: "a|b|c" */
    unsigned flags;
    const char *doc;
    size_t offset;
} wk_setting_t;

/* The table, terminated by an entry with name NULL. */
extern const wk_setting_t wk_settings[];

/*
 * Loads defaults, then the file at path (NULL: INBOXD_CONFIG, or none),
 * then the environment, then validates. Every problem is written as one
 * line "config: KEY: WHY" to errs (when not NULL); returns the number of
 * problems (0 = valid). cfg must be freed with wk_config_free either way.
 * Secrets found in the config are registered with the logger's mask.
 */
int wk_config_load(wk_config_t *cfg, const char *path, FILE *errs);
/*
 * The same for a tool that reads a few keys (inboxctl): only the file's own
 * problem (missing, unreadable, not JSON, not an object) is written to
 * errs, as inboxd words it; the other settings are inboxd's to judge.
 * Returns false when the file could not be read. cfg must be freed either way.
 */
bool wk_config_load_file(wk_config_t *cfg, const char *path, FILE *errs);
void wk_config_free(wk_config_t *cfg);
/*
 * Hands servicebus.transport and servicebus.proxy to amqp/ (sb_transport.h)
 * (and servicebus.websocket_port) for the whole process; cfg NULL reads
 * INBOXD_SERVICEBUS_TRANSPORT, INBOXD_SERVICEBUS_PROXY and
 * INBOXD_SERVICEBUS_WEBSOCKET_PORT. thread: main, before any Service Bus client.
 */
void wk_config_transport_apply(const wk_config_t *cfg);
/* The otel.* settings as otel/'s exporter options (strings borrowed from cfg). */
ot_options_t wk_config_otel(const wk_config_t *cfg);
/*
 * The entity to receive from must be named (servicebus.entity or EntityPath)
 * unless inboxd runs --relay-only; the problem, if any, goes to errs as
 * above. Returns the number of problems.
 */
int wk_config_check_entity(const wk_config_t *cfg, FILE *errs);

/* Effective config as JSON, SENSITIVE values redacted. Caller json_decref()s. */
json_t *wk_config_to_json(const wk_config_t *cfg);
/* The settings table for humans (--help) and as Markdown (docs/configuration.md). */
void wk_config_print_help(FILE *fp);
void wk_config_print_markdown(FILE *fp);
/*
 * Names every INBOXD_* environment variable that is neither a setting nor
 * INBOXD_CONFIG (INBOXD_TEST_* belong to the test suite): to errs as a
 * "config:" line when errs is not NULL (fatal words it as an error rather
 * than a warning), else as a warn log line. Never prints a value. Returns
 * how many there are. thread: main.
 */
int wk_config_unknown_env(FILE *errs, bool fatal);
/* INBOXD_SECTION_KEY for a setting name, into buf. */
void wk_config_env_name(const char *name, char *buf, size_t size);

/* Service Bus's MaxDeliveryCount when the entity's is not known. */
#define WK_SB_DEFAULT_MAX_DELIVERY_COUNT 10

/* What retry.max_deliveries is and why (--check-config). thread: main. */
void wk_config_explain_budget(const wk_config_t *cfg, FILE *out);

#endif
