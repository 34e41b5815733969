/*
 * sb_send.c - the blocking sender and peeker. Each call drives the
 * sender's own proactor on the caller's thread until its work is done or
 * the timeout passes.
 */
#include "sb_send.h"
#include "sb_transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_condition.h"
#include "sb_core.h"
#include "sb_outlink.h"
#include "sb_peek.h"
#include "sb_sstate.h"

struct sb_sender {
    sb_core_t core;
    sb_out_t out; /* the sender links */
    unsigned timeout_ms;
    bool down;
    ib_error_t down_err;
    /* sb_sender_session_state: the session receiver, while it is attached */
    pn_link_t *slink;
    sb_link_tag_t slink_tag; /* its context (events of a link without one are dropped) */
    bool slink_open, slink_closed;
    ib_error_t slink_err;
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

static void on_down(void *owner, const ib_error_t *why)
{
    sb_sender_t *s = owner;
    s->down = true;
    s->down_err = *why;
    sb_out_down(&s->out, why);
}

static void on_link_event(void *owner, pn_event_t *e, pn_link_t *link)
{
    sb_sender_t *s = owner;
    if (link == s->slink) {
        pn_event_type_t t = pn_event_type(e);
        if (t == PN_LINK_REMOTE_OPEN && pn_link_remote_source(link) &&
            pn_terminus_get_address(pn_link_remote_source(link)))
            s->slink_open = true;
        if (t == PN_LINK_REMOTE_DETACH || t == PN_LINK_REMOTE_CLOSE) {
            /* Not logged: the caller decides (a locked session is retried). */
            pn_condition_t *cond = pn_link_remote_condition(link);
            bool set = pn_condition_is_set(cond);
            ib_error_set(&s->slink_err, IB_E_BROKER, IB_CLASS_TRANSIENT,
                         "the broker refused the session receiver: %s: %s",
                         set ? pn_condition_get_name(cond) : "(no condition)",
                         set && pn_condition_get_description(cond)
                             ? pn_condition_get_description(cond)
                             : "");
            s->slink_closed = true;
        }
        return;
    }
    sb_out_event(&s->out, e, link);
}

static void on_tick(void *owner)
{
    sb_sender_t *s = owner;
    sb_out_tick(&s->out);
}

sb_sender_t *sb_sender_open(const sb_sender_options_t *opt, ib_error_t *err)
{
    sb_sender_t *s = calloc(1, sizeof(*s));
    sb_core_hooks_t hooks = {NULL, on_down, on_link_event, NULL, on_tick, NULL, NULL};
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
    s->core.cs.sas_lifetime_s = opt->sas_token_lifetime_s;
    s->core.answer_keep = opt->answer_keep;
    if (opt->answer_keep)
        s->core.max_frame = SB_MAX_FRAME; /* what arrives is read, or dropped, frame by frame */
    sb_out_init(&s->out, &s->core);
    sb_core_connect(&s->core);
    if (!run_until(s, &s->core.up, ib_mono_ms() + s->timeout_ms) && s->down &&
        sb_transport_choosing(s->core.cs.websockets, s->core.cs.emulator)) {
        /* auto: AMQP did not come up; the second attempt goes over WebSockets. */
        ib_error_t amqp_err = s->down_err;
        s->down = false;
        sb_core_connect(&s->core);
        if (!run_until(s, &s->core.up, ib_mono_ms() + s->timeout_ms) && s->down) {
            char ws[sizeof(s->down_err.text)];
            ib_strlcpy(ws, s->down_err.text, sizeof(ws));
            s->down_err = amqp_err; /* the AMQP error first: it is the one configured */
            snprintf(s->down_err.text, sizeof(s->down_err.text), "%.200s; over WebSockets: %.280s",
                     amqp_err.text, ws);
        }
    }
    if (!s->core.up) {
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

static ib_err_t check_alive(sb_sender_t *s, ib_error_t *err)
{
    if (s->down) {
        *err = s->down_err;
        return err->code ? err->code : IB_E_CLOSED;
    }
    return IB_E_OK;
}

/* sb_sender_send, and with each != NULL every message's own result. */
static ib_err_t send_batch(sb_sender_t *s, const char *entity, const sb_out_msg_t *msgs, size_t n,
                           ib_error_t *err, ib_error_t *each)
{
    sb_out_req_t *req;
    ib_err_t rc;

    if (check_alive(s, err) != IB_E_OK ||
        !(req = sb_out_req_new(entity, msgs, n, s->timeout_ms, err))) {
        sb_send_error_classify(err);
        for (size_t k = 0; each && k < n; k++)
            each[k] = *err;
        return err->code ? err->code : IB_E_CLOSED;
    }
    sb_out_submit(&s->out, req);
    /* The tick ends the send at its deadline; the margin covers a stalled loop. */
    if (!run_until(s, &req->done, req->deadline + 1000))
        sb_out_cancel(&s->out, req);
    rc = sb_out_req_result(req, err);
    if (each)
        memcpy(each, req->each, n * sizeof(*each));
    sb_out_req_free(req);
    return rc;
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
    sb_peek_page_t pg;
} peek_call_t;

static void on_peek(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    peek_call_t *pc = ctx;
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
    sb_peek_page_read(pn_message_body(resp), &pc->pg, &pc->err);
}

/* One peek-message request and its answer, read into *pg (see sb_peek.h). */
static ib_err_t peek_page(sb_sender_t *s, const char *entity, long long from_seq, int max,
                          sb_peek_page_t *pg, ib_error_t *err)
{
    peek_call_t pc;
    pn_message_t *req;
    pn_data_t *body;
    sb_rr_t *rr;

    memset(pg, 0, sizeof(*pg));
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
        sb_peek_page_clear(&pc.pg);
        return err->code;
    }
    *pg = pc.pg;
    return IB_E_OK;
}

ib_err_t sb_sender_peek(sb_sender_t *s, const char *entity, long long from_seq, int max,
                        sb_msg_t ***out, size_t *n, ib_error_t *err)
{
    sb_peek_page_t pg;
    *out = NULL;
    *n = 0;
    if (peek_page(s, entity, from_seq, max, &pg, err) != IB_E_OK)
        return err->code;
    *out = pg.msgs;
    *n = pg.n;
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

/* Hands pg's messages to each in order; false when each ended the walk. *top: the highest seq. */
static bool hand_out(const sb_peek_page_t *pg, sb_peek_each_fn each, void *arg, long long *top)
{
    *top = -1;
    for (size_t i = 0; i < pg->n; i++) {
        if (pg->msgs[i]->sequence_number > *top)
            *top = pg->msgs[i]->sequence_number;
        if (!each(pg->msgs[i], arg))
            return false;
    }
    return true;
}

ib_err_t sb_sender_peek_each(sb_sender_t *s, const char *entity, long long from_seq, int page,
                             sb_peek_each_fn each, void *arg, long long *unreadable,
                             ib_error_t *err)
{
    sb_peek_walk_t w = {from_seq, page, page, 0, 0};
    ib_error_clear(err);
    if (page < 1 || !each || !unreadable)
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT,
                            "peek pages of %d messages, or no callback or count", page);
    *unreadable = 0;
    for (;;) {
        sb_peek_page_t pg;
        long long asked = w.from, top;
        size_t entries;
        sb_peek_step_t step;
        if (peek_page(s, entity, w.from, w.count, &pg, err) != IB_E_OK)
            return err->code;
        if (!hand_out(&pg, each, arg, &top)) {
            sb_peek_page_clear(&pg);
            return IB_E_OK; /* the caller's stop: the rest of the page is not looked at */
        }
        step = sb_peek_walk_step(&w, &pg, top);
        *unreadable = w.unreadable;
        entries = pg.entries;
        sb_peek_page_clear(&pg);
        if (step == SB_PEEK_END)
            return IB_E_OK;
        if (step == SB_PEEK_STUCK)
            return ib_error_set(err, IB_E_BROKER, IB_CLASS_PERMANENT,
                                "peek of %s from sequence number %lld answered %zu entr%s, "
                                "none readable at or past it",
                                entity, asked, entries, entries == 1 ? "y" : "ies");
    }
}

typedef struct sstate_call {
    bool done;
    bool set; /* a set: the answer is an empty map */
    int status;
    ib_error_t err;
    char *state;
    size_t len;
} sstate_call_t;

static void on_sstate(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sstate_call_t *sc = ctx;
    sc->done = true;
    sc->status = status;
    if (status < 0)
        sc->err = *err;
    else if (status != 200)
        sb_resp_error(resp, status, &sc->err);
    else if (!sc->set && !sb_sstate_parse(resp, &sc->state, &sc->len))
        ib_error_set(&sc->err, IB_E_BROKER, IB_CLASS_TRANSIENT, "answer without session-state");
}

/* Sends req on entity's $management and waits for its answer into *sc. */
static ib_err_t sstate_call(sb_sender_t *s, const char *entity, pn_message_t *req, bool set,
                            sstate_call_t *sc, ib_error_t *err)
{
    sb_rr_t *rr = sb_rr_mgmt(&s->core, entity);
    memset(sc, 0, sizeof(*sc));
    sc->set = set;
    if (!rr) {
        pn_message_free(req);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    sb_rr_request(rr, req, on_sstate, sc);
    run_until(s, &sc->done, ib_mono_ms() + s->timeout_ms + 1000);
    if (!sc->done) {
        sb_rr_forget(&s->core, sc);
        if (check_alive(s, err) == IB_E_OK)
            ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "session state request on %s "
                         "timed out", entity);
        return err->code ? err->code : IB_E_CLOSED;
    }
    if (sc->err.code != IB_E_OK) {
        *err = sc->err;
        free(sc->state);
        sc->state = NULL;
        return err->code;
    }
    return IB_E_OK;
}

static void authorized(void *ctx, const ib_error_t *err)
{
    sstate_call_t *sc = ctx;
    sc->err = *err;
    sc->done = true;
}

/* Attaches s->slink for session_id of entity; IB_E_OK once the broker granted it. */
static ib_err_t accept_session(sb_sender_t *s, const char *entity, const char *session_id,
                               ib_error_t *err)
{
    sstate_call_t auth = {0};
    char name[128];
    char *aud = sb_core_audience(&s->core, entity);
    pn_session_t *ssn;
    pn_data_t *f;
    if (!aud)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    sb_cbs_authorize(&s->core, aud, authorized, &auth);
    free(aud);
    if (!run_until(s, &auth.done, ib_mono_ms() + s->timeout_ms + 1000) ||
        auth.err.code != IB_E_OK) {
        if (auth.done)
            *err = auth.err;
        else if (check_alive(s, err) == IB_E_OK)
            ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "authorization timed out");
        return err->code ? err->code : IB_E_CLOSED;
    }
    ssn = sb_core_session(&s->core, 0);
    pn_session_open(ssn);
    sb_core_name(&s->core, "sess", name, sizeof(name));
    s->slink = pn_receiver(ssn, name);
    s->slink_open = s->slink_closed = false;
    pn_terminus_set_address(pn_link_source(s->slink), entity);
    pn_terminus_set_address(pn_link_target(s->slink), name);
    pn_link_set_snd_settle_mode(s->slink, PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(s->slink, PN_RCV_SECOND);
    f = pn_terminus_filter(pn_link_source(s->slink));
    pn_data_put_map(f);
    pn_data_enter(f);
    sb_put_sym(f, "com.microsoft:session-filter");
    sb_put_str(f, session_id);
    pn_data_exit(f);
    s->slink_tag.kind = SB_KIND_RECEIVER;
    pn_link_set_context(s->slink, &s->slink_tag);
    pn_link_open(s->slink);
    {
        bool any = false;
        long long deadline = ib_mono_ms() + s->timeout_ms;
        while (!s->slink_open && !s->slink_closed && !s->down && ib_mono_ms() < deadline)
            run_until(s, &any, ib_mono_ms() + 100);
    }
    if (s->slink_open && !s->slink_closed)
        return IB_E_OK;
    if (s->slink_closed)
        *err = s->slink_err;
    else if (check_alive(s, err) == IB_E_OK)
        ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "accepting session %s timed out",
                     session_id);
    return err->code ? err->code : IB_E_CLOSED;
}

/* Gives the session back (closes and frees the link and its AMQP session). */
static void release_session(sb_sender_t *s)
{
    pn_session_t *ssn;
    bool never = false;
    if (!s->slink)
        return;
    ssn = pn_link_session(s->slink);
    pn_link_set_context(s->slink, NULL);
    if (!s->down) {
        pn_link_close(s->slink);
        pn_session_close(ssn);
        run_until(s, &never, ib_mono_ms() + 200);
    }
    if (!s->down) {
        pn_link_free(s->slink);
        pn_session_free(ssn);
    }
    s->slink = NULL;
}

bool sb_session_state_parked(const char *state, size_t len)
{
    return sb_sstate_is_parked(state, len);
}

ib_err_t sb_sender_session_state(sb_sender_t *s, const char *entity, const char *session_id,
                                 bool unpark, char **before, size_t *before_len, ib_error_t *err)
{
    sstate_call_t sc;
    ib_err_t rc;
    char link[128];
    *before = NULL;
    *before_len = 0;
    ib_error_clear(err);
    if (check_alive(s, err) != IB_E_OK)
        return err->code;
    rc = accept_session(s, entity, session_id, err);
    if (rc == IB_E_OK) {
        snprintf(link, sizeof(link), "%s", pn_link_name(s->slink));
        rc = sstate_call(s, entity, sb_sstate_request(session_id, link, false, NULL, 0), false,
                         &sc, err);
        if (rc == IB_E_OK) {
            *before = sc.state;
            *before_len = sc.len;
        }
        if (rc == IB_E_OK && unpark && sb_sstate_is_parked(*before, *before_len)) {
            rc = sstate_call(s, entity, sb_sstate_request(session_id, link, true, NULL, 0), true,
                             &sc, err);
            free(sc.state);
        }
    }
    release_session(s);
    return rc;
}

void sb_sender_close(sb_sender_t *s)
{
    if (!s)
        return;
    if (s->core.conn && !s->down) {
        bool never = false;
        sb_out_close(&s->out);
        sb_core_close(&s->core);
        run_until(s, &never, ib_mono_ms() + 2000);
    }
    sb_out_fini(&s->out);
    sb_core_fini(&s->core);
    free(s);
}
