/*
 * emu_cbs.c - the $cbs node: put-token with SAS (and optionally JWT)
 * validation, and the per-connection grants links are checked against. A
 * grant ends when its token expires (se=, exp, or --token-lifetime-s after
 * the put-token, whichever is first); the links it covered are then
 * detached amqp:unauthorized-access, as Service Bus does. While the
 * namespace is read-only (SIGUSR1, a Geo-Replication promotion) entity and
 * $management links are detached EMU_READ_ONLY_COND instead.
 */
#include "emu_broker.h"

#include "emu_auth.h"
#include "ib_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_GRANTS_MAX 256

/* thread: proactor */
void emu_cbs_grant(emu_conn_t *conn, const char *audience, int64_t expiry_s)
{
    if (conn->ngrants >= EMU_GRANTS_MAX) {
        /* Bounded: drop the oldest (the list tail). */
        emu_grant_t **pp = &conn->grants;
        while ((*pp)->next)
            pp = &(*pp)->next;
        free(*pp);
        *pp = NULL;
        conn->ngrants--;
    }
    size_t n = strlen(audience);
    emu_grant_t *g = malloc(sizeof *g + n + 1);
    if (!g)
        return;
    memcpy(g->audience, audience, n + 1);
    g->expiry_s = expiry_s;
    g->next = conn->grants;
    conn->grants = g;
    conn->ngrants++;
}

/* thread: proactor */
bool emu_cbs_authorized(emu_broker_t *b, emu_conn_t *conn, const char *path)
{
    if (!b->key && !b->jwt_issuer)
        return true;
    int64_t now_s = emu_now_ms() / 1000;
    for (emu_grant_t *g = conn->grants; g; g = g->next)
        if (g->expiry_s > now_s && emu_audience_covers(g->audience, path))
            return true;
    return false;
}

/* Whether conn holds an unexpired grant of exactly this audience (a renewal). */
static bool holds_grant(emu_conn_t *conn, const char *audience)
{
    int64_t now_s = emu_now_ms() / 1000;
    for (emu_grant_t *g = conn->grants; g; g = g->next)
        if (g->expiry_s > now_s && strcmp(g->audience, audience) == 0)
            return true;
    return false;
}

static void respond(emu_link_t *in, pn_message_t *req, int status, const char *desc)
{
    emu_link_t *out = emu_reply_link(in->conn, pn_message_get_reply_to(req));
    if (!out) {
        IB_LOG(IB_LOG_WARN, "cbs", IB_MSG("no reply link for put-token"),
               IB_S("reply_to", pn_message_get_reply_to(req)));
        return;
    }
    pn_message_t *resp = pn_message();
    pn_message_set_correlation_id(resp, pn_message_get_id(req));
    pn_data_t *p = pn_message_properties(resp);
    pn_data_put_map(p);
    pn_data_enter(p);
    pn_data_put_string(p, pn_bytes(strlen("status-code"), "status-code"));
    pn_data_put_int(p, status);
    pn_data_put_string(p, pn_bytes(strlen("status-description"), "status-description"));
    pn_data_put_string(p, pn_bytes(strlen(desc), desc));
    pn_data_exit(p);
    emu_send_message(out, resp);
    pn_message_free(resp);
}

/* thread: proactor */
void emu_cbs_request(emu_broker_t *b, emu_link_t *l, pn_message_t *req)
{
    char op[64], type[128], name[1024];
    if (!emu_app_prop_str(req, "operation", op, sizeof op) || strcmp(op, "put-token") != 0) {
        respond(l, req, 400, "Only put-token is supported on $cbs.");
        return;
    }
    if (!emu_app_prop_str(req, "type", type, sizeof type) ||
        !emu_app_prop_str(req, "name", name, sizeof name)) {
        respond(l, req, 400, "put-token needs type and name.");
        return;
    }
    pn_data_t *body = pn_message_body(req);
    pn_data_rewind(body);
    char token[8192];
    token[0] = '\0';
    if (pn_data_next(body) &&
        (pn_data_type(body) == PN_STRING || pn_data_type(body) == PN_SYMBOL)) {
        pn_bytes_t t =
            pn_data_type(body) == PN_STRING ? pn_data_get_string(body) : pn_data_get_symbol(body);
        snprintf(token, sizeof token, "%.*s", (int)t.size, t.start);
    }
    int64_t now_s = emu_now_ms() / 1000;
    int64_t expiry = now_s + 3600;
    char why[256] = "";
    int rc = 0;
    if (l->conn->put_tokens++ < (unsigned)b->refuse_first_put_token) {
        b->ns->tokens_refused++;
        respond(l, req, 401,
                "InvalidSignature: refused by fault injection (refuse-first-put-token).");
        return;
    }
    if (b->refuse_put_token > 0 && holds_grant(l->conn, name)) {
        b->refuse_put_token--;
        b->ns->tokens_refused++;
        respond(l, req, 401, "InvalidSignature: refused by fault injection (refuse-put-token).");
        return;
    }
    if (strcmp(type, "jwt") == 0) {
        if (b->jwt_issuer)
            rc =
                emu_jwt_check(token, b->jwt_issuer, b->jwt_secret, now_s, &expiry, why, sizeof why);
        else if (b->key)
            rc = -1, snprintf(why, sizeof why, "jwt tokens are not configured");
    } else if (strcmp(type, "servicebus.windows.net:sastoken") == 0) {
        if (b->key)
            rc = emu_sas_check(token, b->key_name, b->key, name, now_s, &expiry, why, sizeof why);
        else if (b->jwt_issuer)
            rc = -1, snprintf(why, sizeof why, "SAS tokens are not configured");
    } else {
        rc = -1;
        snprintf(why, sizeof why, "unknown token type");
    }
    if (rc != 0) {
        IB_LOG(IB_LOG_INFO, "cbs_token", IB_S("audience", name), IB_S("result", "refused"),
               IB_S("reason", why));
        b->ns->tokens_refused++;
        char desc[512];
        snprintf(desc, sizeof desc, "InvalidSignature: The token is not valid: %s.", why);
        respond(l, req, 401, desc);
        return;
    }
    if (b->token_lifetime_s > 0 && expiry > now_s + b->token_lifetime_s)
        expiry = now_s + b->token_lifetime_s;
    emu_cbs_grant(l->conn, name, expiry);
    IB_LOG(IB_LOG_DEBUG, "cbs_token", IB_S("audience", name), IB_S("result", "accepted"));
    respond(l, req, 200, "OK");
}

/* Drops conn's expired grants; true when there were any. thread: proactor */
static bool prune_grants(emu_conn_t *conn, int64_t now_s)
{
    bool any = false;
    for (emu_grant_t **pp = &conn->grants; *pp;) {
        emu_grant_t *g = *pp;
        if (g->expiry_s > now_s) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        free(g);
        conn->ngrants--;
        any = true;
    }
    return any;
}

/* thread: proactor */
bool emu_cbs_expire_links(emu_broker_t *b, emu_conn_t *conn, bool detach)
{
    bool found = false;
    bool pruned = (b->key || b->jwt_issuer) && prune_grants(conn, emu_now_ms() / 1000);
    if (!detach && !pruned && !b->read_only)
        return false;
    for (emu_link_t *l = conn->links; l; l = l->next) {
        if (l->kind != EMU_LINK_SEND_IN && l->kind != EMU_LINK_CONSUMER &&
            l->kind != EMU_LINK_MGMT_IN)
            continue;
        pn_terminus_t *t = l->kind == EMU_LINK_CONSUMER ? pn_link_remote_source(l->pl)
                                                        : pn_link_remote_target(l->pl);
        const char *addr = pn_terminus_get_address(t);
        if (!addr ||
            (!b->read_only && emu_cbs_authorized(b, conn, addr[0] == '/' ? addr + 1 : addr)))
            continue;
        found = true;
        if (!detach)
            break;
        IB_LOG(IB_LOG_INFO, "cbs_token", IB_MSG("link detached"), IB_S("address", addr),
               IB_B("read_only", b->read_only));
        emu_link_release(b, l);
        *(b->read_only ? &b->ns->links_read_only : &b->ns->links_expired) += 1;
        pn_condition_t *c = pn_link_condition(l->pl);
        pn_condition_set_name(c, b->read_only ? EMU_READ_ONLY_COND : "amqp:unauthorized-access");
        pn_condition_set_description(c, b->read_only ? EMU_READ_ONLY_DESC
                                                     : "Unauthorized access. The token has "
                                                       "expired; put a new token with $cbs.");
        pn_link_close(l->pl);
    }
    conn->grants_lapsed = !detach && found;
    return found;
}
