/*
 * wk_outbox.h - how the daemon sets up the outbox: whether this process
 * uses the outbox table and runs the relay (outbox.enabled, outbox.relay,
 * routes that emit, --relay-only), the table's creation or check, and the
 * relay's start. thread: main.
 */
#ifndef WK_OUTBOX_H
#define WK_OUTBOX_H

#include <stdbool.h>
#include <stdio.h>

#include "db_conn.h"
#include "ib_err.h"
#include "sb_token.h"
#include "wk_config.h"
#include "wk_metrics.h"
#include "rl_relay.h"
#include "rt_route.h"

typedef struct wk_outbox_plan {
    bool enabled; /* the outbox table is used (created or checked) */
    bool relay;   /* this process publishes its pending rows */
} wk_outbox_plan_t;

/*
 * Decides the plan from the config, the compiled routes and --relay-only.
 * Contradictions (a route emits but outbox.enabled is false; outbox.relay
 * true or --relay-only with the outbox disabled) are written to errs as
 * "config: KEY: WHY" and counted; returns the number of problems.
 */
int wk_outbox_plan(const wk_config_t *cfg, const rt_routes_t *routes, bool relay_only,
                   wk_outbox_plan_t *plan, FILE *errs);

/* Creates (db.migrate true) or checks the outbox table on dbc. */
ib_err_t wk_outbox_prepare(const wk_config_t *cfg, db_conn_t *dbc, ib_error_t *err);

/*
 * Starts the relay on its own database connection (dbopt is copied),
 * sending on client's sender links, and registers it as the source of the
 * inboxd_outbox_* metrics.
 */
rl_relay_t *wk_outbox_relay_start(const wk_config_t *cfg, const db_options_t *dbopt,
                                  ot_exporter_t *otel,
                                  sb_client_t *client, wk_metrics_t *metrics, ib_error_t *err);

#endif
