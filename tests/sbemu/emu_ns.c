/*
 * emu_ns.c - the namespace: entity creation and lookup, sending (batches,
 * duplicate detection, topic fan-out), sessions and the periodic tick.
 */
#include "emu_entity_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct emu_dedup {
    struct emu_dedup *next;
    int64_t at_ms;
    size_t klen;
    uint8_t key[];
} emu_dedup_t;

/* thread: any */
void emu_entity_opts_default(emu_entity_opts_t *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->lock_duration_s = 60;
    opts->max_delivery_count = 10;
}

/* thread: proactor */
emu_ns_t *emu_ns_new(void)
{
    emu_ns_t *ns = calloc(1, sizeof *ns);
    if (!ns)
        return NULL;
    ns->locks = emu_map_new();
    if (!ns->locks) {
        free(ns);
        return NULL;
    }
    return ns;
}

static void session_free(emu_session_t *s)
{
    free(s->id);
    free(s->state);
    free(s);
}

static void session_free_cb(void *ctx, void *value)
{
    (void)ctx;
    session_free(value);
}

static void entity_free(emu_entity_t *ent)
{
    emu_entity_clear(ent);
    if (ent->sessions) {
        emu_map_each(ent->sessions, session_free_cb, NULL);
        emu_map_free(ent->sessions);
    }
    emu_dedup_t *d = ent->dedup_head;
    while (d) {
        emu_dedup_t *n = d->next;
        free(d);
        d = n;
    }
    emu_map_free(ent->dedup);
    free(ent->subs);
    free(ent->path);
    free(ent);
}

/* thread: proactor */
void emu_ns_free(emu_ns_t *ns)
{
    if (!ns)
        return;
    for (size_t i = 0; i < ns->n; i++)
        entity_free(ns->ents[i]);
    free(ns->ents);
    emu_map_free(ns->locks);
    free(ns);
}

static emu_entity_t *entity_new(emu_ns_t *ns, const char *path, emu_kind_t kind,
                                const emu_entity_opts_t *opts)
{
    if (emu_ns_find(ns, path, strlen(path)))
        return NULL;
    emu_entity_t *ent = calloc(1, sizeof *ent);
    emu_entity_t **v = realloc(ns->ents, (ns->n + 1) * sizeof *v);
    if (!ent || !v) {
        free(ent);
        if (v)
            ns->ents = v;
        return NULL;
    }
    ns->ents = v;
    ent->path = strdup(path);
    ent->kind = kind;
    ent->opts = *opts;
    ent->ns = ns;
    if (opts->requires_session)
        ent->sessions = emu_map_new();
    if (opts->dup_window_s > 0)
        ent->dedup = emu_map_new();
    ns->ents[ns->n++] = ent;
    return ent;
}

static emu_entity_t *with_dlq(emu_ns_t *ns, emu_entity_t *ent)
{
    if (!ent)
        return NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/$DeadLetterQueue", ent->path);
    emu_entity_opts_t o = ent->opts;
    o.max_delivery_count = 0;
    o.requires_session = false;
    o.dup_window_s = 0;
    o.default_ttl_s = 0;
    ent->dlq = entity_new(ns, path, EMU_KIND_DLQ, &o);
    if (ent->dlq)
        ent->dlq->parent = ent;
    return ent;
}

/* thread: proactor */
emu_entity_t *emu_ns_add_queue(emu_ns_t *ns, const char *name, const emu_entity_opts_t *opts)
{
    return with_dlq(ns, entity_new(ns, name, EMU_KIND_QUEUE, opts));
}

/* thread: proactor */
emu_entity_t *emu_ns_add_topic(emu_ns_t *ns, const char *name, const emu_entity_opts_t *opts)
{
    return entity_new(ns, name, EMU_KIND_TOPIC, opts);
}

/* thread: proactor */
emu_entity_t *emu_ns_add_subscription(emu_ns_t *ns, emu_entity_t *topic, const char *name,
                                      const emu_entity_opts_t *opts)
{
    char path[512];
    snprintf(path, sizeof path, "%s/Subscriptions/%s", topic->path, name);
    emu_entity_t **v = realloc(topic->subs, (topic->nsubs + 1) * sizeof *v);
    if (!v)
        return NULL;
    topic->subs = v;
    emu_entity_t *sub = with_dlq(ns, entity_new(ns, path, EMU_KIND_SUBSCRIPTION, opts));
    if (sub) {
        sub->parent = topic;
        topic->subs[topic->nsubs++] = sub;
    }
    return sub;
}

/* thread: proactor */
emu_entity_t *emu_ns_find(emu_ns_t *ns, const char *address, size_t len)
{
    if (len > 0 && address[0] == '/')
        address++, len--;
    for (size_t i = 0; i < ns->n; i++)
        if (emu_ieq(ns->ents[i]->path, strlen(ns->ents[i]->path), address, len))
            return ns->ents[i];
    return NULL;
}

/* Drops dedup entries older than the window. */
static void dedup_purge(emu_entity_t *ent, int64_t now)
{
    int64_t horizon = now - (int64_t)ent->opts.dup_window_s * 1000;
    emu_dedup_t *d = ent->dedup_head;
    while (d && d->at_ms <= horizon) {
        emu_dedup_t *n = d->next;
        if (emu_map_get(ent->dedup, d->key, d->klen) == d)
            emu_map_del(ent->dedup, d->key, d->klen);
        free(d);
        d = n;
    }
    ent->dedup_head = d;
    if (!d)
        ent->dedup_tail = NULL;
}

/* True when the message id was seen inside the window; records it otherwise. */
static bool dedup_seen(emu_entity_t *ent, const uint8_t *key, size_t klen, int64_t now)
{
    dedup_purge(ent, now);
    if (emu_map_get(ent->dedup, key, klen))
        return true;
    emu_dedup_t *d = malloc(sizeof *d + klen);
    if (!d)
        return false;
    d->next = NULL;
    d->at_ms = now;
    d->klen = klen;
    memcpy(d->key, key, klen);
    if (emu_map_put(ent->dedup, key, klen, d) != 0) {
        free(d);
        return false;
    }
    if (ent->dedup_tail)
        ((emu_dedup_t *)ent->dedup_tail)->next = d;
    else
        ent->dedup_head = d;
    ent->dedup_tail = d;
    return false;
}

static emu_send_t send_stored(emu_entity_t *ent, const uint8_t *bytes, size_t len, int64_t now);

/* Stores one (non-batch) encoded message. */
static emu_send_t send_one(emu_entity_t *ent, const uint8_t *bytes, size_t len, int64_t now)
{
    emu_sections_t sec;
    emu_msg_info_t info;
    if (emu_msg_split(bytes, len, &sec) != 0 || emu_msg_info(bytes, &sec, &info) != 0)
        return EMU_SEND_MALFORMED;
    if (!info.message_id.len) {
        /* Service Bus gives every message an id; the SDKs rely on one. */
        uint8_t u[16];
        char id[37], hex[33];
        emu_uuid_new(u);
        emu_uuid_str(u, id);
        size_t k = 0;
        for (size_t i = 0; id[i]; i++)
            if (id[i] != '-')
                hex[k++] = id[i];
        hex[k] = '\0';
        emu_buf_t withid = {0};
        if (emu_msg_set_id(bytes, len, &sec, hex, &withid) != 0) {
            emu_buf_free(&withid);
            return EMU_SEND_MALFORMED;
        }
        emu_send_t rc =
            withid.len ? send_stored(ent, withid.data, withid.len, now) : EMU_SEND_NOMEM;
        emu_buf_free(&withid);
        return rc;
    }
    return send_stored(ent, bytes, len, now);
}

static emu_send_t send_stored(emu_entity_t *ent, const uint8_t *bytes, size_t len, int64_t now)
{
    emu_blob_t *b = malloc(sizeof *b + len);
    if (!b)
        return EMU_SEND_NOMEM;
    memcpy(b->data, bytes, len);
    b->len = (uint32_t)len;
    b->refs = 1;
    if (emu_msg_split(b->data, len, &b->sec) != 0 ||
        emu_msg_info(b->data, &b->sec, &b->info) != 0) {
        free(b);
        return EMU_SEND_MALFORMED;
    }
    /* Delivery annotations are hop-by-hop: never stored. */
    if (ent->dedup && b->info.message_id.len &&
        dedup_seen(ent, b->data + b->info.message_id.off, b->info.message_id.len, now)) {
        ent->st.duplicate_detected++;
        free(b);
        return EMU_SEND_OK;
    }
    emu_send_t rc = EMU_SEND_OK;
    if (ent->kind == EMU_KIND_TOPIC) {
        ent->st.sent++;
        for (size_t i = 0; i < ent->nsubs; i++)
            if (emu_entity_enqueue(ent->subs[i], b, now) != 0)
                rc = EMU_SEND_NOMEM;
    } else if (emu_entity_enqueue(ent, b, now) != 0) {
        rc = EMU_SEND_NOMEM;
    }
    if (--b->refs == 0)
        free(b);
    return rc;
}

typedef struct batch_ctx {
    emu_entity_t *ent;
    int64_t now;
    emu_send_t rc;
} batch_ctx_t;

static int batch_item(void *ctx, const uint8_t *item, size_t len)
{
    batch_ctx_t *bc = ctx;
    emu_send_t rc = send_one(bc->ent, item, len, bc->now);
    if (rc != EMU_SEND_OK)
        bc->rc = rc;
    return 0;
}

/* thread: proactor */
emu_send_t emu_entity_send(emu_entity_t *ent, const uint8_t *bytes, size_t len, int64_t now)
{
    if (ent->kind != EMU_KIND_QUEUE && ent->kind != EMU_KIND_TOPIC)
        return EMU_SEND_NOT_ALLOWED;
    emu_sections_t s;
    if (emu_msg_split(bytes, len, &s) != 0)
        return EMU_SEND_MALFORMED;
    if (emu_msg_is_batch(bytes, &s)) {
        batch_ctx_t bc = {ent, now, EMU_SEND_OK};
        emu_msg_each_data(bytes, &s, batch_item, &bc);
        return bc.rc;
    }
    return send_one(ent, bytes, len, now);
}

/* thread: proactor */
emu_session_t *emu_session_get(emu_entity_t *ent, const char *id, bool create)
{
    if (!ent->sessions)
        return NULL;
    emu_session_t *s = emu_map_get(ent->sessions, id, strlen(id));
    if (s || !create)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->id = strdup(id);
    if (!s->id || emu_map_put(ent->sessions, id, strlen(id), s) != 0) {
        session_free(s);
        return NULL;
    }
    return s;
}

/* Frees a session nobody needs any more (no holder, messages or state). */
static void session_gc(emu_entity_t *ent, emu_session_t *s)
{
    if (s->holder || s->n_msgs || s->has_state)
        return;
    emu_map_del(ent->sessions, s->id, strlen(s->id));
    session_free(s);
}

/* thread: proactor. Called when a message of session s is freed. */
void emu_session_unref_msg(emu_entity_t *ent, emu_session_t *s)
{
    s->n_msgs--;
    session_gc(ent, s);
}

/* thread: proactor */
emu_session_t *emu_session_acquire(emu_entity_t *ent, const char *id, void *holder, int64_t now,
                                   bool *busy)
{
    *busy = false;
    emu_session_t *s = NULL;
    if (!ent->sessions)
        return NULL;
    if (id) {
        s = emu_session_get(ent, id, true);
        if (!s)
            return NULL;
        if (s->holder) {
            *busy = true;
            return NULL;
        }
    } else {
        for (emu_msg_t *m = ent->avail.head; m; m = m->next)
            if (m->session && !m->session->holder) {
                s = m->session;
                break;
            }
        if (!s)
            return NULL;
    }
    s->holder = holder;
    s->held_prev = NULL;
    s->held_next = ent->held;
    if (ent->held)
        ent->held->held_prev = s;
    ent->held = s;
    ent->n_held++;
    s->locked_until_ms = now + (int64_t)ent->opts.lock_duration_s * 1000;
    s->lock_expiry_ms = s->locked_until_ms - ent->ns->lock_early_ms;
    return s;
}

/* thread: proactor */
void emu_session_release(emu_entity_t *ent, emu_session_t *s, bool count_delivery, int64_t now)
{
    void *holder = s->holder;
    if (holder) {
        if (s->held_prev)
            s->held_prev->held_next = s->held_next;
        else
            ent->held = s->held_next;
        if (s->held_next)
            s->held_next->held_prev = s->held_prev;
        s->held_prev = s->held_next = NULL;
        ent->n_held--;
    }
    s->holder = NULL;
    s->locked_until_ms = s->lock_expiry_ms = 0;
    emu_msg_t *m = ent->locked.head, *n;
    /* A guard reference keeps s alive while its messages move or die. */
    s->n_msgs++;
    for (; m; m = n) {
        n = m->next;
        if (m->session == s && m->lock_expiry_ms)
            emu_msg_unlock(m, count_delivery, now);
    }
    (void)holder;
    emu_session_unref_msg(ent, s);
    if (ent->ns->hooks.ready)
        ent->ns->hooks.ready(ent->ns->hooks.ctx, ent);
}

/* thread: proactor */
int emu_session_renew(emu_entity_t *ent, const char *id, int64_t now, int64_t *until_ms)
{
    emu_session_t *s = emu_session_get(ent, id, false);
    if (!s || !s->holder || s->lock_expiry_ms <= now)
        return -1;
    s->locked_until_ms = now + (int64_t)ent->opts.lock_duration_s * 1000;
    s->lock_expiry_ms = s->locked_until_ms - ent->ns->lock_early_ms;
    for (emu_msg_t *m = ent->locked.head; m; m = m->next)
        if (m->session == s && m->lock_expiry_ms) {
            m->locked_until_ms = s->locked_until_ms;
            m->lock_expiry_ms = s->lock_expiry_ms;
        }
    *until_ms = s->locked_until_ms;
    return 0;
}

/* thread: proactor */
int emu_session_set_state(emu_entity_t *ent, const char *id, const uint8_t *state, size_t len)
{
    emu_session_t *s = emu_session_get(ent, id, true);
    if (!s)
        return -1;
    free(s->state);
    s->state = NULL;
    s->state_len = 0;
    s->has_state = false;
    if (state) {
        s->state = malloc(len ? len : 1);
        if (!s->state)
            return -1;
        memcpy(s->state, state, len);
        s->state_len = len;
        s->has_state = true;
    }
    session_gc(ent, s);
    return 0;
}

typedef struct expired_ctx {
    emu_session_t *v[64];
    size_t n;
} expired_ctx_t;

/* The held sessions whose lock ran out (a few per tick); not all sessions, which may be many. */
static void collect_expired(const emu_entity_t *ent, int64_t now, expired_ctx_t *ex)
{
    for (emu_session_t *s = ent->held; s && ex->n < 64; s = s->held_next)
        if (s->lock_expiry_ms <= now)
            ex->v[ex->n++] = s;
}

/* thread: proactor */
void emu_ns_tick(emu_ns_t *ns, int64_t now)
{
    bool ttl_scan = now >= ns->next_ttl_scan_ms;
    if (ttl_scan)
        ns->next_ttl_scan_ms = now + 250;
    for (size_t i = 0; i < ns->n; i++) {
        emu_entity_t *ent = ns->ents[i];
        emu_entity_tick(ent, now, ttl_scan);
        if (ent->dedup)
            dedup_purge(ent, now);
        if (!ent->sessions)
            continue;
        /* Session locks: find the holders whose lock ran out (a few per tick). */
        expired_ctx_t ex = {.n = 0};
        collect_expired(ent, now, &ex);
        for (size_t k = 0; k < ex.n; k++) {
            emu_session_t *s = ex.v[k];
            void *holder = s->holder;
            if (ns->hooks.session_lost)
                ns->hooks.session_lost(ns->hooks.ctx, ent, s, holder);
            if (s->holder == holder)
                emu_session_release(ent, s, true, now);
        }
    }
}
