/*
 * sb_outlink.c - sender links and the sends queued on them (sb_outlink.h).
 * Runs on the thread that drives the core: the client's proactor thread,
 * or the caller of the blocking sender.
 */
#include "sb_outlink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_condition.h"

typedef enum { OL_IDLE, OL_AUTH, OL_ATTACHING, OL_OPEN } ol_state_t;

struct sb_out_link {
    sb_link_tag_t tag; /* first: the link's context */
    sb_out_t *out;
    char *entity;
    ol_state_t state;
    pn_link_t *link; /* NULL unless ATTACHING or OPEN */
    unsigned long long next_tag;
    sb_out_req_t *head, *tail; /* sends in submission order */
    sb_out_link_t *next;
};

/* ---- sends ------------------------------------------------------------------ */

sb_out_req_t *sb_out_req_new(const char *entity, const sb_out_msg_t *msgs, size_t n,
                             unsigned timeout_ms, ib_error_t *err)
{
    sb_out_req_t *req = calloc(1, sizeof(*req));
    size_t slots = n ? n : 1;
    if (!req || !(req->entity = strdup(entity)) || !(req->enc = calloc(slots, sizeof(char *))) ||
        !(req->enc_len = calloc(slots, sizeof(size_t))) ||
        !(req->each = calloc(slots, sizeof(ib_error_t))) || !(req->got = calloc(slots, 1))) {
        sb_out_req_free(req);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    req->n = n;
    req->timeout_ms = timeout_ms ? timeout_ms : 30000;
    for (size_t k = 0; k < n; k++)
        if (sb_out_encode(&msgs[k], &req->enc[k], &req->enc_len[k], err) != IB_E_OK) {
            sb_out_req_free(req);
            return NULL;
        }
    return req;
}

void sb_out_req_free(sb_out_req_t *req)
{
    if (!req)
        return;
    for (size_t k = 0; req->enc && k < req->n; k++)
        free(req->enc[k]);
    free(req->enc);
    free(req->enc_len);
    free(req->each);
    free(req->got);
    free(req->entity);
    free(req);
}

ib_err_t sb_out_req_result(const sb_out_req_t *req, ib_error_t *err)
{
    ib_error_clear(err);
    for (size_t k = 0; k < req->n; k++)
        if (req->each[k].code != IB_E_OK) {
            *err = req->each[k];
            return err->code;
        }
    return IB_E_OK;
}

/* Every message without an answer fails with why; then the classes follow the conditions. */
static void fail_unanswered(sb_out_req_t *req, const ib_error_t *why)
{
    for (size_t k = 0; k < req->n; k++) {
        if (!req->got[k]) {
            req->got[k] = 1;
            req->answered++;
            req->each[k] = *why;
            if (req->each[k].code == IB_E_OK)
                req->each[k].code = IB_E_CLOSED;
        }
        sb_send_error_classify(&req->each[k]);
    }
}

/* The send is the submitter's again (it is on no link's queue). */
static void hand_back(sb_out_req_t *req)
{
    req->next = NULL;
    req->link = NULL;
    req->done = true;
    if (req->done_cb)
        req->done_cb(req, req->ctx);
}

/* Takes req off its link's queue and hands it back to the submitter. */
static void finish(sb_out_link_t *ol, sb_out_req_t *req)
{
    sb_out_req_t **pp = &ol->head, *prev = NULL;
    while (*pp && *pp != req) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = req->next;
        if (ol->tail == req)
            ol->tail = prev;
    }
    hand_back(req);
}

/* Deliveries of req (every send: NULL) still unanswered no longer report to it. */
static void forget_deliveries(sb_out_link_t *ol, const sb_out_req_t *req)
{
    if (!ol->link)
        return;
    for (pn_delivery_t *d = pn_unsettled_head(ol->link); d; d = pn_unsettled_next(d))
        if (!req || pn_delivery_get_context(d) == req)
            pn_delivery_set_context(d, NULL);
}

/* Ends every send queued on ol with why for its unanswered messages. */
static void fail_link(sb_out_link_t *ol, const ib_error_t *why)
{
    forget_deliveries(ol, NULL);
    while (ol->head) {
        sb_out_req_t *req = ol->head;
        fail_unanswered(req, why);
        finish(ol, req);
    }
}

/* ---- links ------------------------------------------------------------------ */

void sb_out_init(sb_out_t *o, sb_core_t *core)
{
    o->core = core;
    o->links = NULL;
}

static sb_out_link_t *link_for(sb_out_t *o, const char *entity)
{
    sb_out_link_t *ol;
    for (ol = o->links; ol; ol = ol->next)
        if (strcmp(ol->entity, entity) == 0)
            return ol;
    ol = calloc(1, sizeof(*ol));
    if (!ol || !(ol->entity = strdup(entity))) {
        free(ol);
        return NULL;
    }
    ol->tag.kind = SB_KIND_SENDER;
    ol->out = o;
    ol->next = o->links;
    o->links = ol;
    return ol;
}

static void attach(sb_out_link_t *ol)
{
    sb_core_t *core = ol->out->core;
    char name[128];
    pn_session_t *ssn = sb_core_session(core, 0);
    pn_session_open(ssn);
    sb_core_name(core, "send", name, sizeof(name));
    ol->link = pn_sender(ssn, name);
    pn_terminus_set_address(pn_link_target(ol->link), ol->entity);
    pn_terminus_set_address(pn_link_source(ol->link), name);
    pn_link_set_context(ol->link, ol);
    pn_link_open(ol->link);
    ol->state = OL_ATTACHING;
}

static void on_authorized(void *ctx, const ib_error_t *err)
{
    sb_out_link_t *ol = ctx;
    if (ol->state != OL_AUTH)
        return; /* the connection went away meanwhile: its sends have ended */
    if (err->code == IB_E_OK && ol->out->core->conn) {
        attach(ol);
        return;
    }
    ol->state = OL_IDLE;
    fail_link(ol, err);
}

/* An idle link with sends waiting: authorize, then attach (once connected). */
static void start(sb_out_link_t *ol)
{
    sb_core_t *core = ol->out->core;
    char *aud;
    ib_error_t err;
    if (ol->state != OL_IDLE || !ol->head || !core->conn || !core->up)
        return;
    aud = sb_core_audience(core, ol->entity);
    if (!aud) {
        ib_error_set(&err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        fail_link(ol, &err);
        return;
    }
    ol->state = OL_AUTH;
    sb_cbs_authorize(core, aud, on_authorized, ol);
    free(aud);
}

/* Sends what credit allows, in queue order; a send's tags are consecutive. */
static void pump(sb_out_link_t *ol)
{
    for (sb_out_req_t *req = ol->head; req && ol->state == OL_OPEN; req = req->next) {
        while (req->sent < req->n && pn_link_credit(ol->link) > 0) {
            unsigned long long t = ol->next_tag++;
            pn_delivery_t *d;
            if (req->sent == 0)
                req->tag0 = t;
            d = pn_delivery(ol->link, pn_dtag((const char *)&t, sizeof(t)));
            pn_delivery_set_context(d, req);
            pn_link_send(ol->link, req->enc[req->sent], req->enc_len[req->sent]);
            pn_link_advance(ol->link);
            req->sent++;
        }
        if (req->sent < req->n)
            return;
    }
}

void sb_out_refuse(sb_out_req_t *req, const ib_error_t *why)
{
    fail_unanswered(req, why);
    hand_back(req);
}

void sb_out_submit(sb_out_t *o, sb_out_req_t *req)
{
    sb_out_link_t *ol = link_for(o, req->entity);
    req->deadline = ib_mono_ms() + req->timeout_ms;
    req->next = NULL;
    req->done = false;
    if (!ol) {
        ib_error_t err;
        ib_error_set(&err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        sb_out_refuse(req, &err);
        return;
    }
    req->link = ol;
    if (ol->tail)
        ol->tail->next = req;
    else
        ol->head = req;
    ol->tail = req;
    if (req->n == 0) {
        finish(ol, req);
        return;
    }
    start(ol);
    pump(ol);
}

/* The broker's answer to one delivery. */
static void answered(sb_out_link_t *ol, pn_delivery_t *d)
{
    sb_out_req_t *req = pn_delivery_get_context(d);
    pn_delivery_tag_t tag = pn_delivery_tag(d);
    unsigned long long t = 0;
    uint64_t state = pn_delivery_remote_state(d);
    size_t k;

    pn_delivery_set_context(d, NULL);
    pn_delivery_settle(d);
    if (!req || tag.size != sizeof(t))
        return;
    memcpy(&t, tag.start, sizeof(t));
    k = (size_t)(t - req->tag0);
    if (t < req->tag0 || k >= req->n || req->got[k])
        return;
    req->got[k] = 1;
    req->answered++;
    if (state == PN_ACCEPTED) {
        ib_error_clear(&req->each[k]);
    } else {
        pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
        ib_error_set(&req->each[k], IB_E_BROKER, IB_CLASS_TRANSIENT,
                     "the broker did not accept the message (%s)",
                     state ? pn_disposition_type_name(state) : "settled without an outcome");
        if (c && pn_condition_is_set(c)) {
            sb_log_condition("send", "message refused", c, &req->each[k]);
            req->each[k].code = IB_E_BROKER;
        }
        sb_send_error_classify(&req->each[k]);
    }
    if (req->answered == req->n)
        finish(ol, req);
}

/* The broker closed the link: its sends end with the broker's reason. */
static void closed(sb_out_link_t *ol, pn_link_t *link)
{
    ib_error_t err;
    ib_error_set(&err, IB_E_DETACHED, IB_CLASS_TRANSIENT, "sender link to %s closed", ol->entity);
    sb_log_condition("send", "the broker closed a sender link", pn_link_remote_condition(link),
                     &err);
    if (strcmp(err.condition, "amqp:not-found") == 0)
        err.code = IB_E_NOTFOUND, err.cls = IB_CLASS_PERMANENT;
    fail_link(ol, &err);
    pn_link_set_context(link, NULL);
    pn_link_close(link);
    pn_session_close(pn_link_session(link));
    ol->link = NULL;
    ol->state = OL_IDLE;
}

bool sb_out_event(sb_out_t *o, pn_event_t *e, pn_link_t *link)
{
    sb_link_tag_t *tag = pn_link_get_context(link);
    sb_out_link_t *ol;
    (void)o;
    if (!tag || tag->kind != SB_KIND_SENDER)
        return false;
    ol = (sb_out_link_t *)tag;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        if (pn_link_remote_target(link)) { /* else a refusal: its close follows */
            ol->state = OL_OPEN;
            pump(ol);
        }
        break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
        closed(ol, link);
        start(ol); /* sends queued since: attach again */
        break;
    case PN_LINK_FLOW:
        pump(ol);
        break;
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        if (pn_delivery_remote_state(d) || pn_delivery_settled(d))
            answered(ol, d);
        pump(ol);
        break;
    }
    default:
        break;
    }
    return true;
}

void sb_out_up(sb_out_t *o)
{
    for (sb_out_link_t *ol = o->links; ol; ol = ol->next)
        start(ol);
}

static void time_out(sb_out_link_t *ol, sb_out_req_t *req)
{
    ib_error_t err;
    if (ol->state == OL_AUTH)
        ib_error_set(&err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "put-token for %s timed out",
                     ol->entity);
    else if (ol->state == OL_ATTACHING)
        ib_error_set(&err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "attach to %s timed out", ol->entity);
    else if (ol->state == OL_IDLE)
        ib_error_set(&err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "no connection to send to %s in %u ms",
                     ol->entity, req->timeout_ms);
    else
        ib_error_set(&err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                     "%zu of %zu messages to %s not confirmed in %u ms", req->n - req->answered,
                     req->n, ol->entity, req->timeout_ms);
    forget_deliveries(ol, req);
    fail_unanswered(req, &err);
    finish(ol, req);
}

void sb_out_cancel(sb_out_t *o, sb_out_req_t *req)
{
    (void)o;
    if (!req->done && req->link)
        time_out(req->link, req);
}

void sb_out_tick(sb_out_t *o)
{
    long long now = ib_mono_ms();
    for (sb_out_link_t *ol = o->links; ol; ol = ol->next) {
        sb_out_req_t *req = ol->head;
        while (req) {
            sb_out_req_t *next = req->next;
            if (now >= req->deadline)
                time_out(ol, req);
            req = next;
        }
        pump(ol); /* a timed-out send may have been holding up the queue */
    }
}

void sb_out_down(sb_out_t *o, const ib_error_t *why)
{
    for (sb_out_link_t *ol = o->links; ol; ol = ol->next) {
        ol->link = NULL; /* gone with the connection */
        ol->state = OL_IDLE;
        fail_link(ol, why);
    }
}

void sb_out_close(sb_out_t *o)
{
    for (sb_out_link_t *ol = o->links; ol; ol = ol->next)
        if (ol->link) {
            forget_deliveries(ol, NULL);
            pn_link_set_context(ol->link, NULL);
            pn_link_close(ol->link);
            ol->link = NULL;
            ol->state = OL_IDLE;
        }
}

void sb_out_fini(sb_out_t *o)
{
    ib_error_t why;
    ib_error_set(&why, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "the sender is closing");
    sb_out_down(o, &why);
    while (o->links) {
        sb_out_link_t *ol = o->links;
        o->links = ol->next;
        free(ol->entity);
        free(ol);
    }
}
