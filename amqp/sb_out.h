/*
 * sb_out.h - an outgoing message (sb_out_msg_t) and its AMQP encoding,
 * shared by the blocking sender (sb_send.h) and the client's sender links
 * (sb_client_send_each).
 *
 * thread: any. Pure functions over the caller's memory.
 */
#ifndef SB_OUT_H
#define SB_OUT_H

#include <stddef.h>

#include "ib_err.h"
#include "sb_msg.h"

/* The AMQP type a message-id is sent as. */
typedef enum {
    SB_ID_STRING = 0, /* message_id_len bytes (0: strlen) as a string */
    SB_ID_BINARY,     /* message_id_len bytes as binary */
    SB_ID_ULONG,      /* message_id is decimal text, sent as ulong */
    SB_ID_UUID,       /* message_id holds the 16 canonical bytes of a uuid */
} sb_id_type_t;

/* Room sb_out_msg_set_id needs for a decoded binary or uuid id. */
#define SB_ID_SCRATCH 130

typedef struct sb_out_msg {
    const char *message_id;     /* message-id; NULL: none */
    size_t message_id_len;      /* bytes of message_id (may hold a NUL); 0: strlen */
    sb_id_type_t message_id_type;
    const char *correlation_id; /* NULL: none */
    const char *subject;
    const char *content_type;
    const char *session_id; /* properties.group-id */
    /* Application properties already encoded (one AMQP map, as sb_msg_t's
     * props_enc): sent with every value's type unchanged, props after them.
     * NULL: none. */
    const unsigned char *props_enc;
    size_t props_enc_len;
    const sb_prop_t *props; /* application properties: type SB_PROP_STRING, INT64,
                               DOUBLE, BOOL or NULL */
    size_t nprops;
    const void *body; /* one data section (may be empty) */
    size_t body_len;
    long long ttl_ms; /* header ttl; 0: none */
    long long scheduled_ms; /* x-opt-scheduled-enqueue-time, Unix ms; 0: enqueued at once */
} sb_out_msg_t;

/*
 * Sets m's message-id from the text sb_msg_decode rendered it to (sb_msg.h):
 * "ulong:N", "uuid:G", "binary:HEX" and "string:S" go back to their AMQP
 * type, anything else is a string. So a message sent again with the id it
 * was received with (dlq replay) renders to the same inbox key. scratch
 * (SB_ID_SCRATCH bytes) holds decoded bytes and must outlive the send.
 * thread: any.
 */
void sb_out_msg_set_id(sb_out_msg_t *m, const char *rendered, unsigned char *scratch);

/*
 * The application properties of a JSON object, the one rule for every
 * sender that takes them as JSON (inboxctl send --file, the outbox relay):
 * each member becomes an sb_prop_t in props (room for max): strings,
 * integers, reals, booleans and null keep their type; keys and strings
 * point into obj (the caller keeps it alive). Fails (IB_E_INVALID_JSON,
 * permanent, *n 0) when obj is not an object, when it holds more than max
 * members, and when a value is an array or an object, which no application
 * property can hold: err names that key ("properties.<key> is a JSON
 * array..."). thread: any.
 */
struct json_t;
ib_err_t sb_out_props_from_json(struct json_t *obj, sb_prop_t *props, size_t max, size_t *n,
                                ib_error_t *err);

/*
 * Encodes m as one AMQP message (header durable, properties, application
 * properties, one data section) into a malloc'd buffer: *buf, *len. Fails
 * (IB_E_INVAL, permanent) when Proton cannot encode it. thread: any.
 */
ib_err_t sb_out_encode(const sb_out_msg_t *m, char **buf, size_t *len, ib_error_t *err);

#endif
