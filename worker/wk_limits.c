/*
 * wk_limits.c - the configuration against the servers' own limits (see
 * wk_limits.h). --check-config calls it from the main thread; the daemon
 * from its main thread (the pool at start, the entity once the poller has
 * read it); wk_limits_max_deliveries from the db workers.
 */
#include "wk_limits.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db_connstr.h"
#include "sb_connstr.h"
#include "wk_dbopt.h"

/* How long --check-config waits for either server. */
#define CHECK_TIMEOUT_MS 5000

long long wk_limits_max_deliveries(const wk_config_t *cfg, long long entity_mdc)
{
    if (!cfg->retry.max_deliveries_auto || entity_mdc <= 0)
        return cfg->retry.max_deliveries;
    return entity_mdc > 1 ? entity_mdc - 1 : 0;
}

/* The longest the retries of one delivery wait in all (full jitter: at most each step). */
static long long retry_wait_max_ms(const wk_config_t *cfg)
{
    long long total = 0, step = cfg->retry.base_ms;
    for (long long i = 0; i < cfg->retry.attempts; i++) {
        total += step < cfg->retry.max_ms ? step : cfg->retry.max_ms;
        if (step < cfg->retry.max_ms)
            step *= 2;
    }
    return total;
}

/* MaxDeliveryCount: the configured figure and the budget against the real one. */
static int check_deliveries(const wk_config_t *cfg, long long mdc, FILE *out)
{
    int n = 0;
    long long md = wk_limits_max_deliveries(cfg, mdc);
    if (mdc <= 0)
        return 0;
    if (cfg->servicebus.max_delivery_count > 0 && cfg->servicebus.max_delivery_count != mdc) {
        n++;
        fprintf(out,
                "config: warning: servicebus.max_delivery_count: %lld, but the entity's "
                "MaxDeliveryCount is %lld (read from Service Bus); inboxd uses %lld\n",
                cfg->servicebus.max_delivery_count, mdc, mdc);
    }
    if (cfg->retry.max_deliveries_auto && md != cfg->retry.max_deliveries) {
        n++;
        fprintf(out,
                "config: warning: retry.max_deliveries: %lld until the entity is read, then %lld, "
                "one below its MaxDeliveryCount %lld (read from Service Bus); set "
                "servicebus.max_delivery_count %lld to have it from the start\n",
                cfg->retry.max_deliveries, md, mdc, mdc);
    }
    if (!cfg->retry.max_deliveries_auto && md > 0 && md >= mdc) {
        n++;
        fprintf(out,
                "config: warning: retry.max_deliveries: %lld is not below the entity's "
                "MaxDeliveryCount %lld (read from Service Bus): the broker may dead-letter first, "
                "as MaxDeliveryCountExceeded without the last error\n",
                md, mdc);
    } else if (!cfg->retry.max_deliveries_auto && md == 0) {
        n++;
        fprintf(out,
                "config: warning: retry.max_deliveries: 0 (off): the entity's MaxDeliveryCount "
                "%lld (read from Service Bus) dead-letters a message failing transiently without "
                "its last error\n",
                mdc);
    }
    return n;
}

/* LockDuration: retries and lock renewal within one lock, each HTTP route's lease. */
static int check_lock(const wk_config_t *cfg, const rt_routes_t *routes, long long lock_ms,
                      FILE *out)
{
    int n = 0;
    long long renewal_ms = cfg->servicebus.max_auto_lock_renewal_s * 1000;
    long long wait_ms = retry_wait_max_ms(cfg);
    if (lock_ms <= 0)
        return 0;
    if (renewal_ms == 0 && wait_ms >= lock_ms) {
        n++;
        fprintf(out,
                "config: warning: retry.attempts: %lld attempts wait up to %lld ms "
                "(retry.base_ms %lld doubling to retry.max_ms %lld), not shorter than the "
                "entity's LockDuration %lld ms (read from Service Bus), and "
                "servicebus.max_auto_lock_renewal_s is 0: the lock lapses while retrying\n",
                cfg->retry.attempts, wait_ms, cfg->retry.base_ms, cfg->retry.max_ms, lock_ms);
    } else if (renewal_ms > 0 && wait_ms >= renewal_ms + lock_ms) {
        n++;
        fprintf(out,
                "config: warning: retry.attempts: %lld attempts wait up to %lld ms, longer than "
                "servicebus.max_auto_lock_renewal_s (%lld s) plus the entity's LockDuration "
                "%lld ms (read from Service Bus): the lock lapses while retrying\n",
                cfg->retry.attempts, wait_ms, cfg->servicebus.max_auto_lock_renewal_s, lock_ms);
    }
    if (routes)
        n += rt_routes_check_lock(routes, lock_ms, out);
    return n;
}

int wk_limits_check_entity(const wk_config_t *cfg, const rt_routes_t *routes,
                           const wk_entity_info_t *e, FILE *out)
{
    int n = 0;
    if (e->requires_session != cfg->servicebus.sessions) {
        n++;
        fprintf(out,
                "config: warning: servicebus.sessions: %s, but the entity %s sessions (read from "
                "Service Bus): %s\n",
                cfg->servicebus.sessions ? "true" : "false",
                e->requires_session ? "requires" : "does not use",
                e->requires_session ? "receiving without a session is refused"
                                    : "no session receiver is ever given a message");
    }
    n += check_deliveries(cfg, e->max_delivery_count, out);
    n += check_lock(cfg, routes, e->lock_duration_ms, out);
    return n;
}

/* db.pool_scope cluster: the replicas' heartbeat keeps a connection of its own. */
static bool heartbeat(const wk_config_t *cfg, bool relay_only)
{
    return !relay_only && cfg->db.pool_size > 1 && strcmp(cfg->db.pool_scope, "cluster") == 0;
}

long long wk_limits_connections(const wk_config_t *cfg, bool relay_only, bool relay)
{
    long long n = relay_only ? 0 : cfg->db.pool_size + 1; /* the workers, the sweeper */
    return n + (relay ? 1 : 0) + (heartbeat(cfg, relay_only) ? 1 : 0);
}

int wk_limits_check_pool(const wk_config_t *cfg, bool relay_only, bool relay, long long limit,
                         FILE *out)
{
    long long need = wk_limits_connections(cfg, relay_only, relay);
    if (limit <= 0 || need <= limit)
        return 0;
    fprintf(out,
            "config: warning: db.pool_size: %lld workers (+%lld for the %s) need %lld connections, "
            "more than the %lld the database accepts for this login: the workers past it get "
            "none and take no messages; lower db.pool_size or raise the server's limit\n",
            relay_only ? 0 : cfg->db.pool_size, need - (relay_only ? 0 : cfg->db.pool_size),
            relay_only                     ? "relay"
            : heartbeat(cfg, relay_only) && relay ? "sweeper, heartbeat and relay"
            : heartbeat(cfg, relay_only)          ? "sweeper and heartbeat"
            : relay                               ? "sweeper and relay"
                                                  : "sweeper",
            need, limit);
    return 1;
}

/* The entity's description, once; any failure is one warning line. */
static void check_entity_live(const wk_config_t *cfg, const rt_routes_t *routes, FILE *out)
{
    sb_connstr_t cs;
    bool sas = false;
    if (cfg->servicebus.entity_poll_s <= 0 || !cfg->servicebus.entity ||
        !*cfg->servicebus.entity)
        return;
    if (sb_connstr_parse(cfg->servicebus.connection_string, &cs, NULL) == IB_E_OK) {
        sas = cs.key || cs.sas;
        sb_connstr_free(&cs);
    }
    if (!sas)
        return; /* an Azure AD token is the pod's: checked by the poller at start */
    wk_entity_opts_t eo = {
        .connection_string = cfg->servicebus.connection_string,
        .entity = cfg->servicebus.entity,
        .endpoint = cfg->servicebus.management_endpoint,
        .ca_file = cfg->servicebus.ca_file[0] ? cfg->servicebus.ca_file : NULL,
        .http_timeout_ms = CHECK_TIMEOUT_MS,
    };
    wk_entity_info_t e;
    ib_error_t err;
    if (wk_entity_fetch(&eo, &e, &err) != IB_E_OK) {
        fprintf(out,
                "config: warning: servicebus.entity: the entity's description could not be read "
                "(%s): MaxDeliveryCount and LockDuration not checked\n",
                err.text);
        return;
    }
    wk_limits_check_entity(cfg, routes, &e, out);
}

/* True when the connection string names SQLite (no server, no limit). */
static bool is_sqlite(const wk_config_t *cfg)
{
    db_connstr_t cs;
    bool yes = strcmp(cfg->db.dialect, "sqlite") == 0;
    if (!yes && db_connstr_parse(cfg->db.connection_string, &cs, NULL) == IB_E_OK) {
        const char *drv = db_connstr_get(&cs, "Driver");
        yes = drv && strcasestr(drv, "sqlite") != NULL;
        db_connstr_free(&cs);
    }
    return yes;
}

/* The database's connection limit, once; any failure is one warning line. */
static void check_pool_live(const wk_config_t *cfg, bool relay_only, bool relay, FILE *out)
{
    wk_dbopt_t dbo;
    ib_error_t err;
    long long limit = 0;
    if (is_sqlite(cfg))
        return;
    if (wk_dbopt_init(&dbo, cfg, CHECK_TIMEOUT_MS, &err) == IB_E_OK) {
        dbo.opt.login_timeout_s = CHECK_TIMEOUT_MS / 1000;
        db_conn_t *dbc = db_conn_new(&dbo.opt, &err);
        if (dbc && db_conn_max_connections(dbc, &limit, &err) == IB_E_OK)
            err.code = IB_E_OK;
        else
            limit = -1;
        db_conn_free(dbc);
    } else {
        limit = -1;
    }
    wk_dbopt_free(&dbo);
    if (limit < 0)
        fprintf(out,
                "config: warning: db.connection_string: the server's connection limit could not "
                "be read (%s): db.pool_size not checked\n",
                err.text);
    else
        wk_limits_check_pool(cfg, relay_only, relay, limit, out);
}

void wk_limits_check_servers(const wk_config_t *cfg, const rt_routes_t *routes, bool relay_only,
                             bool relay, FILE *out)
{
    if (!relay_only)
        check_entity_live(cfg, routes, out);
    check_pool_live(cfg, relay_only, relay, out);
}
