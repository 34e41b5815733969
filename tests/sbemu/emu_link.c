/*
 * emu_link.c - entity links of sbemu: attach (incl. session filters),
 * dispatch to consumers under credit and drain, incoming transfers,
 * settlement replies (with fault injection).
 */
#include "emu_broker.h"

#include "ib_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_MAX_MESSAGE 262144 /* the Standard tier's; --max-message-bytes up to Premium's */

static size_t max_message(const emu_broker_t *b)
{
    return b->max_message_bytes ? b->max_message_bytes : EMU_MAX_MESSAGE;
}
#define EMU_SESSION_FILTER "com.microsoft:session-filter"

static void consumers_add(emu_entity_t *ent, emu_link_t *l)
{
    emu_link_t *head = ent->consumers;
    l->cprev = NULL;
    l->cnext = head;
    if (head)
        head->cprev = l;
    ent->consumers = l;
}

static void consumers_del(emu_entity_t *ent, emu_link_t *l)
{
    if (l->cprev)
        l->cprev->cnext = l->cnext;
    else if (ent->consumers == l)
        ent->consumers = l->cnext;
    if (l->cnext)
        l->cnext->cprev = l->cprev;
    l->cnext = l->cprev = NULL;
}

/* The FIFO of accept-next receivers waiting for a session (ent->waiting). */
static void waiting_add(emu_entity_t *ent, emu_link_t *l)
{
    emu_link_t *tail = ent->waiting;
    while (tail && tail->wnext)
        tail = tail->wnext;
    l->wnext = NULL;
    l->wprev = tail;
    if (tail)
        tail->wnext = l;
    else
        ent->waiting = l;
    l->waiting = true;
}

static void waiting_del(emu_entity_t *ent, emu_link_t *l)
{
    if (!l->waiting)
        return;
    if (l->wprev)
        l->wprev->wnext = l->wnext;
    else
        ent->waiting = l->wnext;
    if (l->wnext)
        l->wnext->wprev = l->wprev;
    l->wnext = l->wprev = NULL;
    l->waiting = false;
}

/* thread: proactor */
bool emu_server_busy(emu_broker_t *b)
{
    int64_t now = emu_now_ms();
    uint64_t after = b->faults.server_busy_after > 0 ? (uint64_t)b->faults.server_busy_after : 1;
    if (b->faults.server_busy_for_ms <= 0)
        return false;
    if (!b->busy_until_ms && b->deliveries >= after) {
        b->busy_until_ms = now + b->faults.server_busy_for_ms;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("server-busy window begins"),
               IB_I("ms", b->faults.server_busy_for_ms));
    }
    return b->busy_until_ms && now < b->busy_until_ms;
}

/* thread: proactor */
void emu_link_assign_waiting(emu_broker_t *b, emu_entity_t *ent)
{
    int64_t now = emu_now_ms();
    emu_link_t *l;
    while ((l = ent->waiting) != NULL) {
        bool busy;
        emu_session_t *s = emu_session_acquire(ent, NULL, l, now, &busy);
        if (!s)
            return;
        waiting_del(ent, l);
        l->session = s; /* the attach is answered by l's own connection */
        emu_conn_poke(b, l->conn);
    }
}

/* Reads the session filter of the remote source: 1 named, 0 null (next), -1 none. */
static int session_filter(pn_link_t *pl, char *id, size_t size)
{
    pn_data_t *f = pn_terminus_filter(pn_link_remote_source(pl));
    if (!f || !emu_map_find(f, EMU_SESSION_FILTER))
        return -1;
    if (pn_data_type(f) == PN_DESCRIBED) {
        pn_data_enter(f);
        pn_data_next(f);
        pn_data_next(f);
    }
    pn_type_t t = pn_data_type(f);
    if (t == PN_STRING || t == PN_SYMBOL) {
        pn_bytes_t s = t == PN_STRING ? pn_data_get_string(f) : pn_data_get_symbol(f);
        if (s.size == 0 || s.size >= size)
            return -1;
        memcpy(id, s.start, s.size);
        id[s.size] = '\0';
        return 1;
    }
    return 0;
}

static uint32_t link_timeout_ms(pn_link_t *pl)
{
    pn_data_t *p = pn_link_remote_properties(pl);
    if (p && emu_map_find(p, "com.microsoft:timeout")) {
        switch (pn_data_type(p)) {
        case PN_UINT:
            return pn_data_get_uint(p);
        case PN_INT:
            return (uint32_t)pn_data_get_int(p);
        case PN_ULONG:
            return (uint32_t)pn_data_get_ulong(p);
        case PN_LONG:
            return (uint32_t)pn_data_get_long(p);
        default:
            break;
        }
    }
    return 60000;
}

/* Completes the attach of a session receiver that now holds session s. */
static void open_session_link(emu_link_t *l, emu_session_t *s)
{
    pn_link_t *pl = l->pl;
    l->session = s;
    l->session_pending = false;
    pn_terminus_copy(pn_link_source(pl), pn_link_remote_source(pl));
    pn_terminus_copy(pn_link_target(pl), pn_link_remote_target(pl));
    pn_link_set_snd_settle_mode(pl, pn_link_remote_snd_settle_mode(pl));
    pn_link_set_rcv_settle_mode(pl, pn_link_remote_rcv_settle_mode(pl));
    pn_data_t *f = pn_terminus_filter(pn_link_source(pl));
    pn_data_clear(f);
    pn_data_put_map(f);
    pn_data_enter(f);
    pn_data_put_symbol(f, pn_bytes(strlen(EMU_SESSION_FILTER), EMU_SESSION_FILTER));
    pn_data_put_string(f, pn_bytes(strlen(s->id), s->id));
    pn_data_exit(f);
    pn_data_t *p = pn_link_properties(pl);
    pn_data_clear(p);
    pn_data_put_map(p);
    pn_data_enter(p);
    pn_data_put_symbol(
        p, pn_bytes(strlen("com.microsoft:locked-until-utc"), "com.microsoft:locked-until-utc"));
    pn_data_put_long(p, emu_ms_to_ticks(s->locked_until_ms));
    pn_data_exit(p);
    pn_link_open(pl);
    IB_LOG(IB_LOG_DEBUG, "session_accept", IB_S("entity", l->ent->path), IB_S("session_id", s->id));
}

/* thread: proactor */
void emu_link_attach_entity(emu_broker_t *b, emu_link_t *l, emu_entity_t *ent)
{
    pn_link_t *pl = l->pl;
    l->ent = ent;
    if (pn_link_is_receiver(pl)) {
        /* The client sends to ent. */
        if (ent->kind != EMU_KIND_QUEUE && ent->kind != EMU_KIND_TOPIC) {
            emu_link_refuse(l, "amqp:not-allowed",
                            "Cannot send to a subscription or dead-letter queue.");
            return;
        }
        l->kind = EMU_LINK_SEND_IN;
        pn_terminus_copy(pn_link_source(pl), pn_link_remote_source(pl));
        pn_terminus_copy(pn_link_target(pl), pn_link_remote_target(pl));
        pn_link_set_snd_settle_mode(pl, pn_link_remote_snd_settle_mode(pl));
        pn_link_set_rcv_settle_mode(pl, PN_RCV_FIRST);
        pn_link_set_max_message_size(pl, max_message(b));
        pn_link_open(pl);
        pn_link_flow(pl, 1000);
        return;
    }
    if (ent->kind == EMU_KIND_TOPIC) {
        emu_link_refuse(l, "amqp:not-allowed",
                        "Cannot receive from a topic; receive from a subscription.");
        return;
    }
    if (emu_server_busy(b)) {
        b->ns->server_busy++;
        emu_link_refuse(l, EMU_BUSY_COND, EMU_BUSY_TEXT);
        return;
    }
    l->kind = EMU_LINK_CONSUMER;
    l->peek_lock = pn_link_remote_snd_settle_mode(pl) != PN_SND_SETTLED;
    uint64_t nth = ++b->consumer_attaches, first = (uint64_t)b->faults.stall_link;
    if (first && nth >= first &&
        nth < first + (uint64_t)(b->faults.stall_links > 0 ? b->faults.stall_links : 1)) {
        l->stalled = true; /* fault: takes credit, never gets a transfer */
        b->ns->links_stalled++;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("receive link stalled"), IB_S("entity", ent->path));
    }
    char id[200];
    int sf = session_filter(pl, id, sizeof id);
    if (ent->opts.requires_session) {
        if (sf < 0) {
            emu_link_refuse(l, "amqp:not-allowed",
                            "It is not possible for an entity that requires sessions to create a "
                            "non-sessionful message receiver.");
            return;
        }
        l->wants_session = true;
        bool busy = false;
        int64_t now = emu_now_ms();
        /* Accept-next never passes over a receiver that waits already. */
        emu_session_t *s = sf == 0 && ent->waiting
                               ? NULL
                               : emu_session_acquire(ent, sf == 1 ? id : NULL, l, now, &busy);
        consumers_add(ent, l);
        if (s) {
            open_session_link(l, s);
            emu_conn_poke(b, l->conn);
        } else if (busy) {
            consumers_del(ent, l);
            emu_link_refuse(
                l, "com.microsoft:session-cannot-be-locked",
                "The requested session cannot be accepted. It may be locked by another receiver.");
        } else {
            /* Wait (without answering) for a session to free up, as the service does. */
            l->session_pending = true;
            waiting_add(ent, l);
            emu_link_assign_waiting(b, ent);
            /*
             * Answer a tick (50 ms) early: the SDK runs its own timer with
             * the same value, and the service's answer should win the race.
             */
            uint32_t wait = link_timeout_ms(pl);
            l->session_deadline_ms = now + (wait > 100 ? wait - 50 : wait);
        }
        return;
    }
    if (sf >= 0) {
        emu_link_refuse(
            l, "amqp:not-allowed",
            "The entity does not require sessions; a session receiver cannot be created.");
        return;
    }
    pn_terminus_copy(pn_link_source(pl), pn_link_remote_source(pl));
    pn_terminus_copy(pn_link_target(pl), pn_link_remote_target(pl));
    pn_link_set_snd_settle_mode(pl, pn_link_remote_snd_settle_mode(pl));
    pn_link_set_rcv_settle_mode(pl, pn_link_remote_rcv_settle_mode(pl));
    pn_link_open(pl);
    consumers_add(ent, l);
}

/* thread: proactor */
void emu_link_release(emu_broker_t *b, emu_link_t *l)
{
    (void)b;
    if (l->ent && l->kind == EMU_LINK_CONSUMER) {
        consumers_del(l->ent, l);
        waiting_del(l->ent, l);
        if (l->session && l->session->holder == l)
            emu_session_release(l->ent, l->session, false, emu_now_ms());
    }
    l->session = NULL;
    l->session_pending = false;
    l->kind = EMU_LINK_REFUSED;
    emu_buf_free(&l->rx);
    emu_buf_free(&l->stream);
    l->stream_d = NULL; /* Proton's, freed with the link */
    emu_reply_t *r = l->replies;
    while (r) {
        emu_reply_t *n = r->next;
        free(r);
        r = n;
    }
    l->replies = NULL;
}

/*
 * A delivery larger than this is handed to Proton in pieces of this size as
 * the peer takes it: Proton moves a delivery's whole pending buffer for
 * every frame it sends, so a 100 MiB message to a peer with 16 KiB frames
 * cost hours of CPU when it was handed over at once.
 */
#define EMU_STREAM_CHUNK (256 * 1024)

/* Hands l's large delivery more pieces; false once it is all sent (and advanced). */
static bool stream_more(emu_link_t *l)
{
    while (l->stream_off < l->stream.len && pn_delivery_pending(l->stream_d) < EMU_STREAM_CHUNK) {
        size_t n = l->stream.len - l->stream_off;
        if (n > EMU_STREAM_CHUNK)
            n = EMU_STREAM_CHUNK;
        pn_link_send(l->pl, (const char *)l->stream.data + l->stream_off, n);
        l->stream_off += n;
    }
    if (l->stream_off < l->stream.len)
        return true;
    pn_link_advance(l->pl);
    if (l->stream_settle)
        pn_delivery_settle(l->stream_d);
    l->stream_d = NULL;
    l->stream.len = l->stream_off = 0;
    return false;
}

/* Sends the encoded delivery in b->scratch on d: at once, or in pieces when large. */
static void send_delivery(emu_broker_t *b, emu_link_t *l, pn_delivery_t *d)
{
    if (b->scratch.len <= EMU_STREAM_CHUNK) {
        pn_link_send(l->pl, (const char *)b->scratch.data, b->scratch.len);
        pn_link_advance(l->pl);
        if (!l->peek_lock)
            pn_delivery_settle(d);
        return;
    }
    emu_buf_t t = l->stream; /* the link keeps these bytes, scratch its old buffer */
    l->stream = b->scratch;
    b->scratch = t;
    b->scratch.len = 0;
    l->stream_d = d;
    l->stream_off = 0;
    l->stream_settle = !l->peek_lock;
    stream_more(l);
}

/* Sends one message to consumer l; false when nothing was available. */
static bool deliver_one(emu_broker_t *b, emu_link_t *l, int64_t now)
{
    emu_msg_t *m = emu_entity_take(l->ent, l->session);
    if (!m)
        return false;
    if (l->peek_lock)
        emu_msg_lock(m, l, now);
    emu_delivery_fields_t f = {
        .delivery_count = m->delivery_count,
        .seq = m->seq,
        .enqueued_ms = m->enqueued_ms,
        .locked_until_ms = l->peek_lock ? m->locked_until_ms : 0,
        .message_state = -1,
        .app = m->app,
        .app_len = m->app_len,
    };
    b->scratch.len = 0;
    if (emu_encode_delivery(&b->scratch, m->blob->data, &m->blob->sec, &m->blob->info, &f) != 0) {
        /* Stored bytes were validated at send; only out of memory gets here. */
        if (l->peek_lock)
            emu_ns_settle(b->ns, m->lock, EMU_RELEASE, NULL, NULL, now);
        return false;
    }
    uint8_t tag[16];
    if (l->peek_lock) {
        emu_lock_swap(m->lock, tag);
    } else {
        uint64_t t = ++l->tag_counter;
        memset(tag, 0, sizeof tag);
        memcpy(tag, &t, sizeof t);
    }
    pn_delivery_t *d = pn_delivery(l->pl, pn_dtag((const char *)tag, 16));
    send_delivery(b, l, d);
    emu_idle_touch(l);
    if (!l->peek_lock)
        emu_msg_consume(m);
    l->conn->deliveries++;
    b->deliveries++;
    return true;
}

static void pump_link(emu_broker_t *b, emu_link_t *l, int64_t now)
{
    emu_conn_t *conn = l->conn;
    if (l->session_lost) {
        l->session_lost = false;
        emu_link_refuse(l, "com.microsoft:session-lock-lost", "The session lock has expired.");
        consumers_del(l->ent, l);
        return;
    }
    if (l->session_pending) {
        if (l->session) {
            open_session_link(l, l->session); /* assigned by emu_link_assign_waiting */
        } else if (l->session_deadline_ms <= now) {
            /* No session freed up in time: attach with no source, then detach. */
            consumers_del(l->ent, l);
            waiting_del(l->ent, l);
            l->session_pending = false;
            IB_LOG(IB_LOG_DEBUG, "session_timeout", IB_S("entity", l->ent->path));
            emu_link_refuse(l, "com.microsoft:timeout",
                            "The operation did not complete within the allotted timeout: no "
                            "session is available.");
            return;
        } else {
            return;
        }
    }
    if (!(pn_link_state(l->pl) & PN_LOCAL_ACTIVE))
        return;
    if (l->stream_d && stream_more(l))
        return; /* the rest of a large delivery first */
    if (l->stalled)
        return; /* fault: neither transfers nor a drain's answer */
    int drop_after = b->faults.drop_after;
    while (pn_link_credit(l->pl) > 0 && !conn->closing && !l->stream_d) {
        if (l->ent->opts.requires_session && !l->session)
            break;
        if (emu_server_busy(b)) {
            /*
             * Fault: a receive with credit out is answered with a detach.
             * A session's lock ends with its link (uncounted, as when the
             * client closes it); message locks outlive a plain link.
             */
            b->ns->server_busy++;
            emu_link_release(b, l);
            emu_link_refuse(l, EMU_BUSY_COND, EMU_BUSY_TEXT);
            return;
        }
        if (!deliver_one(b, l, now))
            break;
        if (drop_after > 0 && conn->deliveries >= (uint64_t)drop_after) {
            emu_conn_close(conn, "amqp:connection:forced",
                           "The connection was closed by fault injection (drop-after).");
            return;
        }
    }
    if (pn_link_get_drain(l->pl) && pn_link_credit(l->pl) > 0) {
        if (l->session && b->faults.ignore_drain > 0 && !l->drain_ignored) {
            /* Fault: this drain of an empty session is never answered. */
            b->faults.ignore_drain--;
            l->drain_ignored = true;
            IB_LOG(IB_LOG_INFO, "fault", IB_MSG("drain left unanswered"));
            return;
        }
        if (!l->drain_ignored)
            pn_link_drained(l->pl);
    }
}

/*
 * Whether pump_link would do nothing for l: no session attach to answer or
 * refuse, no large delivery under way, no credit (and so no drain to
 * answer). Most of a session client's many links are so at any time.
 */
static bool nothing_to_pump(const emu_link_t *l)
{
    return !l->session_lost && !l->session_pending && !l->stream_d && pn_link_credit(l->pl) <= 0;
}

/* thread: proactor */
void emu_link_pump_conn(emu_broker_t *b, emu_conn_t *conn)
{
    int64_t now = emu_now_ms();
    emu_link_flush_replies(b, conn, false);
    for (emu_link_t *l = conn->links; l && !conn->closing; l = l->next)
        if (l->kind == EMU_LINK_CONSUMER && l->ent && !nothing_to_pump(l))
            pump_link(b, l, now);
}

static void reply_now(pn_delivery_t *d, bool lost, bool session)
{
    if (lost) {
        pn_condition_t *c = pn_disposition_condition(pn_delivery_local(d));
        if (session) {
            pn_condition_set_name(c, "com.microsoft:session-lock-lost");
            pn_condition_set_description(c, "The session lock has expired or was released; settle "
                                            "the message on a new session receiver.");
        } else {
            pn_condition_set_name(c, "com.microsoft:message-lock-lost");
            pn_condition_set_description(c,
                                         "The lock supplied is invalid. Either the lock expired, "
                                         "or the message has already been removed from the queue.");
        }
        pn_delivery_update(d, PN_REJECTED);
    } else {
        pn_delivery_update(d, PN_ACCEPTED);
    }
    pn_delivery_settle(d);
}

/* thread: proactor */
void emu_link_flush_replies(emu_broker_t *b, emu_conn_t *conn, bool all)
{
    int64_t now = emu_now_ms();
    (void)b;
    for (emu_link_t *l = conn->links; l; l = l->next) {
        while (l->replies && (all || l->replies->due_ms <= now)) {
            emu_reply_t *r = l->replies;
            l->replies = r->next;
            reply_now(r->dlv, r->lost, l->wants_session);
            free(r);
        }
    }
}

/*
 * Applies propertiesToModify (a map from an abandon/defer annotation or a
 * dead-letter error info) to the locked message's application properties.
 */
static void modify_properties(emu_broker_t *b, const uint8_t lock[16], pn_data_t *mods, int64_t now)
{
    emu_msg_t *m = emu_ns_locked(b->ns, lock, now);
    if (!m || !mods)
        return;
    pn_data_rewind(mods);
    if (!pn_data_next(mods) || pn_data_type(mods) != PN_MAP || pn_data_get_map(mods) == 0)
        return;
    char enc[65536];
    pn_data_rewind(mods);
    ssize_t n = pn_data_encode(mods, enc, sizeof enc);
    if (n <= 0)
        return;
    const uint8_t *app = m->app ? m->app : m->blob->data + m->blob->sec.app.off;
    size_t app_len = m->app ? m->app_len : m->blob->sec.app.len;
    emu_buf_t out = {0};
    if (emu_encode_app_merge(&out, app, app_len, (const uint8_t *)enc, (size_t)n) == 0)
        emu_msg_set_app(m, out.data, out.len);
    emu_buf_free(&out);
}

/* Reads the dead-letter reason/description from a rejected outcome's info map. */
static void dead_letter_info(pn_delivery_t *d, char *reason, size_t rl, char *desc, size_t dl)
{
    reason[0] = desc[0] = '\0';
    pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
    pn_data_t *info = c ? pn_condition_info(c) : NULL;
    const char *keys[2] = {"DeadLetterReason", "DeadLetterErrorDescription"};
    char *outs[2] = {reason, desc};
    size_t sizes[2] = {rl, dl};
    for (int i = 0; i < 2; i++) {
        if (info && emu_map_find(info, keys[i])) {
            pn_type_t t = pn_data_type(info);
            if (t == PN_STRING || t == PN_SYMBOL) {
                pn_bytes_t s = t == PN_STRING ? pn_data_get_string(info) : pn_data_get_symbol(info);
                snprintf(outs[i], sizes[i], "%.*s", (int)s.size, s.start);
            }
        }
    }
}

/* thread: proactor */
void emu_link_on_settle(emu_broker_t *b, emu_link_t *l, pn_delivery_t *d)
{
    if (!pn_delivery_updated(d))
        return;
    uint64_t state = pn_delivery_remote_state(d);
    bool remote_settled = pn_delivery_settled(d);
    if (!state && !remote_settled)
        return;
    pn_delivery_clear(d);
    emu_idle_touch(l);
    /* A repeated disposition while a delayed reply is pending: that reply answers both. */
    for (emu_reply_t *r = l->replies; r; r = r->next)
        if (r->dlv == d)
            return;
    if (state == PN_REJECTED && l->peek_lock && b->faults.ignore_dead_letter > 0) {
        /* Fault: as if lost on its way; the message stays locked as if never settled. */
        b->faults.ignore_dead_letter--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("dead letter ignored"));
        return;
    }
    if (l->peek_lock && !remote_settled && emu_server_busy(b)) {
        /* Fault: refused, not applied; the message stays locked. */
        b->ns->server_busy++;
        pn_condition_t *c = pn_disposition_condition(pn_delivery_local(d));
        pn_condition_set_name(c, EMU_BUSY_COND);
        pn_condition_set_description(c, EMU_BUSY_TEXT);
        pn_delivery_update(d, PN_REJECTED);
        pn_delivery_settle(d);
        return;
    }
    pn_delivery_tag_t tag = pn_delivery_tag(d);
    int64_t now = emu_now_ms();
    int rc = -1;
    if (tag.size == 16 && l->peek_lock) {
        uint8_t lock[16];
        emu_lock_swap((const uint8_t *)tag.start, lock);
        char reason[256], desc[1024];
        switch (state) {
        case PN_ACCEPTED:
            rc = emu_ns_settle(b->ns, lock, EMU_COMPLETE, NULL, NULL, now);
            break;
        case PN_MODIFIED:
            modify_properties(b, lock, pn_disposition_annotations(pn_delivery_remote(d)), now);
            rc = emu_ns_settle(b->ns, lock,
                               pn_disposition_is_undeliverable(pn_delivery_remote(d)) ? EMU_DEFER
                                                                                      : EMU_ABANDON,
                               NULL, NULL, now);
            break;
        case PN_REJECTED: {
            pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
            modify_properties(b, lock, c ? pn_condition_info(c) : NULL, now);
            dead_letter_info(d, reason, sizeof reason, desc, sizeof desc);
            rc = emu_ns_settle(b->ns, lock, EMU_DEAD_LETTER, reason[0] ? reason : NULL,
                               desc[0] ? desc : NULL, now);
            break;
        }
        case PN_RELEASED:
        default:
            rc = emu_ns_settle(b->ns, lock, EMU_RELEASE, NULL, NULL, now);
            break;
        }
    } else {
        rc = 0; /* receive-and-delete deliveries are already gone */
    }
    if (remote_settled) {
        pn_delivery_settle(d);
        return;
    }
    if (b->faults.drop_settle_reply > 0) {
        b->faults.drop_settle_reply--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("settlement reply dropped"));
        return;
    }
    if (b->faults.settle_delay_ms > 0) {
        emu_reply_t *r = calloc(1, sizeof *r);
        if (r) {
            r->dlv = d;
            r->lost = rc != 0;
            r->due_ms = now + b->faults.settle_delay_ms;
            emu_reply_t **pp = &l->replies;
            while (*pp)
                pp = &(*pp)->next;
            *pp = r;
            return;
        }
    }
    reply_now(d, rc != 0, l->wants_session);
}

static void reject(pn_delivery_t *d, const char *cond, const char *desc)
{
    pn_condition_t *c = pn_disposition_condition(pn_delivery_local(d));
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_delivery_update(d, PN_REJECTED);
    pn_delivery_settle(d);
}

/* thread: proactor */
void emu_link_on_incoming(emu_broker_t *b, emu_link_t *l, pn_delivery_t *d)
{
    if (!pn_delivery_readable(d))
        return;
    pn_link_t *pl = l->pl;
    size_t pending;
    bool too_big = false;
    while ((pending = pn_delivery_pending(d)) > 0) {
        if (l->rx.len + pending > max_message(b) * 4) {
            too_big = true;
            char sink[4096];
            while (pn_link_recv(pl, sink, sizeof sink) > 0) {
            }
            break;
        }
        if (emu_buf_reserve(&l->rx, pending) != 0)
            break;
        ssize_t n = pn_link_recv(pl, (char *)l->rx.data + l->rx.len, pending);
        if (n <= 0)
            break;
        l->rx.len += (size_t)n;
    }
    if (pn_delivery_partial(d) && !pn_delivery_aborted(d))
        return;
    if (pn_delivery_aborted(d)) {
        l->rx.len = 0;
        pn_delivery_settle(d);
        return;
    }
    int64_t now = emu_now_ms();
    emu_idle_touch(l);
    if (too_big || l->rx.len > max_message(b)) {
        char why[96];
        snprintf(why, sizeof(why), "The message is larger than the %zu bytes sbemu allows.",
                 max_message(b));
        reject(d, "amqp:link:message-size-exceeded", why);
    } else if (l->kind == EMU_LINK_SEND_IN && emu_server_busy(b)) {
        b->ns->server_busy++;
        reject(d, EMU_BUSY_COND, EMU_BUSY_TEXT);
    } else if (l->kind == EMU_LINK_SEND_IN) {
        emu_send_t rc = emu_entity_send(l->ent, l->rx.data, l->rx.len, now);
        if (rc == EMU_SEND_OK) {
            pn_delivery_update(d, PN_ACCEPTED);
            pn_delivery_settle(d);
        } else {
            reject(d, rc == EMU_SEND_MALFORMED ? "amqp:decode-error" : "amqp:internal-error",
                   rc == EMU_SEND_MALFORMED ? "The message could not be decoded."
                                            : "The message could not be stored.");
        }
    } else {
        pn_message_t *req = pn_message();
        if (pn_message_decode(req, (const char *)l->rx.data, l->rx.len) != 0) {
            reject(d, "amqp:decode-error", "The request could not be decoded.");
        } else {
            pn_delivery_update(d, PN_ACCEPTED);
            pn_delivery_settle(d);
            if (l->kind == EMU_LINK_CBS_IN)
                emu_cbs_request(b, l, req);
            else if (l->kind == EMU_LINK_MGMT_IN)
                emu_mgmt_request(b, l, req);
        }
        pn_message_free(req);
    }
    l->rx.len = 0;
    if (l->rx.cap > 65536)
        emu_buf_free(&l->rx);
    if (pn_link_credit(pl) < 500)
        pn_link_flow(pl, 1000 - pn_link_credit(pl));
}
