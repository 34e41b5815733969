/*
 * wk_limits.h - the configuration held against what the servers say: the
 * entity's MaxDeliveryCount and LockDuration (read from Service Bus's
 * management endpoint, wk_entity.h) and the database's connection limit
 * (db_conn_max_connections). Findings are "config: warning: KEY: ..." lines
 * naming the setting and both values; the derived retry budget is what the
 * db workers use once the entity's MaxDeliveryCount is known.
 */
#ifndef WK_LIMITS_H
#define WK_LIMITS_H

#include <stdbool.h>
#include <stdio.h>

#include "db_conn.h"
#include "wk_config.h"
#include "wk_entity.h"
#include "rt_route.h"

/*
 * The retry budget in effect: retry.max_deliveries as set, or with -1 (the
 * default) one below entity_mdc, the MaxDeliveryCount read from Service Bus
 * (0 = not known yet: the value resolved at load). thread: any.
 */
long long wk_limits_max_deliveries(const wk_config_t *cfg, long long entity_mdc);

/*
 * The settings that depend on the entity, against its description e:
 * servicebus.sessions vs RequiresSession, servicebus.max_delivery_count and
 * retry.max_deliveries vs MaxDeliveryCount, the retry backoff and lock
 * renewal vs LockDuration, each HTTP route's lease_s vs LockDuration
 * (routes may be NULL). Warnings to out; returns their number. thread: any.
 */
int wk_limits_check_entity(const wk_config_t *cfg, const rt_routes_t *routes,
                           const wk_entity_info_t *e, FILE *out);

/* The connections inboxd opens: db.pool_size, the sweeper, the relay when it relays. */
long long wk_limits_connections(const wk_config_t *cfg, bool relay_only, bool relay);

/*
 * A warning to out when wk_limits_connections exceeds limit, the server's
 * (0 = none known: nothing). Returns 1 when it warned. thread: any.
 */
int wk_limits_check_pool(const wk_config_t *cfg, bool relay_only, bool relay, long long limit,
                         FILE *out);

/*
 * --check-config: reads the entity's description once (when the connection
 * string carries a SAS key or signature and entity_poll_s is not 0) and the
 * database's connection limit (not SQLite), each bounded by a few seconds,
 * and checks the settings against them. An unreachable endpoint or database
 * is one warning line, never a problem. thread: main.
 */
void wk_limits_check_servers(const wk_config_t *cfg, const rt_routes_t *routes, bool relay_only,
                             bool relay, FILE *out);

#endif
