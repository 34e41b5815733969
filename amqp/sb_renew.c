/*
 * sb_renew.c - automatic lock renewal.
 *
 * Every unsettled message of a non-session entity - buffered by prefetch or
 * held by the worker - is renewed when its lock ends within the margin
 * (renew_margin_ms, else max(10 s, lock/3) capped at lock/2), until
 * max_auto_lock_renewal_s after receipt. Due tokens are batched into one
 * com.microsoft:renew-lock request per tick (up to RENEW_BATCH tokens). A
 * failed batch is retried token by token so that one lost lock does not
 * cost the others theirs; a single token answered 410 is lock-lost.
 * Session entities renew the session lock instead (sb_session.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "sb_client_int.h"

#define RENEW_BATCH 64

struct sb_renew_batch {
    sb_client_t *c;
    unsigned n;
    sb_msg_t *msgs[RENEW_BATCH];
};

void sb_renew_forget(sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    if (st && st->batch) {
        st->batch->msgs[st->batch_ix] = NULL;
        st->batch = NULL;
    }
}

long long sb_renew_margin(const sb_client_t *c, long long lock_dur)
{
    long long m;
    if (c->renew_margin_ms)
        return c->renew_margin_ms;
    m = lock_dur / 3;
    if (m < 10000)
        m = 10000;
    if (m > lock_dur / 2)
        m = lock_dur / 2;
    return m;
}

static void on_renewed(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sb_renew_batch_t *b = ctx;
    sb_client_t *c = b->c;
    long long mono = ib_mono_ms();
    unsigned i = 0;

    if (status == 200) {
        pn_data_t *body = pn_message_body(resp);
        if (sb_body_find(body, "expirations") && pn_data_type(body) == PN_ARRAY) {
            pn_data_enter(body);
            while (pn_data_next(body) && i < b->n) {
                sb_msg_t *msg = b->msgs[i++];
                if (!msg || pn_data_type(body) != PN_TIMESTAMP)
                    continue;
                msg->st->locked_until = pn_data_get_timestamp(body);
                msg->st->batch = NULL;
                msg->st->renew_alone = false;
                c->stats.renewals_ok++;
            }
            pn_data_exit(body);
        }
        for (i = 0; i < b->n; i++)
            if (b->msgs[i] && b->msgs[i]->st->batch == b) {
                b->msgs[i]->st->batch = NULL;
                b->msgs[i]->st->renew_after = mono + 1000;
            }
        free(b);
        return;
    }
    if (sb_resp_busy(resp, status))
        sb_throttle_note(c, "renew-lock");
    IB_LOG(IB_LOG_WARN, "lock_renew", IB_MSG("renew-lock failed"), IB_I("status", status),
           IB_I("tokens", b->n), IB_S("error", status < 0 ? err->text : NULL));
    for (i = 0; i < b->n; i++) {
        sb_msg_t *msg = b->msgs[i];
        if (!msg)
            continue;
        msg->st->batch = NULL;
        if (b->n > 1 && status >= 0) {
            msg->st->renew_alone = true;
            continue;
        }
        c->stats.renewals_failed++;
        if (status == 410 || (status >= 0 && resp && sb_resp_status(resp) == 410)) {
            sb_msg_lock_lost(c, msg, "lock renewal refused");
        } else {
            msg->st->renew_after = mono + 1000;
        }
    }
    free(b);
}

static void send_batch(sb_client_t *c, sb_renew_batch_t *b)
{
    pn_message_t *req;
    pn_data_t *body;
    sb_rcv_t *r = b->msgs[0]->st->rcv;

    req = sb_mgmt_message("com.microsoft:renew-lock", r && r->link ? r->name : NULL);
    body = pn_message_body(req);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "lock-tokens");
    pn_data_put_array(body, false, PN_UUID);
    pn_data_enter(body);
    for (unsigned i = 0; i < b->n; i++) {
        pn_uuid_t u;
        memcpy(u.bytes, b->msgs[i]->lock_uuid, 16);
        pn_data_put_uuid(body, u);
    }
    pn_data_exit(body);
    pn_data_exit(body);
    IB_LOG(IB_LOG_DEBUG, "lock_renew", IB_MSG("renewing"), IB_I("tokens", b->n));
    c->stats.renew_requests++;
    sb_rr_request(sb_rr_mgmt(&c->core, c->entity), req, on_renewed, b);
}

static sb_renew_batch_t *add(sb_client_t *c, sb_renew_batch_t *b, sb_msg_t *msg)
{
    if (!b) {
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        b->c = c;
    }
    msg->st->batch = b;
    msg->st->batch_ix = b->n;
    b->msgs[b->n++] = msg;
    if (b->n == RENEW_BATCH) {
        send_batch(c, b);
        return NULL;
    }
    return b;
}

void sb_renew_tick(sb_client_t *c)
{
    long long now = ib_now_ms(), mono = ib_mono_ms();
    sb_renew_batch_t *b = NULL;

    if (!c->core.up || c->renew_max_s == 0 || c->sessions || c->stopping)
        return;
    for (sb_msg_t *msg = c->held; msg; msg = msg->st->next) {
        struct sb_msg_state *st = msg->st;
        if (st->state != SB_MS_BUFFERED && st->state != SB_MS_HANDED)
            continue;
        if (st->lock_lost || st->batch || !msg->has_lock || now >= st->renew_until ||
            mono < st->renew_after)
            continue;
        if (st->locked_until - now > sb_renew_margin(c, st->lock_dur))
            continue;
        if (st->renew_alone) {
            sb_renew_batch_t *one = add(c, NULL, msg);
            if (one)
                send_batch(c, one);
            continue;
        }
        b = add(c, b, msg);
    }
    if (b)
        send_batch(c, b);
}
