/*
 * ctl_status.c - `inboxctl status` (see ctl_status.h): reads the broker,
 * the database and optionally a running inboxd's /metrics, judges each
 * finding, and prints one screen (or one JSON object).
 * thread: main.
 */
#include "ctl_status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "db_outbox.h"
#include "db_status.h"
#include "fx_client.h"
#include "ib_enc.h"
#include "ib_time.h"
#include "sb_send.h"
#include "wk_config.h"
#include "wk_dbopt.h"
#include "wk_entity.h"

#define WINDOW_S 3600
#define MAX_CONDS 16
#define MAX_OPEN 8

typedef enum { SEV_DEGRADED = 3, SEV_STUCK = 4 } severity_t;

typedef struct cond {
    const char *name;
    severity_t sev;
    char detail[320];
    char see[320];
} cond_t;

typedef struct status {
    const char *config, *metrics_url, *entity, *consumer;
    long long stuck_after_s;
    /* the broker */
    bool broker_read, counts_read;
    char broker_err[256], counts_err[256];
    wk_entity_info_t counts;
    double oldest_age_s; /* -1: the entity is empty */
    /* the database */
    bool db_read, outbox_read;
    char db_err[256];
    db_status_inbox_t inbox;
    long long outbox_pending, outbox_oldest_s;
    /* the daemon */
    bool metrics_read;
    char metrics_err[256];
    double held, in_flight, parked, breaker;
    char open[MAX_OPEN][160];
    size_t nopen;
    /* the judgement */
    cond_t conds[MAX_CONDS];
    size_t nconds;
} status_t;

static int status_usage(const char *why)
{
    fprintf(stderr,
            "inboxctl: %s\n"
            "usage: inboxctl status --config F [--metrics URL] [--stuck-after SECONDS] [--json]\n"
            "  exit 0 healthy, 3 degraded (something waits for a person), 4 stuck (nothing moves)\n",
            why);
    return 2;
}

static void add(status_t *st, const char *name, severity_t sev, const char *see,
                const char *see_arg, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/*
 * Adds a condition: its name, how bad, what it is, and the command that
 * shows more ("see see_arg": the config file or the metrics URL).
 */
static void add(status_t *st, const char *name, severity_t sev, const char *see,
                const char *see_arg, const char *fmt, ...)
{
    if (st->nconds == MAX_CONDS)
        return;
    cond_t *c = &st->conds[st->nconds++];
    va_list ap;
    c->name = name;
    c->sev = sev;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    snprintf(c->see, sizeof c->see, "%s %s", see, see_arg);
}

/* ---- reading ---- */

static void read_broker(status_t *st, const wk_config_t *cfg)
{
    const char *ca = cfg->servicebus.ca_file[0] ? cfg->servicebus.ca_file : NULL;
    wk_entity_opts_t eo = {.connection_string = cfg->servicebus.connection_string,
                           .entity = st->entity,
                           .endpoint = cfg->servicebus.management_endpoint,
                           .ca_file = ca,
                           .http_timeout_ms = 10000};
    ib_error_t err;
    st->counts_read = wk_entity_fetch(&eo, &st->counts, &err) == IB_E_OK;
    if (!st->counts_read)
        ib_strlcpy(st->counts_err, err.text, sizeof st->counts_err);
    sb_sender_options_t so = {.connection_string = cfg->servicebus.connection_string,
                              .ca_file = ca,
                              .timeout_ms = 10000};
    sb_sender_t *s = sb_sender_open(&so, &err);
    sb_msg_t **msgs = NULL;
    size_t n = 0;
    if (s && sb_sender_peek(s, st->entity, 1, 1, &msgs, &n, &err) == IB_E_OK) {
        st->broker_read = true;
        st->oldest_age_s = n && msgs[0]->enqueued_ms
                               ? (double)(ib_now_ms() - msgs[0]->enqueued_ms) / 1000.0
                               : -1;
        sb_peek_free(msgs, n);
    } else {
        ib_strlcpy(st->broker_err, err.text, sizeof st->broker_err);
    }
    sb_sender_close(s);
}

static void read_db(status_t *st, const wk_config_t *cfg)
{
    wk_dbopt_t dbo;
    ib_error_t err;
    db_conn_t *dbc = NULL;
    if (wk_dbopt_init(&dbo, cfg, 30000, &err) == IB_E_OK)
        dbc = db_conn_new(&dbo.opt, &err);
    if (dbc && db_status_inbox(dbc, st->consumer, WINDOW_S, &st->inbox, &err) == IB_E_OK)
        st->db_read = true;
    else
        ib_strlcpy(st->db_err, err.text, sizeof st->db_err);
    /* No outbox table is no outbox, not a failure. */
    if (dbc && st->db_read)
        st->outbox_read = db_outbox_stats(dbc, cfg->outbox.table, &st->outbox_pending,
                                          &st->outbox_oldest_s, &err) == IB_E_OK;
    db_conn_free(dbc);
    wk_dbopt_free(&dbo);
}

/* The value of an exact series on a /metrics text; -1 when absent. */
static double series(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return atof(p + n + 1);
    return -1;
}

/* Destinations whose inboxd_http_circuit_open series is 1. */
static void open_circuits(status_t *st, const char *text)
{
    static const char pre[] = "inboxd_http_circuit_open{destination=\"";
    for (const char *p = strstr(text, pre); p && st->nopen < MAX_OPEN; p = strstr(p + 1, pre)) {
        const char *d = p + sizeof pre - 1, *q = strstr(d, "\"} ");
        if (q && atof(q + 3) == 1)
            snprintf(st->open[st->nopen++], sizeof st->open[0], "%.*s", (int)(q - d), d);
    }
}

static void read_metrics(status_t *st, const char *ca)
{
    fx_client_t *fx = fx_client_new();
    fx_response_t r;
    memset(&r, 0, sizeof r);
    fx_request_t req = {.method = "GET", .url = st->metrics_url, .timeout_ms = 5000, .ca_file = ca};
    if (!fx)
        ib_strlcpy(st->metrics_err, "out of memory", sizeof st->metrics_err);
    else if (fx_client_call(fx, &req, &r) != IB_E_OK)
        ib_strlcpy(st->metrics_err, r.err.text, sizeof st->metrics_err);
    else if (r.status != 200)
        snprintf(st->metrics_err, sizeof st->metrics_err, "HTTP %ld", r.status);
    else if (series(r.body, "inboxd_in_flight") < 0)
        snprintf(st->metrics_err, sizeof st->metrics_err, "no inboxd metrics there%s",
                 r.body_truncated ? " (the answer was cut)" : "");
    else {
        st->metrics_read = true;
        st->held = series(r.body, "inboxd_held_messages");
        st->in_flight = series(r.body, "inboxd_in_flight");
        st->parked = series(r.body, "inboxd_sessions_parked");
        st->breaker = series(r.body, "inboxd_circuit_open");
        open_circuits(st, r.body);
    }
    if (fx)
        fx_response_free(&r);
    fx_client_free(fx);
}

/* ---- judging ---- */

static void judge_broker(status_t *st)
{
    if (!st->broker_read)
        add(st, "broker_unreachable", SEV_STUCK, "inboxd --check-config --config", st->config,
            "the entity cannot be peeked: %s", st->broker_err);
    if (!st->counts_read)
        add(st, "broker_counts_unknown", SEV_DEGRADED, "inboxd --check-config --config", st->config,
            "the management endpoint gave no counts: %s", st->counts_err);
    else if (st->counts.dead_letter > 0)
        add(st, "dead_letters", SEV_DEGRADED, "inboxctl dlq stats --config", st->config,
            "%lld messages in the dead-letter queue of %s", st->counts.dead_letter, st->entity);
    if (st->broker_read && st->oldest_age_s > (double)st->stuck_after_s)
        add(st, "oldest_message", SEV_STUCK, "inboxctl peek --max 10 --config", st->config,
            "the oldest message waits %.0f s (more than %lld s)", st->oldest_age_s,
            st->stuck_after_s);
}

static void judge_db(status_t *st)
{
    if (!st->db_read) {
        add(st, "database_unreachable", SEV_STUCK, "inboxd --check-config --config", st->config,
            "the inbox cannot be read: %s", st->db_err);
        return;
    }
    if (st->inbox.uncertain_all > 0)
        add(st, "uncertain_rows", SEV_DEGRADED, "inboxctl inbox list --status uncertain --config",
            st->config,
            "%lld effects of unknown outcome: resolve each by hand", st->inbox.uncertain_all);
    if (st->inbox.failed_all > 0)
        add(st, "failed_rows", SEV_DEGRADED, "inboxctl inbox list --status failed --config", st->config,
            "%lld messages recorded failed", st->inbox.failed_all);
    if (st->outbox_read && st->outbox_pending > 0 && st->outbox_oldest_s > st->stuck_after_s)
        add(st, "outbox_backlog", SEV_STUCK, "inboxctl outbox list --status pending --config",
            st->config,
            "%lld outbox rows pending, the oldest for %lld s", st->outbox_pending,
            st->outbox_oldest_s);
}

static void judge_daemon(status_t *st)
{
    if (!st->metrics_url)
        return;
    if (!st->metrics_read) {
        add(st, "daemon_unreachable", SEV_STUCK, "the daemon's log; curl -s", st->metrics_url,
            "%s cannot be read: %s", st->metrics_url, st->metrics_err);
        return;
    }
    if (st->breaker == 1)
        add(st, "database_breaker_open", SEV_STUCK, "inboxd --check-config --config", st->config,
            "the database's setup fails every message: receiving is paused");
    for (size_t i = 0; i < st->nopen; i++)
        add(st, "circuit_open", SEV_DEGRADED, "curl -s", st->metrics_url,
            "calls to %s are held (its circuit is open)", st->open[i]);
    if (st->held > 0)
        add(st, "held_messages", SEV_DEGRADED, "curl -s", st->metrics_url,
            "%.0f messages held for their HTTP destination", st->held);
    if (st->parked > 0)
        add(st, "sessions_parked", SEV_DEGRADED, "inboxctl session show --session S --config",
            st->config, "%.0f sessions parked at a poison message (S: the session_parked_skip log lines)",
            st->parked);
}

/* ---- printing ---- */

static int exit_status(const status_t *st)
{
    int rc = 0;
    for (size_t i = 0; i < st->nconds; i++)
        if ((int)st->conds[i].sev > rc)
            rc = (int)st->conds[i].sev;
    return rc;
}

static const char *verdict(int rc)
{
    return rc == 0 ? "healthy" : rc == SEV_DEGRADED ? "degraded" : "stuck";
}

static void print_text(const status_t *st, int rc)
{
    printf("inboxd status: %s (exit %d)   consumer %s, entity %s\n\n", verdict(rc), rc,
           st->consumer, st->entity);
    if (st->counts_read)
        printf("broker    active %lld  scheduled %lld  dead-lettered %lld", st->counts.active,
               st->counts.scheduled, st->counts.dead_letter);
    else
        printf("broker    counts unknown");
    if (st->broker_read && st->oldest_age_s >= 0)
        printf("  oldest %.0f s\n", st->oldest_age_s);
    else
        printf("  oldest %s\n", st->broker_read ? "none (empty)" : "unknown");
    if (st->db_read)
        printf("inbox     last hour: processed %lld  failed %lld  uncertain %lld  claimed %lld;"
               "  to resolve: failed %lld, uncertain %lld\n",
               st->inbox.processed, st->inbox.failed, st->inbox.uncertain, st->inbox.claimed,
               st->inbox.failed_all, st->inbox.uncertain_all);
    else
        printf("inbox     unknown\n");
    if (st->outbox_read)
        printf("outbox    pending %lld  oldest %lld s\n", st->outbox_pending, st->outbox_oldest_s);
    else
        printf("outbox    none\n");
    if (st->metrics_read)
        printf("daemon    in flight %.0f  held %.0f  open circuits %zu  database breaker %s"
               "  sessions parked %.0f\n",
               st->in_flight, st->held < 0 ? 0 : st->held, st->nopen,
               st->breaker == 1 ? "open" : "closed", st->parked < 0 ? 0 : st->parked);
    else
        printf("daemon    %s\n", st->metrics_url ? "unreachable" : "not asked (--metrics URL)");
    if (st->nconds)
        printf("\n");
    for (size_t i = 0; i < st->nconds; i++)
        printf("%-8s  %-22s %s\n          see: %s\n", verdict((int)st->conds[i].sev),
               st->conds[i].name, st->conds[i].detail, st->conds[i].see);
}

static json_t *count_or_null(bool known, long long v)
{
    return known ? json_integer(v) : json_null();
}

static void print_json(const status_t *st, int rc)
{
    json_t *conds = json_array();
    for (size_t i = 0; i < st->nconds; i++)
        json_array_append_new(conds, json_pack("{s:s, s:s, s:s, s:s}", "name", st->conds[i].name,
                                               "severity", verdict((int)st->conds[i].sev),
                                               "detail", st->conds[i].detail, "see",
                                               st->conds[i].see));
    bool c = st->counts_read, d = st->db_read, o = st->outbox_read, m = st->metrics_read;
    json_t *j = json_pack(
        "{s:s, s:i, s:s, s:s, s:{s:o, s:o, s:o, s:o}, s:{s:i, s:o, s:o, s:o, s:o, s:o, s:o},"
        " s:{s:o, s:o}, s:{s:b, s:o, s:o, s:i, s:o, s:o}, s:o}",
        "status", verdict(rc), "exit", rc, "consumer", st->consumer, "entity", st->entity,
        "broker", "active", count_or_null(c, st->counts.active), "scheduled",
        count_or_null(c, st->counts.scheduled), "dead_lettered",
        count_or_null(c, st->counts.dead_letter), "oldest_age_s",
        st->broker_read && st->oldest_age_s >= 0 ? json_real(st->oldest_age_s) : json_null(),
        "inbox", "window_s", (json_int_t)WINDOW_S, "processed",
        count_or_null(d, st->inbox.processed), "failed", count_or_null(d, st->inbox.failed),
        "uncertain", count_or_null(d, st->inbox.uncertain), "claimed",
        count_or_null(d, st->inbox.claimed), "failed_all", count_or_null(d, st->inbox.failed_all),
        "uncertain_all", count_or_null(d, st->inbox.uncertain_all), "outbox", "pending",
        count_or_null(o, st->outbox_pending), "oldest_pending_s",
        count_or_null(o, st->outbox_oldest_s), "daemon", "read", m, "in_flight",
        count_or_null(m, (long long)st->in_flight), "held",
        count_or_null(m, (long long)(st->held < 0 ? 0 : st->held)), "open_circuits",
        (json_int_t)st->nopen, "breaker_open", m ? json_boolean(st->breaker == 1) : json_null(),
        "sessions_parked", count_or_null(m, (long long)(st->parked < 0 ? 0 : st->parked)),
        "conditions", conds);
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    printf("%s\n", t ? t : "{}");
    free(t);
    json_decref(j);
}

/* ---- the command ---- */

static int parse(int argc, char **argv, status_t *st, bool *json)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            *json = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        char *end = NULL;
        if (!v)
            return status_usage("an option needs a value");
        if (strcmp(argv[i - 1], "--config") == 0)
            st->config = v;
        else if (strcmp(argv[i - 1], "--metrics") == 0)
            st->metrics_url = v;
        else if (strcmp(argv[i - 1], "--stuck-after") == 0 &&
                 (st->stuck_after_s = strtoll(v, &end, 10)) > 0 && !*end)
            continue;
        else
            return status_usage(strcmp(argv[i - 1], "--stuck-after") == 0
                                    ? "--stuck-after takes a positive number of seconds"
                                    : "unknown argument");
    }
    if (!st->config && !(st->config = getenv("INBOXD_CONFIG")))
        return status_usage("no config (--config F or INBOXD_CONFIG)");
    return 0;
}

static bool has(const char *s)
{
    return s && *s;
}

int ctl_status(int argc, char **argv)
{
    static status_t st; /* large; one per process */
    bool json = false;
    wk_config_t cfg;
    memset(&st, 0, sizeof st);
    st.stuck_after_s = 300;
    int rc = parse(argc, argv, &st, &json);
    if (rc)
        return rc;
    if (!wk_config_load_file(&cfg, st.config, stderr)) { /* the file missing or not JSON */
        wk_config_free(&cfg);
        return 2;
    }
    wk_config_transport_apply(&cfg); /* the broker over the transport inboxd uses */
    st.entity = cfg.servicebus.entity;
    st.consumer = cfg.consumer;
    if (!has(cfg.servicebus.connection_string) || !has(st.entity) ||
        !has(cfg.db.connection_string) || !has(st.consumer)) {
        wk_config_free(&cfg);
        return status_usage("the config must name servicebus.connection_string, "
                            "servicebus.entity, db.connection_string and consumer");
    }
    read_broker(&st, &cfg);
    read_db(&st, &cfg);
    if (st.metrics_url)
        read_metrics(&st, NULL);
    judge_broker(&st);
    judge_db(&st);
    judge_daemon(&st);
    rc = exit_status(&st);
    if (json)
        print_json(&st, rc);
    else
        print_text(&st, rc);
    wk_config_free(&cfg);
    return rc;
}
