/*
 * emu_mgmt.c - the $management node of each entity: renew-lock,
 * update-disposition, peek, receive-by-sequence-number, schedule and
 * cancel, session lock renewal and session state.
 */
#include "emu_broker.h"

#include "ib_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_LOCK_LOST_TEXT                                                                         \
    "The lock supplied is invalid. Either the lock expired, or the message has already been "      \
    "removed from the queue."

typedef struct mgmt_ctx {
    emu_broker_t *b;
    emu_link_t *l;
    emu_entity_t *ent;
    pn_message_t *req;
    pn_message_t *resp;
    pn_data_t *body; /* request body */
    pn_data_t *out;  /* response body, a map left open by begin_body */
    int64_t now;
} mgmt_ctx_t;

static void put_str(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

static void put_sym(pn_data_t *d, const char *s)
{
    pn_data_put_symbol(d, pn_bytes(strlen(s), s));
}

/* Sends the response with status; cond is the errorCondition for non-2xx. */
static void finish(mgmt_ctx_t *c, int status, const char *cond, const char *desc)
{
    emu_link_t *out = emu_reply_link(c->l->conn, pn_message_get_reply_to(c->req));
    if (!out) {
        IB_LOG(IB_LOG_WARN, "mgmt", IB_MSG("no reply link"),
               IB_S("reply_to", pn_message_get_reply_to(c->req)));
        return;
    }
    pn_message_set_correlation_id(c->resp, pn_message_get_id(c->req));
    pn_data_t *p = pn_message_properties(c->resp);
    pn_data_clear(p);
    pn_data_put_map(p);
    pn_data_enter(p);
    put_str(p, "statusCode");
    pn_data_put_int(p, status);
    put_str(p, "statusDescription");
    put_str(p, desc);
    if (cond) {
        put_str(p, "errorCondition");
        put_sym(p, cond);
    }
    pn_data_exit(p);
    if (status >= 300) {
        pn_data_clear(pn_message_body(c->resp));
        pn_data_put_null(pn_message_body(c->resp));
    }
    emu_send_message(out, c->resp);
}

static bool get_string(pn_data_t *body, const char *key, char *buf, size_t size)
{
    if (!emu_map_find(body, key))
        return false;
    pn_type_t t = pn_data_type(body);
    if (t != PN_STRING && t != PN_SYMBOL)
        return false;
    pn_bytes_t s = t == PN_STRING ? pn_data_get_string(body) : pn_data_get_symbol(body);
    if (s.size >= size)
        return false;
    memcpy(buf, s.start, s.size);
    buf[s.size] = '\0';
    return true;
}

static bool get_long(pn_data_t *body, const char *key, int64_t *v)
{
    if (!emu_map_find(body, key))
        return false;
    switch (pn_data_type(body)) {
    case PN_LONG:
        *v = pn_data_get_long(body);
        return true;
    case PN_ULONG:
        *v = (int64_t)pn_data_get_ulong(body);
        return true;
    case PN_INT:
        *v = pn_data_get_int(body);
        return true;
    case PN_UINT:
        *v = pn_data_get_uint(body);
        return true;
    default:
        return false;
    }
}

/* Reads an array or list of uuid (or 16-byte binary) values into locks; count or -1. */
static int get_uuids(pn_data_t *body, const char *key, uint8_t (*locks)[16], int max)
{
    if (!emu_map_find(body, key))
        return -1;
    pn_type_t t = pn_data_type(body);
    if (t != PN_ARRAY && t != PN_LIST)
        return -1;
    pn_data_enter(body);
    int n = 0;
    while (pn_data_next(body) && n < max) {
        if (pn_data_type(body) == PN_UUID) {
            pn_uuid_t u = pn_data_get_uuid(body);
            memcpy(locks[n++], u.bytes, 16);
        } else if (pn_data_type(body) == PN_BINARY && pn_data_get_binary(body).size == 16) {
            memcpy(locks[n++], pn_data_get_binary(body).start, 16);
        } else {
            return -1;
        }
    }
    pn_data_exit(body);
    return n;
}

static void begin_body(mgmt_ctx_t *c)
{
    c->out = pn_message_body(c->resp);
    pn_data_clear(c->out);
    pn_data_put_map(c->out);
    pn_data_enter(c->out);
}

static void end_body(mgmt_ctx_t *c)
{
    pn_data_exit(c->out);
}

#define EMU_TOKENS_MAX 256

static void op_renew_lock(mgmt_ctx_t *c)
{
    uint8_t locks[EMU_TOKENS_MAX][16];
    int n = get_uuids(c->body, "lock-tokens", locks, EMU_TOKENS_MAX);
    if (n < 0) {
        finish(c, 400, "com.microsoft:argument-error", "lock-tokens must be an array of uuid.");
        return;
    }
    if (c->b->faults.refuse_renew > 0) {
        c->b->faults.refuse_renew--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("renew-lock refused"));
        finish(c, 410, "com.microsoft:message-lock-lost", EMU_LOCK_LOST_TEXT);
        return;
    }
    int64_t until[EMU_TOKENS_MAX];
    for (int i = 0; i < n; i++) {
        if (emu_ns_renew(c->b->ns, locks[i], c->now, &until[i]) != 0) {
            finish(c, 410, "com.microsoft:message-lock-lost", EMU_LOCK_LOST_TEXT);
            return;
        }
    }
    begin_body(c);
    put_str(c->out, "expirations");
    pn_data_put_array(c->out, false, PN_TIMESTAMP);
    pn_data_enter(c->out);
    for (int i = 0; i < n; i++)
        pn_data_put_timestamp(c->out, until[i]);
    pn_data_exit(c->out);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

static void op_update_disposition(mgmt_ctx_t *c)
{
    uint8_t locks[EMU_TOKENS_MAX][16];
    int n = get_uuids(c->body, "lock-tokens", locks, EMU_TOKENS_MAX);
    char status[32], reason[256], desc[1024];
    if (n < 0 || !get_string(c->body, "disposition-status", status, sizeof status)) {
        finish(c, 400, "com.microsoft:argument-error",
               "lock-tokens and disposition-status are required.");
        return;
    }
    bool has_reason = get_string(c->body, "deadletter-reason", reason, sizeof reason);
    bool has_desc = get_string(c->body, "deadletter-description", desc, sizeof desc);
    emu_outcome_t o;
    if (strcmp(status, "completed") == 0)
        o = EMU_COMPLETE;
    else if (strcmp(status, "abandoned") == 0)
        o = EMU_ABANDON;
    else if (strcmp(status, "suspended") == 0)
        o = EMU_DEAD_LETTER;
    else if (strcmp(status, "defered") == 0 || strcmp(status, "deferred") == 0)
        o = EMU_DEFER;
    else {
        finish(c, 400, "com.microsoft:argument-error", "Unknown disposition-status.");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (emu_ns_settle(c->b->ns, locks[i], o, has_reason ? reason : NULL, has_desc ? desc : NULL,
                          c->now) != 0) {
            finish(c, 410, "com.microsoft:message-lock-lost", EMU_LOCK_LOST_TEXT);
            return;
        }
    }
    begin_body(c);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

/* Appends {message: binary} (plus lock-token when lock is set) for one message. */
static void put_message_entry(mgmt_ctx_t *c, const emu_msg_t *m, int state, const uint8_t *lock)
{
    emu_delivery_fields_t f = {
        .delivery_count = m->delivery_count,
        .seq = m->seq,
        .enqueued_ms = m->enqueued_ms,
        .locked_until_ms = lock ? m->locked_until_ms : 0,
        .message_state = state,
        .app = m->app,
        .app_len = m->app_len,
    };
    emu_buf_t buf = {0};
    if (emu_encode_delivery(&buf, m->blob->data, &m->blob->sec, &m->blob->info, &f) != 0) {
        emu_buf_free(&buf);
        return;
    }
    pn_data_put_map(c->out);
    pn_data_enter(c->out);
    put_str(c->out, "message");
    pn_data_put_binary(c->out, pn_bytes(buf.len, (const char *)buf.data));
    if (lock) {
        pn_uuid_t u;
        memcpy(u.bytes, lock, 16);
        put_str(c->out, "lock-token");
        pn_data_put_uuid(c->out, u);
    }
    pn_data_exit(c->out);
    emu_buf_free(&buf);
}

static void peek_one(void *ctx, const emu_msg_t *m)
{
    mgmt_ctx_t *c = ctx;
    int state = m->state == EMU_MSG_DEFERRED ? 1 : m->state == EMU_MSG_SCHEDULED ? 2 : 0;
    put_message_entry(c, m, state, NULL);
}

static void op_peek(mgmt_ctx_t *c)
{
    int64_t from = 1, count = 1;
    char sid[200];
    get_long(c->body, "from-sequence-number", &from);
    get_long(c->body, "message-count", &count);
    bool has_sid = get_string(c->body, "session-id", sid, sizeof sid);
    if (count < 1)
        count = 1;
    if (count > 1000)
        count = 1000;
    begin_body(c);
    put_str(c->out, "messages");
    pn_data_put_list(c->out);
    pn_data_enter(c->out);
    size_t n = emu_entity_peek(c->ent, from, (size_t)count, has_sid ? sid : NULL, peek_one, c);
    pn_data_exit(c->out);
    end_body(c);
    if (n == 0) {
        pn_data_clear(pn_message_body(c->resp));
        finish(c, 204, NULL, "No messages to peek.");
        return;
    }
    finish(c, 200, NULL, "OK");
}

static void op_receive_by_seq(mgmt_ctx_t *c)
{
    int64_t mode = 1;
    get_long(c->body, "receiver-settle-mode", &mode);
    if (!emu_map_find(c->body, "sequence-numbers") ||
        (pn_data_type(c->body) != PN_ARRAY && pn_data_type(c->body) != PN_LIST)) {
        finish(c, 400, "com.microsoft:argument-error",
               "sequence-numbers must be an array of long.");
        return;
    }
    int64_t seqs[EMU_TOKENS_MAX];
    int n = 0;
    pn_data_enter(c->body);
    while (pn_data_next(c->body) && n < EMU_TOKENS_MAX)
        seqs[n++] = pn_data_type(c->body) == PN_LONG ? pn_data_get_long(c->body) : -1;
    pn_data_exit(c->body);
    emu_msg_t *found[EMU_TOKENS_MAX];
    for (int i = 0; i < n; i++) {
        found[i] = emu_entity_deferred(c->ent, seqs[i]);
        if (!found[i]) {
            finish(c, 404, "com.microsoft:message-not-found",
                   "The deferred message was not found.");
            return;
        }
    }
    begin_body(c);
    put_str(c->out, "messages");
    pn_data_put_list(c->out);
    pn_data_enter(c->out);
    for (int i = 0; i < n; i++) {
        emu_msg_undefer_lock(found[i], c->now);
        put_message_entry(c, found[i], 1, found[i]->lock);
        if (mode == 0)
            emu_ns_settle(c->b->ns, found[i]->lock, EMU_COMPLETE, NULL, NULL, c->now);
    }
    pn_data_exit(c->out);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

static void op_schedule(mgmt_ctx_t *c)
{
    if (!emu_map_find(c->body, "messages") || pn_data_type(c->body) != PN_LIST) {
        finish(c, 400, "com.microsoft:argument-error", "messages must be a list.");
        return;
    }
    int64_t seqs[EMU_TOKENS_MAX];
    int n = 0;
    pn_data_enter(c->body);
    while (pn_data_next(c->body) && n < EMU_TOKENS_MAX) {
        if (pn_data_type(c->body) != PN_MAP)
            continue;
        pn_data_enter(c->body);
        while (pn_data_next(c->body)) {
            bool is_msg = pn_data_type(c->body) == PN_STRING &&
                          pn_data_get_string(c->body).size == 7 &&
                          memcmp(pn_data_get_string(c->body).start, "message", 7) == 0;
            if (!pn_data_next(c->body))
                break;
            if (is_msg && pn_data_type(c->body) == PN_BINARY) {
                pn_bytes_t bin = pn_data_get_binary(c->body);
                emu_entity_t *target =
                    c->ent->kind == EMU_KIND_TOPIC && c->ent->nsubs ? c->ent->subs[0] : c->ent;
                int64_t before = target->next_seq;
                if (emu_entity_send(c->ent, (const uint8_t *)bin.start, bin.size, c->now) !=
                    EMU_SEND_OK) {
                    pn_data_exit(c->body);
                    pn_data_exit(c->body);
                    finish(c, 400, "com.microsoft:argument-error",
                           "A scheduled message could not be decoded.");
                    return;
                }
                seqs[n++] = target->next_seq > before ? target->next_seq : before;
            }
        }
        pn_data_exit(c->body);
    }
    pn_data_exit(c->body);
    begin_body(c);
    put_str(c->out, "sequence-numbers");
    pn_data_put_array(c->out, false, PN_LONG);
    pn_data_enter(c->out);
    for (int i = 0; i < n; i++)
        pn_data_put_long(c->out, seqs[i]);
    pn_data_exit(c->out);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

static void op_cancel_scheduled(mgmt_ctx_t *c)
{
    if (emu_map_find(c->body, "sequence-numbers") &&
        (pn_data_type(c->body) == PN_ARRAY || pn_data_type(c->body) == PN_LIST)) {
        pn_data_enter(c->body);
        while (pn_data_next(c->body))
            if (pn_data_type(c->body) == PN_LONG)
                emu_entity_cancel_scheduled(c->ent, pn_data_get_long(c->body));
        pn_data_exit(c->body);
    }
    begin_body(c);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

static void op_session(mgmt_ctx_t *c, const char *op)
{
    char sid[200];
    if (!c->ent->opts.requires_session) {
        finish(c, 400, "amqp:not-allowed", "The entity does not require sessions.");
        return;
    }
    if (!get_string(c->body, "session-id", sid, sizeof sid)) {
        finish(c, 400, "com.microsoft:argument-error", "session-id is required.");
        return;
    }
    if (strcmp(op, "com.microsoft:renew-session-lock") == 0) {
        int64_t until;
        if (emu_session_renew(c->ent, sid, c->now, &until) != 0) {
            finish(c, 410, "com.microsoft:session-lock-lost",
                   "The session lock has expired or is not held.");
            return;
        }
        begin_body(c);
        put_str(c->out, "expiration");
        pn_data_put_timestamp(c->out, until);
        end_body(c);
        finish(c, 200, NULL, "OK");
        return;
    }
    emu_session_t *s = emu_session_get(c->ent, sid, false);
    /* As Service Bus: the state is read and written by the holder of the session lock. */
    if (!s || !s->holder || s->lock_expiry_ms <= c->now) {
        finish(c, 410, "com.microsoft:session-lock-lost",
               "The session lock has expired or is not held.");
        return;
    }
    if (strcmp(op, "com.microsoft:get-session-state") == 0) {
        if (c->b->faults.busy_get_state > 0) {
            c->b->faults.busy_get_state--;
            IB_LOG(IB_LOG_INFO, "fault", IB_MSG("get-session-state answered busy"));
            finish(c, 503, "com.microsoft:server-busy",
                   "The server is busy. Please retry the operation.");
            return;
        }
        begin_body(c);
        put_str(c->out, "session-state");
        if (s && s->has_state)
            pn_data_put_binary(c->out, pn_bytes(s->state_len, (const char *)s->state));
        else
            pn_data_put_null(c->out);
        end_body(c);
        finish(c, 200, NULL, "OK");
        return;
    }
    /* set-session-state */
    c->ent->st.session_state_sets++;
    if (c->b->faults.stall_set_state > 0) {
        c->b->faults.stall_set_state--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("set-session-state left unanswered"));
        return;
    }
    if (c->b->faults.busy_set_state > 0) {
        c->b->faults.busy_set_state--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("set-session-state answered busy"));
        finish(c, 503, "com.microsoft:server-busy",
               "The server is busy. Please retry the operation.");
        return;
    }
    if (c->b->faults.refuse_set_state > 0) {
        c->b->faults.refuse_set_state--;
        IB_LOG(IB_LOG_INFO, "fault", IB_MSG("set-session-state refused"));
        finish(c, 500, "com.microsoft:internal-error",
               "The service was unable to process the request. Please retry the operation.");
        return;
    }
    const uint8_t *st = NULL;
    size_t len = 0;
    if (emu_map_find(c->body, "session-state") && pn_data_type(c->body) == PN_BINARY) {
        pn_bytes_t bin = pn_data_get_binary(c->body);
        st = (const uint8_t *)bin.start;
        len = bin.size;
    }
    if (emu_session_set_state(c->ent, sid, st, len) != 0) {
        finish(c, 500, "amqp:internal-error", "Out of memory.");
        return;
    }
    begin_body(c);
    end_body(c);
    finish(c, 200, NULL, "OK");
}

/* thread: proactor */
void emu_mgmt_request(emu_broker_t *b, emu_link_t *l, pn_message_t *req)
{
    char op[128];
    mgmt_ctx_t c = {.b = b, .l = l, .ent = l->ent, .req = req, .now = emu_now_ms()};
    c.resp = pn_message();
    c.body = pn_message_body(req);
    if (!emu_app_prop_str(req, "operation", op, sizeof op)) {
        finish(&c, 400, "com.microsoft:argument-error", "operation is required.");
    } else if (emu_server_busy(b)) {
        b->ns->server_busy++;
        finish(&c, 503, EMU_BUSY_COND, EMU_BUSY_TEXT);
    } else if (strcmp(op, "com.microsoft:renew-lock") == 0) {
        op_renew_lock(&c);
    } else if (strcmp(op, "com.microsoft:update-disposition") == 0) {
        op_update_disposition(&c);
    } else if (strcmp(op, "com.microsoft:peek-message") == 0) {
        op_peek(&c);
    } else if (strcmp(op, "com.microsoft:receive-by-sequence-number") == 0) {
        op_receive_by_seq(&c);
    } else if (strcmp(op, "com.microsoft:schedule-message") == 0) {
        op_schedule(&c);
    } else if (strcmp(op, "com.microsoft:cancel-scheduled-message") == 0) {
        op_cancel_scheduled(&c);
    } else if (strcmp(op, "com.microsoft:renew-session-lock") == 0 ||
               strcmp(op, "com.microsoft:get-session-state") == 0 ||
               strcmp(op, "com.microsoft:set-session-state") == 0) {
        op_session(&c, op);
    } else {
        char desc[200];
        snprintf(desc, sizeof desc, "The operation %s is not supported by sbemu.", op);
        finish(&c, 501, "com.microsoft:not-supported", desc);
    }
    IB_LOG(IB_LOG_DEBUG, "mgmt", IB_S("operation", op), IB_S("entity", l->ent ? l->ent->path : ""));
    pn_message_free(c.resp);
}
