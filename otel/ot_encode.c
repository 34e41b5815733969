/*
 * ot_encode.c - the body of an OTLP/HTTP trace export request
 * (ExportTraceServiceRequest): protobuf, field by field as
 * opentelemetry-proto's trace.proto, common.proto and resource.proto number
 * them (sized first, then written in one pass), or the OTLP/JSON mapping of
 * the same message (ids as hex, 64-bit integers as strings, enums as
 * numbers). A span is encoded on its own by the thread that ends it; the
 * exporter's thread puts a batch of encoded spans in a request's envelope.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ib_enc.h"
#include "ot_int.h"

#define OT_SCOPE_NAME "inboxd"

/* ---- buffer ------------------------------------------------------------- */

void ot_buf_free(ot_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

bool ot_buf_reserve(ot_buf_t *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

/* ---- protobuf: every length known before a byte is written ---------------- */

/*
 * The request is sized first (each nested message's length from its fields'),
 * then written once into a buffer reserved to that size: no length is
 * patched in afterwards and nothing is moved.
 */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    if (v < 0x80)
        return 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The size of a length-delimited field of n bytes (its tag and length included). */
static size_t len_field(unsigned field, size_t n)
{
    return varint_len((uint64_t)field << 3) + varint_len(n) + n;
}

/* AnyValue { string 1, bool 2, int64 3 }, and KeyValue { key = 1; value = 2 }. */
static size_t any_size(const ot_attr_t *a)
{
    if (a->type == OT_V_STR)
        return len_field(1, a->slen);
    return 1 + varint_len(a->type == OT_V_BOOL ? a->i != 0 : (uint64_t)a->i);
}

static size_t kv_size(const ot_attr_t *a)
{
    return len_field(1, a->klen) + len_field(2, any_size(a));
}

/* A string KeyValue's size: key and value of klen and vlen bytes. */
static size_t kv_str_size(size_t klen, size_t vlen)
{
    return len_field(1, klen) + len_field(2, len_field(1, vlen));
}

#define LINK_SIZE (len_field(1, 16) + len_field(2, 8) + 1 + 4)

static size_t status_size(const ot_span_t *s)
{
    return (s->status_msg ? len_field(2, strlen(s->status_msg)) : 0) + 2;
}

/* The size of a Span's fields (what its length prefix counts). */
static size_t span_size(const ot_span_t *s)
{
    size_t n = len_field(1, 16) + len_field(2, 8) + (s->has_parent ? len_field(4, 8) : 0) +
               len_field(5, s->name_len) + 1 + varint_len((uint64_t)s->kind) + 2 * (1 + 8) +
               2 + 4; /* flags = 16: a two-byte tag */
    if (s->shared && s->shared->pb_whole)
        n += s->shared->pb_len;
    for (unsigned i = 0; s->shared && !s->shared->pb_whole && i < s->shared->n; i++)
        n += len_field(9, kv_str_size(s->shared->kv[i].klen, s->shared->kv[i].vlen));
    for (unsigned i = 0; i < s->nattrs; i++)
        n += len_field(9, kv_size(&s->attrs[i]));
    if (s->dropped_attrs)
        n += 1 + varint_len(s->dropped_attrs);
    n += s->nlinks * len_field(13, LINK_SIZE);
    if (s->error)
        n += len_field(15, status_size(s));
    return n;
}

/* The writer: p moves on through space already reserved. */
static unsigned char *w_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static unsigned char *w_tag(unsigned char *p, unsigned field, unsigned wt)
{
    return w_varint(p, ((uint64_t)field << 3) | wt);
}

/* The tag and length of a length-delimited field; its n bytes follow. */
static unsigned char *w_len(unsigned char *p, unsigned field, size_t n)
{
    return w_varint(w_tag(p, field, WT_LEN), n);
}

static unsigned char *w_bytes(unsigned char *p, unsigned field, const void *src, size_t n)
{
    p = w_len(p, field, n);
    memcpy(p, src, n);
    return p + n;
}

static unsigned char *w_fixed(unsigned char *p, unsigned field, uint64_t v, unsigned nbytes)
{
    p = w_tag(p, field, nbytes == 8 ? WT_I64 : WT_I32);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v32 = (uint32_t)v;
    memcpy(p, nbytes == 8 ? (const void *)&v : (const void *)&v32, nbytes); /* the wire's order */
    return p + nbytes;
#else
    for (unsigned i = 0; i < nbytes; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
#endif
}

static unsigned char *w_kv_str(unsigned char *p, unsigned field, const char *key, size_t klen,
                               const char *value, size_t vlen)
{
    p = w_len(p, field, kv_str_size(klen, vlen));
    p = w_bytes(p, 1, key, klen);
    p = w_len(p, 2, len_field(1, vlen));
    return w_bytes(p, 1, value, vlen);
}

static unsigned char *w_kv(unsigned char *p, unsigned field, const ot_attr_t *a)
{
    if (a->type == OT_V_STR)
        return w_kv_str(p, field, a->key, a->klen, a->s, a->slen);
    size_t any = any_size(a);
    p = w_len(p, field, len_field(1, a->klen) + len_field(2, any));
    p = w_bytes(p, 1, a->key, a->klen);
    p = w_len(p, 2, any);
    p = w_tag(p, a->type == OT_V_BOOL ? 2 : 3, WT_VARINT);
    return w_varint(p, a->type == OT_V_BOOL ? a->i != 0 : (uint64_t)a->i);
}

/* Span flags: the W3C flags, and whether the parent is known to be remote. */
static uint32_t span_flags(const ot_span_t *s)
{
    uint32_t f = s->ctx.flags;
    if (s->has_parent)
        f |= 0x100u | (s->parent_remote ? 0x200u : 0);
    return f;
}

static unsigned char *w_span(unsigned char *p, const ot_span_t *s, size_t size)
{
    p = w_len(p, 2, size); /* ScopeSpans.spans = 2 */
    p = w_bytes(p, 1, s->ctx.trace_id, 16);
    p = w_bytes(p, 2, s->ctx.span_id, 8);
    if (s->has_parent)
        p = w_bytes(p, 4, s->parent, 8);
    p = w_bytes(p, 5, s->name, s->name_len);
    p = w_varint(w_tag(p, 6, WT_VARINT), (uint64_t)s->kind);
    p = w_fixed(p, 7, (uint64_t)s->start_ns, 8);
    p = w_fixed(p, 8, (uint64_t)s->end_ns, 8);
    if (s->shared && s->shared->pb_whole) {
        memcpy(p, s->shared->pb, s->shared->pb_len);
        p += s->shared->pb_len;
    }
    for (unsigned i = 0; s->shared && !s->shared->pb_whole && i < s->shared->n; i++)
        p = w_kv_str(p, 9, s->shared->kv[i].key, s->shared->kv[i].klen, s->shared->kv[i].value,
                     s->shared->kv[i].vlen);
    for (unsigned i = 0; i < s->nattrs; i++)
        p = w_kv(p, 9, &s->attrs[i]);
    if (s->dropped_attrs)
        p = w_varint(w_tag(p, 10, WT_VARINT), s->dropped_attrs);
    for (unsigned i = 0; i < s->nlinks; i++) {
        p = w_len(p, 13, LINK_SIZE);
        p = w_bytes(p, 1, s->links[i].trace_id, 16);
        p = w_bytes(p, 2, s->links[i].span_id, 8);
        p = w_fixed(p, 6, s->links[i].flags, 4);
    }
    if (s->error) {
        p = w_len(p, 15, status_size(s));
        if (s->status_msg)
            p = w_bytes(p, 2, s->status_msg, strlen(s->status_msg));
        p = w_varint(w_tag(p, 3, WT_VARINT), 2); /* STATUS_CODE_ERROR */
    }
    return w_fixed(p, 16, span_flags(s), 4);
}

bool ot_pb_attr_str(unsigned char *p, size_t room, uint32_t *len, const char *key, size_t klen,
                    const char *value, size_t vlen)
{
    size_t n = len_field(9, kv_str_size(klen, vlen));
    if (n > room - *len)
        return false;
    w_kv_str(p + *len, 9, key, klen, value, vlen);
    *len += (uint32_t)n;
    return true;
}

size_t ot_pb_span_len(const ot_span_t *s, size_t *inner)
{
    return len_field(2, *inner = span_size(s));
}

void ot_pb_span_put(const ot_span_t *s, size_t inner, unsigned char *p)
{
    w_span(p, s, inner);
}

size_t ot_pb_head(const ot_kv_t *res, size_t nres, size_t bytes, unsigned char *out)
{
    size_t resource = 0, scope = len_field(1, strlen(OT_SCOPE_NAME)), ss, rs;
    unsigned char *p = out;
    for (size_t i = 0; i < nres; i++)
        resource += len_field(1, kv_str_size(strlen(res[i].key), strlen(res[i].value)));
    ss = len_field(1, scope) + bytes; /* ScopeSpans { scope = 1; spans = 2 } */
    rs = len_field(1, resource) + len_field(2, ss); /* ResourceSpans { resource 1; scope_spans 2 } */
    if (!out)
        return len_field(1, rs) - bytes;
    p = w_len(p, 1, rs); /* ExportTraceServiceRequest.resource_spans = 1 */
    p = w_len(p, 1, resource); /* Resource { attributes = 1 } */
    for (size_t i = 0; i < nres; i++)
        p = w_kv_str(p, 1, res[i].key, strlen(res[i].key), res[i].value, strlen(res[i].value));
    p = w_len(p, 2, ss);
    p = w_len(p, 1, scope); /* InstrumentationScope { name = 1 } */
    p = w_bytes(p, 1, OT_SCOPE_NAME, strlen(OT_SCOPE_NAME));
    return (size_t)(p - out);
}

/* The request's protobuf: its envelope, then the spans' bytes (its ScopeSpans.spans). */
static bool pb_request(const ot_kv_t *res, size_t nres, const ot_spans_t *sp, ot_buf_t *out)
{
    size_t bytes = sp->n ? sp->ends[sp->n - 1] - sp->start : 0;
    size_t head = ot_pb_head(res, nres, bytes, NULL);
    if (!ot_buf_reserve(out, head + bytes))
        return false;
    if (ot_pb_head(res, nres, bytes, out->p + out->len) != head)
        return false;
    if (bytes)
        memcpy(out->p + out->len + head, sp->p + sp->start, bytes);
    out->len += head + bytes;
    return true;
}

/* ---- OTLP/JSON ----------------------------------------------------------- */

static json_t *js_attr(const char *key, const ot_attr_t *a, const char *str)
{
    json_t *v;
    char num[24];
    if (!a || a->type == OT_V_STR) {
        v = json_pack("{s:s}", "stringValue", a ? a->s : str);
    } else if (a->type == OT_V_BOOL) {
        v = json_pack("{s:b}", "boolValue", (int)(a->i != 0));
    } else {
        snprintf(num, sizeof(num), "%lld", a->i);
        v = json_pack("{s:s}", "intValue", num);
    }
    return json_pack("{s:s,s:o}", "key", key, "value", v);
}

static json_t *js_span(const ot_span_t *s)
{
    char tid[33], sid[17], pid[17], start[24], end[24];
    json_t *attrs = json_array(), *links = json_array(), *o;
    ib_enc_hex(tid, s->ctx.trace_id, 16);
    ib_enc_hex(sid, s->ctx.span_id, 8);
    snprintf(start, sizeof(start), "%lld", s->start_ns);
    snprintf(end, sizeof(end), "%lld", s->end_ns);
    for (unsigned i = 0; s->shared && i < s->shared->n; i++)
        json_array_append_new(attrs, js_attr(s->shared->kv[i].key, NULL, s->shared->kv[i].value));
    for (unsigned i = 0; i < s->nattrs; i++)
        json_array_append_new(attrs, js_attr(s->attrs[i].key, &s->attrs[i], NULL));
    for (unsigned i = 0; i < s->nlinks; i++) {
        char lt[33], ls[17];
        ib_enc_hex(lt, s->links[i].trace_id, 16);
        ib_enc_hex(ls, s->links[i].span_id, 8);
        json_array_append_new(links, json_pack("{s:s,s:s,s:i}", "traceId", lt, "spanId", ls,
                                               "flags", (int)s->links[i].flags));
    }
    o = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:o,s:o,s:i}", "traceId", tid, "spanId", sid, "name",
                  s->name, "kind", (int)s->kind, "startTimeUnixNano", start, "endTimeUnixNano",
                  end, "attributes", attrs, "links", links, "flags", (int)span_flags(s));
    if (o && s->has_parent) {
        ib_enc_hex(pid, s->parent, 8);
        json_object_set_new(o, "parentSpanId", json_string(pid));
    }
    if (o && s->dropped_attrs)
        json_object_set_new(o, "droppedAttributesCount", json_integer(s->dropped_attrs));
    if (o && s->error)
        json_object_set_new(o, "status", json_pack("{s:s,s:i}", "message",
                                                   s->status_msg ? s->status_msg : "", "code", 2));
    return o;
}

char *ot_json_span(const ot_span_t *s)
{
    json_t *o = js_span(s);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static bool append(ot_buf_t *out, const void *p, size_t n)
{
    if (!ot_buf_reserve(out, n))
        return false;
    memcpy(out->p + out->len, p, n);
    out->len += n;
    return true;
}

/* The request's OTLP/JSON: its envelope around the spans' objects, comma-separated. */
static bool json_request(const ot_kv_t *res, size_t nres, const ot_spans_t *sp, ot_buf_t *out)
{
    static const char head[] = "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
    static const char mid[] = "},\"scopeSpans\":[{\"scope\":{\"name\":\"" OT_SCOPE_NAME
                              "\"},\"spans\":[";
    static const char tail[] = "]}]}]}";
    json_t *rattrs = json_array();
    char *ra;
    bool ok;
    for (size_t i = 0; rattrs && i < nres; i++)
        json_array_append_new(rattrs, js_attr(res[i].key, NULL, res[i].value));
    ra = rattrs ? json_dumps(rattrs, JSON_COMPACT) : NULL;
    json_decref(rattrs);
    ok = ra && append(out, head, sizeof(head) - 1) && append(out, ra, strlen(ra)) &&
         append(out, mid, sizeof(mid) - 1);
    free(ra);
    for (unsigned i = 0; ok && i < sp->n; i++) {
        size_t from = i ? sp->ends[i - 1] : sp->start;
        ok = (!i || append(out, ",", 1)) && append(out, sp->p + from, sp->ends[i] - from);
    }
    return ok && append(out, tail, sizeof(tail) - 1);
}

bool ot_encode_request(const ot_kv_t *res, size_t nres, bool json, const ot_spans_t *sp,
                       ot_buf_t *out)
{
    return json ? json_request(res, nres, sp, out) : pb_request(res, nres, sp, out);
}

/* ---- a list of span records at once (tests) ------------------------------ */

/* Encodes each span of the list into spans (ends at *ends, n of them), then the request. */
static bool encode_list(const ot_kv_t *res, size_t nres, bool json, const ot_span_t *list,
                        ot_buf_t *out)
{
    ot_buf_t b = {0};
    size_t n = 0, *ends = NULL, *e = NULL, inner = 0;
    bool ok = true;
    for (const ot_span_t *s = list; ok && s; s = s->next) {
        char *text = json ? ot_json_span(s) : NULL;
        size_t len = json ? (text ? strlen(text) : 0) : ot_pb_span_len(s, &inner);
        ok = (!json || text) && ot_buf_reserve(&b, len) &&
             (e = realloc(ends, (n + 1) * sizeof(*e)));
        if (ok) {
            ends = e;
            if (json)
                memcpy(b.p + b.len, text, len);
            else
                ot_pb_span_put(s, inner, b.p + b.len);
            b.len += len;
            ends[n++] = b.len;
        }
        free(text);
    }
    ot_spans_t sp = {b.p, ends, 0, (unsigned)n};
    ok = ok && ot_encode_request(res, nres, json, &sp, out);
    free(ends);
    ot_buf_free(&b);
    return ok;
}

bool ot_encode_protobuf(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out)
{
    return encode_list(res, nres, false, spans, out);
}

bool ot_encode_json(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out)
{
    return encode_list(res, nres, true, spans, out);
}
