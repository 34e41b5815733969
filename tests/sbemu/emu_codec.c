/*
 * emu_codec.c - section-level AMQP encoding and decoding for the emulator.
 */
#include "emu_codec.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) << 32 | rd32(p + 4);
}

/* thread: any */
int emu_buf_reserve(emu_buf_t *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

/* thread: any */
int emu_buf_add(emu_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (emu_buf_reserve(b, n) != 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* thread: any */
void emu_buf_free(emu_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* thread: any */
long emu_amqp_skip(const uint8_t *p, size_t len)
{
    if (len < 1)
        return -1;
    uint8_t c = p[0];
    size_t need;
    if (c == 0x00) {
        long d = emu_amqp_skip(p + 1, len - 1);
        if (d < 0)
            return -1;
        long v = emu_amqp_skip(p + 1 + d, len - 1 - (size_t)d);
        return v < 0 ? -1 : 1 + d + v;
    }
    switch (c >> 4) {
    case 0x4:
        need = 1;
        break;
    case 0x5:
        need = 2;
        break;
    case 0x6:
        need = 3;
        break;
    case 0x7:
        need = 5;
        break;
    case 0x8:
        need = 9;
        break;
    case 0x9:
        need = 17;
        break;
    case 0xa:
    case 0xc:
    case 0xe:
        if (len < 2)
            return -1;
        need = 2 + (size_t)p[1];
        break;
    case 0xb:
    case 0xd:
    case 0xf:
        if (len < 5)
            return -1;
        need = 5 + (size_t)rd32(p + 1);
        break;
    default:
        return -1;
    }
    return need <= len ? (long)need : -1;
}

/* Section code of a described value at p (0x00 0x53 code, or 0x00 0x80 ulong), or -1. */
static int section_code(const uint8_t *p, size_t len, size_t *hdr)
{
    if (len >= 3 && p[0] == 0x00 && p[1] == 0x53) {
        *hdr = 3;
        return p[2];
    }
    if (len >= 10 && p[0] == 0x00 && p[1] == 0x80 && rd32(p + 2) == 0) {
        *hdr = 10;
        return (int)rd32(p + 6);
    }
    return -1;
}

/* thread: any */
int emu_msg_split(const uint8_t *p, size_t len, emu_sections_t *s)
{
    memset(s, 0, sizeof *s);
    size_t off = 0;
    while (off < len) {
        size_t hdr;
        int code = section_code(p + off, len - off, &hdr);
        long n = emu_amqp_skip(p + off, len - off);
        if (code < 0x70 || code > 0x78 || n < 0)
            return -1;
        emu_span_t sp = {(uint32_t)off, (uint32_t)n};
        switch (code) {
        case 0x70:
            s->header = sp;
            break;
        case 0x71:
            s->dann = sp;
            break;
        case 0x72:
            s->mann = sp;
            break;
        case 0x73:
            s->props = sp;
            break;
        case 0x74:
            s->app = sp;
            break;
        default:
            if (!s->rest.len && !s->rest.off)
                s->rest = (emu_span_t){(uint32_t)off, (uint32_t)(len - off)};
            if (code == 0x75)
                s->n_data++;
            else if (code == 0x76 || code == 0x77)
                s->other_body = true;
            break;
        }
        off += (size_t)n;
    }
    return 0;
}

/*
 * Iterates the fields of a described list section: calls fn(index, value,
 * value_len) for each field. Returns -1 when malformed.
 */
static int list_fields(const uint8_t *p, emu_span_t sp,
                       int (*fn)(void *ctx, int idx, const uint8_t *v, size_t vl), void *ctx)
{
    const uint8_t *q = p + sp.off;
    size_t len = sp.len, hdr;
    if (section_code(q, len, &hdr) < 0)
        return -1;
    q += hdr;
    len -= hdr;
    uint32_t count;
    if (len < 1)
        return -1;
    if (q[0] == 0x45)
        return 0;
    if (q[0] == 0xc0 && len >= 3) {
        count = q[2];
        q += 3, len -= 3;
    } else if (q[0] == 0xd0 && len >= 9) {
        count = rd32(q + 5);
        q += 9, len -= 9;
    } else {
        return -1;
    }
    for (uint32_t i = 0; i < count; i++) {
        long n = emu_amqp_skip(q, len);
        if (n < 0)
            return -1;
        if (fn(ctx, (int)i, q, (size_t)n) != 0)
            return -1;
        q += n, len -= (size_t)n;
    }
    return 0;
}

/* Entries of an encoded map value at q (constructor included). */
static int map_entries(const uint8_t *q, size_t len, const uint8_t **ents, size_t *elen,
                       uint32_t *count)
{
    if (len >= 3 && q[0] == 0xc1) {
        *count = q[2] / 2;
        *ents = q + 3;
        if ((size_t)q[1] + 2 > len || q[1] < 1)
            return -1;
        *elen = (size_t)q[1] - 1;
        return 0;
    }
    if (len >= 9 && q[0] == 0xd1) {
        *count = rd32(q + 5) / 2;
        *ents = q + 9;
        if ((size_t)rd32(q + 1) + 5 > len || rd32(q + 1) < 4)
            return -1;
        *elen = (size_t)rd32(q + 1) - 4;
        return 0;
    }
    return -1;
}

/* Symbol or string value at v as a pointer/length; false otherwise. */
static bool text_value(const uint8_t *v, size_t vl, const char **s, size_t *sl)
{
    if ((v[0] == 0xa1 || v[0] == 0xa3) && vl >= 2) {
        *s = (const char *)v + 2, *sl = v[1];
        return true;
    }
    if ((v[0] == 0xb1 || v[0] == 0xb3) && vl >= 5) {
        *s = (const char *)v + 5, *sl = rd32(v + 1);
        return true;
    }
    return false;
}

static bool text_is(const uint8_t *v, size_t vl, const char *want)
{
    const char *s;
    size_t sl;
    return text_value(v, vl, &s, &sl) && sl == strlen(want) && memcmp(s, want, sl) == 0;
}

typedef struct props_ctx {
    emu_msg_info_t *info;
    const uint8_t *base;
} props_ctx_t;

static int props_field(void *ctx, int idx, const uint8_t *v, size_t vl)
{
    props_ctx_t *pc = ctx;
    emu_msg_info_t *info = pc->info;
    if (idx == 0 && v[0] != 0x40) {
        info->message_id.off = (uint32_t)(v - pc->base);
        info->message_id.len = (uint32_t)vl;
    } else if (idx == 10) {
        const char *s;
        size_t sl;
        if (text_value(v, vl, &s, &sl)) {
            if (sl >= sizeof info->group_id)
                sl = sizeof info->group_id - 1;
            memcpy(info->group_id, s, sl);
            info->group_id[sl] = '\0';
        }
    }
    return 0;
}

static int header_field(void *ctx, int idx, const uint8_t *v, size_t vl)
{
    emu_msg_info_t *info = ctx;
    if (idx == 0)
        info->durable = v[0] == 0x41 || (v[0] == 0x56 && vl == 2 && v[1]);
    else if (idx == 1 && v[0] == 0x50 && vl == 2)
        info->priority = v[1];
    else if (idx == 2) {
        if (v[0] == 0x70 && vl == 5)
            info->has_ttl = true, info->ttl_ms = rd32(v + 1);
        else if (v[0] == 0x52 && vl == 2)
            info->has_ttl = true, info->ttl_ms = v[1];
        else if (v[0] == 0x43)
            info->has_ttl = true, info->ttl_ms = 0;
    }
    return 0;
}

/* thread: any */
int emu_msg_info(const uint8_t *p, const emu_sections_t *s, emu_msg_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->priority = -1;
    if (s->header.len && list_fields(p, s->header, header_field, info) != 0)
        return -1;
    if (s->props.len) {
        props_ctx_t pc = {info, p};
        if (list_fields(p, s->props, props_field, &pc) != 0)
            return -1;
    }
    if (s->mann.len) {
        size_t hdr;
        section_code(p + s->mann.off, s->mann.len, &hdr);
        const uint8_t *ents;
        size_t elen;
        uint32_t count;
        if (map_entries(p + s->mann.off + hdr, s->mann.len - hdr, &ents, &elen, &count) != 0)
            return -1;
        for (uint32_t i = 0; i < count; i++) {
            long kn = emu_amqp_skip(ents, elen);
            if (kn < 0)
                return -1;
            long vn = emu_amqp_skip(ents + kn, elen - (size_t)kn);
            if (vn < 0)
                return -1;
            if (text_is(ents, (size_t)kn, "x-opt-scheduled-enqueue-time") && ents[kn] == 0x83)
                info->scheduled_ms = (int64_t)rd64(ents + kn + 1);
            ents += kn + vn;
            elen -= (size_t)(kn + vn);
        }
    }
    return 0;
}

/* Payload of a data section at q; false when it is not one. */
static bool data_payload(const uint8_t *q, size_t len, const uint8_t **d, size_t *dl)
{
    size_t hdr;
    if (section_code(q, len, &hdr) != 0x75)
        return false;
    q += hdr, len -= hdr;
    if (len >= 2 && q[0] == 0xa0 && (size_t)q[1] + 2 <= len) {
        *d = q + 2, *dl = q[1];
        return true;
    }
    if (len >= 5 && q[0] == 0xb0 && (size_t)rd32(q + 1) + 5 <= len) {
        *d = q + 5, *dl = rd32(q + 1);
        return true;
    }
    return false;
}

/* thread: any */
int emu_msg_each_data(const uint8_t *p, const emu_sections_t *s,
                      int (*fn)(void *ctx, const uint8_t *item, size_t len), void *ctx)
{
    const uint8_t *q = p + s->rest.off;
    size_t len = s->rest.len;
    while (len > 0) {
        long n = emu_amqp_skip(q, len);
        if (n < 0)
            return -1;
        const uint8_t *d;
        size_t dl;
        if (data_payload(q, (size_t)n, &d, &dl) && fn(ctx, d, dl) != 0)
            return -1;
        q += n, len -= (size_t)n;
    }
    return 0;
}

static int batch_item_ok(void *ctx, const uint8_t *item, size_t len)
{
    emu_sections_t s;
    size_t hdr;
    (void)ctx;
    if (section_code(item, len, &hdr) < 0x70 || emu_msg_split(item, len, &s) != 0)
        return -1;
    return (s.rest.len || s.props.len) ? 0 : -1;
}

/* thread: any */
bool emu_msg_is_batch(const uint8_t *p, const emu_sections_t *s)
{
    if (s->other_body || s->n_data < 1)
        return false;
    return emu_msg_each_data(p, s, batch_item_ok, NULL) == 0;
}

static int put_sym_key(emu_buf_t *b, const char *k)
{
    uint8_t h[2] = {0xa3, (uint8_t)strlen(k)};
    return emu_buf_add(b, h, 2) || emu_buf_add(b, k, strlen(k));
}

static int put_typed64(emu_buf_t *b, uint8_t code, int64_t v)
{
    uint8_t x[9] = {code};
    wr32(x + 1, (uint32_t)((uint64_t)v >> 32));
    wr32(x + 5, (uint32_t)v);
    return emu_buf_add(b, x, 9);
}

static bool is_broker_key(const uint8_t *k, size_t kl)
{
    return text_is(k, kl, "x-opt-sequence-number") || text_is(k, kl, "x-opt-enqueued-time") ||
           text_is(k, kl, "x-opt-locked-until") || text_is(k, kl, "x-opt-message-state");
}

/* thread: any */
int emu_encode_delivery(emu_buf_t *out, const uint8_t *p, const emu_sections_t *s,
                        const emu_msg_info_t *info, const emu_delivery_fields_t *f)
{
    /* Header: hand-encoded so that delivery-count 0 is still on the wire. */
    uint8_t h[32];
    size_t n = 0;
    h[n++] = 0x00, h[n++] = 0x53, h[n++] = 0x70, h[n++] = 0xc0;
    size_t size_at = n++;
    h[n++] = 5;
    h[n++] = info->durable ? 0x41 : 0x42;
    if (info->priority >= 0)
        h[n++] = 0x50, h[n++] = (uint8_t)info->priority;
    else
        h[n++] = 0x40;
    if (info->has_ttl) {
        h[n++] = 0x70;
        wr32(h + n, info->ttl_ms);
        n += 4;
    } else {
        h[n++] = 0x40;
    }
    h[n++] = 0x40;
    h[n++] = 0x70;
    wr32(h + n, f->delivery_count);
    n += 4;
    h[size_at] = (uint8_t)(n - size_at - 1);
    if (emu_buf_add(out, h, n))
        return -1;

    /* Message annotations: the sender's entries, then ours. */
    static const uint8_t mhdr[] = {0x00, 0x53, 0x72, 0xd1, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t start = out->len;
    if (emu_buf_add(out, mhdr, sizeof mhdr))
        return -1;
    uint32_t count = 0;
    if (s->mann.len) {
        const uint8_t *ents;
        size_t elen, hdr;
        uint32_t pairs;
        section_code(p + s->mann.off, s->mann.len, &hdr);
        if (map_entries(p + s->mann.off + hdr, s->mann.len - hdr, &ents, &elen, &pairs) != 0)
            return -1;
        for (uint32_t i = 0; i < pairs; i++) {
            long kn = emu_amqp_skip(ents, elen);
            long vn = kn < 0 ? -1 : emu_amqp_skip(ents + kn, elen - (size_t)kn);
            if (vn < 0)
                return -1;
            if (!is_broker_key(ents, (size_t)kn)) {
                if (emu_buf_add(out, ents, (size_t)(kn + vn)))
                    return -1;
                count += 2;
            }
            ents += kn + vn, elen -= (size_t)(kn + vn);
        }
    }
    if (put_sym_key(out, "x-opt-sequence-number") || put_typed64(out, 0x81, f->seq) ||
        put_sym_key(out, "x-opt-enqueued-time") || put_typed64(out, 0x83, f->enqueued_ms))
        return -1;
    count += 4;
    if (f->locked_until_ms) {
        if (put_sym_key(out, "x-opt-locked-until") || put_typed64(out, 0x83, f->locked_until_ms))
            return -1;
        count += 2;
    }
    if (f->message_state >= 0) {
        uint8_t st[5] = {0x71};
        wr32(st + 1, (uint32_t)f->message_state);
        if (put_sym_key(out, "x-opt-message-state") || emu_buf_add(out, st, 5))
            return -1;
        count += 2;
    }
    wr32(out->data + start + 4, (uint32_t)(out->len - start - 8));
    wr32(out->data + start + 8, count);

    if (s->props.len && emu_buf_add(out, p + s->props.off, s->props.len))
        return -1;
    if (f->app) {
        if (emu_buf_add(out, f->app, f->app_len))
            return -1;
    } else if (s->app.len && emu_buf_add(out, p + s->app.off, s->app.len)) {
        return -1;
    }
    if (s->rest.len && emu_buf_add(out, p + s->rest.off, s->rest.len))
        return -1;
    return 0;
}

static int put_str(emu_buf_t *b, const char *v)
{
    size_t l = strlen(v);
    uint8_t h[5] = {0xb1};
    wr32(h + 1, (uint32_t)l);
    return emu_buf_add(b, h, 5) || emu_buf_add(b, v, l);
}

/* thread: any */
int emu_encode_dead_letter_props(emu_buf_t *out, const uint8_t *app, size_t app_len,
                                 const char *reason, const char *description)
{
    static const uint8_t ahdr[] = {0x00, 0x53, 0x74, 0xd1, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t start = out->len;
    uint32_t count = 0;
    if (emu_buf_add(out, ahdr, sizeof ahdr))
        return -1;
    if (app && app_len) {
        const uint8_t *ents;
        size_t elen, hdr;
        uint32_t pairs;
        if (section_code(app, app_len, &hdr) != 0x74 ||
            map_entries(app + hdr, app_len - hdr, &ents, &elen, &pairs) != 0)
            return -1;
        for (uint32_t i = 0; i < pairs; i++) {
            long kn = emu_amqp_skip(ents, elen);
            long vn = kn < 0 ? -1 : emu_amqp_skip(ents + kn, elen - (size_t)kn);
            if (vn < 0)
                return -1;
            bool ours = text_is(ents, (size_t)kn, "DeadLetterReason") ||
                        text_is(ents, (size_t)kn, "DeadLetterErrorDescription");
            if (!ours) {
                if (emu_buf_add(out, ents, (size_t)(kn + vn)))
                    return -1;
                count += 2;
            }
            ents += kn + vn, elen -= (size_t)(kn + vn);
        }
    }
    if (reason) {
        if (put_str(out, "DeadLetterReason") || put_str(out, reason))
            return -1;
        count += 2;
    }
    if (description) {
        if (put_str(out, "DeadLetterErrorDescription") || put_str(out, description))
            return -1;
        count += 2;
    }
    wr32(out->data + start + 4, (uint32_t)(out->len - start - 8));
    wr32(out->data + start + 8, count);
    return 0;
}

/* thread: any */
int emu_msg_set_id(const uint8_t *p, size_t len, const emu_sections_t *s, const char *id,
                   emu_buf_t *out)
{
    size_t at, after;
    const uint8_t *fields = NULL;
    size_t flen = 0;
    uint32_t count = 0;
    if (s->props.len) {
        at = s->props.off;
        after = s->props.off + s->props.len;
        const uint8_t *q = p + s->props.off + 3;
        size_t ql = s->props.len - 3;
        if (s->props.len < 4 || p[s->props.off + 1] != 0x53)
            return -1;
        if (q[0] == 0xc0 && ql >= 3) {
            count = q[2], fields = q + 3, flen = ql - 3;
        } else if (q[0] == 0xd0 && ql >= 9) {
            count = rd32(q + 5), fields = q + 9, flen = ql - 9;
        } else if (q[0] != 0x45) {
            return -1;
        }
        if (count > 0) {
            /* Skip the old message-id. */
            long n = emu_amqp_skip(fields, flen);
            if (n < 0)
                return -1;
            fields += n, flen -= (size_t)n;
        }
    } else {
        size_t end = 0;
        emu_span_t before[3] = {s->header, s->dann, s->mann};
        for (int i = 0; i < 3; i++)
            if (before[i].len && before[i].off + before[i].len > end)
                end = before[i].off + before[i].len;
        at = after = end;
    }
    size_t il = strlen(id);
    if (il > 255 || emu_buf_add(out, p, at))
        return -1;
    uint8_t h[14] = {0x00, 0x53, 0x73, 0xd0};
    wr32(h + 4, (uint32_t)(4 + 2 + il + flen));
    wr32(h + 8, count ? count : 1);
    h[12] = 0xa1;
    h[13] = (uint8_t)il;
    if (emu_buf_add(out, h, 14) || emu_buf_add(out, id, il) || emu_buf_add(out, fields, flen) ||
        emu_buf_add(out, p + after, len - after))
        return -1;
    return 0;
}

/* True when the string/symbol key k appears among the count pairs of ents. */
static bool map_has_key(const uint8_t *ents, size_t elen, uint32_t count, const uint8_t *k,
                        size_t kl)
{
    const char *ks;
    size_t ksl;
    if (!text_value(k, kl, &ks, &ksl))
        return false;
    for (uint32_t i = 0; i < count; i++) {
        long a = emu_amqp_skip(ents, elen);
        long v = a < 0 ? -1 : emu_amqp_skip(ents + a, elen - (size_t)a);
        if (v < 0)
            return false;
        const char *s;
        size_t sl;
        if (text_value(ents, (size_t)a, &s, &sl) && sl == ksl && memcmp(s, ks, sl) == 0)
            return true;
        ents += a + v, elen -= (size_t)(a + v);
    }
    return false;
}

/* thread: any */
int emu_encode_app_merge(emu_buf_t *out, const uint8_t *app, size_t app_len, const uint8_t *mods,
                         size_t mods_len)
{
    static const uint8_t ahdr[] = {0x00, 0x53, 0x74, 0xd1, 0, 0, 0, 0, 0, 0, 0, 0};
    const uint8_t *ments;
    size_t mlen, hdr;
    uint32_t mcount, count = 0;
    if (map_entries(mods, mods_len, &ments, &mlen, &mcount) != 0)
        return -1;
    size_t start = out->len;
    if (emu_buf_add(out, ahdr, sizeof ahdr))
        return -1;
    if (app && app_len) {
        const uint8_t *ents;
        size_t elen;
        uint32_t pairs;
        if (section_code(app, app_len, &hdr) != 0x74 ||
            map_entries(app + hdr, app_len - hdr, &ents, &elen, &pairs) != 0)
            return -1;
        for (uint32_t i = 0; i < pairs; i++) {
            long kn = emu_amqp_skip(ents, elen);
            long vn = kn < 0 ? -1 : emu_amqp_skip(ents + kn, elen - (size_t)kn);
            if (vn < 0)
                return -1;
            if (!map_has_key(ments, mlen, mcount, ents, (size_t)kn)) {
                if (emu_buf_add(out, ents, (size_t)(kn + vn)))
                    return -1;
                count += 2;
            }
            ents += kn + vn, elen -= (size_t)(kn + vn);
        }
    }
    for (uint32_t i = 0; i < mcount; i++) {
        long kn = emu_amqp_skip(ments, mlen);
        long vn = kn < 0 ? -1 : emu_amqp_skip(ments + kn, mlen - (size_t)kn);
        if (vn < 0)
            return -1;
        bool text = ments[0] == 0xa1 || ments[0] == 0xa3 || ments[0] == 0xb1 || ments[0] == 0xb3;
        bool dl = text_is(ments, (size_t)kn, "DeadLetterReason") ||
                  text_is(ments, (size_t)kn, "DeadLetterErrorDescription");
        if (text && !dl) {
            size_t at = out->len;
            if (emu_buf_add(out, ments, (size_t)(kn + vn)))
                return -1;
            /* sym8/sym32 and str8/str32 share their layout: retag as string. */
            if (out->data[at] == 0xa3)
                out->data[at] = 0xa1;
            else if (out->data[at] == 0xb3)
                out->data[at] = 0xb1;
            count += 2;
        }
        ments += kn + vn, mlen -= (size_t)(kn + vn);
    }
    wr32(out->data + start + 4, (uint32_t)(out->len - start - 8));
    wr32(out->data + start + 8, count);
    return 0;
}
