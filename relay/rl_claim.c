/*
 * rl_claim.c - the relay's claim check (rl_claim.h): the blob's name from
 * the row's message id, the upload with the configured authorisation
 * (fx_blob_put reads the row's body in place), the SHA-256 the message
 * carries, and the reference's properties.
 *
 * thread: the relay's.
 */
#include "rl_claim.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_blob.h"
#include "ib_enc.h"
#include "ib_log.h"
#include "sb_aad.h"

struct rl_claim {
    rl_claim_options_t o;
    sb_aad_t *aad;
};

rl_claim_t *rl_claim_new(const rl_claim_options_t *o, ib_error_t *err)
{
    rl_claim_t *c = calloc(1, sizeof(*c));
    if (!c) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    c->o = *o;
    if (o->workload_identity) {
        sb_aad_opts_t ao = {.scope = FX_BLOB_TOKEN_SCOPE};
        if (!(c->aad = sb_aad_new(&ao, err))) {
            free(c);
            return NULL;
        }
    }
    return c;
}

void rl_claim_free(rl_claim_t *c)
{
    if (!c)
        return;
    sb_aad_free(c->aad);
    free(c);
}

bool rl_claim_wanted(const rl_claim_t *c, const db_outbox_row_t *row)
{
    return c && row->body && row->body_len > (size_t)c->o.over_bytes;
}

void rl_claim_ref_free(rl_claim_ref_t *ref)
{
    free(ref->url);
    ref->url = NULL;
}

/* CONTAINER/NAME[?query]: malloc'd, NULL when out of memory. */
static char *blob_url(const char *container, const char *name, const char *query)
{
    bool q = query && *query;
    size_t n = strlen(container) + strlen(name) + (q ? strlen(query) : 0) + 3;
    char *u = malloc(n);
    if (u)
        snprintf(u, n, "%s%s%s%s%s", container, container[strlen(container) - 1] == '/' ? "" : "/",
                 name, q ? "?" : "", q ? query : "");
    return u;
}

static void sha256_hex(const unsigned char *p, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
    ib_enc_hex(out, md, 32);
    out[64] = '\0';
}

/* The upload itself; the request's URL holds the write SAS, so it is freed here. */
static ib_err_t upload(rl_claim_t *c, const db_outbox_row_t *row, const char *name, ib_error_t *err)
{
    const rl_claim_options_t *o = &c->o;
    sb_token_t tok = {0};
    fx_blob_put_t out;
    if (c->aad && sb_aad_token_get(c->aad, NULL, &tok, err) != IB_E_OK)
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_TRANSIENT,
                            "claim check: no token for Azure Storage yet");
    char *url = blob_url(o->container_url, name, o->sas);
    if (!url) {
        sb_token_clear(&tok);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    fx_blob_put_req_t rq = {.url = url,
                            .account = o->account,
                            .account_key = o->account_key,
                            .bearer = tok.token,
                            .content_type = row->content_type,
                            .data = row->body,
                            .len = row->body_len,
                            .timeout_ms = (long)o->timeout_ms,
                            .ca_file = o->ca_file};
    fx_blob_put(&rq, &out);
    free(url);
    sb_token_clear(&tok);
    if (out.res == FX_BLOB_OK) {
        IB_LOG(IB_LOG_DEBUG, "claim_check_uploaded", IB_MSG("an outbox row's body was uploaded"),
               IB_S("message_id", row->message_id), IB_I("bytes", (long long)row->body_len),
               IB_I("requests", out.requests), IB_D("duration_s", out.duration_s));
        return IB_E_OK;
    }
    ib_error_set(err, out.err.code ? out.err.code : IB_E_IO, IB_CLASS_TRANSIENT,
                 "claim check upload (%s, HTTP %ld): %s", fx_blob_result_name(out.res), out.status,
                 out.err.text);
    ib_strlcpy(err->condition, "inboxd:claim-check-upload", sizeof err->condition);
    return err->code;
}

ib_err_t rl_claim_upload(rl_claim_t *c, const db_outbox_row_t *row, rl_claim_ref_t *ref,
                         ib_error_t *err)
{
    const rl_claim_options_t *o = &c->o;
    char *name = ib_enc_pct_dup(row->message_id);
    memset(ref, 0, sizeof(*ref));
    if (!name)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    if (upload(c, row, name, err) != IB_E_OK) {
        free(name);
        return err->code;
    }
    ref->url = blob_url(o->container_url, name, o->read_sas);
    free(name);
    if (!ref->url)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    sha256_hex((const unsigned char *)row->body, row->body_len, ref->sha256);
    ref->size = (long long)row->body_len;
    return IB_E_OK;
}

/* Points props' entry key at value (replacing the row's own), or adds it. */
static void set_prop(sb_prop_t *props, size_t *nprops, sb_prop_t v)
{
    for (size_t i = 0; i < *nprops; i++)
        if (strcmp(props[i].key, v.key) == 0) {
            props[i].type = v.type;
            props[i].str = v.str; /* the holder still frees the parsed value */
            props[i].i = v.i;
            return;
        }
    props[(*nprops)++] = v;
}

void rl_claim_props(const rl_claim_ref_t *ref, sb_prop_t *props, size_t *nprops)
{
    set_prop(props, nprops,
             (sb_prop_t){.key = RL_CLAIM_URL, .type = SB_PROP_STRING, .str = ref->url});
    set_prop(
        props, nprops,
        (sb_prop_t){.key = RL_CLAIM_SHA256, .type = SB_PROP_STRING, .str = (char *)ref->sha256});
    set_prop(props, nprops,
             (sb_prop_t){.key = RL_CLAIM_SIZE, .type = SB_PROP_INT64, .i = ref->size});
}
