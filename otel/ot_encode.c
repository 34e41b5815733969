/*
 * ot_encode.c - the body of an OTLP/HTTP trace export request
 * (ExportTraceServiceRequest): protobuf, field by field as
 * opentelemetry-proto's trace.proto, common.proto and resource.proto number
 * them, or the OTLP/JSON mapping of the same message (ids as hex, 64-bit
 * integers as strings, enums as numbers). thread: the exporter's.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ib_enc.h"
#include "ot_int.h"

#define OT_SCOPE_NAME "inboxd"

/* ---- buffer and protobuf wire format ------------------------------------ */

void ot_buf_free(ot_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static bool reserve(ot_buf_t *b, size_t more)
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

static void put(ot_buf_t *b, const void *src, size_t n)
{
    if (reserve(b, n)) {
        memcpy(b->p + b->len, src, n);
        b->len += n;
    }
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void varint(ot_buf_t *b, uint64_t v)
{
    unsigned char tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (unsigned char)v;
    put(b, tmp, n);
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static void tag(ot_buf_t *b, unsigned field, unsigned wt)
{
    varint(b, ((uint64_t)field << 3) | wt);
}

static void bytes_field(ot_buf_t *b, unsigned field, const void *p, size_t n)
{
    tag(b, field, WT_LEN);
    varint(b, n);
    put(b, p, n);
}

static void str_field(ot_buf_t *b, unsigned field, const char *s)
{
    bytes_field(b, field, s, strlen(s));
}

static void fixed64_field(ot_buf_t *b, unsigned field, uint64_t v)
{
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    tag(b, field, WT_I64);
    put(b, le, 8);
}

static void fixed32_field(ot_buf_t *b, unsigned field, uint32_t v)
{
    unsigned char le[4];
    for (int i = 0; i < 4; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    tag(b, field, WT_I32);
    put(b, le, 4);
}

/* A nested message: open() notes where it starts, close() inserts its tag and length. */
static size_t open_msg(const ot_buf_t *b)
{
    return b->len;
}

static void close_msg(ot_buf_t *b, size_t start, unsigned field)
{
    size_t n = b->len - start;
    uint64_t key = ((uint64_t)field << 3) | WT_LEN;
    size_t head = varint_len(key) + varint_len(n);
    if (!reserve(b, head))
        return;
    memmove(b->p + start + head, b->p + start, n);
    size_t end = b->len;
    b->len = start;
    varint(b, key);
    varint(b, n);
    b->len = end + head;
}

/* KeyValue { key = 1; AnyValue value = 2 }; AnyValue { string 1, bool 2, int64 3 } */
static void pb_attr(ot_buf_t *b, unsigned field, const char *key, const ot_attr_t *a,
                    const char *str)
{
    size_t kv = open_msg(b), any;
    str_field(b, 1, key);
    any = open_msg(b);
    if (!a || a->type == OT_V_STR) {
        str_field(b, 1, a ? a->s : str);
    } else if (a->type == OT_V_BOOL) {
        tag(b, 2, WT_VARINT);
        varint(b, a->i != 0);
    } else {
        tag(b, 3, WT_VARINT);
        varint(b, (uint64_t)a->i);
    }
    close_msg(b, any, 2);
    close_msg(b, kv, field);
}

/* Span flags: the W3C flags, and whether the parent is known to be remote. */
static uint32_t span_flags(const ot_span_t *s)
{
    uint32_t f = s->ctx.flags;
    if (s->has_parent)
        f |= 0x100u | (s->parent_remote ? 0x200u : 0);
    return f;
}

static void pb_span(ot_buf_t *b, const ot_span_t *s)
{
    size_t sp = open_msg(b);
    bytes_field(b, 1, s->ctx.trace_id, 16);
    bytes_field(b, 2, s->ctx.span_id, 8);
    if (s->has_parent)
        bytes_field(b, 4, s->parent, 8);
    str_field(b, 5, s->name);
    tag(b, 6, WT_VARINT);
    varint(b, (uint64_t)s->kind);
    fixed64_field(b, 7, (uint64_t)s->start_ns);
    fixed64_field(b, 8, (uint64_t)s->end_ns);
    for (unsigned i = 0; i < s->nattrs; i++)
        pb_attr(b, 9, s->attrs[i].key, &s->attrs[i], NULL);
    if (s->dropped_attrs) {
        tag(b, 10, WT_VARINT);
        varint(b, s->dropped_attrs);
    }
    for (unsigned i = 0; i < s->nlinks; i++) {
        size_t lk = open_msg(b);
        bytes_field(b, 1, s->links[i].trace_id, 16);
        bytes_field(b, 2, s->links[i].span_id, 8);
        fixed32_field(b, 6, s->links[i].flags);
        close_msg(b, lk, 13);
    }
    if (s->error) {
        size_t st = open_msg(b);
        if (s->status_msg)
            str_field(b, 2, s->status_msg);
        tag(b, 3, WT_VARINT);
        varint(b, 2); /* STATUS_CODE_ERROR */
        close_msg(b, st, 15);
    }
    fixed32_field(b, 16, span_flags(s));
    close_msg(b, sp, 2);
}

bool ot_encode_protobuf(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out)
{
    size_t rs = open_msg(out), r, ss, sc;
    r = open_msg(out); /* ResourceSpans.resource = 1: Resource { attributes = 1 } */
    for (size_t i = 0; i < nres; i++)
        pb_attr(out, 1, res[i].key, NULL, res[i].value);
    close_msg(out, r, 1);
    ss = open_msg(out); /* ResourceSpans.scope_spans = 2 */
    sc = open_msg(out); /* ScopeSpans.scope = 1: InstrumentationScope { name = 1 } */
    str_field(out, 1, OT_SCOPE_NAME);
    close_msg(out, sc, 1);
    for (const ot_span_t *s = spans; s; s = s->next)
        pb_span(out, s); /* ScopeSpans.spans = 2 */
    close_msg(out, ss, 2);
    close_msg(out, rs, 1); /* ExportTraceServiceRequest.resource_spans = 1 */
    return !out->failed;
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

bool ot_encode_json(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out)
{
    json_t *rattrs = json_array(), *list = json_array(), *root;
    char *text;
    for (size_t i = 0; i < nres; i++)
        json_array_append_new(rattrs, js_attr(res[i].key, NULL, res[i].value));
    for (const ot_span_t *s = spans; s; s = s->next)
        json_array_append_new(list, js_span(s));
    root = json_pack("{s:[{s:{s:o},s:[{s:{s:s},s:o}]}]}", "resourceSpans", "resource",
                     "attributes", rattrs, "scopeSpans", "scope", "name", OT_SCOPE_NAME, "spans",
                     list);
    text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return false;
    put(out, text, strlen(text));
    free(text);
    return !out->failed;
}
