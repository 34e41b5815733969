/*
 * sb_send.c - the blocking sender and peeker. Each call drives the
 * sender's own proactor on the caller's thread until its work is done or
 * the timeout passes.
 */
#include "sb_send.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_condition.h"
#include "sb_core.h"

typedef struct out_link {
    sb_link_tag_t tag;
    char *entity;
    pn_link_t *link;
    bool authorized, open, failed;
    ib_error_t err;
    struct out_link *next;
} out_link_t;

typedef struct outcome {
    bool done;
    uint64_t state;
    ib_error_t err;
} outcome_t;

struct sb_sender {
    sb_core_t core;
    unsigned timeout_ms;
    bool down;
    ib_error_t down_err;
    out_link_t *links;
};

/*
 * thread: caller. Runs the proactor until *flag, a lost connection, or the
 * deadline. Work done since the last batch is flushed by waking the
 * connection first.
 */
static bool run_until(sb_sender_t *s, const bool *flag, long long deadline)
{
    sb_core_wake(&s->core);
    while (!*flag && !s->down && ib_mono_ms() < deadline) {
        pn_event_batch_t *b = pn_proactor_wait(s->core.proactor);
        pn_event_t *e;
        while ((e = pn_event_batch_next(b)) != NULL)
            sb_core_handle(&s->core, e);
        pn_proactor_done(s->core.proactor, b);
    }
    return *flag;
}

/*
 * thread: caller. Handles one batch of events (at most one tick, 100 ms, of
 * waiting). kick: work was done outside a batch, wake the connection so it
 * is written out.
 */
static void run_once(sb_sender_t *s, bool kick)
{
    pn_event_batch_t *b;
    pn_event_t *e;
    if (kick)
        sb_core_wake(&s->core);
    b = pn_proactor_wait(s->core.proactor);
    while ((e = pn_event_batch_next(b)) != NULL)
        sb_core_handle(&s->core, e);
    pn_proactor_done(s->core.proactor, b);
}

static void on_down(void *owner, const ib_error_t *why)
{
    sb_sender_t *s = owner;
    s->down = true;
    s->down_err = *why;
    for (out_link_t *ol = s->links; ol; ol = ol->next) {
        ol->link = NULL;
        ol->open = ol->authorized = false;
    }
}

static void on_link_event(void *owner, pn_event_t *e, pn_link_t *link)
{
    sb_link_tag_t *tag = pn_link_get_context(link);
    out_link_t *ol;
    (void)owner;
    if (!tag || tag->kind != SB_KIND_SENDER)
        return;
    ol = (out_link_t *)tag;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        ol->open = pn_link_remote_target(link) != NULL;
        break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
        ib_error_set(&ol->err, IB_E_DETACHED, IB_CLASS_TRANSIENT, "sender link to %s closed",
                     ol->entity);
        sb_log_condition("send", "the broker closed a sender link", pn_link_remote_condition(link),
                         &ol->err);
        if (strcmp(ol->err.condition, "amqp:not-found") == 0)
            ol->err.code = IB_E_NOTFOUND, ol->err.cls = IB_CLASS_PERMANENT;
        ol->failed = true;
        ol->open = false;
        pn_link_set_context(link, NULL);
        pn_link_close(link);
        ol->link = NULL;
        break;
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        outcome_t *oc = pn_delivery_get_context(d);
        if (oc && (pn_delivery_remote_state(d) || pn_delivery_settled(d))) {
            oc->done = true;
            oc->state = pn_delivery_remote_state(d);
            if (oc->state != PN_ACCEPTED) {
                pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
                ib_error_set(&oc->err, IB_E_BROKER, IB_CLASS_TRANSIENT,
                             "the broker did not accept the message (%s)",
                             pn_disposition_type_name(oc->state));
                if (c && pn_condition_is_set(c)) {
                    sb_log_condition("send", "message refused", c, &oc->err);
                    oc->err.code = IB_E_BROKER;
                }
            }
            pn_delivery_set_context(d, NULL);
            pn_delivery_settle(d);
        }
        break;
    }
    default:
        break;
    }
}

sb_sender_t *sb_sender_open(const sb_sender_options_t *opt, ib_error_t *err)
{
    sb_sender_t *s = calloc(1, sizeof(*s));
    sb_core_hooks_t hooks = {NULL, on_down, on_link_event, NULL, NULL, NULL, NULL};
    if (!s) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    hooks.owner = s;
    s->timeout_ms = opt->timeout_ms ? opt->timeout_ms : 30000;
    if (sb_core_init(&s->core, opt->connection_string, opt->ca_file, opt->token_get, opt->token_ctx,
                     s->timeout_ms, &hooks, err) != IB_E_OK) {
        free(s);
        return NULL;
    }
    sb_core_connect(&s->core);
    if (!run_until(s, &s->core.up, ib_mono_ms() + s->timeout_ms)) {
        if (s->down)
            *err = s->down_err;
        else
            ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "no connection to %s:%d in %u ms",
                         s->core.cs.host, s->core.cs.port, s->timeout_ms);
        sb_sender_close(s);
        return NULL;
    }
    return s;
}

static void on_authorized(void *ctx, const ib_error_t *err)
{
    out_link_t *ol = ctx;
    if (err->code == IB_E_OK) {
        ol->authorized = true;
    } else {
        ol->failed = true;
        ol->err = *err;
    }
}

static ib_err_t check_alive(sb_sender_t *s, ib_error_t *err)
{
    if (s->down) {
        *err = s->down_err;
        return err->code ? err->code : IB_E_CLOSED;
    }
    return IB_E_OK;
}

static out_link_t *attach(sb_sender_t *s, const char *entity, long long deadline, ib_error_t *err)
{
    out_link_t *ol;
    char name[128], *aud;
    pn_session_t *ssn;

    for (ol = s->links; ol; ol = ol->next)
        if (strcmp(ol->entity, entity) == 0)
            break;
    if (ol && ol->open && ol->link)
        return ol;
    if (!ol) {
        ol = calloc(1, sizeof(*ol));
        if (!ol || !(ol->entity = strdup(entity))) {
            free(ol);
            ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            return NULL;
        }
        ol->tag.kind = SB_KIND_SENDER;
        ol->next = s->links;
        s->links = ol;
    }
    ol->failed = ol->authorized = false;
    aud = sb_core_audience(&s->core, entity);
    if (!aud) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    sb_cbs_authorize(&s->core, aud, on_authorized, ol);
    free(aud);
    for (bool kick = true; !ol->authorized && !ol->failed && !s->down && ib_mono_ms() < deadline;
         kick = false)
        run_once(s, kick);
    if (check_alive(s, err) != IB_E_OK)
        return NULL;
    if (ol->failed) {
        *err = ol->err;
        return NULL;
    }
    if (!ol->authorized) {
        ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "put-token for %s timed out", entity);
        return NULL;
    }
    ssn = pn_session(s->core.conn);
    pn_session_open(ssn);
    sb_core_name(&s->core, "send", name, sizeof(name));
    ol->link = pn_sender(ssn, name);
    pn_terminus_set_address(pn_link_target(ol->link), entity);
    pn_terminus_set_address(pn_link_source(ol->link), name);
    pn_link_set_context(ol->link, ol);
    pn_link_open(ol->link);
    for (bool kick = true; !ol->open && !ol->failed && !s->down && ib_mono_ms() < deadline;
         kick = false)
        run_once(s, kick);
    if (check_alive(s, err) != IB_E_OK)
        return NULL;
    if (ol->failed) {
        *err = ol->err;
        return NULL;
    }
    if (!ol->open) {
        ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "attach to %s timed out", entity);
        return NULL;
    }
    return ol;
}

static bool unhex(const char *h, unsigned char *out, size_t max, size_t *n)
{
    size_t len = strlen(h);
    if (len % 2 || len / 2 > max)
        return false;
    for (size_t k = 0; k < len / 2; k++) {
        unsigned v;
        if (!isxdigit((unsigned char)h[2 * k]) || !isxdigit((unsigned char)h[2 * k + 1]) ||
            sscanf(h + 2 * k, "%2x", &v) != 1)
            return false;
        out[k] = (unsigned char)v;
    }
    *n = len / 2;
    return true;
}

void sb_out_msg_set_id(sb_out_msg_t *m, const char *rendered, unsigned char *scratch)
{
    size_t n;
    m->message_id = rendered;
    m->message_id_len = 0;
    m->message_id_type = SB_ID_STRING;
    if (!rendered)
        return;
    if (strncmp(rendered, "string:", 7) == 0) {
        m->message_id = rendered + 7;
    } else if (strncmp(rendered, "ulong:", 6) == 0 && rendered[6] &&
               strspn(rendered + 6, "0123456789") == strlen(rendered + 6)) {
        m->message_id = rendered + 6;
        m->message_id_type = SB_ID_ULONG;
    } else if (strncmp(rendered, "uuid:", 5) == 0 && sb_guid_parse(rendered + 5, scratch)) {
        m->message_id = (const char *)scratch;
        m->message_id_len = 16;
        m->message_id_type = SB_ID_UUID;
    } else if (strncmp(rendered, "binary:", 7) == 0 &&
               unhex(rendered + 7, scratch, SB_ID_SCRATCH, &n) && n > 0) {
        m->message_id = (const char *)scratch;
        m->message_id_len = n;
        m->message_id_type = SB_ID_BINARY;
    }
}

static pn_message_t *build(const sb_out_msg_t *om)
{
    pn_message_t *m = pn_message();
    pn_data_t *ap;
    if (om->message_id) {
        pn_atom_t id;
        size_t n = om->message_id_len ? om->message_id_len : strlen(om->message_id);
        if (om->message_id_type == SB_ID_ULONG) {
            id.type = PN_ULONG;
            id.u.as_ulong = strtoull(om->message_id, NULL, 10);
        } else if (om->message_id_type == SB_ID_UUID) {
            id.type = PN_UUID;
            memcpy(id.u.as_uuid.bytes, om->message_id, 16);
        } else {
            id.type = om->message_id_type == SB_ID_BINARY ? PN_BINARY : PN_STRING;
            id.u.as_bytes = pn_bytes(n, om->message_id);
        }
        pn_message_set_id(m, id);
    }
    if (om->correlation_id) {
        pn_atom_t id;
        id.type = PN_STRING;
        id.u.as_bytes = pn_bytes(strlen(om->correlation_id), om->correlation_id);
        pn_message_set_correlation_id(m, id);
    }
    if (om->subject)
        pn_message_set_subject(m, om->subject);
    if (om->content_type)
        pn_message_set_content_type(m, om->content_type);
    if (om->session_id)
        pn_message_set_group_id(m, om->session_id);
    if (om->ttl_ms > 0)
        pn_message_set_ttl(m, (pn_millis_t)om->ttl_ms);
    pn_message_set_durable(m, true);
    if (om->nprops) {
        ap = pn_message_properties(m);
        pn_data_put_map(ap);
        pn_data_enter(ap);
        sb_props_put(ap, om->props, om->nprops, false);
        pn_data_exit(ap);
    }
    pn_message_set_inferred(m, true); /* a binary body goes out as one data section */
    pn_data_put_binary(pn_message_body(m), pn_bytes(om->body_len, om->body ? om->body : ""));
    return m;
}

/* Each message's own result from its outcome slot; err is the call's failure. */
static void fill_each(const outcome_t *oc, size_t n, const ib_error_t *err, ib_error_t *each)
{
    for (size_t k = 0; k < n; k++) {
        if (oc[k].done && oc[k].state == PN_ACCEPTED) {
            ib_error_clear(&each[k]);
            continue;
        }
        each[k] = oc[k].done ? oc[k].err : *err;
        if (each[k].code == IB_E_OK)
            each[k].code = IB_E_BROKER;
        sb_send_error_classify(&each[k]);
    }
}

/* sb_sender_send, and with each != NULL every message's own result. */
static ib_err_t send_batch(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs, size_t n,
                           ib_error_t *err, ib_error_t *each)
{
    long long deadline = ib_mono_ms() + s->timeout_ms;
    out_link_t *ol;
    outcome_t *oc;
    size_t sent = 0;
    ib_err_t rc = IB_E_OK;
    bool all = false;

    ib_error_clear(err);
    if (check_alive(s, err) != IB_E_OK || !(ol = attach(s, entity, deadline, err)))
        goto unsent;
    oc = calloc(n ? n : 1, sizeof(*oc));
    if (!oc) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        goto unsent;
    }
    while (!all && !s->down && !ol->failed && ib_mono_ms() < deadline) {
        size_t before = sent;
        while (sent < n && ol->link && pn_link_credit(ol->link) > 0) {
            char tag[24];
            pn_message_t *m = build(&msgs[sent]);
            pn_delivery_t *d;
            int tl = snprintf(tag, sizeof(tag), "%zu", sent);
            d = pn_delivery(ol->link, pn_dtag(tag, (size_t)tl));
            pn_delivery_set_context(d, &oc[sent]);
            if (pn_message_send(m, ol->link, NULL) < 0) {
                oc[sent].done = true;
                oc[sent].state = PN_REJECTED;
                ib_error_set(&oc[sent].err, IB_E_INVAL, IB_CLASS_PERMANENT,
                             "message %zu does not encode", sent);
                pn_delivery_set_context(d, NULL);
                pn_delivery_abort(d);
            }
            pn_message_free(m);
            sent++;
        }
        all = sent == n;
        for (size_t k = 0; all && k < n; k++)
            all = oc[k].done;
        if (!all)
            run_once(s, sent != before);
    }
    if (!all) {
        if (check_alive(s, err) == IB_E_OK) {
            if (ol->failed)
                *err = ol->err;
            else
                ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                             "%zu of %zu messages to %s not confirmed in %u ms", n - sent, n,
                             entity, s->timeout_ms);
        }
        rc = err->code ? err->code : IB_E_TIMEOUT;
        /* Deliveries still pending may complete later; forget their outcome slots. */
        if (ol->link)
            for (pn_delivery_t *d = pn_unsettled_head(ol->link); d; d = pn_unsettled_next(d))
                pn_delivery_set_context(d, NULL);
    } else {
        for (size_t k = 0; k < n; k++)
            if (oc[k].state != PN_ACCEPTED) {
                *err = oc[k].err;
                rc = err->code ? err->code : IB_E_BROKER;
                break;
            }
    }
    if (rc != IB_E_OK)
        sb_send_error_classify(err); /* transient or permanent by the broker's condition */
    if (each)
        fill_each(oc, n, err, each);
    free(oc);
    return rc;
unsent:
    sb_send_error_classify(err);
    for (size_t k = 0; each && k < n; k++)
        each[k] = *err;
    return err->code ? err->code : IB_E_CLOSED;
}

ib_err_t sb_sender_send(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs, size_t n,
                        ib_error_t *err)
{
    return send_batch(s, entity, msgs, n, err, NULL);
}

ib_err_t sb_sender_send_each(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs,
                             size_t n, ib_error_t *each)
{
    ib_error_t err;
    return send_batch(s, entity, msgs, n, &err, each);
}

typedef struct peek_call {
    bool done;
    int status;
    ib_error_t err;
    sb_msg_t **msgs;
    size_t n;
} peek_call_t;

static void on_peek(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    peek_call_t *pc = ctx;
    pn_data_t *body;
    pc->done = true;
    pc->status = status;
    if (status < 0) {
        pc->err = *err;
        return;
    }
    if (status == 204)
        return;
    if (status != 200) {
        sb_resp_error(resp, status, &pc->err);
        return;
    }
    body = pn_message_body(resp);
    if (!sb_body_find(body, "messages") || pn_data_type(body) != PN_LIST)
        return;
    {
        size_t cnt = pn_data_get_list(body);
        pc->msgs = calloc(cnt ? cnt : 1, sizeof(sb_msg_t *));
        if (!pc->msgs) {
            ib_error_set(&pc->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            return;
        }
        pn_data_enter(body);
        while (pn_data_next(body) && pc->n < cnt) {
            pn_bytes_t b;
            sb_msg_t *msg;
            pn_data_t *item = body;
            if (pn_data_type(item) != PN_MAP)
                continue;
            pn_data_enter(item);
            b.size = 0;
            b.start = NULL;
            while (pn_data_next(item)) {
                bool is_msg = pn_data_type(item) == PN_STRING &&
                              pn_data_get_string(item).size == 7 &&
                              memcmp(pn_data_get_string(item).start, "message", 7) == 0;
                if (!pn_data_next(item))
                    break;
                if (is_msg && pn_data_type(item) == PN_BINARY)
                    b = pn_data_get_binary(item);
            }
            pn_data_exit(item);
            if (!b.start)
                continue;
            msg = sb_msg_new_decoded((const unsigned char *)b.start, b.size, false);
            if (msg)
                pc->msgs[pc->n++] = msg;
        }
        pn_data_exit(body);
    }
}

ib_err_t sb_sender_peek(sb_sender_t *s, const char *entity, long long from_seq, int max,
                        sb_msg_t ***out, size_t *n, ib_error_t *err)
{
    peek_call_t pc;
    pn_message_t *req;
    pn_data_t *body;
    sb_rr_t *rr;

    *out = NULL;
    *n = 0;
    ib_error_clear(err);
    if (check_alive(s, err) != IB_E_OK)
        return err->code;
    memset(&pc, 0, sizeof(pc));
    rr = sb_rr_mgmt(&s->core, entity);
    if (!rr)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    req = sb_mgmt_message("com.microsoft:peek-message", NULL);
    body = pn_message_body(req);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "from-sequence-number");
    pn_data_put_long(body, from_seq);
    sb_put_str(body, "message-count");
    pn_data_put_int(body, max);
    pn_data_exit(body);
    sb_rr_request(rr, req, on_peek, &pc);
    run_until(s, &pc.done, ib_mono_ms() + s->timeout_ms + 1000);
    if (!pc.done) {
        sb_rr_forget(&s->core, &pc);
        if (check_alive(s, err) == IB_E_OK)
            ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "peek on %s timed out", entity);
        return err->code ? err->code : IB_E_CLOSED;
    }
    if (pc.err.code != IB_E_OK) {
        *err = pc.err;
        sb_peek_free(pc.msgs, pc.n);
        return err->code;
    }
    *out = pc.msgs;
    *n = pc.n;
    return IB_E_OK;
}

void sb_peek_free(sb_msg_t **msgs, size_t n)
{
    if (!msgs)
        return;
    for (size_t k = 0; k < n; k++)
        sb_msg_free(msgs[k]);
    free(msgs);
}

void sb_sender_close(sb_sender_t *s)
{
    if (!s)
        return;
    if (s->core.conn && !s->down) {
        bool never = false;
        for (out_link_t *ol = s->links; ol; ol = ol->next)
            if (ol->link)
                pn_link_close(ol->link);
        sb_core_close(&s->core);
        run_until(s, &never, ib_mono_ms() + 2000);
    }
    sb_core_fini(&s->core);
    while (s->links) {
        out_link_t *ol = s->links;
        s->links = ol->next;
        free(ol->entity);
        free(ol);
    }
    free(s);
}
