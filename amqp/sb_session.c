/*
 * sb_session.c - next-available sessions: the session filter on attach,
 * reading the granted session from the broker's attach, session-lock
 * renewal, and giving back idle sessions.
 */
#include <stdlib.h>
#include <string.h>

#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_client_int.h"

#define TICKS_AT_EPOCH 621355968000000000LL

void sb_session_prepare(sb_rcv_t *r)
{
    pn_data_t *f = pn_terminus_filter(pn_link_source(r->link));
    pn_data_t *p = pn_link_properties(r->link);
    pn_data_put_map(f);
    pn_data_enter(f);
    sb_put_sym(f, "com.microsoft:session-filter");
    pn_data_put_null(f); /* null: any available session */
    pn_data_exit(f);
    pn_data_put_map(p);
    pn_data_enter(p);
    sb_put_sym(p, "com.microsoft:timeout");
    pn_data_put_uint(p, r->c->session_wait_ms);
    pn_data_exit(p);
}

/* Finds key in the map at the top of d; leaves the cursor on its value. */
static bool map_find(pn_data_t *d, const char *key)
{
    size_t kl = strlen(key);
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return false;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t k = {0, NULL};
        if (pn_data_type(d) == PN_SYMBOL)
            k = pn_data_get_symbol(d);
        else if (pn_data_type(d) == PN_STRING)
            k = pn_data_get_string(d);
        if (!pn_data_next(d))
            break;
        if (k.start && k.size == kl && memcmp(k.start, key, kl) == 0)
            return true;
    }
    return false;
}

bool sb_session_opened(sb_rcv_t *r)
{
    pn_terminus_t *src = pn_link_remote_source(r->link);
    pn_data_t *f = src ? pn_terminus_filter(src) : NULL;
    pn_data_t *p = pn_link_remote_properties(r->link);
    long long now = ib_now_ms();

    if (!f || !map_find(f, "com.microsoft:session-filter") || pn_data_type(f) != PN_STRING)
        return false;
    {
        pn_bytes_t b = pn_data_get_string(f);
        free(r->session_id);
        r->session_id = strndup(b.start, b.size);
    }
    r->session_locked_until = now + 30000;
    if (p && map_find(p, "com.microsoft:locked-until-utc")) {
        if (pn_data_type(p) == PN_LONG)
            r->session_locked_until = (pn_data_get_long(p) - TICKS_AT_EPOCH) / 10000;
        else if (pn_data_type(p) == PN_TIMESTAMP)
            r->session_locked_until = pn_data_get_timestamp(p);
    }
    r->session_lock_dur = r->session_locked_until - now;
    if (r->session_lock_dur < 1000)
        r->session_lock_dur = 1000;
    r->c->stats.sessions_accepted++;
    return r->session_id != NULL;
}

typedef struct sess_renew {
    sb_rcv_t *r;
    unsigned gen;
} sess_renew_t;

static void on_session_renewed(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sess_renew_t *sr = ctx;
    sb_rcv_t *r = sr->r;
    sb_client_t *c = r->c;
    bool current = r->gen == sr->gen && r->state == RCV_OPEN;
    free(sr);
    if (!current)
        return;
    r->session_renewing = false;
    if (status == 200) {
        pn_data_t *body = pn_message_body(resp);
        if (sb_body_find(body, "expiration") && pn_data_type(body) == PN_TIMESTAMP) {
            r->session_locked_until = pn_data_get_timestamp(body);
            c->stats.renewals_ok++;
            for (sb_msg_t *msg = c->held; msg; msg = msg->st->next)
                if (msg->st->rcv == r)
                    msg->st->locked_until = r->session_locked_until;
        }
        return;
    }
    c->stats.renewals_failed++;
    IB_LOG(IB_LOG_WARN, "lock_renew", IB_MSG("renew-session-lock failed"),
           IB_S("session_id", r->session_id), IB_I("status", status),
           IB_S("error", status < 0 ? err->text : NULL));
    if (status == 410) {
        ib_error_t why;
        ib_error_set(&why, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT, "session lock lost");
        sb_rcv_lost(r, &why, true);
        r->retry_at = ib_mono_ms() + 200;
    }
}

static void renew_session(sb_client_t *c, sb_rcv_t *r)
{
    sess_renew_t *sr = malloc(sizeof(*sr));
    pn_message_t *req;
    pn_data_t *body;
    if (!sr)
        return;
    sr->r = r;
    sr->gen = r->gen;
    req = sb_mgmt_message("com.microsoft:renew-session-lock", r->name);
    body = pn_message_body(req);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "session-id");
    sb_put_str(body, r->session_id);
    pn_data_exit(body);
    r->session_renewing = true;
    sb_rr_request(sb_rr_mgmt(&c->core, c->entity), req, on_session_renewed, sr);
}

void sb_session_tick(sb_client_t *c)
{
    long long mono = ib_mono_ms(), now = ib_now_ms();
    if (!c->sessions || !c->core.up || c->stopping)
        return;
    for (sb_rcv_t *r = c->rcvs; r; r = r->next) {
        if (r->state != RCV_OPEN || !r->session_id)
            continue;
        if (r->held == 0 &&
            (c->receiving_stopped || mono - r->last_activity > (long long)c->idle_s * 1000)) {
            IB_LOG(IB_LOG_INFO, "session_release", IB_MSG("session idle, released"),
                   IB_S("session_id", r->session_id));
            sb_rcv_close(r);
            continue;
        }
        if (c->renew_max_s && !r->session_renewing) {
            bool stale = false;
            for (sb_msg_t *msg = c->held; msg; msg = msg->st->next)
                if (msg->st->rcv == r && now >= msg->st->renew_until)
                    stale = true;
            if (!stale && r->session_locked_until - now <= sb_renew_margin(c, r->session_lock_dur))
                renew_session(c, r);
        }
    }
}
