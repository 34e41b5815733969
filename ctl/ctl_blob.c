/*
 * ctl_blob.c - `inboxctl blob show|fetch` (ctl_blob.h): the message peeked,
 * its route matched and its claim_check bound (route/rt_claim.c), the blob
 * fetched with effect/'s fx_blob_get as the daemon's worker/wk_claim.c
 * does. thread: main.
 */
#include "ctl_blob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fx_blob.h"
#include "fx_client.h"
#include "rt_route.h"
#include "sb_aad.h"

typedef struct find {
    const ctl_blob_opts_t *o;
    const rt_routes_t *routes;
    bool found;
    int rc;
} find_t;

static const char *auth_name(rt_claim_auth_t a)
{
    return a == RT_CLAIM_SHARED_KEY        ? "shared_key"
           : a == RT_CLAIM_WORKLOAD_IDENTITY ? "workload_identity"
                                             : "sas";
}

/* The storage token of workload identity into *tok; false after saying why. */
static bool storage_token(sb_token_t *tok)
{
    ib_error_t err;
    sb_aad_opts_t ao = {.scope = "https://storage.azure.com/.default"};
    sb_aad_t *aad = sb_aad_new(&ao, &err);
    bool ok = aad && sb_aad_wait(aad, 30000, &err) == IB_E_OK &&
              sb_aad_token_get(aad, NULL, tok, &err) == IB_E_OK;
    if (!ok)
        fprintf(stderr, "inboxctl: no token for Azure Storage: %s\n", err.text);
    sb_aad_free(aad);
    return ok;
}

/* Fetches ref into o->out and adds the result to j; the exit status. */
static int fetch(const ctl_blob_opts_t *o, const rt_claim_spec_t *c, const rt_claim_ref_t *ref,
                 json_t *j)
{
    sb_token_t tok = {0};
    fx_blob_t b;
    if (rt_claim_auth(c) == RT_CLAIM_WORKLOAD_IDENTITY && !storage_token(&tok))
        return 1;
    fx_blob_req_t rq = {.url = ref->url,
                        .account = rt_claim_account(c),
                        .account_key = rt_claim_account_key(c),
                        .bearer = tok.token,
                        .etag = ref->etag,
                        .sha256 = ref->sha256,
                        .max_bytes = (size_t)rt_claim_max_bytes(c),
                        .timeout_ms = rt_claim_timeout_ms(c),
                        .ca_file = rt_claim_ca_file(c)};
    fx_blob_get(&rq, &b);
    sb_token_clear(&tok);
    json_object_set_new(j, "result", json_string(fx_blob_result_name(b.res)));
    json_object_set_new(j, "http_status", json_integer(b.status));
    json_object_set_new(j, "bytes", json_integer((json_int_t)b.len));
    json_object_set_new(j, "blob_sha256", b.res == FX_BLOB_OK ? json_string(b.sha256) : json_null());
    json_object_set_new(j, "blob_etag", b.etag[0] ? json_string(b.etag) : json_null());
    json_object_set_new(j, "error", b.res == FX_BLOB_OK ? json_null() : json_string(b.err.text));
    int rc = b.res == FX_BLOB_OK ? 0 : 1;
    if (rc == 0) {
        FILE *fp = fopen(o->out, "wb");
        if (!fp || fwrite(b.data, 1, b.len, fp) != b.len || fclose(fp) != 0) {
            fprintf(stderr, "inboxctl: cannot write %s\n", o->out);
            rc = 1;
        }
    }
    fx_blob_free(&b);
    return rc;
}

/* One message's reference (and blob); the exit status. */
static int show(const ctl_blob_opts_t *o, const rt_routes_t *routes, const sb_msg_t *m)
{
    const rt_route_t *r = rt_routes_match(routes, m);
    const rt_claim_spec_t *c = r ? rt_route_claim(r) : NULL;
    rt_claim_ref_t ref;
    ib_error_t err;
    int rc;
    if (!c) {
        fprintf(stderr, "inboxctl: message %s: %s\n", o->message_id,
                r ? "its route has no claim_check" : "no route matches it");
        return 2;
    }
    if (rt_route_bind_claim(r, m, &ref, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: message %s: %s\n", o->message_id, err.text);
        rt_claim_ref_free(&ref);
        return 1;
    }
    json_t *j = json_pack("{s:s, s:I, s:s, s:s, s:s, s:I}", "message_id", o->message_id, "route",
                          (json_int_t)rt_route_index(r), "url", ref.url_redacted, "destination",
                          ref.dest, "auth", auth_name(rt_claim_auth(c)), "max_bytes",
                          (json_int_t)rt_claim_max_bytes(c));
    json_object_set_new(j, "sha256", ref.sha256 ? json_string(ref.sha256) : json_null());
    json_object_set_new(j, "etag", ref.etag ? json_string(ref.etag) : json_null());
    rc = o->fetch ? fetch(o, c, &ref, j) : 0;
    char *t = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    printf("%s\n", t ? t : "{}");
    free(t);
    json_decref(j);
    rt_claim_ref_free(&ref);
    return rc;
}

static bool on_peeked(const sb_msg_t *m, void *arg)
{
    find_t *f = arg;
    if (!m->message_id || strcmp(m->message_id, f->o->message_id) != 0)
        return true;
    f->found = true;
    f->rc = show(f->o, f->routes, m);
    return false;
}

int ctl_blob(sb_sender_t *s, const wk_config_t *cfg, const ctl_blob_opts_t *o)
{
    rt_routes_t routes;
    ib_error_t err;
    char entity[600];
    long long unreadable = 0;
    if (rt_routes_compile(cfg->routes, &routes, stderr) != 0) {
        rt_routes_free(&routes);
        return 2;
    }
    if (o->fetch && fx_global_init(&err) != IB_E_OK) {
        rt_routes_free(&routes);
        return 1;
    }
    find_t f = {o, &routes, false, 0};
    snprintf(entity, sizeof entity, "%s%s", o->entity, o->dlq ? "/$DeadLetterQueue" : "");
    if (sb_sender_peek_each(s, entity, 1, 100, on_peeked, &f, &unreadable, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: peek failed: %s\n", err.text);
        f.rc = 1;
    } else if (!f.found) {
        fprintf(stderr, "inboxctl: no message %s in %s\n", o->message_id, entity);
        f.rc = 3;
    }
    if (o->fetch)
        fx_global_cleanup();
    rt_routes_free(&routes);
    return f.rc;
}
