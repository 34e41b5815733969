/*
 * emu_codec.h - the AMQP 1.0 message bytes the emulator touches without
 * decoding whole messages: section boundaries, the few properties the broker
 * acts on (message-id, group-id, ttl, scheduled time), hand-encoded headers
 * with an explicit delivery-count, broker annotations, dead-letter
 * application properties and batch envelopes (format 0x80013700).
 *
 * Bodies are copied byte for byte and never re-encoded.
 *
 * thread: any (pure functions over caller buffers).
 */
#ifndef EMU_CODEC_H
#define EMU_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct emu_span {
    uint32_t off, len;
} emu_span_t;

/* Where each section of an encoded message sits; len 0 when absent. */
typedef struct emu_sections {
    emu_span_t header, dann, mann, props, app;
    emu_span_t rest; /* body sections and footer, up to the end */
    int n_data;      /* number of data body sections */
    bool other_body; /* an amqp-value or amqp-sequence section */
} emu_sections_t;

/* What the broker reads from a message. */
typedef struct emu_msg_info {
    emu_span_t message_id; /* raw encoded message-id value; len 0 if absent or null */
    char group_id[129];    /* "" when absent */
    bool has_ttl;
    uint32_t ttl_ms;
    bool durable;
    int priority;         /* -1 when absent */
    int64_t scheduled_ms; /* x-opt-scheduled-enqueue-time, 0 when absent */
} emu_msg_info_t;

/* A growable byte buffer. */
typedef struct emu_buf {
    uint8_t *data;
    size_t len, cap;
} emu_buf_t;

int emu_buf_reserve(emu_buf_t *b, size_t more);
int emu_buf_add(emu_buf_t *b, const void *p, size_t n);
void emu_buf_free(emu_buf_t *b);

/* Length of the one encoded value at p; -1 when malformed or truncated. */
long emu_amqp_skip(const uint8_t *p, size_t len);

/* Finds the sections of an encoded message; -1 when malformed. */
int emu_msg_split(const uint8_t *p, size_t len, emu_sections_t *s);

/* Reads what the broker acts on; -1 when a section is malformed. */
int emu_msg_info(const uint8_t *p, const emu_sections_t *s, emu_msg_info_t *info);

/*
 * True when the message looks like a batch envelope: no amqp-value/sequence,
 * one or more data sections, each holding a complete encoded message.
 * (Proton-C 0.37 does not expose a received transfer's message-format.)
 */
bool emu_msg_is_batch(const uint8_t *p, const emu_sections_t *s);

/* Calls fn for each data section payload of p; stops and returns -1 if fn does. */
int emu_msg_each_data(const uint8_t *p, const emu_sections_t *s,
                      int (*fn)(void *ctx, const uint8_t *item, size_t len), void *ctx);

/*
 * Writes into out a copy of the message p[0..len) whose properties carry
 * message-id = id (a string), keeping every other byte. Used when a sender
 * leaves message-id empty: Service Bus assigns one. Returns 0 or -1.
 */
int emu_msg_set_id(const uint8_t *p, size_t len, const emu_sections_t *s, const char *id,
                   emu_buf_t *out);

/* Per-delivery fields the broker adds. */
typedef struct emu_delivery_fields {
    uint32_t delivery_count;
    int64_t seq;
    int64_t enqueued_ms;
    int64_t locked_until_ms; /* 0: omit x-opt-locked-until */
    int message_state;       /* -1: omit x-opt-message-state */
    const uint8_t *app;      /* replacement application-properties section, or NULL */
    size_t app_len;
} emu_delivery_fields_t;

/*
 * Appends to out the message as delivered: a header with explicit
 * delivery-count, message-annotations = the sender's plus the broker's,
 * then properties, application-properties and body as stored.
 * Returns 0, or -1 when out of memory or the stored bytes are malformed.
 */
int emu_encode_delivery(emu_buf_t *out, const uint8_t *p, const emu_sections_t *s,
                        const emu_msg_info_t *info, const emu_delivery_fields_t *f);

/*
 * Appends an application-properties section: the stored one (app may be
 * NULL/0) with DeadLetterReason and DeadLetterErrorDescription set (a NULL
 * value is left out). Returns 0 or -1.
 */
int emu_encode_dead_letter_props(emu_buf_t *out, const uint8_t *app, size_t app_len,
                                 const char *reason, const char *description);

/*
 * Appends an application-properties section: the stored one (app may be
 * NULL/0) updated with the entries of mods, an encoded AMQP map (symbol
 * keys become strings; DeadLetterReason/DeadLetterErrorDescription are
 * left out, dead-lettering sets them). Returns 0 or -1.
 */
int emu_encode_app_merge(emu_buf_t *out, const uint8_t *app, size_t app_len, const uint8_t *mods,
                         size_t mods_len);

#endif
