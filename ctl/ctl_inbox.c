/*
 * ctl_inbox.c - inboxctl's "inbox" commands: what operators do with the
 * inbox rows of HTTP routes whose outcome a machine could not decide.
 *
 *   inboxctl inbox list --status uncertain|failed|claimed|retry|processed
 *                       [--consumer C] [--max N] [--config F]
 *   inboxctl inbox resolve --consumer C --message-id M --as processed|retry
 *                          [--remote-id R] --note TEXT [--config F]
 *
 * The database is the one inboxd uses: db.connection_string (and
 * db.inbox_table, db.dialect) from --config FILE or INBOXD_CONFIG, with
 * the same INBOXD_DB_* environment overrides. list prints one JSON object
 * per row; resolve records the decision on the row (resolution,
 * resolution_note, resolved_at). "retry" lets the next delivery, or a
 * replay, call the destination again; "processed" closes the row.
 *
 * Exit status: 0 done, 1 database failure or no such row, 2 usage.
 * thread: main (a command-line tool).
 */
#include "ctl_inbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "db_effect.h"
#include "ib_log.h"
#include "wk_config.h"
#include "wk_dbopt.h"

typedef struct inbox_opts {
    const char *sub, *status, *consumer, *message_id, *as, *remote_id, *note, *config;
    long max;
} inbox_opts_t;

static int inbox_usage(const char *why)
{
    fprintf(stderr,
            "inboxctl: %s\n"
            "usage: inboxctl inbox list --status uncertain|failed|claimed|retry|processed\n"
            "                           [--consumer C] [--max N] [--config F]\n"
            "       inboxctl inbox resolve --consumer C --message-id M --as processed|retry\n"
            "                              [--remote-id R] --note TEXT [--config F]\n",
            why);
    return 2;
}

static int parse(int argc, char **argv, inbox_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max = 1000;
    if (argc < 1 || (strcmp(argv[0], "list") != 0 && strcmp(argv[0], "resolve") != 0))
        return inbox_usage("inbox takes 'list' or 'resolve'");
    o->sub = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = strcmp(a, "--status") == 0       ? &o->status
                            : strcmp(a, "--consumer") == 0   ? &o->consumer
                            : strcmp(a, "--message-id") == 0 ? &o->message_id
                            : strcmp(a, "--as") == 0         ? &o->as
                            : strcmp(a, "--remote-id") == 0  ? &o->remote_id
                            : strcmp(a, "--note") == 0       ? &o->note
                            : strcmp(a, "--config") == 0     ? &o->config
                                                             : NULL;
        if (strcmp(a, "--max") == 0 && v) {
            o->max = atol(v);
            if (o->max <= 0)
                return inbox_usage("--max takes a positive number");
            i++;
            continue;
        }
        if (!slot || !v) {
            char why[300];
            snprintf(why, sizeof why, "unknown or incomplete argument '%s'", a);
            return inbox_usage(why);
        }
        *slot = v;
        i++;
    }
    return 0;
}

static int check(const inbox_opts_t *o)
{
    static const char *const statuses[] = {"uncertain", "failed",    "claimed",
                                           "retry",     "processed", NULL};
    if (strcmp(o->sub, "list") == 0) {
        int i;
        for (i = 0; o->status && statuses[i] && strcmp(statuses[i], o->status) != 0; i++)
            ;
        if (!o->status || !statuses[i])
            return inbox_usage("list needs --status uncertain|failed|claimed|retry|processed");
        return 0;
    }
    if (!o->consumer || !o->message_id)
        return inbox_usage("resolve needs --consumer and --message-id");
    if (!o->as || (strcmp(o->as, "processed") != 0 && strcmp(o->as, "retry") != 0))
        return inbox_usage("resolve needs --as processed or --as retry");
    if (!o->note || !*o->note)
        return inbox_usage("resolve needs --note TEXT (it is recorded on the row)");
    if (o->remote_id && strcmp(o->as, "retry") == 0)
        return inbox_usage("--remote-id goes with --as processed");
    return 0;
}

static void put_str(json_t *j, const char *k, const char *v)
{
    json_object_set_new(j, k, v && *v ? json_string(v) : json_null());
}

static bool print_row(const db_effect_listed_t *r, void *arg)
{
    (void)arg;
    json_t *j = json_object();
    put_str(j, "consumer", r->consumer);
    put_str(j, "message_id", r->message_id);
    put_str(j, "idempotency_key", r->idempotency_key);
    put_str(j, "status", r->status);
    put_str(j, "error_class", r->error_class);
    put_str(j, "error_detail", r->error_detail);
    put_str(j, "remote_id", r->remote_id);
    json_object_set_new(j, "remote_status",
                        r->remote_status ? json_integer(r->remote_status) : json_null());
    json_object_set_new(j, "attempts", json_integer(r->attempts));
    put_str(j, "processed_at", r->processed_at);
    put_str(j, "lease_until", r->lease_until);
    put_str(j, "resolution", r->resolution);
    put_str(j, "resolution_note", r->resolution_note);
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s)
        puts(s);
    free(s);
    json_decref(j);
    return true;
}

/* A connection to inboxd's database from its config; NULL (printed) on failure. */
static db_conn_t *open_db(const inbox_opts_t *o, wk_config_t *cfg, wk_dbopt_t *dbo, int *rc)
{
    ib_error_t err;
    /* Only the db section matters here; other problems of the file do not. */
    if (!wk_config_load_file(cfg, o->config, stderr)) {
        *rc = 2;
        return NULL;
    }
    if (!cfg->db.connection_string || !*cfg->db.connection_string) {
        fprintf(stderr, "inboxctl: no db.connection_string (--config FILE, INBOXD_CONFIG or "
                        "INBOXD_DB_CONNECTION_STRING)\n");
        *rc = 2;
        return NULL;
    }
    /* The same options and db.auth token path as inboxd (wk_dbopt.c). */
    db_conn_t *dbc = NULL;
    if (wk_dbopt_init(dbo, cfg, 30000, &err) == IB_E_OK)
        dbc = db_conn_new(&dbo->opt, &err);
    if (!dbc) {
        fprintf(stderr, "inboxctl: database: %s\n", err.text);
        *rc = 1;
    }
    return dbc;
}

int ctl_inbox(int argc, char **argv)
{
    inbox_opts_t o;
    wk_config_t cfg;
    ib_error_t err;
    int rc = parse(argc, argv, &o);
    if (rc == 0)
        rc = check(&o);
    if (rc != 0)
        return rc;
    wk_dbopt_t dbo = {0};
    db_conn_t *dbc = open_db(&o, &cfg, &dbo, &rc);
    if (dbc && strcmp(o.sub, "list") == 0) {
        long n = db_effect_list(dbc, o.status, o.consumer, o.max, print_row, NULL, &err);
        if (n < 0) {
            fprintf(stderr, "inboxctl: list: %s\n", err.text);
            rc = 1;
        }
    } else if (dbc) {
        if (db_effect_resolve(dbc, o.consumer, o.message_id, o.as, o.remote_id, o.note, &err) !=
            IB_E_OK) {
            fprintf(stderr, "inboxctl: resolve: %s\n", err.text);
            rc = 1;
        } else {
            fprintf(stderr, "inboxctl: consumer '%s' message '%s' resolved as %s\n", o.consumer,
                    o.message_id, o.as);
        }
    }
    db_conn_free(dbc);
    wk_dbopt_free(&dbo);
    wk_config_free(&cfg);
    return rc;
}
