/*
 * ot_int.h - inside otel/: the span record, the exporter, the encoders.
 * Private to otel/ (and its tests).
 */
#ifndef OT_INT_H
#define OT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "ot_trace.h"

#define OT_MAX_ATTRS 24
#define OT_TEXT_MAX 256 /* a span's copied strings, in the span while they fit */

typedef enum { OT_V_STR, OT_V_INT, OT_V_BOOL } ot_vtype_t;

typedef struct ot_attr {
    const char *key;
    union {
        const char *s; /* OT_V_STR: in the span's text, borrowed, or owned */
        long long i;   /* OT_V_INT, OT_V_BOOL */
    };
    uint32_t klen, slen; /* strlen of key and s, for the encoders */
    uint8_t type;        /* ot_vtype_t */
    bool owned;          /* s was allocated for it (did not fit the text): freed with it */
} ot_attr_t;

/*
 * A span record. ot_span_start clears the fields up to text; the text and
 * the attributes are written as they are added, never cleared.
 */
struct ot_span {
    ot_exporter_t *x;
    ot_ctx_t ctx;
    uint8_t parent[8];
    bool has_parent, parent_remote, recording;
    ot_kind_t kind;
    const char *name;
    uint32_t name_len;
    bool name_owned; /* name was allocated (a copy that did not fit the text) */
    long long start_ns, end_ns;
    const ot_shared_t *shared; /* attributes before attrs, or NULL */
    unsigned nattrs, dropped_attrs;
    ot_ctx_t *links;
    unsigned nlinks, caplinks;
    bool error;
    char *status_msg;
    struct ot_span *next; /* the exporter's records for reuse */
    bool spilled;         /* a copied string did not fit the text: some attribute owns one */
    unsigned text_used;
    char text[OT_TEXT_MAX];
    ot_attr_t attrs[OT_MAX_ATTRS];
};

/* The resource's attributes, as key/value strings. */
typedef struct ot_kv {
    char *key, *value;
} ot_kv_t;

typedef enum {
    OT_SAMPLE_ALWAYS_ON,
    OT_SAMPLE_ALWAYS_OFF,
    OT_SAMPLE_RATIO,
    OT_SAMPLE_PARENT_ALWAYS_ON,
    OT_SAMPLE_PARENT_ALWAYS_OFF,
    OT_SAMPLE_PARENT_RATIO
} ot_sampler_t;

/* A growable byte buffer; on allocation failure it stays failed (ok false). */
typedef struct ot_buf {
    unsigned char *p;
    size_t len, cap;
    bool failed;
} ot_buf_t;

/*
 * A span is encoded by the thread that ends it, while its record is in that
 * thread's cache, and queued as bytes: protobuf, its ScopeSpans.spans field
 * (ot_pb_span_len bytes, written by ot_pb_span_put with the inner length
 * ot_pb_span_len gave); JSON, its object (ot_json_span, to be freed).
 * thread: any.
 */
size_t ot_pb_span_len(const ot_span_t *s, size_t *inner);
/*
 * Appends a string attribute (a Span.attributes field) at p + *len, moving
 * *len on; false when it does not fit in room bytes.
 */
bool ot_pb_attr_str(unsigned char *p, size_t room, uint32_t *len, const char *key, size_t klen,
                    const char *value, size_t vlen);
void ot_pb_span_put(const ot_span_t *s, size_t inner, unsigned char *p);
char *ot_json_span(const ot_span_t *s);

/* Encoded spans back to back: the i-th from ends[i - 1] (start for the first) to ends[i]. */
typedef struct ot_spans {
    const unsigned char *p;
    const size_t *ends;
    size_t start;
    unsigned n;
} ot_spans_t;

/*
 * The protobuf request's bytes before its spans' (bytes of them): written at
 * out, or with out NULL only counted. Returns their length.
 */
size_t ot_pb_head(const ot_kv_t *res, size_t nres, size_t bytes, unsigned char *out);
/* Appends to out the request body carrying sp's spans (encoded as json says). */
bool ot_encode_request(const ot_kv_t *res, size_t nres, bool json, const ot_spans_t *sp,
                       ot_buf_t *out);
/* The request body of a list of span records (linked by next), protobuf or JSON. */
bool ot_encode_protobuf(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out);
bool ot_encode_json(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out);
/* Room for more bytes at b->len; false (b failed) when memory runs out. */
bool ot_buf_reserve(ot_buf_t *b, size_t more);
void ot_buf_free(ot_buf_t *b);

/* Whether a new span is recorded (ot_span.c). */
bool ot_sample(ot_sampler_t s, double ratio, const ot_ctx_t *parent, const uint8_t trace_id[16]);
/* The exporter's sampler, ratio, and queueing (ot_export.c). */
void ot_exporter_sampler(const ot_exporter_t *x, ot_sampler_t *s, double *ratio);
/* Encodes s, queues its bytes (or drops it, counted) and gives its record back. */
void ot_exporter_queue(ot_exporter_t *x, ot_span_t *s);
/*
 * Span records of x: a recycled one (its links array kept), else a new one
 * with none; NULL when memory runs out. put takes back a chain (linked by
 * next) of cleared records, keeping up to queue_max for reuse and freeing the
 * rest: a record lives from its span's start to its end (the queue holds
 * bytes), and a free across threads' malloc arenas, span after span, cost
 * more than the span. thread: any.
 */
ot_span_t *ot_exporter_span_get(ot_exporter_t *x);
void ot_exporter_span_put(ot_exporter_t *x, ot_span_t *first);
/* Frees what a span record holds (its strings) but the record and its links array. */
void ot_span_clear(ot_span_t *s);
/* Clears a span record and gives it back to its exporter. */
void ot_span_free(ot_span_t *s);

#endif
