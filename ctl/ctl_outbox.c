/*
 * ctl_outbox.c - `inboxctl outbox ...`: the operator's view of the
 * outbox table, straight from the database (no broker involved).
 *
 *   inboxctl outbox list  [--status pending|published|failed] [--max N] --config F
 *   inboxctl outbox retry --id N --config F
 *   inboxctl outbox skip  --id N [--note TEXT] --config F
 *   inboxctl outbox republish [--since TIME] --config F
 *
 * The database connection string, dialect and outbox.table come from the
 * config file inboxd reads (and its INBOXD_* environment overrides); the
 * connection string also from INBOXD_DB_CONNECTION_STRING. list prints one
 * JSON object per row, oldest first, with its trace_context (the
 * traceparent of the span that wrote it, or null). retry puts a failed row back to
 * pending (the relay publishes it on its next round) and exits 1 when the
 * row is not failed. A failed row with a session id holds back its
 * session's later rows (list shows them with "blocked_by": its id) until it
 * is retried, or skipped: skip leaves it failed, marks its last_error
 * "inboxd:skipped (NOTE); was: ..." and lets the session's later rows go.
 * republish puts every row published since TIME (UTC, 2026-01-31T12:00:00Z,
 * or a duration ago: 900s, 15m, 2h; default 15m) back to pending: the relay
 * sends each again with its message id. After a forced Geo-Replication
 * promotion, that is how what the old primary accepted but had not
 * replicated reaches the new one; TIME must reach back at least the
 * namespace's maximum replication lag, and the copies that did survive are
 * duplicates the receivers' inboxes (or the entity's duplicate detection)
 * drop.
 *
 * thread: main (a command-line tool).
 */
#include "ctl_outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "db_outbox.h"
#include "ib_log.h"
#include "wk_config.h"
#include "wk_dbopt.h"

static int outbox_usage(const char *why)
{
    fprintf(stderr,
            "inboxctl: %s\n"
            "usage: inboxctl outbox list [--status pending|published|failed] [--max N] --config F\n"
            "       inboxctl outbox retry --id N --config F\n"
            "       inboxctl outbox skip --id N [--note TEXT] --config F\n"
            "       inboxctl outbox republish [--since TIME|15m] --config F\n",
            why);
    return 2;
}

static json_t *row_json(const db_outbox_row_t *r)
{
    json_t *j = json_object();
#define OPT_STR(k, v) json_object_set_new(j, (k), (v) ? json_string(v) : json_null())
    json_object_set_new(j, "id", json_integer(r->id));
    OPT_STR("entity", r->entity);
    OPT_STR("message_id", r->message_id);
    OPT_STR("session_id", r->session_id);
    OPT_STR("status", r->status);
    json_object_set_new(j, "attempts", json_integer(r->attempts));
    OPT_STR("last_error", r->last_error);
    OPT_STR("created_at", r->created_at);
    OPT_STR("published_at", r->published_at);
    OPT_STR("trace_context", r->trace_context);
    if (r->blocked_by)
        json_object_set_new(j, "blocked_by", json_integer(r->blocked_by));
#undef OPT_STR
    return j;
}

static int list_rows(db_conn_t *dbc, const char *table, const char *status, int max)
{
    db_outbox_row_t *rows;
    size_t n;
    ib_error_t err;
    if (db_outbox_list(dbc, table, status, max, &rows, &n, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: %s\n", err.text);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *j = row_json(&rows[i]);
        char *t = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (t)
            printf("%s\n", t);
        free(t);
        json_decref(j);
    }
    db_outbox_rows_free(rows, n);
    return 0;
}

static int retry_row(db_conn_t *dbc, const char *table, long long id)
{
    long long changed = 0;
    ib_error_t err;
    if (db_outbox_retry(dbc, table, id, &changed, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: %s\n", err.text);
        return 1;
    }
    if (changed != 1) {
        fprintf(stderr, "inboxctl: outbox row %lld is not failed (nothing changed)\n", id);
        return 1;
    }
    printf("outbox row %lld is pending again\n", id);
    return 0;
}

static int skip_row(db_conn_t *dbc, const char *table, long long id, const char *note)
{
    long long changed = 0;
    ib_error_t err;
    if (db_outbox_skip(dbc, table, id, note, &changed, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: %s\n", err.text);
        return 1;
    }
    if (changed != 1) {
        fprintf(stderr, "inboxctl: outbox row %lld is not failed or is already skipped (nothing "
                        "changed)\n",
                id);
        return 1;
    }
    printf("outbox row %lld is skipped: it stays failed and its session's later rows go on\n", id);
    return 0;
}

/* Seconds back to TIME (UTC YYYY-MM-DDTHH:MM:SS[Z], or N followed by s, m or h); -1 if bad. */
static long long since_ago(const char *v)
{
    char *end;
    struct tm tm;
    long long n = strtoll(v, &end, 10);
    if (end != v && n >= 0 && end[0] && !end[1] && strchr("smh", end[0]))
        return n * (end[0] == 'h' ? 3600 : end[0] == 'm' ? 60 : 1);
    memset(&tm, 0, sizeof(tm));
    end = strptime(v, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || (end[0] && strcmp(end, "Z") != 0))
        return -1;
    n = (long long)time(NULL) - (long long)timegm(&tm);
    return n < 0 ? 0 : n;
}

static int republish_rows(db_conn_t *dbc, const char *table, long long ago_s)
{
    long long changed = 0;
    ib_error_t err;
    if (db_outbox_republish(dbc, table, ago_s, &changed, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: %s\n", err.text);
        return 1;
    }
    printf("%lld outbox rows published in the last %lld s are pending again: the relay sends "
           "them again with their message ids\n",
           changed, ago_s);
    return 0;
}

/* Opens the database named by the config as inboxd does (dbo: the caller
 * frees it after the connection); NULL after printing why. */
static db_conn_t *open_db(const wk_config_t *cfg, wk_dbopt_t *dbo)
{
    ib_error_t err;
    db_conn_t *dbc = NULL;
    if (wk_dbopt_init(dbo, cfg, 30000, &err) == IB_E_OK)
        dbc = db_conn_new(&dbo->opt, &err);
    if (!dbc)
        fprintf(stderr, "inboxctl: cannot connect to the database: %s\n", err.text);
    return dbc;
}

int ctl_outbox(int argc, char **argv)
{
    const char *sub, *config = NULL, *status = NULL, *note = NULL;
    long long id = 0, ago_s = 15 * 60;
    int max = 1000, rc;
    wk_config_t cfg;
    wk_dbopt_t dbo;
    db_conn_t *dbc;

    if (argc < 1)
        return outbox_usage("outbox takes 'list', 'retry', 'skip' or 'republish'");
    sub = argv[0];
    if (strcmp(sub, "list") != 0 && strcmp(sub, "retry") != 0 && strcmp(sub, "skip") != 0 &&
        strcmp(sub, "republish") != 0)
        return outbox_usage("outbox takes 'list', 'retry', 'skip' or 'republish'");
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return outbox_usage("an option needs a value");
        if (strcmp(argv[i], "--config") == 0)
            config = v;
        else if (strcmp(argv[i], "--status") == 0)
            status = v;
        else if (strcmp(argv[i], "--max") == 0)
            max = atoi(v);
        else if (strcmp(argv[i], "--id") == 0)
            id = atoll(v);
        else if (strcmp(argv[i], "--note") == 0)
            note = v;
        else if (strcmp(argv[i], "--since") == 0) {
            if ((ago_s = since_ago(v)) < 0)
                return outbox_usage("--since takes a UTC time (2026-01-31T12:00:00Z) or 900s, "
                                    "15m, 2h");
        } else
            return outbox_usage("unknown argument");
        i++;
    }
    if (status && strcmp(status, "pending") != 0 && strcmp(status, "published") != 0 &&
        strcmp(status, "failed") != 0)
        return outbox_usage("--status takes pending, published or failed");
    if (max <= 0)
        return outbox_usage("--max takes a positive number");
    if ((strcmp(sub, "retry") == 0 || strcmp(sub, "skip") == 0) && id <= 0)
        return outbox_usage("retry and skip need --id N (a row id from 'outbox list')");
    if (!config && !getenv("INBOXD_CONFIG") && !getenv("INBOXD_DB_CONNECTION_STRING"))
        return outbox_usage("no database (--config F, INBOXD_CONFIG or INBOXD_DB_CONNECTION_STRING)");
    /* Only the db and outbox keys matter here; a file that cannot be read is said so. */
    if (!wk_config_load_file(&cfg, config, stderr)) {
        wk_config_free(&cfg);
        return 2;
    }
    if (!cfg.db.connection_string || !cfg.db.connection_string[0]) {
        wk_config_free(&cfg);
        return outbox_usage("the config names no db.connection_string");
    }
    dbc = open_db(&cfg, &dbo);
    if (!dbc) {
        wk_dbopt_free(&dbo);
        wk_config_free(&cfg);
        return 1;
    }
    rc = strcmp(sub, "list") == 0        ? list_rows(dbc, cfg.outbox.table, status, max)
         : strcmp(sub, "retry") == 0     ? retry_row(dbc, cfg.outbox.table, id)
         : strcmp(sub, "republish") == 0 ? republish_rows(dbc, cfg.outbox.table, ago_s)
                                         : skip_row(dbc, cfg.outbox.table, id, note);
    db_conn_free(dbc);
    wk_dbopt_free(&dbo);
    wk_config_free(&cfg);
    return rc;
}
