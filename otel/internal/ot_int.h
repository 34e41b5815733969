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

typedef enum { OT_V_STR, OT_V_INT, OT_V_BOOL } ot_vtype_t;

typedef struct ot_attr {
    const char *key;
    ot_vtype_t type;
    const char *s; /* OT_V_STR: owned unless borrowed */
    bool borrowed; /* s outlives the span (ot_span_str_const): not freed */
    long long i;
} ot_attr_t;

struct ot_span {
    ot_exporter_t *x;
    ot_ctx_t ctx;
    uint8_t parent[8];
    bool has_parent, parent_remote, recording;
    ot_kind_t kind;
    const char *name;
    bool name_owned; /* name was copied (ot_span_start) */
    long long start_ns, end_ns;
    ot_attr_t attrs[OT_MAX_ATTRS];
    unsigned nattrs, dropped_attrs;
    ot_ctx_t *links;
    unsigned nlinks, caplinks;
    bool error;
    char *status_msg;
    struct ot_span *next; /* the exporter's queue */
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

/* The encoded request body of n spans (linked by next), protobuf or JSON. */
bool ot_encode_protobuf(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out);
bool ot_encode_json(const ot_kv_t *res, size_t nres, const ot_span_t *spans, ot_buf_t *out);
void ot_buf_free(ot_buf_t *b);

/* Whether a new span is recorded (ot_span.c). */
bool ot_sample(ot_sampler_t s, double ratio, const ot_ctx_t *parent, const uint8_t trace_id[16]);
/* The exporter's sampler, ratio, and queueing (ot_export.c). */
void ot_exporter_sampler(const ot_exporter_t *x, ot_sampler_t *s, double *ratio);
void ot_exporter_queue(ot_exporter_t *x, ot_span_t *s);
/* Frees a span record. */
void ot_span_free(ot_span_t *s);

#endif
