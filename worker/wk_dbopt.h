/*
 * wk_dbopt.h - the one path from the configuration to database options.
 *
 * inboxd (its db workers, sweeper and outbox relay) and every inboxctl
 * command that opens the database build their db_options_t here, so
 * db.connection_string, db.dialect, db.inbox_table, db.statement_timeout_s,
 * errors.transient_native / errors.permanent_native and db.auth
 * (workload_identity: an Azure AD token for Azure SQL before each connect)
 * mean the same thing in all of them.
 *
 * thread: main (init and free); the token callback runs on whichever thread
 * connects.
 */
#ifndef WK_DBOPT_H
#define WK_DBOPT_H

#include "db_conn.h"
#include "ib_err.h"
#include "sb_aad.h"
#include "wk_config.h"

/* The scope of Azure AD tokens for Azure SQL Database. */
#define WK_AAD_SCOPE_AZURE_SQL "https://database.windows.net/.default"

typedef struct wk_dbopt {
    db_options_t opt; /* what db_conn_new takes; valid while this lives */
    sb_aad_t *aad;    /* db.auth workload_identity: the token source, else NULL */
} wk_dbopt_t;

/*
 * Fills o from cfg. A bad errors.*_native list gives IB_E_CONFIG; with
 * db.auth workload_identity it starts the Azure AD token source and waits up
 * to token_wait_ms for a first token (IB_E_AUTH or IB_E_TIMEOUT when none
 * comes). On failure o holds nothing to free (wk_dbopt_free is still safe).
 */
ib_err_t wk_dbopt_init(wk_dbopt_t *o, const wk_config_t *cfg, long token_wait_ms,
                       ib_error_t *err);

/* Stops the token source and frees the code lists; after every connection user. */
void wk_dbopt_free(wk_dbopt_t *o);

#endif
