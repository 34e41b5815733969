/*
 * wk_outbox.c - the daemon's outbox set-up: the plan, the table, the relay.
 * See wk_outbox.h. thread: main.
 */
#include "wk_outbox.h"

#include <string.h>

#include "db_outbox.h"
#include "ib_log.h"

int wk_outbox_plan(const wk_config_t *cfg, const rt_routes_t *routes, bool relay_only,
                   wk_outbox_plan_t *plan, FILE *errs)
{
    const char *en = cfg->outbox.enabled, *rl = cfg->outbox.relay;
    bool emits = rt_routes_emit(routes);
    int problems = 0;

    plan->enabled = strcmp(en, "true") == 0 ||
                    (strcmp(en, "auto") == 0 && (emits || strcmp(rl, "true") == 0 || relay_only));
    plan->relay = relay_only || strcmp(rl, "true") == 0 || (strcmp(rl, "auto") == 0 && plan->enabled);
    if (emits && !plan->enabled) {
        problems++;
        if (errs)
            fprintf(errs, "config: outbox.enabled: is false, but a route emits messages "
                          "(routes[].emit and emit_on_failure need the outbox table)\n");
    }
    if (plan->relay && !plan->enabled) {
        problems++;
        if (errs)
            fprintf(errs, "config: outbox.relay: the relay needs outbox.enabled (auto or true)\n");
    }
    if (relay_only && strcmp(rl, "false") == 0) {
        problems++;
        if (errs)
            fprintf(errs, "config: outbox.relay: is false, but --relay-only runs only the relay\n");
    }
    return problems;
}

ib_err_t wk_outbox_prepare(const wk_config_t *cfg, db_conn_t *dbc, ib_error_t *err)
{
    if (db_outbox_migrate(dbc, cfg->outbox.table, cfg->db.migrate, err) != IB_E_OK)
        return err->code;
    IB_LOG(IB_LOG_INFO, "db_ready",
           IB_MSG(cfg->db.migrate ? "outbox table ready" : "outbox table checked"),
           IB_S("table", cfg->outbox.table));
    return IB_E_OK;
}

/* The relay's claim check from outbox.claim_check_* ("" is none). */
static rl_claim_options_t wk_outbox_claim_options(const wk_config_t *cfg)
{
    const char *auth = cfg->outbox.claim_check_auth;
    bool key = strcmp(auth, "shared_key") == 0;
    return (rl_claim_options_t){
        .over_bytes = cfg->outbox.claim_check_over_bytes,
        .container_url = cfg->outbox.claim_check_container,
        .sas = strcmp(auth, "sas") == 0 ? cfg->outbox.claim_check_sas : NULL,
        .read_sas = cfg->outbox.claim_check_read_sas,
        .account = key ? cfg->outbox.claim_check_account : NULL,
        .account_key = key ? cfg->outbox.claim_check_account_key : NULL,
        .workload_identity = strcmp(auth, "workload_identity") == 0,
        .timeout_ms = cfg->outbox.claim_check_timeout_ms,
        .ca_file = *cfg->outbox.claim_check_ca_file ? cfg->outbox.claim_check_ca_file : NULL,
    };
}

rl_relay_t *wk_outbox_relay_start(const wk_config_t *cfg, const db_options_t *dbopt,
                                  ot_exporter_t *otel,
                                  sb_client_t *client, wk_metrics_t *metrics, ib_error_t *err)
{
    rl_relay_options_t ro = {
        .client = client,
        .db = *dbopt,
        .table = cfg->outbox.table,
        .poll_ms = cfg->outbox.poll_ms,
        .batch = (int)cfg->outbox.batch,
        .retention_s = cfg->outbox.retention_s,
        .backoff_max_ms = cfg->outbox.backoff_max_ms,
        .otel = otel,
        .claim = wk_outbox_claim_options(cfg),
    };
    rl_relay_t *r = rl_relay_start(&ro, err);
    if (!r) {
        IB_LOG(IB_LOG_ERROR, "outbox_relay", IB_MSG(err->text));
        return NULL;
    }
    if (metrics)
        wk_metrics_outbox_source(metrics, rl_relay_stats, r);
    return r;
}
