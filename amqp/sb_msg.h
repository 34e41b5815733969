/*
 * sb_msg.h - a Service Bus message decoded into plain C.
 *
 * A received message is owned by the client (sb_client.h): the worker reads
 * its public fields from on_message until on_settled returns, and never
 * frees it. Peeked messages (sb_send.h) and messages decoded directly with
 * sb_msg_decode are owned by the caller and freed with sb_msg_free.
 *
 * The public fields are written once, before the message is handed out, and
 * never change afterwards, so any thread may read them.
 */
#ifndef SB_MSG_H
#define SB_MSG_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"

/* Application property value types. */
enum {
    SB_PROP_STRING = 0, /* str */
    SB_PROP_INT64,      /* i: every AMQP integer type, char and timestamp-less ints */
    SB_PROP_DOUBLE,     /* d: float and double */
    SB_PROP_BOOL,       /* i: 0 or 1 */
    SB_PROP_NULL,       /* nothing */
    SB_PROP_OTHER       /* str: rendered text (uuid canonical, binary hex, timestamp
                           RFC 3339 with i = ms since the epoch, lists and maps as
                           Proton renders them) */
};

typedef struct sb_prop {
    char *key;
    int type;
    char *str;
    long long i;
    double d;
} sb_prop_t;

typedef enum { SB_COMPLETE, SB_ABANDON, SB_DEADLETTER, SB_DEFER, SB_RELEASE } sb_disposition_t;

struct sb_msg_state;

typedef struct sb_msg {
    /*
     * Ids of any AMQP id type rendered as distinct texts: a string as it is,
     * "ulong:42", "uuid:<canonical>", "binary:<hex>" for the other types, and
     * "string:" in front of a string that starts with one of those prefixes
     * (or with "string:"). A NUL byte is shown as the text \x00. NULL when
     * absent.
     */
    char *message_id;
    char *correlation_id;
    /* Why message_id cannot key the inbox although present (a NUL byte, or
     * a string that is not UTF-8), else NULL. */
    const char *message_id_problem;
    char *subject;
    char *content_type;
    char *session_id;    /* properties.group-id */
    char lock_token[37]; /* canonical GUID text; "" when the delivery had none */
    /*
     * As Service Bus counts deliveries: 1 on the first delivery. The wire
     * header carries the number of previous failed deliveries, so a received
     * message reports wire + 1 (as the .NET and Java SDKs do); a peeked
     * message reports the wire value unchanged, as .NET does.
     */
    unsigned delivery_count;
    long long sequence_number;     /* x-opt-sequence-number; -1 when absent */
    long long enqueued_ms;         /* x-opt-enqueued-time, ms since the epoch; 0 when absent */
    long long locked_until_ms;     /* x-opt-locked-until as delivered (renewals do not change it;
                                      the client tracks the renewed value); 0 when absent */
    char *dead_letter_reason;      /* application property DeadLetterReason, else NULL */
    char *dead_letter_description; /* DeadLetterErrorDescription, else NULL */
    sb_prop_t *props;
    size_t nprops;
    /* The application-properties map as it arrived (its encoded bytes, from
     * the map's format code on): every value with its AMQP type, for a
     * re-send that must not change them (sb_enc.h). NULL when absent. */
    unsigned char *props_enc;
    size_t props_enc_len;
    unsigned char *body; /* data sections concatenated, or the amqp-value string or
                            binary; never NULL when body_len > 0; points into
                            owned after sb_msg_decode_owned kept it there */
    size_t body_len;
    unsigned char *owned; /* the encoded message body points into, or NULL (sb_msg_decode_owned) */
    ib_error_t decode_err; /* code != IB_E_OK: malformed or unsupported, dead-letter it */
    void *user; /* the application's, from on_message on; the client never reads it */
    /* Which attach of a receive link delivered it: one value for the messages
     * of one session lock, another for every other link and every attach
     * (a count across the client). Messages of one session with different
     * values came under different locks. */
    unsigned long link_seq;

    /* Internal: the client's bookkeeping. thread: proactor only. */
    unsigned char lock_uuid[16]; /* canonical (RFC 4122) bytes of lock_token */
    bool has_lock;
    struct sb_msg_state *st;
} sb_msg_t;

/*
 * Decodes an encoded AMQP message (the bytes of one transfer) into msg,
 * which the function zeroes first. Never fails hard: on malformed or
 * unsupported input it keeps what it could read and sets msg->decode_err
 * (IB_E_DECODE, permanent). received selects the delivery-count convention
 * above. Returns msg->decode_err.code, or IB_E_NOMEM. thread: any.
 */
ib_err_t sb_msg_decode(sb_msg_t *msg, const unsigned char *buf, size_t len, bool received);

/*
 * As sb_msg_decode, for bytes the message may keep: buf (malloc'd, cap
 * bytes, cap > len) passes to msg. When the body is one data section in its
 * usual encoding it stays where it is in buf (no copy of a large body) and
 * buf is freed with the message; otherwise buf is freed before this
 * returns. Either way the caller no longer owns buf. thread: any.
 */
ib_err_t sb_msg_decode_owned(sb_msg_t *msg, unsigned char *buf, size_t len, size_t cap,
                             bool received);

/* Allocates and decodes; NULL on out of memory. thread: any. */
sb_msg_t *sb_msg_new_decoded(const unsigned char *buf, size_t len, bool received);

/* Frees the fields of msg (not msg itself) and zeroes them. thread: any. */
void sb_msg_clear(sb_msg_t *msg);
/* sb_msg_clear + free. For messages the caller owns (peeked or decoded). */
void sb_msg_free(sb_msg_t *msg);

/* Application property by exact key, or NULL. */
const sb_prop_t *sb_msg_prop(const sb_msg_t *msg, const char *key);

/*
 * Lock tokens. The receive link carries a lock token as a 16-byte delivery
 * tag in .NET Guid.ToByteArray() order; $management carries it as an AMQP
 * uuid in canonical order. Converting either way reverses bytes 0-3 and
 * swaps 4/5 and 6/7. thread: any.
 */
void sb_guid_swap(const unsigned char in[16], unsigned char out[16]);
/* Canonical bytes to "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (37 bytes with NUL). */
void sb_guid_format(const unsigned char uuid[16], char out[37]);
/* The reverse; returns false unless s is exactly a canonical GUID (any case). */
bool sb_guid_parse(const char *s, unsigned char uuid[16]);
/* A delivery tag to the canonical uuid and text; false unless the tag has 16 bytes. */
bool sb_lock_token_from_tag(const unsigned char *tag, size_t tag_len, unsigned char uuid[16],
                            char text[37]);

/*
 * Length of s cut to at most max bytes without splitting a UTF-8 sequence
 * (dead-letter reasons and descriptions are cut to SB_REASON_MAX). thread: any.
 */
#define SB_REASON_MAX 4096
size_t sb_utf8_cap(const char *s, size_t max);

/* Disposition name ("complete", ...). */
const char *sb_disposition_name(sb_disposition_t d);

#endif
