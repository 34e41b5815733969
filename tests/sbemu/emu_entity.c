/*
 * emu_entity.c - the message state machine: lists per state, locks,
 * settlement outcomes, dead-lettering, expiry.
 */
#include "emu_entity_int.h"

#include <stdlib.h>
#include <string.h>

/* Keeps a session's count of available messages in step with the avail list. */
static void avail_count(emu_list_t *l, emu_msg_t *m, int delta)
{
    if (m->session && l == &m->entity->avail)
        m->session->n_avail = (size_t)((long long)m->session->n_avail + delta);
}

static void list_push(emu_list_t *l, emu_msg_t *m)
{
    avail_count(l, m, 1);
    m->next = NULL;
    m->prev = l->tail;
    if (l->tail)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
    l->count++;
}

/* Inserts in sequence order; abandoned messages usually belong near the head. */
static void list_insert_ordered(emu_list_t *l, emu_msg_t *m)
{
    emu_msg_t *at = l->head;
    while (at && at->seq < m->seq)
        at = at->next;
    if (!at) {
        list_push(l, m);
        return;
    }
    avail_count(l, m, 1);
    m->next = at;
    m->prev = at->prev;
    if (at->prev)
        at->prev->next = m;
    else
        l->head = m;
    at->prev = m;
    l->count++;
}

static void list_unlink(emu_list_t *l, emu_msg_t *m)
{
    avail_count(l, m, -1);
    if (m->prev)
        m->prev->next = m->next;
    else
        l->head = m->next;
    if (m->next)
        m->next->prev = m->prev;
    else
        l->tail = m->prev;
    m->prev = m->next = NULL;
    l->count--;
}

static emu_list_t *state_list(emu_entity_t *ent, emu_msg_state_t st)
{
    switch (st) {
    case EMU_MSG_ACTIVE:
        return &ent->avail;
    case EMU_MSG_LOCKED:
        return &ent->locked;
    case EMU_MSG_DEFERRED:
        return &ent->deferred;
    case EMU_MSG_SCHEDULED:
        break;
    }
    return &ent->scheduled;
}

/*
 * The one transition function: moves msg from its current list into the
 * list of state st (ordered for the avail list) and drops its lock.
 */
static void msg_set_state(emu_msg_t *msg, emu_msg_state_t st)
{
    emu_entity_t *ent = msg->entity;
    list_unlink(state_list(ent, msg->state), msg);
    if (msg->state == EMU_MSG_LOCKED) {
        emu_map_del(ent->ns->locks, msg->lock, 16);
        msg->holder = NULL;
        msg->locked_until_ms = msg->lock_expiry_ms = 0;
    }
    msg->state = st;
    if (st == EMU_MSG_ACTIVE)
        list_insert_ordered(&ent->avail, msg);
    else
        list_push(state_list(ent, st), msg);
}

static void blob_unref(emu_blob_t *b)
{
    if (b && --b->refs == 0)
        free(b);
}

/* Unlinks and frees a message in any state. */
static void msg_free(emu_msg_t *msg)
{
    emu_entity_t *ent = msg->entity;
    list_unlink(state_list(ent, msg->state), msg);
    if (msg->state == EMU_MSG_LOCKED)
        emu_map_del(ent->ns->locks, msg->lock, 16);
    if (msg->session)
        emu_session_unref_msg(ent, msg->session);
    blob_unref(msg->blob);
    free(msg->app);
    free(msg);
}

/* thread: proactor. Frees every message of ent (namespace teardown). */
void emu_entity_clear(emu_entity_t *ent)
{
    emu_list_t *lists[] = {&ent->avail, &ent->locked, &ent->deferred, &ent->scheduled};
    for (size_t i = 0; i < 4; i++)
        while (lists[i]->head)
            msg_free(lists[i]->head);
}

/* thread: proactor */
void emu_stats_reason(emu_stats_t *st, const char *reason)
{
    if (!reason || !*reason)
        reason = "(none)";
    for (int i = 0; i < EMU_REASONS_MAX; i++) {
        if (st->by_reason[i].n == 0 && !st->by_reason[i].reason[0]) {
            size_t l = strlen(reason);
            if (l >= sizeof st->by_reason[i].reason)
                l = sizeof st->by_reason[i].reason - 1;
            memcpy(st->by_reason[i].reason, reason, l);
            st->by_reason[i].reason[l] = '\0';
        }
        if (strncmp(st->by_reason[i].reason, reason, sizeof st->by_reason[i].reason - 1) == 0 ||
            i == EMU_REASONS_MAX - 1) {
            if (i == EMU_REASONS_MAX - 1 && strcmp(st->by_reason[i].reason, reason) != 0)
                strcpy(st->by_reason[i].reason, "other");
            st->by_reason[i].n++;
            return;
        }
    }
}

/* thread: proactor */
emu_msg_t *emu_entity_take(emu_entity_t *ent, emu_session_t *s)
{
    emu_msg_t *m = ent->avail.head;
    if (s && s->n_avail == 0)
        return NULL; /* a drain on an empty session costs no walk */
    if (s)
        while (m && m->session != s)
            m = m->next;
    if (!m)
        return NULL;
    list_unlink(&ent->avail, m);
    /* Parked in the locked list until the caller locks or consumes it. */
    m->state = EMU_MSG_LOCKED;
    list_push(&ent->locked, m);
    return m;
}

/* thread: proactor */
void emu_msg_lock(emu_msg_t *msg, void *holder, int64_t now)
{
    emu_entity_t *ent = msg->entity;
    emu_uuid_new(msg->lock);
    msg->holder = holder;
    if (msg->session && msg->session->holder)
        msg->locked_until_ms = msg->session->locked_until_ms;
    else
        msg->locked_until_ms = now + (int64_t)ent->opts.lock_duration_s * 1000;
    msg->lock_expiry_ms = msg->locked_until_ms - ent->ns->lock_early_ms;
    emu_map_put(ent->ns->locks, msg->lock, 16, msg);
    ent->st.delivered++;
}

/* thread: proactor */
void emu_msg_consume(emu_msg_t *msg)
{
    msg->entity->st.delivered++;
    msg->entity->st.completed++;
    msg_free(msg);
}

/* Creates the DLQ copy of msg (same body, sequence number, delivery count). */
static void dlq_store(emu_msg_t *msg, const char *reason, const char *description, int64_t now)
{
    emu_entity_t *ent = msg->entity;
    emu_entity_t *dlq = ent->dlq;
    emu_msg_t *d = calloc(1, sizeof *d);
    if (!d)
        return;
    emu_buf_t app = {0};
    const uint8_t *src = msg->app ? msg->app : msg->blob->data + msg->blob->sec.app.off;
    size_t srclen = msg->app ? msg->app_len : msg->blob->sec.app.len;
    if (emu_encode_dead_letter_props(&app, src, srclen, reason, description) != 0) {
        emu_buf_free(&app);
        free(d);
        return;
    }
    d->entity = dlq;
    d->blob = msg->blob;
    d->blob->refs++;
    d->seq = msg->seq;
    d->enqueued_ms = msg->enqueued_ms;
    d->delivery_count = msg->delivery_count;
    d->app = app.data;
    d->app_len = (uint32_t)app.len;
    d->state = EMU_MSG_ACTIVE;
    list_insert_ordered(&dlq->avail, d);
    dlq->st.sent++;
    (void)now;
    ent->st.dead_lettered++;
    emu_stats_reason(&ent->st, reason);
    if (ent->ns->hooks.ready)
        ent->ns->hooks.ready(ent->ns->hooks.ctx, dlq);
}

/* thread: proactor */
void emu_msg_dead_letter(emu_msg_t *msg, const char *reason, const char *description, int64_t now)
{
    if (msg->entity->dlq)
        dlq_store(msg, reason, description, now);
    msg_free(msg);
}

static void notify(emu_entity_t *ent)
{
    if (ent->ns->hooks.ready)
        ent->ns->hooks.ready(ent->ns->hooks.ctx, ent);
}

/*
 * A delivery failed (abandon, lock expiry): count it, then dead-letter at
 * the limit or make the message available again.
 */
static void msg_failed(emu_msg_t *msg, int64_t now)
{
    emu_entity_t *ent = msg->entity;
    msg->delivery_count++;
    int max = ent->opts.max_delivery_count;
    if (max > 0 && msg->delivery_count >= (uint32_t)max) {
        emu_msg_dead_letter(msg, "MaxDeliveryCountExceeded",
                            "Message could not be consumed after maximum delivery attempts.", now);
        return;
    }
    msg_set_state(msg, EMU_MSG_ACTIVE);
    notify(ent);
}

/* thread: proactor */
emu_msg_t *emu_ns_locked(emu_ns_t *ns, const uint8_t lock[16], int64_t now)
{
    emu_msg_t *m = emu_map_get(ns->locks, lock, 16);
    if (!m || m->lock_expiry_ms <= now)
        return NULL;
    if (m->session && m->session->holder == NULL)
        return NULL;
    return m;
}

/* thread: proactor */
int emu_ns_settle(emu_ns_t *ns, const uint8_t lock[16], emu_outcome_t outcome, const char *reason,
                  const char *description, int64_t now)
{
    emu_msg_t *m = emu_ns_locked(ns, lock, now);
    if (!m)
        return -1;
    emu_entity_t *ent = m->entity;
    switch (outcome) {
    case EMU_COMPLETE:
        ent->st.completed++;
        msg_free(m);
        break;
    case EMU_ABANDON:
        ent->st.abandoned++;
        msg_failed(m, now);
        break;
    case EMU_DEAD_LETTER:
        if (ent->kind == EMU_KIND_DLQ) {
            /* A message cannot leave a DLQ by dead-lettering: treat as abandon. */
            ent->st.abandoned++;
            msg_failed(m, now);
        } else {
            emu_msg_dead_letter(m, reason, description, now);
        }
        break;
    case EMU_DEFER:
        ent->st.deferred++;
        msg_set_state(m, EMU_MSG_DEFERRED);
        break;
    case EMU_RELEASE:
        ent->st.released++;
        msg_set_state(m, EMU_MSG_ACTIVE);
        notify(ent);
        break;
    }
    return 0;
}

/* thread: proactor */
int emu_ns_renew(emu_ns_t *ns, const uint8_t lock[16], int64_t now, int64_t *until_ms)
{
    emu_msg_t *m = emu_ns_locked(ns, lock, now);
    if (!m)
        return -1;
    if (m->session)
        m->locked_until_ms = m->session->locked_until_ms;
    else
        m->locked_until_ms = now + (int64_t)m->entity->opts.lock_duration_s * 1000;
    m->lock_expiry_ms = m->locked_until_ms - ns->lock_early_ms;
    *until_ms = m->locked_until_ms;
    return 0;
}

static void expire_msg(emu_msg_t *msg, int64_t now)
{
    emu_entity_t *ent = msg->entity;
    ent->st.expired++;
    if (ent->opts.dead_letter_on_expiry && msg->state != EMU_MSG_DEFERRED)
        emu_msg_dead_letter(msg, "TTLExpiredException",
                            "The message expired and was dead lettered.", now);
    else
        msg_free(msg);
}

/* thread: proactor */
void emu_entity_tick(emu_entity_t *ent, int64_t now, bool ttl_scan)
{
    emu_msg_t *m, *n;
    bool woke = false;
    for (m = ent->locked.head; m; m = n) {
        n = m->next;
        /* Session messages end with their session lock, handled below. */
        if (!m->session && m->lock_expiry_ms && m->lock_expiry_ms <= now)
            msg_failed(m, now);
    }
    for (m = ent->scheduled.head; m; m = n) {
        n = m->next;
        if (m->visible_ms <= now) {
            msg_set_state(m, EMU_MSG_ACTIVE);
            woke = true;
        }
    }
    if (ttl_scan && ent->kind != EMU_KIND_DLQ) {
        for (m = ent->avail.head; m; m = n) {
            n = m->next;
            if (m->expires_ms && m->expires_ms <= now)
                expire_msg(m, now);
        }
        for (m = ent->deferred.head; m; m = n) {
            n = m->next;
            if (m->expires_ms && m->expires_ms <= now)
                expire_msg(m, now);
        }
    }
    if (woke)
        notify(ent);
}

/* Used by sessions: return msg (locked by the session holder) to active. */
void emu_msg_unlock(emu_msg_t *msg, bool count_delivery, int64_t now)
{
    if (count_delivery) {
        msg_failed(msg, now);
    } else {
        msg_set_state(msg, EMU_MSG_ACTIVE);
    }
}

/* Stores a new message of ent; takes a reference on blob. */
int emu_entity_enqueue(emu_entity_t *ent, emu_blob_t *blob, int64_t now)
{
    emu_msg_t *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->entity = ent;
    m->blob = blob;
    blob->refs++;
    m->seq = ++ent->next_seq;
    m->enqueued_ms = now;
    int64_t ttl = blob->info.has_ttl && blob->info.ttl_ms ? (int64_t)blob->info.ttl_ms : 0;
    int64_t dttl = (int64_t)ent->opts.default_ttl_s * 1000;
    if (dttl && (!ttl || dttl < ttl))
        ttl = dttl;
    int64_t base = blob->info.scheduled_ms > now ? blob->info.scheduled_ms : now;
    m->expires_ms = ttl ? base + ttl : 0;
    ent->st.sent++;
    if (ent->opts.requires_session) {
        if (!blob->info.group_id[0]) {
            m->state = EMU_MSG_ACTIVE;
            list_push(&ent->avail, m);
            emu_msg_dead_letter(m, "SessionIdIsNull", "Session ID is null.", now);
            return 0;
        }
        m->session = emu_session_get(ent, blob->info.group_id, true);
        if (!m->session) {
            blob_unref(blob);
            free(m);
            return -1;
        }
        m->session->n_msgs++;
    }
    if (blob->info.scheduled_ms > now) {
        m->visible_ms = blob->info.scheduled_ms;
        m->state = EMU_MSG_SCHEDULED;
        list_push(&ent->scheduled, m);
        return 0;
    }
    m->state = EMU_MSG_ACTIVE;
    list_push(&ent->avail, m);
    notify(ent);
    return 0;
}

/* thread: proactor */
emu_msg_t *emu_entity_deferred(emu_entity_t *ent, int64_t seq)
{
    for (emu_msg_t *m = ent->deferred.head; m; m = m->next)
        if (m->seq == seq)
            return m;
    return NULL;
}

/* Moves a deferred message into the locked state for a by-sequence receive. */
void emu_msg_undefer_lock(emu_msg_t *msg, int64_t now)
{
    emu_entity_t *ent = msg->entity;
    list_unlink(&ent->deferred, msg);
    msg->state = EMU_MSG_LOCKED;
    list_push(&ent->locked, msg);
    emu_msg_lock(msg, NULL, now);
}

static int cmp_seq(const void *a, const void *b)
{
    const emu_msg_t *x = *(const emu_msg_t *const *)a, *y = *(const emu_msg_t *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* thread: proactor */
size_t emu_entity_peek(emu_entity_t *ent, int64_t from, size_t max, const char *sid,
                       void (*fn)(void *ctx, const emu_msg_t *msg), void *ctx)
{
    emu_list_t *lists[] = {&ent->avail, &ent->locked, &ent->deferred, &ent->scheduled};
    size_t total = 0;
    for (size_t i = 0; i < 4; i++)
        total += lists[i]->count;
    if (!total || !max)
        return 0;
    emu_msg_t **v = malloc(total * sizeof *v);
    if (!v)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < 4; i++)
        for (emu_msg_t *m = lists[i]->head; m; m = m->next)
            if (m->seq >= from && (!sid || (m->session && strcmp(m->session->id, sid) == 0)))
                v[n++] = m;
    qsort(v, n, sizeof *v, cmp_seq);
    if (n > max)
        n = max;
    for (size_t i = 0; i < n; i++)
        fn(ctx, v[i]);
    free(v);
    return n;
}

/* thread: proactor */
int emu_entity_cancel_scheduled(emu_entity_t *ent, int64_t seq)
{
    if (ent->kind == EMU_KIND_TOPIC) {
        int rc = -1;
        for (size_t i = 0; i < ent->nsubs; i++)
            if (emu_entity_cancel_scheduled(ent->subs[i], seq) == 0)
                rc = 0;
        return rc;
    }
    for (emu_msg_t *m = ent->scheduled.head; m; m = m->next)
        if (m->seq == seq) {
            msg_free(m);
            return 0;
        }
    return -1;
}

/* thread: proactor */
int emu_msg_set_app(emu_msg_t *msg, const uint8_t *app, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return -1;
    memcpy(copy, app, len);
    free(msg->app);
    msg->app = copy;
    msg->app_len = (uint32_t)len;
    return 0;
}
