/*
 * wk_dbopt.c - database options from the configuration (see wk_dbopt.h).
 * thread: main; db_token_from_aad on the connecting thread.
 */
#include "wk_dbopt.h"

#include <string.h>

#include "db_dialect.h"
#include "sb_token.h"

/*
 * db_token_fn over the Azure SQL token source: copies its cached token
 * (refreshed before expiry by its own thread) for a new connection.
 * thread: a db worker, the sweeper, the relay or inboxctl, before each connect.
 */
static ib_err_t db_token_from_aad(void *arg, char *buf, size_t size, ib_error_t *err)
{
    sb_token_t tok = {0};
    ib_err_t rc = sb_aad_token_get(arg, NULL, &tok, err);

    if (rc == IB_E_OK && (!tok.token || strlen(tok.token) >= size))
        rc = ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT, "Azure SQL token too long");
    if (rc == IB_E_OK)
        memcpy(buf, tok.token, strlen(tok.token) + 1);
    sb_token_clear(&tok);
    return rc;
}

/* db.auth workload_identity: a token source for Azure SQL from the federated credential. */
static ib_err_t start_token(wk_dbopt_t *o, const wk_config_t *cfg, long wait_ms, ib_error_t *err)
{
    sb_aad_opts_t aad = {.scope = WK_AAD_SCOPE_AZURE_SQL};

    if (!cfg->db.auth || strcmp(cfg->db.auth, "workload_identity") != 0)
        return IB_E_OK;
    o->aad = sb_aad_new(&aad, err);
    if (!o->aad || sb_aad_wait(o->aad, wait_ms, err) != IB_E_OK) {
        ib_error_prefix(err, "db.auth: no Azure AD token for Azure SQL");
        return err->code;
    }
    o->opt.access_token = db_token_from_aad;
    o->opt.access_token_arg = o->aad;
    return IB_E_OK;
}

ib_err_t wk_dbopt_init(wk_dbopt_t *o, const wk_config_t *cfg, long token_wait_ms,
                       ib_error_t *err)
{
    int d = db_dialect_parse(cfg->db.dialect);

    memset(o, 0, sizeof(*o));
    o->opt.connection_string = cfg->db.connection_string;
    o->opt.dialect = d < 0 ? DB_DIALECT_AUTO : (db_dialect_t)d;
    o->opt.inbox_table = cfg->db.inbox_table;
    o->opt.statement_timeout_s = (long)cfg->db.statement_timeout_s;
    if (db_codes_from_json(cfg->errors.transient_native, "errors.transient_native",
                           &o->opt.transient_native, err) != IB_E_OK ||
        db_codes_from_json(cfg->errors.permanent_native, "errors.permanent_native",
                           &o->opt.permanent_native, err) != IB_E_OK) {
        wk_dbopt_free(o);
        err->code = IB_E_CONFIG; /* a bad code list in the config file */
        return err->code;
    }
    if (start_token(o, cfg, token_wait_ms, err) != IB_E_OK) {
        wk_dbopt_free(o);
        return err->code;
    }
    return IB_E_OK;
}

void wk_dbopt_free(wk_dbopt_t *o)
{
    sb_aad_free(o->aad);
    o->aad = NULL;
    db_codes_free(&o->opt.transient_native);
    db_codes_free(&o->opt.permanent_native);
    memset(&o->opt, 0, sizeof(o->opt));
}
