/*
 * ot_trace.h - OpenTelemetry traces for inboxd: W3C trace context, spans,
 * and their export over OTLP/HTTP (protobuf or JSON) by one thread.
 *
 * A span is built by one thread (start, attributes, end); ot_span_end hands
 * it to the exporter's bounded queue and never blocks: when the queue is
 * full, or the collector slow or gone, spans are dropped and counted. The
 * exporter thread batches them and posts them with libcurl. Everything here
 * may be called from any thread. Depends on common/ and libcurl only.
 */
#ifndef OT_TRACE_H
#define OT_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "ib_err.h"

/* A span context: what a traceparent header carries. */
typedef struct ot_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags; /* W3C trace flags; bit 0 = sampled */
    bool valid;    /* false: no context (ids all zero) */
} ot_ctx_t;

#define OT_TRACEPARENT_LEN 56 /* "00-" 32 "-" 16 "-" 2, and the NUL */

/*
 * Parses a W3C traceparent (version 00, or a later version read as 00 as
 * the specification asks); false (out cleared) when it is not one: wrong
 * length or shape, upper-case hex, all-zero ids, version ff.
 */
bool ot_ctx_parse(const char *traceparent, ot_ctx_t *out);
/* Formats ctx as a version 00 traceparent. */
void ot_ctx_format(const ot_ctx_t *ctx, char out[OT_TRACEPARENT_LEN]);

typedef enum {
    OT_KIND_INTERNAL = 1,
    OT_KIND_SERVER = 2,
    OT_KIND_CLIENT = 3,
    OT_KIND_PRODUCER = 4,
    OT_KIND_CONSUMER = 5
} ot_kind_t;

typedef struct ot_exporter ot_exporter_t;

/* At stop, the longest the exporter sends for: a share of the drain, not the whole. */
#define OT_STOP_MS 2000
typedef struct ot_span ot_span_t;

/*
 * Exporter settings. A NULL or empty field takes the standard environment
 * variable named beside it, then the default. Tracing is off (ot_exporter_new
 * returns NULL without error) when neither endpoint is set.
 */
/*
 * Of messages without trace context, the share traced when no sampler is set:
 * the default sampler follows a sender's decision and starts a trace of its
 * own only 1 time in 100 (OpenTelemetry's SDKs default to tracing each).
 */
#define OT_DEFAULT_ROOT_RATIO 0.01

typedef struct ot_options {
    const char *endpoint;        /* OTEL_EXPORTER_OTLP_ENDPOINT; "/v1/traces" is appended */
    const char *traces_endpoint; /* OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; used as it is */
    const char *protocol;        /* OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: http/protobuf
                                    (default) or http/json */
    const char *headers;         /* OTEL_EXPORTER_OTLP_(TRACES_)HEADERS: k=v,k2=v2 */
    const char *service_name;    /* OTEL_SERVICE_NAME; default "inboxd" */
    const char *resource_attributes; /* OTEL_RESOURCE_ATTRIBUTES: k=v,k2=v2 */
    const char *sampler;         /* OTEL_TRACES_SAMPLER; default parentbased_traceidratio */
    const char *sampler_arg;     /* OTEL_TRACES_SAMPLER_ARG: the ratio; default 1.0, or
                                    OT_DEFAULT_ROOT_RATIO under the default sampler */
    unsigned queue_max;          /* spans waiting at most; 0 = 2048 */
    unsigned batch_max;          /* spans per request at most; 0 = 512 */
    unsigned interval_ms;        /* longest wait before a partial batch is sent; 0 = 1000 */
    unsigned timeout_ms;         /* per request; 0 = 10000 */
} ot_options_t;

/*
 * Starts the exporter thread. NULL with err clear when tracing is off; NULL
 * with err set (naming the setting) when a setting is invalid.
 */
ot_exporter_t *ot_exporter_new(const ot_options_t *opt, ib_error_t *err);
/* Checks the settings as ot_exporter_new would, without starting anything. */
bool ot_options_check(const ot_options_t *opt, ib_error_t *err);
/*
 * Sends what is queued for at most OT_STOP_MS (the request under way
 * included; what is left is dropped, counted), stops the thread, frees.
 */
void ot_exporter_free(ot_exporter_t *x);
/* Whether the exporter is set up with http/json (for tests and logs). */
bool ot_exporter_json(const ot_exporter_t *x);
/* Counters: spans exported (the collector answered 2xx) and dropped. */
unsigned long long ot_exporter_exported(const ot_exporter_t *x);
unsigned long long ot_exporter_dropped(const ot_exporter_t *x);

/*
 * Starts a span of x (NULL when x is NULL or memory runs out). parent may be
 * NULL or invalid (a root span: a new trace id); remote says the parent came
 * from another process (the message's traceparent). The sampler decides
 * whether the span is recorded; an unrecorded span still has a context to
 * propagate (with the sampled flag clear). start_ns 0 = now.
 */
ot_span_t *ot_span_start(ot_exporter_t *x, const char *name, ot_kind_t kind,
                         const ot_ctx_t *parent, bool remote, long long start_ns);
/* As ot_span_start, but name is not copied: it must outlive the span (a constant). */
ot_span_t *ot_span_start_const(ot_exporter_t *x, const char *name, ot_kind_t kind,
                               const ot_ctx_t *parent, bool remote, long long start_ns);
/* Which spans ot_span_start_keep gives: the sampler's unrecorded ones too, or not. */
typedef enum {
    OT_KEEP_ALWAYS,     /* as ot_span_start: recorded or not */
    OT_KEEP_PROPAGATED, /* NULL for an unrecorded root: it has no context worth handing on */
    OT_KEEP_RECORDED,   /* NULL whenever unrecorded (a leaf: nothing hands its context on) */
    OT_KEEP_FORCED      /* recorded whatever the sampler says (a span of recorded spans' links) */
} ot_keep_t;
/*
 * As ot_span_start_const, with keep deciding what it gives; a NULL it gives
 * costs no span record (the sampler's "no" to a message without trace
 * context is then nearly free).
 */
ot_span_t *ot_span_start_keep(ot_exporter_t *x, const char *name, ot_kind_t kind,
                              const ot_ctx_t *parent, bool remote, long long start_ns,
                              ot_keep_t keep);
/* Whether s is recorded (false for NULL). */
bool ot_span_recording(const ot_span_t *s);
/* The exporter a span belongs to (for its children). */
ot_exporter_t *ot_span_exporter(const ot_span_t *s);
/* The span's own context (for children and traceparent headers). */
const ot_ctx_t *ot_span_ctx(const ot_span_t *s);
/* Attributes; key must outlive the span (a string constant). NULL s: no-op. */
void ot_span_str(ot_span_t *s, const char *key, const char *value);
/* As ot_span_str without a copy: value must outlive the span (constant, or config). */
void ot_span_str_const(ot_span_t *s, const char *key, const char *value);
void ot_span_int(ot_span_t *s, const char *key, long long value);
void ot_span_bool(ot_span_t *s, const char *key, bool value);
/*
 * String attributes many spans share (a consumer span's destination, a
 * settlement's operation), built once before any span carries them; keys
 * and values must outlive every such span. A span carries a set by one
 * pointer, its attributes first; they do not count against a span's limit.
 */
#define OT_SHARED_MAX 8
#define OT_SHARED_PB 1024 /* room for the set's protobuf, encoded once */
typedef struct ot_shared {
    struct {
        const char *key, *value;
        uint32_t klen, vlen;
    } kv[OT_SHARED_MAX];
    unsigned n;
    uint32_t pb_len;               /* bytes of pb: the set's Span.attributes fields */
    bool pb_whole;                 /* pb holds every pair (else each is encoded per span) */
    unsigned char pb[OT_SHARED_PB];
} ot_shared_t;

/* Adds key=value to set (a NULL value, or a full set: nothing). Start from a zeroed set. */
void ot_shared_add(ot_shared_t *set, const char *key, const char *value);
/* s carries set (NULL s or set: no-op). */
void ot_span_shared(ot_span_t *s, const ot_shared_t *set);
/* A link to another span (a batch's transaction to each message it carries). */
void ot_span_link(ot_span_t *s, const ot_ctx_t *ctx);
/* Status ERROR with a description (OK is never set: unset means no error). */
void ot_span_error(ot_span_t *s, const char *description);
/* Ends s (end_ns 0 = now) and queues it for export, or drops it; frees s. */
void ot_span_end(ot_span_t *s, long long end_ns);
/* Frees s without exporting it (a span started in vain). NULL s: no-op. */
void ot_span_drop(ot_span_t *s);

/* Nanoseconds since the epoch, now. */
long long ot_now_ns(void);

#endif
