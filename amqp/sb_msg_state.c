/*
 * sb_msg_state.c - where a received message is and who holds it: the one
 * transition function (sb_msg_set_state), the held list, dropping a message
 * the worker never saw, marking its lock lost, and freeing it; plus the
 * application-property helpers settlement uses. thread: proactor.
 */
#include <stdlib.h>
#include <string.h>

#include <proton/disposition.h>

#include "ib_log.h"
#include "sb_client_int.h"

/*
 * In flight = held by the worker, or settling through $management (a
 * request with its own timeout). A disposition sent on the receive link is
 * the broker's to answer and no longer takes a worker's slot: a silent
 * broker must not stall the worker (n_settling bounds those separately,
 * and settle_timeout_ms ends them).
 */
static bool counted_in_flight(const struct sb_msg_state *st, sb_msg_state_t s)
{
    return s == SB_MS_HANDED || (s == SB_MS_SETTLING && !st->settling_on_link);
}

void sb_msg_set_state(sb_client_t *c, sb_msg_t *msg, sb_msg_state_t to)
{
    struct sb_msg_state *st = msg->st;
    sb_msg_state_t from = st->state;
    if (from == to)
        return;
    bool was = counted_in_flight(st, from);
    if (to == SB_MS_DONE && st->bytes_counted)
        c->held_bytes -= st->bytes;
    else if (to != SB_MS_DONE && !st->bytes_counted)
        c->held_bytes += st->bytes;
    st->bytes_counted = to != SB_MS_DONE;
    sb_held_publish(c);
    if (from == SB_MS_BUFFERED)
        c->n_buffered--;
    if (to == SB_MS_BUFFERED)
        c->n_buffered++;
    if (from == SB_MS_SETTLING && st->settling_on_link)
        c->n_settling--;
    if (to == SB_MS_SETTLING) {
        st->settling_on_link = st->dlv != NULL;
        if (st->settling_on_link)
            c->n_settling++;
    }
    bool will = counted_in_flight(st, to);
    if (was && !will)
        c->n_inflight--;
    if (!was && will)
        c->n_inflight++;
    st->state = to;
}

void sb_msg_unlink(sb_client_t *c, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    if (st->prev)
        st->prev->st->next = st->next;
    else if (c->held == msg)
        c->held = st->next;
    if (st->next)
        st->next->st->prev = st->prev;
    st->prev = st->next = NULL;
    sb_renew_forget(msg);
    if (st->mgmt_pending) {
        sb_rr_forget(&c->core, msg);
        st->mgmt_pending = false;
    }
}

void sb_props_free(sb_prop_t *props, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(props[k].key);
        free(props[k].str);
    }
    free(props);
}

/* Appends key/value pairs (the caller has entered a map). */
void sb_props_put(pn_data_t *d, const sb_prop_t *props, size_t n, bool symbol_keys)
{
    for (size_t k = 0; k < n; k++) {
        const sb_prop_t *p = &props[k];
        if (symbol_keys)
            sb_put_sym(d, p->key);
        else
            sb_put_str(d, p->key);
        switch (p->type) {
        case SB_PROP_INT64:
            pn_data_put_long(d, p->i);
            break;
        case SB_PROP_DOUBLE:
            pn_data_put_double(d, p->d);
            break;
        case SB_PROP_BOOL:
            pn_data_put_bool(d, p->i != 0);
            break;
        case SB_PROP_NULL:
            pn_data_put_null(d);
            break;
        default:
            sb_put_str(d, p->str ? p->str : "");
            break;
        }
    }
}

void sb_msg_destroy(sb_msg_t *msg)
{
    if (msg->st) {
        sb_props_free(msg->st->mod, msg->st->nmod);
        free(msg->st->reason);
        free(msg->st->desc);
        free(msg->st);
    }
    sb_msg_free(msg);
}

void sb_dlv_release(pn_delivery_t *dlv, uint64_t outcome)
{
    if (!dlv)
        return;
    if (outcome)
        pn_delivery_update(dlv, outcome);
    pn_delivery_settle(dlv);
}

void sb_msg_drop(sb_client_t *c, sb_msg_t *msg, uint64_t outcome)
{
    struct sb_msg_state *st = msg->st;
    sb_rcv_t *r = st->rcv;
    if (r)
        r->held--;
    st->rcv = NULL;
    if (st->state == SB_MS_BUFFERED && st->session) {
        if (r)
            sb_session_unbuffer(r, msg); /* a session's own buffer */
    } else if (st->state == SB_MS_BUFFERED) {
        sb_msg_t **pp = &c->buf_head, *prev = NULL;
        while (*pp && *pp != msg) {
            prev = *pp;
            pp = &(*pp)->st->bnext;
        }
        if (*pp) {
            *pp = st->bnext;
            if (c->buf_tail == msg)
                c->buf_tail = prev;
        }
        st->bnext = NULL;
    }
    sb_msg_set_state(c, msg, SB_MS_DONE);
    if (st->dlv) {
        pn_delivery_set_context(st->dlv, NULL);
        sb_dlv_release(st->dlv, outcome);
        st->dlv = NULL;
    }
    sb_msg_unlink(c, msg);
    sb_msg_destroy(msg);
    if (r)
        sb_rcv_grant(r);
}

void sb_msg_lock_lost(sb_client_t *c, sb_msg_t *msg, const char *why)
{
    struct sb_msg_state *st = msg->st;
    if (st->lock_lost)
        return;
    st->lock_lost = true;
    c->stats.lock_lost++;
    IB_LOG(IB_LOG_WARN, "lock_lost", IB_MSG(why), IB_S("message_id", msg->message_id),
           IB_S("lock_token", msg->lock_token), IB_S("session_id", msg->session_id),
           IB_I("delivery_count", msg->delivery_count));
    if (st->state == SB_MS_BUFFERED) {
        sb_msg_drop(c, msg, PN_RELEASED);
        return;
    }
    if (st->state == SB_MS_HANDED && c->cb.on_lock_lost)
        c->cb.on_lock_lost(msg, c->cb.ctx);
}
