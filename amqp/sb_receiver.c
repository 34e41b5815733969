/*
 * sb_receiver.c - peek-lock receive links: attach (after put-token), credit,
 * incoming deliveries, the prefetch buffer and its hand-off to the worker,
 * and what happens to messages when a link goes away.
 */
#include <stdlib.h>
#include <string.h>

#include <proton/condition.h>
#include <proton/terminus.h>

#include "ib_log.h"
#include "sb_client_int.h"
#include "sb_condition.h"

/* A buffered message whose lock ends sooner than this is not handed out. */
#define HANDOFF_MIN_LOCK_MS 1000

sb_rcv_t *sb_rcv_new(sb_client_t *c, bool session)
{
    sb_rcv_t *r = calloc(1, sizeof(*r)), **tail;
    if (!r)
        return NULL;
    r->tag.kind = SB_KIND_RECEIVER;
    r->c = c;
    r->session = session;
    for (tail = &c->rcvs; *tail; tail = &(*tail)->next)
        ;
    *tail = r;
    return r;
}

/*
 * Whether a session receiver's AMQP session stays open for its next link:
 * one-message sessions then cost a link each, not a begin and an end too.
 * Not once either side ended it, nor when the client stops.
 */
static bool keeps_session(const sb_rcv_t *r)
{
    pn_state_t st;
    if (!r->session || !r->ssn || r->c->stopping)
        return false;
    st = pn_session_state(r->ssn);
    return !(st & (PN_LOCAL_CLOSED | PN_REMOTE_CLOSED));
}

static void rcv_attach(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    if (!c->core.conn || c->stopping) {
        r->state = RCV_IDLE;
        return;
    }
    if (r->ssn && !keeps_session(r)) {
        pn_session_free(r->ssn); /* the broker ended it while the receiver was idle */
        r->ssn = NULL;
    }
    if (!r->ssn) {
        r->ssn = sb_core_session(&c->core, c->rcv_window);
        pn_session_open(r->ssn);
    }
    sb_core_name(&c->core, r->session ? "sess" : "recv", r->name, sizeof(r->name));
    r->link = pn_receiver(r->ssn, r->name);
    pn_terminus_set_address(pn_link_source(r->link), c->entity);
    pn_terminus_set_address(pn_link_target(r->link), r->name);
    pn_link_set_snd_settle_mode(r->link, PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(r->link, PN_RCV_SECOND);
    if (r->session)
        sb_session_prepare(r);
    pn_link_set_context(r->link, r);
    pn_link_open(r->link);
    r->state = RCV_ATTACHING;
    r->attach_at = ib_mono_ms();
    r->held = 0;
    r->credit_since = 0;
    r->gen++;
    r->link_seq = ++r->c->attaches;
    if (r->session)
        sb_session_drain_with_attach(r);
}

static void rcv_authorized(void *ctx, const ib_error_t *err)
{
    sb_rcv_t *r = ctx;
    if (r->state != RCV_AUTH)
        return;
    if (err->code != IB_E_OK) {
        r->state = RCV_IDLE;
        r->retry_at = ib_mono_ms() + (err->code == IB_E_AUTH ? 5000 : 1000);
        if (err->code != IB_E_CLOSED)
            sb_client_set_ready(r->c, 0, err);
        return;
    }
    if (r->session)
        sb_client_set_ready(r->c, 1, NULL); /* sessions: ready once authorized */
    rcv_attach(r);
}

void sb_rcv_start(sb_rcv_t *r)
{
    /* No attach while the broker is busy: sb_throttle's resume starts them. */
    if (r->state != RCV_IDLE || !r->c->core.conn || sb_throttle_on(r->c))
        return;
    r->state = RCV_AUTH;
    sb_cbs_authorize(&r->c->core, r->c->audience, rcv_authorized, r);
}

/*
 * Caps new credit so that the bytes held (with the caller's held_beside),
 * plus the credit outstanding at the size of the largest recent message,
 * stay within max_held_bytes. Until a
 * message's size is known one credit at a time; with nothing held and no
 * credit out one message is always allowed, however large. Credit counts
 * messages, not bytes: a message larger than the estimate overshoots once.
 */
static int within_byte_budget(const sb_client_t *c, int want, int credit)
{
    unsigned long long room, fits, used;
    if (!c->max_held_bytes || want <= 0)
        return want;
    if (!c->largest_bytes)
        return credit == 0 ? 1 : 0;
    used = sb_held_used(c);
    if (used == 0 && credit == 0 && c->largest_bytes >= c->max_held_bytes)
        return 1;
    room = used < c->max_held_bytes ? c->max_held_bytes - used : 0;
    fits = room / c->largest_bytes;
    if (fits <= (unsigned long long)credit)
        return 0;
    fits -= (unsigned long long)credit;
    return fits < (unsigned long long)want ? (int)fits : want;
}

static void rcv_read(sb_client_t *c, sb_rcv_t *r);

void sb_rcv_grant(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    int credit, want;
    if (r->stalled && !r->reading && r->link)
        rcv_read(c, r); /* settlements freed bytes: read on */
    if (r->state != RCV_OPEN || !r->link || r->recycling || c->receiving_stopped || c->paused ||
        c->stopping || sb_throttle_on(c))
        return;
    if (r->session) {
        sb_session_step(r); /* sessions take credit only as drains */
        return;
    }
    credit = pn_link_credit(r->link);
    {
        /* Messages of a lost link the worker still holds count too.
         * Settlements awaiting the broker's answer do not hold a slot, up
         * to a bound that keeps memory (and the broker's locks) in check. */
        int window = (int)(c->prefetch + c->mcc);
        int slack = 4 * window > 256 ? 4 * window : 256;
        int settling = (int)c->n_settling > slack ? (int)c->n_settling - slack : 0;
        want = window - (int)(c->n_inflight + c->n_buffered) - settling - credit;
    }
    want = within_byte_budget(c, want, credit);
    if (want > 0) {
        if (credit == 0)
            r->credit_since = ib_mono_ms();
        pn_link_flow(r->link, want);
    }
}

/* Whether auto-renewal still looks after this message's lock. */
static bool renewable(const sb_client_t *c, const struct sb_msg_state *st)
{
    return !st->session && c->renew_max_s > 0 && ib_now_ms() < st->renew_until && !st->lock_lost;
}

void sb_rcv_pump(sb_client_t *c)
{
    long long now = ib_now_ms();
    while (c->buf_head && c->n_inflight < c->mcc && !c->stopping && !c->receiving_stopped &&
           !c->paused) {
        sb_msg_t *msg = c->buf_head;
        struct sb_msg_state *st = msg->st;
        c->buf_head = st->bnext;
        if (!c->buf_head)
            c->buf_tail = NULL;
        st->bnext = NULL;
        if (now >= st->locked_until ||
            (st->locked_until - now < HANDOFF_MIN_LOCK_MS && !renewable(c, st))) {
            /* Its lock ended (or will, unrenewed) while it waited: the broker delivers it again. */
            c->stats.expired_dropped++;
            IB_LOG(IB_LOG_INFO, "lock_expired", IB_MSG("buffered message dropped, lock expired"),
                   IB_S("message_id", msg->message_id), IB_S("lock_token", msg->lock_token));
            sb_msg_set_state(c, msg, SB_MS_NEW); /* already out of the buffer */
            sb_msg_drop(c, msg, PN_RELEASED);
            continue;
        }
        sb_msg_set_state(c, msg, SB_MS_HANDED);
        c->stats.handed++;
        c->cb.on_message(msg, c->cb.ctx);
    }
}

/* Forgets the delivery being read: its bytes and their count. */
static void acc_drop(sb_rcv_t *r)
{
    sb_client_t *c = r->c;
    c->arriving_bytes -= 2 * (unsigned long long)r->acc_len;
    sb_held_publish(c);
    free(r->acc);
    r->acc = NULL;
    r->acc_len = r->acc_cap = 0;
    r->stalled = false;
    if (c->overdraft == r)
        c->overdraft = NULL;
}

/*
 * How many of pending arriving bytes r may read now: what fits the budget
 * (each byte counted twice, as once decoded), or all of them when nothing
 * is held and no other receiver reads past the budget: a message larger
 * than the budget is read alone, once the others are settled.
 */
static size_t readable_now(sb_client_t *c, sb_rcv_t *r, size_t pending)
{
    unsigned long long used = sb_held_used(c), room;
    if (!c->max_held_bytes)
        return pending;
    room = used < c->max_held_bytes ? (c->max_held_bytes - used) / 2 : 0;
    if (room >= pending)
        return pending;
    if (c->held_bytes == 0 && (!c->overdraft || c->overdraft == r)) {
        c->overdraft = r;
        return pending;
    }
    return (size_t)room;
}

/* Appends up to n bytes of the current delivery to r->acc. Returns false when out of memory. */
static bool acc_read(sb_rcv_t *r, size_t n)
{
    ssize_t got;
    if (r->acc_len + n + 1 > r->acc_cap) {
        size_t cap = r->acc_cap ? r->acc_cap : 4096;
        char *grown;
        while (cap < r->acc_len + n + 1) /* + 1: the body's NUL (sb_msg_decode_owned) */
            cap *= 2;
        grown = realloc(r->acc, cap);
        if (!grown)
            return false;
        r->acc = grown;
        r->acc_cap = cap;
    }
    got = pn_link_recv(r->link, r->acc + r->acc_len, n);
    if (got > 0) {
        r->acc_len += (size_t)got;
        r->c->arriving_bytes += 2 * (unsigned long long)got;
        sb_held_publish(r->c);
    }
    return true;
}

static void msg_arrived(sb_client_t *c, sb_rcv_t *r, pn_delivery_t *dlv);

/*
 * Reads the link's current delivery as far as the byte budget allows, and
 * the ones after it once whole. What is left unread stays in Proton, and
 * the session's window (c->rcv_window) stops the broker; a settlement that
 * frees bytes calls this again through sb_rcv_grant.
 */
static void rcv_read(sb_client_t *c, sb_rcv_t *r)
{
    pn_delivery_t *dlv;
    r->reading = true;
    r->stalled = false;
    while (r->link && (dlv = pn_link_current(r->link)) && pn_delivery_readable(dlv) &&
           !pn_delivery_get_context(dlv)) {
        size_t pending = pn_delivery_pending(dlv), n = readable_now(c, r, pending);
        if (pn_delivery_aborted(dlv)) {
            acc_drop(r);
            pn_delivery_settle(dlv); /* the broker gave it up: nothing to answer */
            continue;
        }
        if (n && !acc_read(r, n)) {
            acc_drop(r);
            pn_link_advance(r->link);
            sb_dlv_release(dlv, PN_RELEASED);
            continue;
        }
        if (n < pending) {
            r->stalled = true;
            break;
        }
        if (pn_delivery_partial(dlv))
            break; /* more frames to come: their PN_DELIVERY reads them */
        pn_link_advance(r->link);
        msg_arrived(c, r, dlv);
    }
    r->reading = false;
}

static void on_delivery(sb_client_t *c, sb_rcv_t *r, pn_delivery_t *dlv)
{
    sb_msg_t *msg = pn_delivery_get_context(dlv);
    if (msg) { /* an update of a delivery we hold */
        if (pn_delivery_settled(dlv))
            sb_settle_reply(c, msg, dlv);
        return;
    }
    if (!r->reading)
        rcv_read(c, r);
}

/* A whole delivery read into r->acc (the link advanced past it): decoded, then buffered. */
static void msg_arrived(sb_client_t *c, sb_rcv_t *r, pn_delivery_t *dlv)
{
    sb_msg_t *msg = calloc(1, sizeof(*msg));
    struct sb_msg_state *st = calloc(1, sizeof(*st));
    pn_delivery_tag_t tag;
    size_t got = r->acc_len, cap;
    unsigned char *bytes;
    long long now;

    if (!msg || !st) {
        free(msg);
        free(st);
        acc_drop(r);
        sb_dlv_release(dlv, PN_RELEASED);
        return;
    }
    bytes = (unsigned char *)r->acc; /* the message's from here: its body stays in them */
    cap = r->acc_cap;
    r->acc = NULL;
    acc_drop(r); /* its bytes are counted as held from here (st->bytes) */
    if (sb_msg_decode_owned(msg, bytes, got, cap, true) == IB_E_NOMEM) {
        free(msg);
        free(st);
        sb_dlv_release(dlv, PN_RELEASED);
        return;
    }
    tag = pn_delivery_tag(dlv);
    msg->has_lock = sb_lock_token_from_tag((const unsigned char *)tag.start, tag.size,
                                           msg->lock_uuid, msg->lock_token);
    msg->st = st;
    msg->link_seq = r->link_seq;
    now = ib_now_ms();
    st->client = c;
    st->d = SB_RELEASE; /* until a settlement is chosen: what stop does with it, never complete */
    st->rcv = r;
    st->dlv = dlv;
    st->session = r->session;
    st->locked_until = msg->locked_until_ms ? msg->locked_until_ms : now + 30000;
    if (r->session && r->session_locked_until > st->locked_until)
        st->locked_until = r->session_locked_until;
    st->lock_dur = st->locked_until - now;
    if (st->lock_dur < 1000)
        st->lock_dur = 1000;
    st->renew_until = now + (long long)c->renew_max_s * 1000;
    st->state = SB_MS_NEW;
    /* Held twice until settled: the bytes read (the body stays in them when
     * it is one data section), and its body parsed by the worker (Proton
     * keeps at most the session's window of it). */
    st->bytes = 2 * got;
    /* The estimate follows the largest recent size, decaying by 1/64 a message. */
    c->largest_bytes -= c->largest_bytes / 64;
    if (st->bytes > c->largest_bytes)
        c->largest_bytes = st->bytes;
    pn_delivery_set_context(dlv, msg);
    st->next = c->held;
    if (c->held)
        c->held->st->prev = msg;
    c->held = msg;
    r->held++;
    r->last_activity = ib_mono_ms();
    r->credit_since = r->link && pn_link_credit(r->link) > 0 ? r->last_activity : 0;
    c->stalls_in_row = 0;
    c->stats.received++;
    IB_LOG(IB_LOG_DEBUG, "msg_received", IB_S("message_id", msg->message_id),
           IB_S("lock_token", msg->lock_token), IB_S("session_id", msg->session_id),
           IB_I("delivery_count", msg->delivery_count),
           IB_I("sequence_number", msg->sequence_number));
    if (c->receiving_stopped || c->stopping) {
        sb_msg_drop(c, msg, PN_RELEASED);
        return;
    }
    if (r->session) {
        sb_session_delivered(r, msg); /* one at a time per session, from its own buffer */
        return;
    }
    if (c->buf_tail)
        c->buf_tail->st->bnext = msg;
    else
        c->buf_head = msg;
    c->buf_tail = msg;
    sb_msg_set_state(c, msg, SB_MS_BUFFERED);
    sb_rcv_pump(c);
    sb_rcv_grant(r);
}

void sb_rcv_release_buffered(sb_client_t *c)
{
    while (c->buf_head) {
        sb_msg_drop(c, c->buf_head, PN_RELEASED);
    }
}

void sb_rcv_close(sb_rcv_t *r)
{
    if (!r->link || r->state == RCV_CLOSING)
        return;
    r->state = RCV_CLOSING;
    pn_link_close(r->link);
}

/* Takes msg off r without settling its delivery (the lock outlives the link). */
static void unhook(sb_rcv_t *r, struct sb_msg_state *st)
{
    if (st->dlv)
        pn_delivery_set_context(st->dlv, NULL);
    st->dlv = NULL;
    st->rcv = NULL;
    r->held--;
}

/* A settlement sent on r whose answer will not come: ask again through $management. */
static void answer_lost(sb_rcv_t *r, sb_msg_t *msg)
{
    struct sb_msg_state *st = msg->st;
    st->answer_lost = !st->park_wait; /* a dead letter waiting for its park was never sent */
    unhook(r, st);
    if (!st->session && st->d != SB_RELEASE && msg->has_lock) {
        sb_settle_requeue(r->c, msg);
    } else {
        ib_error_t res;
        ib_error_set(&res, IB_E_DETACHED, IB_CLASS_TRANSIENT, "link recycled");
        sb_settle_finish(r->c, msg, &res);
    }
}

/*
 * Step 1: the settlements past their deadline are asked again through
 * $management; no more credit; the broker is asked to drain what it was
 * granted, so nothing is in transit when the link closes (a delivery lost
 * in transit would only come back when its lock expires, counted).
 */
void sb_rcv_recycle(sb_rcv_t *r, const char *why)
{
    sb_client_t *c = r->c;
    long long mono = ib_mono_ms();
    unsigned unanswered = 0;

    if (r->recycling || r->state != RCV_OPEN || !r->link)
        return;
    for (sb_msg_t *msg = c->held, *next; msg; msg = next) {
        next = msg->st->next;
        if (msg->st->rcv == r && msg->st->state == SB_MS_SETTLING && msg->st->dlv &&
            mono > msg->st->settle_deadline) {
            unanswered++;
            answer_lost(r, msg);
        }
    }
    IB_LOG(IB_LOG_WARN, "link_recycle", IB_MSG(why), IB_S("entity", c->entity),
           IB_S("link", r->name), IB_I("unanswered_settlements", unanswered));
    c->stats.link_recycles++;
    r->recycling = true;
    r->recycle_close_at = mono + RECYCLE_DRAIN_MS;
    if (!r->session)
        pn_link_drain(r->link, 0);
}

/*
 * Step 2, once the drain is answered (or RECYCLE_DRAIN_MS passed: the
 * broker may be silent altogether): buffered messages are released (they
 * come back at once, uncounted), the worker keeps the ones it holds (a
 * non-session lock outlives the link: they settle through $management),
 * settlements still awaiting an answer are asked again, and the link is
 * closed; the broker's detach brings it back to idle and it re-attaches.
 */
void sb_rcv_recycle_finish(sb_rcv_t *r, bool drained)
{
    sb_client_t *c = r->c;
    if (!r->recycling || r->state != RCV_OPEN ||
        (!drained && ib_mono_ms() < r->recycle_close_at))
        return;
    for (sb_msg_t *msg = c->held, *next; msg; msg = next) {
        struct sb_msg_state *st = msg->st;
        next = st->next;
        if (st->rcv != r)
            continue;
        if (st->state == SB_MS_BUFFERED) {
            if (!r->session) /* a session's buffer is returned by closing its link */
                sb_msg_drop(c, msg, PN_RELEASED);
        } else if (st->state == SB_MS_HANDED && st->session)
            sb_msg_lock_lost(c, msg, "session link recycled");
        else if (st->state == SB_MS_HANDED)
            unhook(r, st);
        else if (st->state == SB_MS_SETTLING && st->dlv)
            answer_lost(r, msg);
    }
    r->recycling = false;
    sb_rcv_close(r);
}

/*
 * The broker closed r for a reason that leaves the locks alive (throttling,
 * its idle close): the messages keep their locks and stay where they are
 * (buffered ones are still handed out), settling through $management; a
 * settlement awaiting its answer is asked again there. Nothing is released
 * or lost, so no delivery is counted for it. Plain entities only.
 */
static void keep_locks(sb_rcv_t *r)
{
    for (sb_msg_t *msg = r->c->held, *next; msg; msg = next) {
        struct sb_msg_state *st = msg->st;
        next = st->next;
        if (st->rcv != r || st->session || !msg->has_lock)
            continue;
        if (st->state == SB_MS_BUFFERED || st->state == SB_MS_HANDED)
            unhook(r, st);
        else if (st->state == SB_MS_SETTLING && st->dlv && !st->mgmt_pending)
            answer_lost(r, msg);
    }
}

/*
 * A detach that is an ordinary recycle (server-busy, idle close): true when
 * handled. A plain link's messages keep their locks; a session link's
 * session ends with it (its lock is the link's): what it buffered comes
 * again in order, uncounted, and a message the worker holds can no longer
 * settle (it comes again too, and the inbox knows it). The receiver takes
 * the next session at once, or when the hold ends.
 */
static bool detached_recycle(sb_client_t *c, sb_rcv_t *r, const char *name, bool ours)
{
    ib_error_t why;
    bool busy = sb_condition_busy(name);
    if (ours || (!busy && strcmp(name, "amqp:link:detach-forced") != 0))
        return false;
    if (busy)
        sb_throttle_note(c, "receive");
    else
        c->stats.link_recycles++;
    IB_LOG(IB_LOG_INFO, "link_recycle",
           IB_MSG("the broker closed the receive link; attaching again"), IB_S("condition", name),
           IB_S("entity", c->entity), IB_S("link", r->name), IB_S("session_id", r->session_id));
    ib_error_set(&why, IB_E_DETACHED, IB_CLASS_TRANSIENT, "receive link closed by the broker (%s)",
                 name);
    if (!r->session)
        keep_locks(r);
    sb_rcv_lost(r, &why, true);
    r->retry_at = ib_mono_ms(); /* a hold (sb_throttle_on) keeps it idle meanwhile */
    if (r->session)
        sb_session_fill(c);
    return true;
}

void sb_rcv_lost(sb_rcv_t *r, const ib_error_t *why, bool proton_alive)
{
    sb_client_t *c = r->c;
    sb_msg_t *msg = c->held;
    bool was_session = r->session && r->session_id;

    acc_drop(r); /* a delivery cut short comes again */
    /* Its buffered messages are all in c->held and dropped below. */
    r->sbuf_head = r->sbuf_tail = NULL;
    r->nbuf = 0;
    r->drain_at = 0;
    r->drain_with_attach = r->filled_short = false;
    r->give_back = false;

    while (msg) {
        sb_msg_t *next = msg->st->next;
        struct sb_msg_state *st = msg->st;
        if (st->rcv == r) {
            pn_delivery_t *dlv = st->dlv;
            st->rcv = NULL;
            st->dlv = NULL;
            if (dlv && proton_alive) {
                pn_delivery_set_context(dlv, NULL);
                pn_delivery_settle(dlv);
            }
            if (st->state == SB_MS_BUFFERED) {
                sb_msg_drop(c, msg, 0);
            } else if (st->state == SB_MS_HANDED) {
                sb_msg_lock_lost(c, msg, st->session ? "session link lost" : "receive link lost");
            } else if (st->state == SB_MS_SETTLING && !st->mgmt_pending) {
                /* The broker's answer will never come on this link. */
                ib_error_t res;
                if (st->session || st->d == SB_RELEASE) {
                    ib_error_set(&res, st->session ? IB_E_LOCK_LOST : IB_E_DETACHED,
                                 IB_CLASS_TRANSIENT, "link lost before the broker confirmed: %s",
                                 why->text);
                    sb_settle_finish(c, msg, &res);
                } else {
                    /* Settle again through $management: the lock outlives the link. */
                    st->lock_lost = true;
                    sb_settle_requeue(c, msg);
                }
            }
        }
        msg = next;
    }
    if (proton_alive && r->link) {
        /* Freed at once: session receivers come and go all day on one connection. */
        pn_link_set_context(r->link, NULL);
        pn_link_close(r->link);
        pn_link_free(r->link);
    }
    if (proton_alive && r->ssn && !keeps_session(r)) {
        pn_session_close(r->ssn);
        pn_session_free(r->ssn);
        r->ssn = NULL;
    }
    r->link = NULL;
    if (!proton_alive)
        r->ssn = NULL; /* freed with the connection */
    r->held = 0;
    r->state = RCV_IDLE;
    r->recycling = false;
    r->session_renewing = false;
    if (was_session)
        c->stats.sessions_released++;
    free(r->session_id);
    r->session_id = NULL;
    sb_sstate_forget(r);
}

void sb_rcv_event(sb_client_t *c, pn_event_t *e, pn_link_t *link)
{
    sb_link_tag_t *tag = pn_link_get_context(link);
    sb_rcv_t *r;
    if (!tag || tag->kind != SB_KIND_RECEIVER)
        return;
    r = (sb_rcv_t *)tag;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        if (r->state != RCV_ATTACHING)
            break;
        if (r->session) {
            if (!sb_session_opened(r))
                break; /* no session now; the broker detaches with com.microsoft:timeout */
        } else if (!pn_terminus_get_address(pn_link_remote_source(link))) {
            break; /* refused: a detach with the reason follows */
        }
        r->state = RCV_OPEN;
        r->last_activity = ib_mono_ms();
        /* A session link is one of many a minute: debug, like its give-back (session_release). */
        IB_LOG(r->session ? IB_LOG_DEBUG : IB_LOG_INFO, "attach", IB_MSG("receive link attached"),
               IB_S("entity", c->entity), IB_S("link", r->name), IB_S("session_id", r->session_id));
        if (!r->session)
            sb_client_set_ready(c, 1, NULL);
        sb_rcv_grant(r);
        break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH: {
        ib_error_t why;
        pn_condition_t *cond = pn_link_remote_condition(link);
        const char *name = pn_condition_is_set(cond) ? pn_condition_get_name(cond) : "";
        bool ours = r->state == RCV_CLOSING;
        bool timeout = r->session && strcmp(name, "com.microsoft:timeout") == 0;
        bool quiet = ours || timeout ||
                     (r->session && strcmp(name, "com.microsoft:session-cannot-be-locked") == 0);
        long long waited = ib_mono_ms() - r->attach_at;
        if (detached_recycle(c, r, name, ours))
            break;
        ib_error_set(&why, IB_E_DETACHED, IB_CLASS_TRANSIENT, "receive link closed by the broker");
        if (quiet) {
            IB_LOG(IB_LOG_DEBUG, "detach", IB_MSG("receive link closed"), IB_S("condition", name),
                   IB_S("link", r->name));
        } else {
            sb_log_condition("detach", "the broker closed a receive link", cond, &why);
            why.code = strstr(name, "lock-lost")             ? IB_E_LOCK_LOST
                       : strcmp(name, "amqp:not-found") == 0 ? IB_E_NOTFOUND
                       : strstr(name, "unauthorized")        ? IB_E_AUTH
                                                             : IB_E_DETACHED;
        }
        if (!r->session && !quiet)
            sb_client_set_ready(c, 0, &why);
        sb_rcv_lost(r, &why, true);
        /* A refused link backs off; a session slot goes on at once (see sb_session_fill). */
        r->retry_at = ib_mono_ms() + (quiet ? 0 : why.code == IB_E_NOTFOUND ? 5000 : 1000);
        if (r->session && quiet && !ours) {
            /*
             * No session (the broker waited session_wait_ms) or one taken
             * meanwhile: ask again at once, unless the answer came early,
             * which a broker that ignores com.microsoft:timeout does.
             */
            if (waited < 1000)
                r->retry_at = ib_mono_ms() + ib_rand_range(&c->seed, 100, 299);
            if (timeout)
                sb_session_none(c);
        }
        if (r->session)
            sb_session_fill(c);
        break;
    }
    case PN_LINK_FLOW:
        if (r->session)
            sb_session_step(r); /* a drain answered */
        /* The drain asked for by a recycle is answered: nothing in transit. */
        if (r->recycling && pn_link_credit(link) == 0)
            sb_rcv_recycle_finish(r, true);
        break;
    case PN_DELIVERY:
        on_delivery(c, r, pn_event_delivery(e));
        break;
    default:
        break;
    }
}
