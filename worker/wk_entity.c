/*
 * wk_entity.c - the entity poller (see wk_entity.h): a thread of its own
 * that reads the entity's description from Service Bus's management
 * endpoint with effect's HTTP client (fx_client.h) and peeks its oldest
 * message on a blocking connection of its own (sb_send.h).
 *
 * thread: wk_entity_start/stop on main; poll_main on the poller thread; the
 * readers (metrics source, wk_entity_max_delivery_count) on any thread,
 * under mu.
 */
#include "wk_entity.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fx_client.h"
#include "ib_log.h"
#include "ib_time.h"
#include "sb_connstr.h"
#include "sb_send.h"

/* An Authorization header value: a SAS token or an Azure AD JWT. */
#define AUTH_MAX 16384

/* One failing source (the management endpoint or the peek) and its last logged condition. */
typedef struct {
    unsigned long long errors;
    char condition[128]; /* "" while healthy */
} source_t;

struct wk_entity {
    wk_entity_opts_t o;
    sb_connstr_t cs;
    char url[1024];      /* ENDPOINT/ENTITY?api-version=2021-05 */
    char audience[1024]; /* ENDPOINT/ENTITY: what a SAS token is signed for */
    sb_sender_t *peeker; /* poller thread only */
    pthread_t tid;
    pthread_mutex_t mu; /* guards everything below */
    bool stop, joined;
    pthread_cond_t cv;
    bool counted;     /* the description was read at least once */
    bool up;          /* the last read succeeded */
    wk_entity_info_t info;
    bool age_known;
    long long oldest_enqueued_ms; /* 0: the entity holds no message */
    source_t mgmt, peek;
};

/* ---- parsing ------------------------------------------------------------------ */

/*
 * Copies the text of the first element whose local name is name (with or
 * without a namespace prefix) into out. False when there is none.
 */
static bool xml_text(const char *xml, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(xml, name); p; p = strstr(p + 1, name)) {
        if (p == xml || p[nl] != '>')
            continue;
        const char *q = p - 1;
        if (*q == ':') /* a prefix: walk back over it to the '<' */
            while (q > xml && (isalnum((unsigned char)q[-1]) || q[-1] == '_'))
                q--;
        if (q == p - 1 ? *q != '<' : q[-1] != '<')
            continue;
        const char *v = p + nl + 1, *end = strchr(v, '<');
        size_t vl = end ? (size_t)(end - v) : 0;
        if (!end || vl >= size)
            return false;
        memcpy(out, v, vl);
        out[vl] = '\0';
        return true;
    }
    return false;
}

static bool xml_count(const char *xml, const char *name, long long *out)
{
    char buf[32], *end;
    if (!xml_text(xml, name, buf, sizeof buf))
        return false;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || *end || v < 0)
        return false;
    *out = v;
    return true;
}

long long wk_entity_duration_ms(const char *s)
{
    if (!s || *s++ != 'P')
        return -1;
    double ms = 0;
    bool time = false, any = false;
    while (*s) {
        if (*s == 'T' && !time) {
            time = true;
            s++;
            continue;
        }
        char *end;
        double v = strtod(s, &end);
        if (end == s || v < 0)
            return -1;
        double unit = !time && *end == 'D' ? 86400e3
                      : time && *end == 'H' ? 3600e3
                      : time && *end == 'M' ? 60e3
                      : time && *end == 'S' ? 1e3
                                            : -1;
        if (unit < 0)
            return -1;
        ms += v * unit;
        any = true;
        s = end + 1;
    }
    return any && ms < 9.2e18 ? (long long)(ms + 0.5) : -1;
}

ib_err_t wk_entity_parse(const char *xml, wk_entity_info_t *out, ib_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!strstr(xml, "<entry"))
        return ib_error_set(err, IB_E_NOTFOUND, IB_CLASS_PERMANENT,
                            strstr(xml, "<feed") ? "no such entity (an empty feed)"
                                                 : "not an Atom entry");
    const char *cd = strstr(xml, "CountDetails");
    if (!cd || !xml_count(cd, "ActiveMessageCount", &out->active) ||
        !xml_count(cd, "DeadLetterMessageCount", &out->dead_letter))
        return ib_error_set(err, IB_E_DECODE, IB_CLASS_PERMANENT,
                            "the entity description has no CountDetails");
    /* Older entities may leave out the scheduled and transfer counts: 0. */
    xml_count(cd, "ScheduledMessageCount", &out->scheduled);
    xml_count(cd, "TransferDeadLetterMessageCount", &out->transfer_dead_letter);
    xml_count(xml, "MaxDeliveryCount", &out->max_delivery_count);
    char buf[64];
    if (xml_text(xml, "LockDuration", buf, sizeof buf)) {
        long long ms = wk_entity_duration_ms(buf);
        out->lock_duration_ms = ms > 0 ? ms : 0;
    }
    out->requires_session =
        xml_text(xml, "RequiresSession", buf, sizeof buf) && strcmp(buf, "true") == 0;
    return IB_E_OK;
}

/* ---- one read of the management endpoint ---------------------------------------- */

/* URL and token audience from the options; false when the connection string is unusable. */
static bool make_urls(const wk_entity_opts_t *o, const sb_connstr_t *cs, char *url, size_t ul,
                      char *aud, size_t al)
{
    char base[512];
    if (o->endpoint && *o->endpoint)
        snprintf(base, sizeof base, "%s", o->endpoint);
    else if (cs->port_given)
        snprintf(base, sizeof base, "https://%s:%d/", cs->host, cs->port);
    else
        snprintf(base, sizeof base, "https://%s/", cs->host);
    size_t bl = strlen(base);
    if (bl == 0 || base[bl - 1] != '/')
        snprintf(base + bl, sizeof base - bl, "/");
    int n = snprintf(aud, al, "%s%s", base, o->entity);
    return n > 0 && (size_t)n < al &&
           (size_t)snprintf(url, ul, "%s?api-version=2021-05", aud) < ul;
}

/* The Authorization header's value for the request, into hdr. */
static ib_err_t auth_header(const wk_entity_opts_t *o, const sb_connstr_t *cs, const char *aud,
                            char *hdr, size_t size, ib_error_t *err)
{
    sb_token_t tok = {0};
    ib_err_t rc = o->token_get ? o->token_get(o->token_ctx, aud, &tok, err)
                               : sb_token_from_connstr((void *)cs, aud, &tok, err);
    if (rc != IB_E_OK)
        return rc;
    bool jwt = tok.type && strcmp(tok.type, SB_TOKEN_TYPE_JWT) == 0;
    int n = snprintf(hdr, size, "%s%s", jwt ? "Bearer " : "", tok.token);
    sb_token_clear(&tok);
    if (n < 0 || (size_t)n >= size)
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT, "token too long");
    return IB_E_OK;
}

/* One GET of the description through effect's HTTP client (no redirect followed). */
static ib_err_t fetch(const wk_entity_opts_t *o, const sb_connstr_t *cs, const char *url,
                      const char *aud, wk_entity_info_t *out, ib_error_t *err)
{
    char *hdr = malloc(AUTH_MAX);
    if (!hdr)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    ib_err_t rc = auth_header(o, cs, aud, hdr, AUTH_MAX, err);
    fx_client_t *fx = rc == IB_E_OK ? fx_client_new() : NULL;
    if (rc == IB_E_OK && !fx)
        rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "cannot create an HTTP client");
    if (rc != IB_E_OK) {
        memset(hdr, 0, AUTH_MAX);
        free(hdr);
        return rc;
    }
    const fx_header_t hdrs[] = {{"Authorization", hdr}, {"Accept", "application/atom+xml"}};
    fx_request_t req = {.method = "GET",
                        .url = url,
                        .headers = hdrs,
                        .nheaders = 2,
                        .timeout_ms = o->http_timeout_ms > 0 ? o->http_timeout_ms : 10000,
                        .ca_file = o->ca_file && *o->ca_file ? o->ca_file : NULL};
    fx_response_t resp;
    fx_client_call(fx, &req, &resp);
    fx_client_free(fx);
    memset(hdr, 0, AUTH_MAX); /* the token */
    free(hdr);
    if (resp.status == 0)
        rc = ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT, "unreachable: %s", resp.err.text);
    else if (resp.status == 401 || resp.status == 403)
        rc = ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                          "unauthorized: HTTP %ld (the token needs the Manage right, or the "
                          "Azure Service Bus Data Owner role)", resp.status);
    else if (resp.status != 200)
        rc = ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT, "HTTP %ld", resp.status);
    else if (resp.body_truncated)
        rc = ib_error_set(err, IB_E_DECODE, IB_CLASS_TRANSIENT,
                          "the description is larger than %d bytes", FX_BODY_MAX);
    else
        rc = wk_entity_parse(resp.body, out, err);
    fx_response_free(&resp);
    return rc;
}

ib_err_t wk_entity_fetch(const wk_entity_opts_t *o, wk_entity_info_t *out, ib_error_t *err)
{
    sb_connstr_t cs;
    ib_err_t rc = sb_connstr_parse(o->connection_string, &cs, err);
    if (rc != IB_E_OK)
        return rc;
    char url[1024], aud[1024];
    if (!make_urls(o, &cs, url, sizeof url, aud, sizeof aud))
        rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "entity URL too long");
    else
        rc = fetch(o, &cs, url, aud, out, err);
    sb_connstr_free(&cs);
    return rc;
}

/* ---- the poller thread ------------------------------------------------------------ */

/* Counts a failure and logs it once per condition; an empty why marks recovery. */
static void note(wk_entity_t *ep, source_t *src, const char *what, const ib_error_t *err)
{
    pthread_mutex_lock(&ep->mu);
    bool was_ok = src->condition[0] == '\0', same = false;
    if (err) {
        src->errors++;
        same = strcmp(src->condition, err->text) == 0;
        snprintf(src->condition, sizeof src->condition, "%s", err->text);
    } else {
        src->condition[0] = '\0';
    }
    pthread_mutex_unlock(&ep->mu);
    if (err && !same)
        IB_LOG(IB_LOG_WARN, "entity_poll", IB_MSG(err->text), IB_S("source", what),
               IB_S("entity", ep->o.entity), IB_S("code", ib_err_name(err->code)));
    else if (!err && !was_ok)
        IB_LOG(IB_LOG_INFO, "entity_poll", IB_MSG("recovered"), IB_S("source", what),
               IB_S("entity", ep->o.entity));
}

/* What the poller keeps of a peeked head: its properties whole, its body cut. */
#define PEEK_KEEP_BYTES (64u << 10)

/* Peeks the head of the entity: its enqueued time, 0 when empty. */
static ib_err_t peek_head(wk_entity_t *ep, long long *enqueued_ms, ib_error_t *err)
{
    if (!ep->peeker) {
        sb_sender_options_t so = {.connection_string = ep->o.connection_string,
                                  .ca_file = ep->o.ca_file,
                                  .token_get = ep->o.token_get,
                                  .token_ctx = ep->o.token_ctx,
                                  .sas_token_lifetime_s = ep->o.sas_token_lifetime_s,
                                  .timeout_ms = 10000,
                                  .answer_keep = PEEK_KEEP_BYTES};
        ep->peeker = sb_sender_open(&so, err);
        if (!ep->peeker)
            return err->code ? err->code : IB_E_IO;
    }
    sb_msg_t **msgs = NULL;
    size_t n = 0;
    ib_err_t rc = sb_sender_peek(ep->peeker, ep->o.entity, 1, 1, &msgs, &n, err);
    if (rc != IB_E_OK) {
        sb_sender_close(ep->peeker); /* a fresh connection next time */
        ep->peeker = NULL;
        return rc;
    }
    *enqueued_ms = n > 0 ? msgs[0]->enqueued_ms : 0;
    sb_peek_free(msgs, n);
    return IB_E_OK;
}

static void poll_once(wk_entity_t *ep)
{
    wk_entity_info_t info;
    ib_error_t err;
    ib_err_t rc = fetch(&ep->o, &ep->cs, ep->url, ep->audience, &info, &err);
    pthread_mutex_lock(&ep->mu);
    ep->up = rc == IB_E_OK;
    if (rc == IB_E_OK) {
        ep->counted = true;
        ep->info = info;
    }
    pthread_mutex_unlock(&ep->mu);
    note(ep, &ep->mgmt, "management", rc == IB_E_OK ? NULL : &err);
    if (rc == IB_E_OK && ep->o.on_active)
        ep->o.on_active(ep->o.active_ctx, info.active);

    /* A peek only when something waits (or the counts are unknown). */
    long long enq = 0;
    if (rc == IB_E_OK && info.active + info.scheduled == 0)
        rc = IB_E_OK;
    else if ((rc = peek_head(ep, &enq, &err)) != IB_E_OK)
        note(ep, &ep->peek, "peek", &err);
    else
        note(ep, &ep->peek, "peek", NULL);
    pthread_mutex_lock(&ep->mu);
    if (rc == IB_E_OK) {
        ep->age_known = true;
        ep->oldest_enqueued_ms = enq;
    }
    pthread_mutex_unlock(&ep->mu);
}

static void *poll_main(void *arg)
{
    wk_entity_t *ep = arg;
    for (;;) {
        poll_once(ep);
        long long until = ib_mono_ms() + (long long)ep->o.poll_s * 1000;
        pthread_mutex_lock(&ep->mu);
        while (!ep->stop && ib_cond_wait_until(&ep->cv, &ep->mu, until) == 0)
            ;
        bool stop = ep->stop;
        pthread_mutex_unlock(&ep->mu);
        if (stop)
            break;
    }
    sb_sender_close(ep->peeker);
    ep->peeker = NULL;
    return NULL;
}

/* The metrics source: a copy under mu, the age at this instant. thread: http. */
static void entity_source(void *ctx, wk_metrics_entity_t *out)
{
    wk_entity_t *ep = ctx;
    pthread_mutex_lock(&ep->mu);
    out->counted = ep->counted;
    out->active = ep->info.active;
    out->scheduled = ep->info.scheduled;
    out->dead_letter = ep->info.dead_letter;
    out->transfer_dead_letter = ep->info.transfer_dead_letter;
    out->max_delivery_count = ep->info.max_delivery_count;
    out->lock_duration_ms = ep->info.lock_duration_ms;
    out->up = ep->up;
    out->age_known = ep->age_known;
    long long enq = ep->oldest_enqueued_ms;
    out->errors_management = ep->mgmt.errors;
    out->errors_peek = ep->peek.errors;
    pthread_mutex_unlock(&ep->mu);
    long long age = enq > 0 ? ib_now_ms() - enq : 0;
    out->oldest_age_s = age > 0 ? age / 1000.0 : 0.0;
}

wk_entity_t *wk_entity_start(const wk_entity_opts_t *o, ib_error_t *err)
{
    wk_entity_t *ep = calloc(1, sizeof *ep);
    if (!ep) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    ep->o = *o;
    if (ep->o.poll_s < 1)
        ep->o.poll_s = 1;
    if (sb_connstr_parse(o->connection_string, &ep->cs, err) != IB_E_OK) {
        free(ep);
        return NULL;
    }
    if (!make_urls(o, &ep->cs, ep->url, sizeof ep->url, ep->audience, sizeof ep->audience)) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "entity URL too long");
        sb_connstr_free(&ep->cs);
        free(ep);
        return NULL;
    }
    pthread_mutex_init(&ep->mu, NULL);
    ib_cond_init(&ep->cv);
    if (pthread_create(&ep->tid, NULL, poll_main, ep) != 0) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "cannot start the entity poller");
        pthread_mutex_destroy(&ep->mu);
        pthread_cond_destroy(&ep->cv);
        sb_connstr_free(&ep->cs);
        free(ep);
        return NULL;
    }
    if (o->metrics)
        wk_metrics_entity_source(o->metrics, entity_source, ep);
    IB_LOG(IB_LOG_INFO, "entity_poll", IB_MSG("polling the entity's counts"), IB_S("url", ep->url),
           IB_I("poll_s", ep->o.poll_s));
    return ep;
}

void wk_entity_stop(wk_entity_t *ep)
{
    if (!ep)
        return;
    pthread_mutex_lock(&ep->mu);
    bool joined = ep->joined;
    ep->stop = true;
    ep->joined = true;
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
    if (!joined)
        pthread_join(ep->tid, NULL);
}

void wk_entity_free(wk_entity_t *ep)
{
    if (!ep)
        return;
    wk_entity_stop(ep);
    pthread_mutex_destroy(&ep->mu);
    pthread_cond_destroy(&ep->cv);
    sb_connstr_free(&ep->cs);
    free(ep);
}

long long wk_entity_max_delivery_count(wk_entity_t *ep)
{
    if (!ep)
        return 0;
    pthread_mutex_lock(&ep->mu);
    long long v = ep->counted ? ep->info.max_delivery_count : 0;
    pthread_mutex_unlock(&ep->mu);
    return v;
}

long long wk_entity_lock_duration_ms(wk_entity_t *ep)
{
    if (!ep)
        return 0;
    pthread_mutex_lock(&ep->mu);
    long long v = ep->counted ? ep->info.lock_duration_ms : 0;
    pthread_mutex_unlock(&ep->mu);
    return v;
}

bool wk_entity_last(wk_entity_t *ep, wk_entity_info_t *out)
{
    if (!ep)
        return false;
    pthread_mutex_lock(&ep->mu);
    bool known = ep->counted;
    *out = ep->info;
    pthread_mutex_unlock(&ep->mu);
    return known;
}
