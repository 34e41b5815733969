/*
 * ot_span.c - W3C trace context (parse, format), span ids, the sampler,
 * and building a span. thread: any; a span belongs to the thread that
 * builds it until ot_span_end hands it to the exporter.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ib_enc.h"
#include "ot_int.h"

long long ot_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool all_zero(const uint8_t *id, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (id[i])
            return false;
    return true;
}

bool ot_ctx_parse(const char *tp, ot_ctx_t *out)
{
    uint8_t ver;
    size_t len = tp ? strlen(tp) : 0;
    memset(out, 0, sizeof(*out));
    /* version 00 is exactly 55 characters; a later one may go on after a '-' */
    if (len < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || !ib_dec_hex(&ver, tp, 1, IB_HEX_LOWER))
        return false;
    if (ver == 0xff || (ver == 0 && len != 55) || (len > 55 && tp[55] != '-'))
        return false;
    /* Lower-case hex only, as the W3C specification requires. */
    if (!ib_dec_hex(out->trace_id, tp + 3, 16, IB_HEX_LOWER) ||
        !ib_dec_hex(out->span_id, tp + 36, 8, IB_HEX_LOWER) ||
        !ib_dec_hex(&out->flags, tp + 53, 1, IB_HEX_LOWER) || all_zero(out->trace_id, 16) ||
        all_zero(out->span_id, 8)) {
        memset(out, 0, sizeof(*out));
        return false;
    }
    out->valid = true;
    return true;
}

void ot_ctx_format(const ot_ctx_t *ctx, char out[OT_TRACEPARENT_LEN])
{
    memcpy(out, "00-", 3);
    ib_enc_hex(out + 3, ctx->trace_id, 16);
    out[35] = '-';
    ib_enc_hex(out + 36, ctx->span_id, 8);
    out[52] = '-';
    ib_enc_hex(out + 53, &ctx->flags, 1);
}

/* Random bytes for ids (n a multiple of 8): a per-thread xorshift generator seeded by the kernel. */
static void random_id(uint8_t *out, size_t n)
{
    static _Thread_local uint64_t state;
    while (!state) {
        if (getrandom(&state, sizeof(state), 0) != (ssize_t)sizeof(state))
            state = (uint64_t)ot_now_ns() ^ (uint64_t)(uintptr_t)&state;
    }
    for (size_t i = 0; i < n; i += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        memcpy(out + i, &state, 8); /* xorshift never yields 0: never the invalid all-zero id */
    }
}

/* The ratio sampler decides on the trace id's last 56 bits, as OpenTelemetry's. */
static bool ratio_says(double ratio, const uint8_t trace_id[16])
{
    uint64_t r = 0;
    for (int i = 9; i < 16; i++)
        r = (r << 8) | trace_id[i];
    if (ratio >= 1.0)
        return true;
    if (ratio <= 0.0)
        return false;
    return (double)r < ratio * 72057594037927936.0; /* 2^56 */
}

bool ot_sample(ot_sampler_t s, double ratio, const ot_ctx_t *parent, const uint8_t trace_id[16])
{
    bool has_parent = parent && parent->valid;
    switch (s) {
    case OT_SAMPLE_ALWAYS_ON:
        return true;
    case OT_SAMPLE_ALWAYS_OFF:
        return false;
    case OT_SAMPLE_RATIO:
        return ratio_says(ratio, trace_id);
    case OT_SAMPLE_PARENT_ALWAYS_ON:
        return has_parent ? (parent->flags & 1) != 0 : true;
    case OT_SAMPLE_PARENT_ALWAYS_OFF:
        return has_parent ? (parent->flags & 1) != 0 : false;
    case OT_SAMPLE_PARENT_RATIO:
        return has_parent ? (parent->flags & 1) != 0 : ratio_says(ratio, trace_id);
    }
    return false;
}

/*
 * A copy of n bytes of src (and a NUL) in s's text while it fits, else on
 * the heap (*owned set); NULL when memory runs out.
 */
static const char *copy_text(ot_span_t *s, const char *src, size_t n, bool *owned)
{
    char *d;
    *owned = false;
    if (n < sizeof(s->text) - s->text_used) {
        d = s->text + s->text_used;
        s->text_used += (unsigned)n + 1;
    } else if ((d = malloc(n + 1))) {
        *owned = s->spilled = true;
    } else {
        return NULL;
    }
    memcpy(d, src, n);
    d[n] = '\0';
    return d;
}

/* The sampler's decision on a new span of x (its ids already drawn), or keep's when it forces one. */
static bool decide(ot_exporter_t *x, ot_keep_t keep, const ot_ctx_t *parent,
                   const uint8_t trace_id[16])
{
    ot_sampler_t sampler;
    double ratio;
    if (keep == OT_KEEP_FORCED)
        return true;
    ot_exporter_sampler(x, &sampler, &ratio);
    return ot_sample(sampler, ratio, parent, trace_id);
}

static ot_span_t *span_start(ot_exporter_t *x, const char *name, bool copy, ot_kind_t kind,
                             const ot_ctx_t *parent, bool remote, long long start_ns,
                             ot_keep_t keep)
{
    ot_ctx_t ctx = {.valid = true};
    bool has_parent = parent && parent->valid, recording;
    ot_span_t *s;
    ot_ctx_t *links;
    unsigned caplinks;
    if (!x)
        return NULL;
    if (has_parent)
        memcpy(ctx.trace_id, parent->trace_id, 16);
    else
        random_id(ctx.trace_id, 16);
    recording = name && decide(x, keep, parent, ctx.trace_id);
    if (!recording && (keep == OT_KEEP_RECORDED || (keep == OT_KEEP_PROPAGATED && !has_parent)))
        return NULL; /* nothing to record, nothing to hand on: nothing taken */
    if (!(s = ot_exporter_span_get(x)))
        return NULL;
    links = s->links;
    caplinks = s->caplinks;
    memset(s, 0, offsetof(ot_span_t, text)); /* the text and attributes are filled as added */
    s->links = links;
    s->caplinks = caplinks;
    s->x = x;
    s->kind = kind;
    name = name ? name : "";
    s->name_len = (uint32_t)strlen(name);
    s->name = copy ? copy_text(s, name, s->name_len, &s->name_owned) : name;
    s->start_ns = start_ns ? start_ns : ot_now_ns();
    s->ctx = ctx;
    if (has_parent) {
        memcpy(s->parent, parent->span_id, 8);
        s->has_parent = true;
        s->parent_remote = remote;
    }
    random_id(s->ctx.span_id, 8);
    s->recording = recording;
    s->ctx.flags = recording ? 1 : 0;
    return s;
}

ot_span_t *ot_span_start(ot_exporter_t *x, const char *name, ot_kind_t kind,
                         const ot_ctx_t *parent, bool remote, long long start_ns)
{
    return span_start(x, name, true, kind, parent, remote, start_ns, OT_KEEP_ALWAYS);
}

ot_span_t *ot_span_start_const(ot_exporter_t *x, const char *name, ot_kind_t kind,
                               const ot_ctx_t *parent, bool remote, long long start_ns)
{
    return span_start(x, name, false, kind, parent, remote, start_ns, OT_KEEP_ALWAYS);
}

ot_span_t *ot_span_start_keep(ot_exporter_t *x, const char *name, ot_kind_t kind,
                              const ot_ctx_t *parent, bool remote, long long start_ns,
                              ot_keep_t keep)
{
    return span_start(x, name, false, kind, parent, remote, start_ns, keep);
}

bool ot_span_recording(const ot_span_t *s)
{
    return s && s->recording;
}

ot_exporter_t *ot_span_exporter(const ot_span_t *s)
{
    return s ? s->x : NULL;
}

const ot_ctx_t *ot_span_ctx(const ot_span_t *s)
{
    return &s->ctx;
}

static ot_attr_t *new_attr(ot_span_t *s, const char *key, ot_vtype_t type)
{
    if (!s || !s->recording)
        return NULL;
    if (s->nattrs == OT_MAX_ATTRS) {
        s->dropped_attrs++;
        return NULL;
    }
    ot_attr_t *a = &s->attrs[s->nattrs++];
    a->key = key;
    a->klen = (uint32_t)strlen(key);
    a->type = (uint8_t)type;
    a->owned = false;
    return a;
}

void ot_span_str(ot_span_t *s, const char *key, const char *value)
{
    ot_attr_t *a;
    if (!value || !(a = new_attr(s, key, OT_V_STR)))
        return;
    a->slen = (uint32_t)strlen(value);
    if (!(a->s = copy_text(s, value, a->slen, &a->owned))) {
        s->nattrs--;
        s->dropped_attrs++;
    }
}

void ot_span_str_const(ot_span_t *s, const char *key, const char *value)
{
    ot_attr_t *a;
    if (!value || !(a = new_attr(s, key, OT_V_STR)))
        return;
    a->s = value;
    a->slen = (uint32_t)strlen(value);
}

void ot_shared_add(ot_shared_t *set, const char *key, const char *value)
{
    if (!value || set->n == OT_SHARED_MAX)
        return;
    set->kv[set->n].key = key;
    set->kv[set->n].value = value;
    set->kv[set->n].klen = (uint32_t)strlen(key);
    set->kv[set->n].vlen = (uint32_t)strlen(value);
    if (set->n == 0)
        set->pb_whole = true;
    set->pb_whole = set->pb_whole && ot_pb_attr_str(set->pb, sizeof(set->pb), &set->pb_len, key,
                                                    set->kv[set->n].klen, value,
                                                    set->kv[set->n].vlen);
    set->n++;
}

void ot_span_shared(ot_span_t *s, const ot_shared_t *set)
{
    if (s && s->recording)
        s->shared = set;
}

void ot_span_int(ot_span_t *s, const char *key, long long value)
{
    ot_attr_t *a = new_attr(s, key, OT_V_INT);
    if (a)
        a->i = value;
}

void ot_span_bool(ot_span_t *s, const char *key, bool value)
{
    ot_attr_t *a = new_attr(s, key, OT_V_BOOL);
    if (a)
        a->i = value;
}

void ot_span_link(ot_span_t *s, const ot_ctx_t *ctx)
{
    if (!s || !s->recording || !ctx || !ctx->valid)
        return;
    if (s->nlinks == s->caplinks) {
        unsigned cap = s->caplinks ? 2 * s->caplinks : 8;
        ot_ctx_t *p = realloc(s->links, cap * sizeof(*p));
        if (!p)
            return;
        s->links = p;
        s->caplinks = cap;
    }
    s->links[s->nlinks++] = *ctx;
}

void ot_span_error(ot_span_t *s, const char *description)
{
    if (!s || !s->recording)
        return;
    s->error = true;
    free(s->status_msg);
    s->status_msg = description ? strdup(description) : NULL;
}

void ot_span_clear(ot_span_t *s)
{
    for (unsigned i = 0; s->spilled && i < s->nattrs; i++)
        if (s->attrs[i].owned)
            free((char *)s->attrs[i].s);
    s->nattrs = 0;
    s->spilled = false;
    free(s->status_msg);
    s->status_msg = NULL;
    if (s->name_owned)
        free((char *)s->name);
    s->name_owned = false;
}

void ot_span_free(ot_span_t *s)
{
    if (!s)
        return;
    ot_span_clear(s);
    s->next = NULL;
    ot_exporter_span_put(s->x, s);
}

void ot_span_drop(ot_span_t *s)
{
    ot_span_free(s);
}

void ot_span_end(ot_span_t *s, long long end_ns)
{
    if (!s)
        return;
    s->end_ns = end_ns ? end_ns : ot_now_ns();
    if (s->end_ns < s->start_ns)
        s->end_ns = s->start_ns;
    if (!s->recording) {
        ot_span_free(s);
        return;
    }
    ot_exporter_queue(s->x, s);
}
