/*
 * sb_rr.c - request/response link pairs: $cbs (put-token, see sb_cbs.c) and
 * one $management pair per entity. Requests carry a string message-id and the
 * response link's address as reply-to; answers are matched by
 * correlation-id. A pair attaches lazily on its first request, after a token
 * for "<entity>/$management" is in place, and is reattached after a loss.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_condition.h"
#include "sb_core.h"
#include "sb_peek.h"

typedef enum { RR_IDLE, RR_AUTH, RR_ATTACHING, RR_READY } rr_state_t;

typedef struct rr_req {
    char id[40];
    pn_message_t *msg; /* NULL once sent */
    sb_rr_cb cb;
    void *ctx;
    long long deadline; /* monotonic ms */
    struct rr_req *next;
} rr_req_t;

struct sb_rr {
    sb_link_tag_t tag;
    sb_core_t *core;
    char *entity; /* NULL for $cbs */
    char *node;
    char *audience;
    rr_state_t state;
    pn_session_t *ssn;
    pn_link_t *snd, *rcv;
    bool snd_open, rcv_open;
    char reply_to[128];
    rr_req_t *queued, *sent;
    /* The answer being read (core->answer_keep: only its first bytes kept) */
    char *acc;
    size_t acc_len, acc_cap;
    bool acc_cut;  /* bytes past answer_keep were dropped */
    bool acc_fail; /* out of memory: the answer is dropped */
    sb_rr_t *next;
};

/* ---- helpers ---- */

void sb_put_str(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

void sb_put_sym(pn_data_t *d, const char *s)
{
    pn_data_put_symbol(d, pn_bytes(strlen(s), s));
}

pn_message_t *sb_mgmt_message(const char *operation, const char *associated_link)
{
    pn_message_t *m = pn_message();
    pn_data_t *ap = pn_message_properties(m);
    pn_data_put_map(ap);
    pn_data_enter(ap);
    sb_put_str(ap, "operation");
    sb_put_str(ap, operation);
    if (associated_link) {
        sb_put_str(ap, "associated-link-name");
        sb_put_str(ap, associated_link);
    }
    pn_data_exit(ap);
    return m;
}

static bool find_key(pn_data_t *d, const char *key)
{
    size_t kl = strlen(key);
    if (pn_data_type(d) != PN_MAP)
        return false;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t k = {0, NULL};
        if (pn_data_type(d) == PN_STRING)
            k = pn_data_get_string(d);
        else if (pn_data_type(d) == PN_SYMBOL)
            k = pn_data_get_symbol(d);
        if (!pn_data_next(d))
            break;
        if (k.start && k.size == kl && memcmp(k.start, key, kl) == 0)
            return true;
    }
    pn_data_exit(d);
    return false;
}

bool sb_body_find(pn_data_t *body, const char *key)
{
    pn_data_rewind(body);
    if (!pn_data_next(body))
        return false;
    return find_key(body, key);
}

static bool app_prop(pn_message_t *resp, const char *key, pn_data_t **out)
{
    pn_data_t *ap = pn_message_properties(resp);
    pn_data_rewind(ap);
    if (!pn_data_next(ap) || !find_key(ap, key))
        return false;
    *out = ap;
    return true;
}

int sb_resp_status(pn_message_t *resp)
{
    pn_data_t *ap;
    if (app_prop(resp, "statusCode", &ap) || app_prop(resp, "status-code", &ap)) {
        switch (pn_data_type(ap)) {
        case PN_INT:
            return pn_data_get_int(ap);
        case PN_UINT:
            return (int)pn_data_get_uint(ap);
        case PN_LONG:
            return (int)pn_data_get_long(ap);
        case PN_SHORT:
            return pn_data_get_short(ap);
        default:
            return 0;
        }
    }
    return 0;
}

static void prop_text(pn_message_t *resp, const char *key, char *buf, size_t size)
{
    pn_data_t *ap;
    buf[0] = '\0';
    if (!app_prop(resp, key, &ap))
        return;
    if (pn_data_type(ap) == PN_STRING || pn_data_type(ap) == PN_SYMBOL) {
        pn_bytes_t b =
            pn_data_type(ap) == PN_STRING ? pn_data_get_string(ap) : pn_data_get_symbol(ap);
        size_t n = b.size < size - 1 ? b.size : size - 1;
        memcpy(buf, b.start, n);
        buf[n] = '\0';
    }
}

void sb_resp_error(pn_message_t *resp, int status, ib_error_t *err)
{
    char desc[300], cond[96];
    ib_err_t code = IB_E_BROKER;
    ib_class_t cls = IB_CLASS_TRANSIENT;

    prop_text(resp, "statusDescription", desc, sizeof(desc));
    if (!desc[0])
        prop_text(resp, "status-description", desc, sizeof(desc));
    prop_text(resp, "errorCondition", cond, sizeof(cond));
    if (status == 410 || strstr(cond, "lock-lost"))
        code = IB_E_LOCK_LOST, cls = IB_CLASS_TRANSIENT;
    else if (status == 401 || status == 403)
        code = IB_E_AUTH, cls = IB_CLASS_PERMANENT;
    else if (status == 404)
        code = IB_E_NOTFOUND, cls = IB_CLASS_PERMANENT;
    else if (status == 408)
        code = IB_E_TIMEOUT;
    else if (status == 400)
        cls = IB_CLASS_PERMANENT;
    ib_error_set(err, code, cls, "status %d %s%s%s", status, cond, cond[0] ? ": " : "", desc);
    ib_strlcpy(err->condition, cond, sizeof(err->condition));
}

bool sb_resp_busy(pn_message_t *resp, int status)
{
    char cond[96];
    if (status != 503 || !resp)
        return false;
    prop_text(resp, "errorCondition", cond, sizeof(cond));
    return !cond[0] || sb_condition_busy(cond);
}

/* ---- pairs ---- */

static void rr_start(sb_rr_t *rr);

sb_rr_t *sb_rr_mgmt(sb_core_t *core, const char *entity)
{
    sb_rr_t *rr;
    if (!entity) {
        if (!core->cbs) {
            rr = calloc(1, sizeof(*rr));
            if (!rr)
                return NULL;
            rr->tag.kind = SB_KIND_RR;
            rr->core = core;
            rr->node = strdup("$cbs");
            core->cbs = rr;
        }
        if (core->conn && core->cbs->state == RR_IDLE)
            rr_start(core->cbs);
        return core->cbs;
    }
    for (rr = core->rrs; rr; rr = rr->next)
        if (strcmp(rr->entity, entity) == 0)
            return rr;
    rr = calloc(1, sizeof(*rr));
    if (!rr)
        return NULL;
    rr->tag.kind = SB_KIND_RR;
    rr->core = core;
    rr->entity = strdup(entity);
    rr->node = malloc(strlen(entity) + 16);
    if (rr->node)
        sprintf(rr->node, "%s/$management", entity);
    rr->audience = rr->node ? sb_core_audience(core, rr->node) : NULL;
    if (!rr->entity || !rr->node || !rr->audience) {
        free(rr->entity);
        free(rr->node);
        free(rr->audience);
        free(rr);
        return NULL;
    }
    rr->next = core->rrs;
    core->rrs = rr;
    return rr;
}

static void fail_list(rr_req_t *list, const ib_error_t *why)
{
    while (list) {
        rr_req_t *r = list;
        list = r->next;
        if (r->cb)
            r->cb(r->ctx, -1, NULL, why);
        if (r->msg)
            pn_message_free(r->msg);
        free(r);
    }
}

static void rr_attach(sb_rr_t *rr)
{
    sb_core_t *core = rr->core;
    char name[128];
    if (!core->conn)
        return;
    rr->ssn = sb_core_session(core, 0);
    pn_session_open(rr->ssn);
    sb_core_name(core, rr->entity ? "mgmt-req" : "cbs-req", name, sizeof(name));
    rr->snd = pn_sender(rr->ssn, name);
    pn_terminus_set_address(pn_link_target(rr->snd), rr->node);
    pn_link_set_context(rr->snd, rr);
    pn_link_open(rr->snd);
    sb_core_name(core, rr->entity ? "mgmt-reply" : "cbs-reply", rr->reply_to, sizeof(rr->reply_to));
    rr->rcv = pn_receiver(rr->ssn, rr->reply_to);
    pn_terminus_set_address(pn_link_source(rr->rcv), rr->node);
    pn_terminus_set_address(pn_link_target(rr->rcv), rr->reply_to);
    pn_link_set_context(rr->rcv, rr);
    pn_link_open(rr->rcv);
    pn_link_flow(rr->rcv, 64);
    rr->snd_open = rr->rcv_open = false;
    rr->state = RR_ATTACHING;
}

static void rr_authorized(void *ctx, const ib_error_t *err)
{
    sb_rr_t *rr = ctx;
    if (rr->state != RR_AUTH)
        return;
    if (err->code != IB_E_OK) {
        rr_req_t *q = rr->queued;
        rr->queued = NULL;
        rr->state = RR_IDLE;
        fail_list(q, err);
        return;
    }
    rr_attach(rr);
}

static void rr_start(sb_rr_t *rr)
{
    if (!rr->core->conn || rr->state != RR_IDLE)
        return;
    if (!rr->entity) {
        rr_attach(rr);
        return;
    }
    rr->state = RR_AUTH;
    sb_cbs_authorize(rr->core, rr->audience, rr_authorized, rr);
}

static void rr_flush(sb_rr_t *rr)
{
    while (rr->state == RR_READY && rr->queued && pn_link_credit(rr->snd) > 0) {
        rr_req_t *r = rr->queued, **tail;
        pn_delivery_t *d;
        rr->queued = r->next;
        d = pn_delivery(rr->snd, pn_dtag(r->id, strlen(r->id)));
        (void)d;
        pn_message_set_reply_to(r->msg, rr->reply_to);
        pn_message_send(r->msg, rr->snd, NULL);
        pn_message_free(r->msg);
        r->msg = NULL;
        r->next = NULL;
        for (tail = &rr->sent; *tail; tail = &(*tail)->next)
            ;
        *tail = r;
    }
}

void sb_rr_request(sb_rr_t *rr, pn_message_t *req, sb_rr_cb cb, void *ctx)
{
    sb_core_t *core = rr->core;
    rr_req_t *r = calloc(1, sizeof(*r)), **tail;
    pn_atom_t id;
    if (!r) {
        ib_error_t e;
        ib_error_set(&e, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        pn_message_free(req);
        cb(ctx, -1, NULL, &e);
        return;
    }
    snprintf(r->id, sizeof(r->id), "req-%llu", (unsigned long long)++core->next_id);
    id.type = PN_STRING;
    id.u.as_bytes = pn_bytes(strlen(r->id), r->id);
    pn_message_set_id(req, id);
    r->msg = req;
    r->cb = cb;
    r->ctx = ctx;
    r->deadline = ib_mono_ms() + core->op_timeout_ms;
    for (tail = &rr->queued; *tail; tail = &(*tail)->next)
        ;
    *tail = r;
    if (rr->state == RR_IDLE)
        rr_start(rr);
    rr_flush(rr);
}

static void forget_in(sb_rr_t *rr, void *ctx)
{
    for (rr_req_t *r = rr->queued; r; r = r->next)
        if (r->ctx == ctx)
            r->cb = NULL;
    for (rr_req_t *r = rr->sent; r; r = r->next)
        if (r->ctx == ctx)
            r->cb = NULL;
}

void sb_rr_forget(sb_core_t *core, void *ctx)
{
    if (core->cbs)
        forget_in(core->cbs, ctx);
    for (sb_rr_t *rr = core->rrs; rr; rr = rr->next)
        forget_in(rr, ctx);
}

/* Forgets the answer being read. */
static void acc_reset(sb_rr_t *rr)
{
    free(rr->acc);
    rr->acc = NULL;
    rr->acc_len = rr->acc_cap = 0;
    rr->acc_cut = rr->acc_fail = false;
}

static void rr_lost(sb_rr_t *rr, const ib_error_t *why)
{
    rr_req_t *all = rr->sent, **tail;
    acc_reset(rr);
    if (rr->snd) {
        pn_link_set_context(rr->snd, NULL);
        pn_link_close(rr->snd);
        pn_link_free(rr->snd);
    }
    if (rr->rcv) {
        pn_link_set_context(rr->rcv, NULL);
        pn_link_close(rr->rcv);
        pn_link_free(rr->rcv);
    }
    if (rr->ssn) {
        pn_session_close(rr->ssn);
        pn_session_free(rr->ssn);
    }
    rr->snd = rr->rcv = NULL;
    rr->ssn = NULL;
    rr->state = RR_IDLE;
    for (tail = &all; *tail; tail = &(*tail)->next)
        ;
    *tail = rr->queued;
    rr->sent = rr->queued = NULL;
    fail_list(all, why);
}

/* Hands the whole answer in buf to the request it answers. */
static void on_response(sb_rr_t *rr, const char *buf, size_t len)
{
    pn_message_t *m = pn_message();
    if (m && pn_message_decode(m, buf, len) == 0) {
        pn_msgid_t cid = pn_message_get_correlation_id(m);
        char key[40] = "";
        if (cid.type == PN_STRING || cid.type == PN_SYMBOL) {
            size_t kl =
                cid.u.as_bytes.size < sizeof(key) - 1 ? cid.u.as_bytes.size : sizeof(key) - 1;
            memcpy(key, cid.u.as_bytes.start, kl);
            key[kl] = '\0';
        }
        for (rr_req_t **pp = &rr->sent; *pp; pp = &(*pp)->next) {
            rr_req_t *r = *pp;
            if (strcmp(r->id, key) != 0)
                continue;
            *pp = r->next;
            if (r->cb) {
                ib_error_t ok;
                ib_error_clear(&ok);
                r->cb(r->ctx, sb_resp_status(m), m, &ok);
            }
            free(r);
            break;
        }
    } else {
        IB_LOG(IB_LOG_WARN, "mgmt", IB_MSG("undecodable response ignored"), IB_S("node", rr->node));
    }
    pn_message_free(m);
}

/* Appends up to n bytes of the current answer to rr->acc; false when none could be read. */
static bool acc_take(sb_rr_t *rr, size_t n)
{
    ssize_t got;
    if (rr->acc_len + n > rr->acc_cap) {
        size_t cap = rr->acc_cap ? rr->acc_cap : 4096;
        char *grown;
        while (cap < rr->acc_len + n)
            cap *= 2;
        if (!(grown = realloc(rr->acc, cap))) {
            rr->acc_fail = true;
            return false;
        }
        rr->acc = grown;
        rr->acc_cap = cap;
    }
    got = pn_link_recv(rr->rcv, rr->acc + rr->acc_len, n);
    if (got <= 0)
        return false;
    rr->acc_len += (size_t)got;
    return true;
}

/*
 * Reads what has arrived of answer d: whole once complete, or with
 * core->answer_keep frame by frame, the bytes past it dropped as they come
 * (Proton then never holds a large answer whole). A complete answer is
 * settled and handed on, cut to fit first when bytes were dropped.
 */
static void rr_read(sb_rr_t *rr, pn_delivery_t *d)
{
    size_t keep = rr->core->answer_keep, pending;
    if (pn_delivery_aborted(d)) { /* the broker gave it up */
        pn_delivery_settle(d);
        acc_reset(rr);
        return;
    }
    if (!keep && pn_delivery_partial(d))
        return;
    while ((pending = pn_delivery_pending(d)) > 0) {
        size_t room = keep ? (rr->acc_len < keep ? keep - rr->acc_len : 0) : pending;
        if (rr->acc_fail || room == 0) {
            char scrap[4096];
            rr->acc_cut = true;
            if (pn_link_recv(rr->rcv, scrap, pending < sizeof scrap ? pending : sizeof scrap) <= 0)
                break;
        } else if (!acc_take(rr, pending < room ? pending : room) && !rr->acc_fail) {
            break;
        }
    }
    if (pn_delivery_partial(d))
        return;
    pn_link_advance(rr->rcv);
    pn_delivery_update(d, PN_ACCEPTED);
    pn_delivery_settle(d);
    if (pn_link_credit(rr->rcv) < 32)
        pn_link_flow(rr->rcv, 64 - pn_link_credit(rr->rcv));
    if (rr->acc_fail)
        IB_LOG(IB_LOG_WARN, "mgmt", IB_MSG("response dropped: out of memory"),
               IB_S("node", rr->node));
    else
        on_response(rr, rr->acc ? rr->acc : "",
                    rr->acc_cut ? sb_peek_answer_cut((unsigned char *)rr->acc, rr->acc_len)
                                : rr->acc_len);
    acc_reset(rr);
}

bool sb_rr_handle(sb_core_t *core, pn_event_t *e, pn_link_t *link)
{
    sb_link_tag_t *tag = pn_link_get_context(link);
    sb_rr_t *rr;
    if (!tag || tag->kind != SB_KIND_RR)
        return tag == NULL; /* context cleared: a closed link of ours */
    rr = (sb_rr_t *)tag;
    (void)core;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        if (link == rr->snd)
            rr->snd_open = true;
        else
            rr->rcv_open = true;
        if (rr->snd_open && rr->rcv_open && rr->state == RR_ATTACHING) {
            rr->state = RR_READY;
            rr_flush(rr);
        }
        break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH: {
        ib_error_t why;
        ib_error_set(&why, IB_E_DETACHED, IB_CLASS_TRANSIENT, "%s link closed", rr->node);
        sb_log_condition("mgmt",
                         rr->entity ? "the broker closed a $management link"
                                    : "the broker closed a $cbs link",
                         pn_link_remote_condition(link), &why);
        if (strcmp(why.condition, "amqp:not-found") == 0)
            why.code = IB_E_NOTFOUND, why.cls = IB_CLASS_PERMANENT;
        else if (strstr(why.condition, "unauthorized"))
            why.code = IB_E_AUTH, why.cls = IB_CLASS_PERMANENT;
        rr_lost(rr, &why);
        break;
    }
    case PN_LINK_FLOW:
        if (link == rr->snd)
            rr_flush(rr);
        break;
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        if (link == rr->snd) {
            if (pn_delivery_remote_state(d) || pn_delivery_settled(d))
                pn_delivery_settle(d);
        } else if (pn_delivery_readable(d)) {
            rr_read(rr, d);
        }
        break;
    }
    default:
        break;
    }
    return true;
}

/* Moves the requests of *pp whose deadline passed onto *late. */
static void collect_late(rr_req_t **pp, long long now, rr_req_t **late)
{
    while (*pp) {
        rr_req_t *r = *pp;
        if (r->deadline <= now) {
            *pp = r->next;
            r->next = *late;
            *late = r;
        } else {
            pp = &r->next;
        }
    }
}

static void rr_tick_one(sb_core_t *core, sb_rr_t *rr, long long now, const ib_error_t *tmo)
{
    rr_req_t *late = NULL;
    collect_late(&rr->queued, now, &late);
    collect_late(&rr->sent, now, &late);
    fail_list(late, tmo);
    if (rr->queued && rr->state == RR_IDLE && core->up)
        rr_start(rr);
}

void sb_rr_tick(sb_core_t *core)
{
    long long now = ib_mono_ms();
    ib_error_t tmo;
    ib_error_set(&tmo, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "no answer from the broker in time");
    if (core->cbs)
        rr_tick_one(core, core->cbs, now, &tmo);
    for (sb_rr_t *rr = core->rrs; rr; rr = rr->next)
        rr_tick_one(core, rr, now, &tmo);
}

static void reset_one(sb_rr_t *rr, const ib_error_t *why)
{
    rr_req_t *all = rr->sent, **tail;
    acc_reset(rr);
    rr->snd = rr->rcv = NULL;
    rr->ssn = NULL;
    rr->state = RR_IDLE;
    for (tail = &all; *tail; tail = &(*tail)->next)
        ;
    *tail = rr->queued;
    rr->sent = rr->queued = NULL;
    fail_list(all, why);
}

void sb_rr_reset_all(sb_core_t *core, const ib_error_t *why)
{
    /* The connection is gone: forget link pointers without touching them. */
    if (core->cbs)
        reset_one(core->cbs, why);
    for (sb_rr_t *rr = core->rrs; rr; rr = rr->next)
        reset_one(rr, why);
}

static void rr_free(sb_rr_t *rr)
{
    rr_req_t *all = rr->sent, **tail;
    for (tail = &all; *tail; tail = &(*tail)->next)
        ;
    *tail = rr->queued;
    for (rr_req_t *r = all, *nx; r; r = nx) {
        nx = r->next;
        if (r->msg)
            pn_message_free(r->msg);
        free(r);
    }
    acc_reset(rr);
    free(rr->entity);
    free(rr->node);
    free(rr->audience);
    free(rr);
}

void sb_rr_free_all(sb_core_t *core)
{
    if (core->cbs)
        rr_free(core->cbs);
    core->cbs = NULL;
    while (core->rrs) {
        sb_rr_t *rr = core->rrs;
        core->rrs = rr->next;
        rr_free(rr);
    }
}
