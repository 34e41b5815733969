/*
 * sb_settle.c - settlement: the worker's requests come through a
 * mutex-protected queue and a wake-up; each becomes a disposition on the
 * receive link (peek-lock, rcv-settle-mode second: the broker answers with
 * its own settled disposition) or, when that link is gone, a $management
 * com.microsoft:update-disposition. Every request ends in exactly one
 * on_settled.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/disposition.h>

#include "ib_log.h"
#include "sb_client_int.h"
#include "sb_condition.h"

/*
 * A settlement whose first answer was lost and that then failed (lock not
 * found, link gone, no answer again) may well have been applied by the
 * broker the first time: its outcome is unknown, not a lock loss. The
 * redelivery, if any, meets the inbox.
 */
static const ib_error_t *unknown_if_answer_lost(const struct sb_msg_state *st,
                                                const ib_error_t *result, ib_error_t *buf)
{
    if (!st->answer_lost || result->code == IB_E_OK || result->code == IB_E_SHUTDOWN)
        return result;
    ib_error_set(buf, IB_E_SETTLE_UNKNOWN, IB_CLASS_AMBIGUOUS,
                 "the broker never answered the settlement (%s); it may have applied it",
                 result->text);
    return buf;
}

void sb_settle_finish(sb_client_t *c, sb_msg_t *msg, const ib_error_t *result)
{
    struct sb_msg_state *st = msg->st;
    sb_rcv_t *r = st->rcv;
    ib_error_t unknown;
    result = unknown_if_answer_lost(st, result, &unknown);
    if (st->dlv) {
        pn_delivery_set_context(st->dlv, NULL);
        pn_delivery_settle(st->dlv);
        st->dlv = NULL;
    }
    if (r) {
        r->held--;
        r->last_activity = ib_mono_ms();
        r->done_msgs++;
        if (r->session && (st->d == SB_ABANDON || st->d == SB_RELEASE || result->code != IB_E_OK)) {
            /*
             * The message is back at the head of its session. Later ones
             * held here (buffered, in flight, or on their way in a drain)
             * must not overtake it: give the session back (the broker keeps
             * them in order). With none, drain again and it comes back first.
             */
            if (r->held > 0 || (r->link && pn_link_credit(r->link) > 0))
                r->give_back = true;
            else
                r->drain_at = 0;
        }
    }
    st->rcv = NULL;
    sb_msg_set_state(c, msg, SB_MS_DONE);
    sb_msg_unlink(c, msg);
    if (result->code == IB_E_OK)
        c->stats.settled_ok++;
    else
        c->stats.settle_failed++;
    IB_LOG(result->code == IB_E_OK ? IB_LOG_DEBUG : IB_LOG_WARN, "settled",
           IB_S("disposition", sb_disposition_name(st->d)), IB_S("message_id", msg->message_id),
           IB_S("lock_token", msg->lock_token), IB_S("session_id", msg->session_id),
           IB_S("result", ib_err_name(result->code)),
           IB_S("error", result->code == IB_E_OK ? NULL : result->text));
    c->cb.on_settled(msg, st->d, result, c->cb.ctx);
    sb_msg_destroy(msg);
    /* Credit is client-wide for a plain entity: a message of a lost link frees a slot too. */
    for (sb_rcv_t *g = c->rcvs; g; g = g->next)
        if (g == r || !g->session)
            sb_rcv_grant(g);
    sb_session_hand_more(c);
    sb_rcv_pump(c);
}

static void settle_one(sb_client_t *c, sb_msg_t *msg);

static const char *mgmt_status(sb_disposition_t d)
{
    switch (d) {
    case SB_COMPLETE:
        return "completed";
    case SB_ABANDON:
        return "abandoned";
    case SB_DEADLETTER:
        return "suspended";
    case SB_DEFER:
        return "defered"; /* sic: the service's spelling */
    default:
        return NULL;
    }
}

void sb_settle_requeue(sb_client_t *c, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    sb_msg_set_state(c, msg, SB_MS_HANDED);
    pthread_mutex_lock(&c->lock);
    st->qnext = c->sq_head;
    c->sq_head = msg;
    if (!c->sq_tail)
        c->sq_tail = msg;
    pthread_mutex_unlock(&c->lock);
}

static void on_mgmt_settled(void *ctx, int status, pn_message_t *resp, const ib_error_t *err)
{
    sb_msg_t *msg = ctx;
    sb_client_t *c = msg->st->client;
    ib_error_t res;
    msg->st->mgmt_pending = false;
    if (status == 200 || status == 204) {
        ib_error_clear(&res);
    } else if (sb_resp_busy(resp, status) && !c->stopping) {
        /* Throttled: asked again once the hold ends (the lock is still renewed). */
        sb_throttle_note(c, "update-disposition");
        sb_settle_requeue(c, msg);
        return;
    } else if (status < 0) {
        res = *err;
        if (res.code == IB_E_CLOSED || res.code == IB_E_DETACHED) {
            /* The request never got an answer because the link or connection went away:
             * while the lock can still be alive, try again after reconnecting. */
            if (!c->stopping && ib_now_ms() < msg->st->locked_until) {
                sb_settle_requeue(c, msg);
                return;
            }
            res.code = IB_E_DETACHED;
        }
    } else {
        sb_resp_error(resp, status, &res);
    }
    sb_settle_finish(c, msg, &res);
}

static void settle_via_mgmt(sb_client_t *c, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    pn_message_t *req = sb_mgmt_message("com.microsoft:update-disposition", NULL);
    pn_data_t *body = pn_message_body(req);
    pn_uuid_t u;
    sb_rr_t *rr = sb_rr_mgmt(&c->core, c->entity);

    memcpy(u.bytes, msg->lock_uuid, 16);
    pn_data_put_map(body);
    pn_data_enter(body);
    sb_put_str(body, "lock-tokens");
    pn_data_put_array(body, false, PN_UUID);
    pn_data_enter(body);
    pn_data_put_uuid(body, u);
    pn_data_exit(body);
    sb_put_str(body, "disposition-status");
    sb_put_str(body, mgmt_status(st->d));
    if (st->d == SB_DEADLETTER) {
        sb_put_str(body, "deadletter-reason");
        sb_put_str(body, st->reason ? st->reason : "");
        sb_put_str(body, "deadletter-description");
        sb_put_str(body, st->desc ? st->desc : "");
    }
    if (st->nmod) {
        sb_put_str(body, "properties-to-modify");
        pn_data_put_map(body);
        pn_data_enter(body);
        sb_props_put(body, st->mod, st->nmod, false);
        pn_data_exit(body);
    }
    pn_data_exit(body);
    sb_msg_set_state(c, msg, SB_MS_SETTLING);
    st->mgmt_pending = true;
    sb_renew_forget(msg);
    sb_rr_request(rr, req, on_mgmt_settled, msg);
}

/*
 * Under "park", the first dead letter of a session waits for the parked
 * record: written and answered first, then the dead letter (a crash
 * between them leaves the session parked with its poison still at its
 * head). Returns true when msg now waits (SETTLING, park_wait).
 */
static bool park_first(sb_client_t *c, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    sb_rcv_t *r = st->rcv;
    if (!st->session || !r || !c->park || r->state != RCV_OPEN || r->parking)
        return false;
    sb_msg_set_state(c, msg, SB_MS_SETTLING);
    st->park_wait = true;
    st->settle_deadline = LLONG_MAX; /* nothing sent yet: the tick waits */
    sb_sstate_park(r, msg);
    return true;
}

/* Ends msg, which waits for a park that failed: released, not dead-lettered. */
static void park_failed(sb_client_t *c, sb_msg_t *msg)
{
    ib_error_t res;
    pn_delivery_update(msg->st->dlv, PN_RELEASED);
    ib_error_set(&res, IB_E_BROKER, IB_CLASS_TRANSIENT,
                 "the session could not be parked: the message was released to the head of its "
                 "session, not dead-lettered");
    sb_settle_finish(c, msg, &res);
}

void sb_settle_park_done(sb_client_t *c, sb_rcv_t *r, bool parked)
{
    for (sb_msg_t *msg = c->held, *next; msg; msg = next) {
        struct sb_msg_state *st = msg->st;
        next = st->next;
        if (st->rcv != r || !st->park_wait)
            continue;
        st->park_wait = false;
        if (!parked) {
            park_failed(c, msg);
            continue;
        }
        sb_msg_set_state(c, msg, SB_MS_HANDED);
        settle_one(c, msg); /* r->parking: the dead letter goes out now */
    }
}

static void settle_one(sb_client_t *c, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    ib_error_t res;

    if (st->state != SB_MS_HANDED)
        return; /* already settling or done: a second request is ignored */
    if (st->dlv) {
        pn_disposition_t *disp = pn_delivery_local(st->dlv);
        uint64_t outcome = PN_ACCEPTED;
        switch (st->d) {
        case SB_COMPLETE:
            break;
        case SB_ABANDON:
        case SB_DEFER:
            outcome = PN_MODIFIED;
            pn_disposition_set_failed(disp, false);
            pn_disposition_set_undeliverable(disp, st->d == SB_DEFER);
            if (st->nmod) {
                pn_data_t *ann = pn_disposition_annotations(disp);
                pn_data_put_map(ann);
                pn_data_enter(ann);
                sb_props_put(ann, st->mod, st->nmod, true);
                pn_data_exit(ann);
            }
            break;
        case SB_DEADLETTER: {
            pn_condition_t *cond = pn_disposition_condition(disp);
            pn_data_t *info;
            outcome = PN_REJECTED;
            if (park_first(c, msg))
                return;
            pn_condition_set_name(cond, "com.microsoft:dead-letter");
            info = pn_condition_info(cond);
            pn_data_put_map(info);
            pn_data_enter(info);
            sb_put_str(info, "DeadLetterReason");
            if (st->reason)
                sb_put_str(info, st->reason);
            else
                pn_data_put_null(info);
            sb_put_str(info, "DeadLetterErrorDescription");
            if (st->desc)
                sb_put_str(info, st->desc);
            else
                pn_data_put_null(info);
            sb_props_put(info, st->mod, st->nmod, false);
            pn_data_exit(info);
            break;
        }
        case SB_RELEASE:
            outcome = PN_RELEASED;
            break;
        }
        sb_msg_set_state(c, msg, SB_MS_SETTLING);
        st->settle_deadline = ib_mono_ms() + c->settle_timeout_ms;
        pn_delivery_update(st->dlv, outcome);
        return;
    }
    if (!st->session && st->d != SB_RELEASE && msg->has_lock) {
        settle_via_mgmt(c, msg);
        return;
    }
    ib_error_set(&res, st->session ? IB_E_LOCK_LOST : IB_E_DETACHED, IB_CLASS_TRANSIENT,
                 st->session ? "the session link that delivered the message is gone"
                             : "the link that delivered the message is gone");
    sb_msg_set_state(c, msg, SB_MS_SETTLING);
    sb_settle_finish(c, msg, &res);
}

/*
 * A session message's settlement answered server-busy: not applied, the
 * message still locked under its session's lock, which only its own link
 * holds (Service Bus settles a session's messages on that link alone), and
 * the delivery ended by the answer, so the same disposition cannot go out
 * again. The session is given back once none of it is in flight (at once
 * when this message was the one out): the broker returns it, and those
 * behind it, to the head of the session in order without counting a
 * delivery, and a receiver takes it once the hold is over; the inbox then
 * settles it again (a duplicate is completed, a failed row dead-lettered
 * again). The worker's settlement ends IB_E_LOCK_LOST: nothing is abandoned
 * or dead-lettered for the broker's load, and no attempt is counted.
 */
static void session_busy(sb_client_t *c, sb_msg_t *msg, pn_delivery_t *dlv)
{
    struct sb_msg_state *st = msg->st;
    sb_rcv_t *r = st->rcv;
    ib_error_t res;
    sb_throttle_note(c, "settle");
    pn_delivery_set_context(dlv, NULL);
    pn_delivery_settle(dlv);
    st->dlv = NULL;
    if (r)
        r->give_back = true; /* also when nothing is buffered: a drain would pass it over */
    ib_error_set(&res, IB_E_LOCK_LOST, IB_CLASS_TRANSIENT,
                 "the broker was busy: the session is given back and the message comes again");
    sb_settle_finish(c, msg, &res);
    if (r && r->state == RCV_OPEN && r->give_back && r->held == r->nbuf)
        sb_session_give_back(r, "busy");
}

void sb_settle_drain_queue(sb_client_t *c)
{
    sb_msg_t *list;
    if (sb_throttle_on(c))
        return; /* the broker is busy: the settlements wait in the queue */
    pthread_mutex_lock(&c->lock);
    list = c->sq_head;
    c->sq_head = c->sq_tail = NULL;
    pthread_mutex_unlock(&c->lock);
    if (!list)
        return;
    while (list) {
        sb_msg_t *msg = list;
        list = msg->st->qnext;
        msg->st->qnext = NULL;
        if (c->stopping) {
            ib_error_t res;
            ib_error_set(&res, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "the client is stopping");
            sb_settle_finish(c, msg, &res);
            continue;
        }
        settle_one(c, msg);
    }
    /* A settlement on its way frees the worker's slot at once: no waiting
     * on the broker's answer before the next message is handed out. */
    for (sb_rcv_t *r = c->rcvs; r; r = r->next)
        if (!r->session)
            sb_rcv_grant(r);
    sb_session_hand_more(c);
    sb_rcv_pump(c);
}

void sb_settle_reply(sb_client_t *c, sb_msg_t *msg, pn_delivery_t *dlv)
{
    struct sb_msg_state *st = msg->st;
    uint64_t state = pn_delivery_remote_state(dlv);
    pn_condition_t *cond = pn_disposition_condition(pn_delivery_remote(dlv));
    const char *name = cond && pn_condition_is_set(cond) ? pn_condition_get_name(cond) : NULL;
    ib_error_t res;

    if (st->state != SB_MS_SETTLING) {
        /* The broker settled a delivery we did not settle: its lock is gone. */
        pn_delivery_set_context(dlv, NULL);
        pn_delivery_settle(dlv);
        st->dlv = NULL;
        sb_msg_lock_lost(c, msg, "the broker settled the delivery unasked");
        return;
    }
    ib_error_clear(&res);
    if (name) {
        sb_log_condition("settle", "the broker refused a settlement", cond, &res);
        if (strstr(name, "lock-lost")) {
            res.code = IB_E_LOCK_LOST;
        } else if (sb_condition_busy(name) && st->session && !c->stopping) {
            session_busy(c, msg, dlv);
            return;
        } else if (sb_condition_busy(name) && !st->session && msg->has_lock &&
                   st->d != SB_RELEASE && !c->stopping) {
            /* Throttled, not applied: once the hold ends, sent through $management. */
            sb_throttle_note(c, "settle");
            pn_delivery_set_context(dlv, NULL);
            pn_delivery_settle(dlv);
            st->dlv = NULL;
            sb_settle_requeue(c, msg);
            return;
        } else if (strcmp(name, "amqp:not-found") == 0 && !st->session && msg->has_lock &&
                   st->d != SB_RELEASE) {
            /* Not on this link: Service Bus allows the same settlement via $management. */
            pn_delivery_set_context(dlv, NULL);
            pn_delivery_settle(dlv);
            st->dlv = NULL;
            settle_via_mgmt(c, msg);
            return;
        }
    } else if (state == PN_REJECTED && st->d != SB_DEADLETTER) {
        ib_error_set(&res, IB_E_BROKER, IB_CLASS_TRANSIENT, "the broker rejected the settlement");
    }
    sb_settle_finish(c, msg, &res);
}

void sb_settle_tick(sb_client_t *c)
{
    long long mono = ib_mono_ms(), now = ib_now_ms();
    sb_msg_t *msg = c->held;
    while (msg) {
        sb_msg_t *next = msg->st->next;
        struct sb_msg_state *st = msg->st;
        if (st->state == SB_MS_SETTLING && st->dlv && mono > st->settle_deadline) {
            /* The link has gone silent: every message on it changes hands,
             * so the walk starts again at the next tick. */
            if (st->rcv) {
                sb_rcv_recycle(st->rcv, "no answer to a settlement");
                return;
            }
            ib_error_t res;
            st->answer_lost = true;
            ib_error_set(&res, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                         "no answer to the settlement from the broker");
            sb_settle_finish(c, msg, &res);
        } else if (st->state == SB_MS_HANDED && !st->lock_lost && st->locked_until > 0 &&
                   now > st->locked_until) {
            sb_msg_lock_lost(c, msg, "lock expired without renewal");
        }
        msg = next;
    }
}

void sb_settle_shutdown(sb_client_t *c)
{
    ib_error_t res;
    pthread_mutex_lock(&c->lock);
    c->sq_head = c->sq_tail = NULL;
    pthread_mutex_unlock(&c->lock);
    sb_rcv_release_buffered(c);
    ib_error_set(&res, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT,
                 "the client stopped before the message was settled");
    while (c->held) {
        sb_msg_t *msg = c->held;
        if (msg->st->state == SB_MS_BUFFERED) {
            sb_msg_drop(c, msg, PN_RELEASED);
            continue;
        }
        if (msg->st->dlv && c->core.conn) {
            /* Give the lock back at once rather than let it expire. */
            if (msg->st->state == SB_MS_HANDED || msg->st->park_wait)
                pn_delivery_update(msg->st->dlv, PN_RELEASED);
        } else {
            msg->st->dlv = NULL;
        }
        sb_settle_finish(c, msg, &res);
    }
}
