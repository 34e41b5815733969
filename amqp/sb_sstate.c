/*
 * sb_sstate.c - session state requests and the parked record (see
 * sb_sstate.h). thread: the proactor of the connection that sends them.
 */
#include "sb_sstate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_backoff.h"
#include "ib_enc.h"
#include "ib_log.h"
#include "ib_time.h"
#include "sb_client_int.h"

#define PARKED_PREFIX "{\"parked\":true"

pn_message_t *sb_sstate_request(const char *session_id, const char *link, bool set,
                                const char *state, size_t len)
{
    pn_message_t *req = sb_mgmt_message(
        set ? "com.microsoft:set-session-state" : "com.microsoft:get-session-state", link);
    pn_data_t *body = pn_message_body(req);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "session-id");
    sb_put_str(body, session_id);
    if (set) {
        sb_put_str(body, "session-state");
        if (state)
            pn_data_put_binary(body, pn_bytes(len, state));
        else
            pn_data_put_null(body);
    }
    pn_data_exit(body);
    return req;
}

bool sb_sstate_parse(pn_message_t *resp, char **state, size_t *len)
{
    pn_data_t *body = pn_message_body(resp);
    *state = NULL;
    *len = 0;
    if (!sb_body_find(body, "session-state"))
        return false;
    if (pn_data_type(body) == PN_NULL)
        return true;
    if (pn_data_type(body) != PN_BINARY)
        return false;
    {
        pn_bytes_t b = pn_data_get_binary(body);
        *state = malloc(b.size + 1);
        if (!*state)
            return false;
        memcpy(*state, b.start, b.size);
        (*state)[b.size] = '\0';
        *len = b.size;
    }
    return true;
}

bool sb_sstate_is_parked(const char *state, size_t len)
{
    size_t pl = strlen(PARKED_PREFIX);
    return state && len > pl && memcmp(state, PARKED_PREFIX, pl) == 0;
}

/* Appends "key":"escaped value" (the value cut to 512 bytes) at *at. */
static void put_text(char *buf, size_t size, size_t *at, const char *key, const char *v)
{
    char esc[1024];
    v = v ? v : "";
    ib_enc_json(esc, sizeof esc, v, strnlen(v, 512), NULL);
    *at += (size_t)snprintf(buf + *at, size - *at, ",\"%s\":\"%s\"", key, esc);
}

char *sb_sstate_record(const char *reason, const char *message_id, long long sequence_number,
                       long long now_ms)
{
    size_t size = 4096, at;
    char *buf = malloc(size), when[40];
    if (!buf)
        return NULL;
    at = (size_t)snprintf(buf, size, "%s", PARKED_PREFIX);
    put_text(buf, size, &at, "reason", reason);
    put_text(buf, size, &at, "message_id", message_id);
    at += (size_t)snprintf(buf + at, size - at, ",\"sequence_number\":%lld", sequence_number);
    ib_time_rfc3339(when, sizeof when, now_ms);
    put_text(buf, size, &at, "parked_at", when);
    snprintf(buf + at, size - at, "}");
    return buf;
}

/* ---- the client's parking (sb_client_int.h); thread: the client's proactor ---- */

typedef struct sstate_call {
    sb_rcv_t *r;
    unsigned gen;
    char *session_id;
} sstate_call_t;

static sstate_call_t *call_new(sb_rcv_t *r)
{
    sstate_call_t *call = calloc(1, sizeof(*call));
    if (call && !(call->session_id = strdup(r->session_id))) {
        free(call);
        return NULL;
    }
    if (call) {
        call->r = r;
        call->gen = r->gen;
    }
    return call;
}

static void call_free(sstate_call_t *call)
{
    free(call->session_id);
    free(call);
}

static struct sb_parked *find(sb_client_t *c, const char *id)
{
    for (unsigned i = 0; i < c->n_parked; i++)
        if (strcmp(c->parked[i].id, id) == 0)
            return &c->parked[i];
    return NULL;
}

/* Remembers id as parked (seen now) or forgets it; the oldest entry makes room. */
static void remember(sb_client_t *c, const char *id, bool parked)
{
    unsigned i, oldest = 0;
    for (i = 0; i < c->n_parked && strcmp(c->parked[i].id, id) != 0; i++)
        if (c->parked[i].seen < c->parked[oldest].seen)
            oldest = i;
    if (!parked) {
        if (i < c->n_parked) {
            free(c->parked[i].id);
            c->parked[i] = c->parked[--c->n_parked];
        }
    } else if (i < c->n_parked) {
        c->parked[i].seen = ib_mono_ms();
    } else {
        char *copy = strdup(id);
        if (copy) {
            i = c->n_parked < SB_PARKED_MAX ? c->n_parked++ : oldest;
            if (i == oldest && c->n_parked == SB_PARKED_MAX)
                free(c->parked[i].id);
            c->parked[i].id = copy;
            c->parked[i].seen = ib_mono_ms();
            c->parked[i].cool_until = 0;
        }
    }
    c->stats.sessions_parked = c->n_parked;
}

static bool current(const sstate_call_t *call)
{
    const sb_rcv_t *r = call->r;
    return r->gen == call->gen && r->state == RCV_OPEN && r->session_id;
}

static void on_state(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sstate_call_t *call = ctx;
    sb_rcv_t *r = call->r;
    char *state = NULL;
    size_t len = 0;
    bool ok;
    if (!current(call) || !r->state_pending) {
        call_free(call);
        return;
    }
    call_free(call);
    r->state_pending = false;
    if (sb_resp_busy(resp, status)) {
        /* Throttled: nothing received from it yet, so given back uncounted; taken after the hold. */
        sb_throttle_note(r->c, "get-session-state");
        sb_session_give_back(r, "busy");
        return;
    }
    ok = status == 200 && sb_sstate_parse(resp, &state, &len);
    if (!ok) {
        /* Unknown: held without receiving like a parked one, asked again after. */
        IB_LOG(IB_LOG_WARN, "session_state",
               IB_MSG("get-session-state failed: session held without receiving, asked again "
                      "before its lock ends"),
               IB_S("session_id", r->session_id), IB_I("status", status),
               IB_S("error", status < 0 ? err->text : NULL));
        r->parked_hold = true;
    } else if (sb_sstate_is_parked(state, len)) {
        struct sb_parked *p;
        remember(r->c, r->session_id, true);
        p = find(r->c, r->session_id);
        if (p && p->cool_until > ib_mono_ms()) {
            /*
             * Just given back: leave it free (this receiver waits) so that
             * inboxctl session unpark, which needs the session's lock, can
             * take it; next-available receivers waiting at the broker would
             * otherwise take it back the moment it is free.
             */
            r->cool_until = p->cool_until;
            free(state);
            sb_session_give_back(r, "parked");
            return;
        }
        r->parked_hold = true;
        IB_LOG(IB_LOG_INFO, "session_parked_skip",
               IB_MSG("session is parked: left untouched (no message received), given back "
                      "before its lock ends"),
               IB_S("session_id", r->session_id), IB_J("state", state));
    } else {
        remember(r->c, r->session_id, false);
    }
    free(state);
    if (r->parked_hold)
        sb_session_fill(r->c);
    else
        sb_session_step(r);
}

void sb_sstate_check(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    sstate_call_t *call = call_new(r);
    r->state_pending = true;
    if (!call) {
        r->state_pending = false;
        r->parked_hold = true; /* out of memory: take nothing from it */
        return;
    }
    sb_rr_request(sb_rr_mgmt(&c->core, c->entity),
                  sb_sstate_request(r->session_id, r->name, false, NULL, 0), on_state, call);
}

void sb_sstate_forget(sb_rcv_t *r)
{
    free(r->park_record);
    r->park_record = NULL;
    r->park_tries = 0;
    r->park_retry_at = 0;
}

/*
 * The park is over, set or not: the waiting dead letter is sent (or, not
 * parked, the poison released), and the session goes on to be given back.
 */
static void park_done(sb_rcv_t *r, bool parked)
{
    sb_sstate_forget(r);
    r->park_setting = false;
    sb_settle_park_done(r->c, r, parked);
    sb_session_step(r);
}

/*
 * A failed set-session-state worth sending again: the broker did not answer
 * or said 5xx. A server-busy answer (sb_throttle.c) costs no try: the record
 * goes again once the hold ends, however long the broker throttles.
 */
static bool park_again(const sstate_call_t *call, int status)
{
    const sb_rcv_t *r = call->r;
    return current(call) && r->park_setting && r->park_record && (status < 0 || status >= 500) &&
           r->park_tries < SB_PARK_TRIES;
}

static void on_parked(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sstate_call_t *call = ctx;
    sb_rcv_t *r = call->r;
    if (status != 200) {
        ib_error_t why;
        bool busy = sb_resp_busy(resp, status) && current(call) && r->park_setting;
        if (busy) {
            sb_throttle_note(r->c, "set-session-state");
            if (r->park_tries)
                r->park_tries--;
        }
        bool again = park_again(call, status);
        if (status >= 0)
            sb_resp_error(resp, status, &why);
        IB_LOG(again ? IB_LOG_WARN : IB_LOG_ERROR, "session_park",
               IB_MSG(again ? "set-session-state failed: sent again, the session held meanwhile"
                            : "set-session-state failed: the session is not parked, its poison "
                              "message is released (not dead-lettered) and comes first again"),
               IB_S("session_id", call->session_id), IB_I("status", status),
               IB_I("attempt", (long long)r->park_tries),
               IB_S("error", status < 0 ? err->text : why.text));
        if (again) {
            r->park_retry_at = ib_mono_ms() + ib_backoff_ms(SB_PARK_RETRY_MS, SB_PARK_RETRY_MAX_MS,
                                                            (int)r->park_tries, &r->c->seed);
            if (busy && r->park_retry_at < r->c->busy_until)
                r->park_retry_at = r->c->busy_until;
            call_free(call);
            return;
        }
        remember(r->c, call->session_id, false);
    } else if (current(call) && r->park_setting) {
        remember(r->c, call->session_id, true);
        IB_LOG(IB_LOG_WARN, "session_park",
               IB_MSG("session parked: its message is dead-lettered now, its later messages "
                      "wait for inboxctl session unpark"),
               IB_S("session_id", call->session_id), IB_I("attempt", (long long)r->park_tries));
    }
    if (current(call) && r->park_setting)
        park_done(r, status == 200);
    call_free(call);
}

/* Sends r's park record (set-session-state); false (logged) when out of memory. */
static bool park_send(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    sstate_call_t *call = r->park_record ? call_new(r) : NULL;
    if (!call) {
        IB_LOG(IB_LOG_ERROR, "session_park", IB_MSG("out of memory: the session is NOT parked"),
               IB_S("session_id", r->session_id));
        return false;
    }
    r->park_tries++;
    sb_rr_request(sb_rr_mgmt(&c->core, c->entity),
                  sb_sstate_request(r->session_id, r->name, true, r->park_record,
                                    strlen(r->park_record)),
                  on_parked, call);
    return true;
}

void sb_sstate_park(sb_rcv_t *r, sb_msg_t *msg)
{
    r->parking = true; /* given back once the dead letter settled: nothing more is handed out */
    sb_sstate_forget(r);
    r->park_record =
        sb_sstate_record(msg->st->reason, msg->message_id, msg->sequence_number, ib_now_ms());
    r->park_setting = true;
    IB_LOG(IB_LOG_INFO, "session_park",
           IB_MSG("message to be dead-lettered: the session's parked record is written first"),
           IB_S("session_id", r->session_id), IB_S("message_id", msg->message_id),
           IB_I("sequence_number", msg->sequence_number), IB_S("reason", msg->st->reason));
    if (!park_send(r))
        park_done(r, false);
}

void sb_sstate_tick(sb_client_t *c)
{
    long long now = ib_now_ms();
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        long long margin;
        if (r->state == RCV_OPEN && r->park_retry_at && ib_mono_ms() >= r->park_retry_at) {
            r->park_retry_at = 0;
            if (!park_send(r)) {
                remember(c, r->session_id, false);
                park_done(r, false);
            }
        }
        if (r->state != RCV_OPEN || !r->parked_hold)
            continue;
        margin = r->session_lock_dur / 4 > 500 ? r->session_lock_dur / 4 : 500;
        if (now >= r->session_locked_until - margin) {
            struct sb_parked *p = find(c, r->session_id);
            long long cool = r->session_lock_dur / 2;
            if (p)
                p->cool_until = ib_mono_ms() + (cool < 1000 ? 1000 : cool > 5000 ? 5000 : cool);
            sb_session_give_back(r, "parked");
        }
    }
}

void sb_sstate_free(sb_client_t *c)
{
    for (unsigned i = 0; i < c->n_parked; i++)
        free(c->parked[i].id);
    c->n_parked = 0;
}
