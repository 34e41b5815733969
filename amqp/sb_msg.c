/*
 * sb_msg.c - decoding one AMQP message, section by section, into sb_msg_t.
 *
 * The decoder walks the sections itself with pn_data_decode rather than
 * using pn_message_decode: it needs every data section (Service Bus allows
 * several), the raw header delivery-count, and must turn any malformed
 * input into decode_err instead of losing it.
 */
#include "sb_msg.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proton/codec.h>

#include "ib_enc.h"
#include "ib_log.h"
#include "ib_utf8.h"
#include "sb_enc.h"

#define SEC_HEADER 0x70
#define SEC_DELIVERY_ANN 0x71
#define SEC_MESSAGE_ANN 0x72
#define SEC_PROPERTIES 0x73
#define SEC_APP_PROPS 0x74
#define SEC_DATA 0x75
#define SEC_SEQUENCE 0x76
#define SEC_VALUE 0x77
#define SEC_FOOTER 0x78

#define MAX_PROPS 4096

static const struct {
    const char *name;
    unsigned long code;
} section_names[] = {
    {"amqp:header:list", SEC_HEADER},
    {"amqp:delivery-annotations:map", SEC_DELIVERY_ANN},
    {"amqp:message-annotations:map", SEC_MESSAGE_ANN},
    {"amqp:properties:list", SEC_PROPERTIES},
    {"amqp:application-properties:map", SEC_APP_PROPS},
    {"amqp:data:binary", SEC_DATA},
    {"amqp:amqp-sequence:list", SEC_SEQUENCE},
    {"amqp:amqp-value:*", SEC_VALUE},
    {"amqp:footer:map", SEC_FOOTER},
};

typedef struct decoder {
    sb_msg_t *msg;
    pn_data_t *d;
    size_t body_cap;
    bool nomem;
    bool props_seen;
    bool in_place;    /* a body in one data section may stay in the input */
    bool body_in_buf; /* msg->body points into the input */
} decoder_t;

static void fail(decoder_t *dc, const char *fmt, const char *what)
{
    if (dc->msg->decode_err.code != IB_E_OK)
        return; /* keep the first problem */
    ib_error_set(&dc->msg->decode_err, IB_E_DECODE, IB_CLASS_PERMANENT, fmt, what);
}

static char *dup_bytes(decoder_t *dc, const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) {
        dc->nomem = true;
        return NULL;
    }
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static char *dup_str(decoder_t *dc, const char *s)
{
    return dup_bytes(dc, s, strlen(s));
}

static char *hex_of(decoder_t *dc, const char *p, size_t n)
{
    char *s = malloc(n * 2 + 1);
    if (!s) {
        dc->nomem = true;
        return NULL;
    }
    ib_enc_hex(s, p, n);
    return s;
}

/*
 * Id rendering. The inbox keys on text, so every AMQP id type must map to a
 * distinct text: a string id is kept as it is, a non-string id gets its type
 * as a prefix ("ulong:42", "uuid:<canonical>", "binary:<hex>"), and a string
 * that itself begins with one of these prefixes (or "string:") gets
 * "string:" in front, so no two different ids ever render alike. Symbols
 * (not a legal id type, but seen) count as strings.
 */
static const char *const id_prefixes[] = {"string:", "ulong:", "uuid:", "binary:"};

static bool has_id_prefix(const char *p, size_t n)
{
    for (size_t k = 0; k < sizeof(id_prefixes) / sizeof(id_prefixes[0]); k++) {
        size_t pl = strlen(id_prefixes[k]);
        if (n >= pl && memcmp(p, id_prefixes[k], pl) == 0)
            return true;
    }
    return false;
}

/* prefix + the n bytes at p, with each NUL byte written as the text \x00. */
static char *id_text(decoder_t *dc, const char *prefix, const char *p, size_t n)
{
    size_t pl = strlen(prefix), nuls = 0, o;
    char *s;
    for (size_t k = 0; k < n; k++)
        nuls += p[k] == '\0';
    s = malloc(pl + n + nuls * 3 + 1);
    if (!s) {
        dc->nomem = true;
        return NULL;
    }
    memcpy(s, prefix, pl);
    o = pl;
    for (size_t k = 0; k < n; k++) {
        if (p[k] == '\0') {
            memcpy(s + o, "\\x00", 4);
            o += 4;
        } else {
            s[o++] = p[k];
        }
    }
    s[o] = '\0';
    return s;
}

/* A message-id / correlation-id of any AMQP id type, as text (see above). */
static char *render_id(decoder_t *dc, bool message_id)
{
    pn_data_t *d = dc->d;
    char buf[64];
    switch (pn_data_type(d)) {
    case PN_STRING:
    case PN_SYMBOL: {
        pn_bytes_t b =
            pn_data_type(d) == PN_STRING ? pn_data_get_string(d) : pn_data_get_symbol(d);
        if (message_id && memchr(b.start, '\0', b.size))
            dc->msg->message_id_problem = "the message-id holds a NUL byte";
        else if (message_id && !ib_utf8_valid(b.start, b.size))
            dc->msg->message_id_problem = "the message-id is not valid UTF-8";
        return id_text(dc, has_id_prefix(b.start, b.size) ? "string:" : "", b.start, b.size);
    }
    case PN_ULONG:
        snprintf(buf, sizeof(buf), "ulong:%llu", (unsigned long long)pn_data_get_ulong(d));
        return dup_str(dc, buf);
    case PN_UUID: {
        pn_uuid_t u = pn_data_get_uuid(d);
        memcpy(buf, "uuid:", 5);
        sb_guid_format((const unsigned char *)u.bytes, buf + 5);
        return dup_str(dc, buf);
    }
    case PN_BINARY: {
        pn_bytes_t b = pn_data_get_binary(d);
        char *hex = hex_of(dc, b.start, b.size);
        char *s = hex ? id_text(dc, "binary:", hex, strlen(hex)) : NULL;
        free(hex);
        return s;
    }
    case PN_NULL:
        return NULL;
    default:
        fail(dc, "%s has an unsupported type", "message-id or correlation-id");
        return NULL;
    }
}

/* An optional string field of the properties list. */
static char *get_string(decoder_t *dc, const char *field)
{
    pn_data_t *d = dc->d;
    if (pn_data_type(d) == PN_STRING) {
        pn_bytes_t b = pn_data_get_string(d);
        return dup_bytes(dc, b.start, b.size);
    }
    if (pn_data_type(d) == PN_SYMBOL) {
        pn_bytes_t b = pn_data_get_symbol(d);
        return dup_bytes(dc, b.start, b.size);
    }
    if (pn_data_type(d) != PN_NULL)
        fail(dc, "properties.%s is not a string", field);
    return NULL;
}

static bool get_integer(pn_data_t *d, long long *out)
{
    switch (pn_data_type(d)) {
    case PN_BYTE:
        *out = pn_data_get_byte(d);
        return true;
    case PN_UBYTE:
        *out = pn_data_get_ubyte(d);
        return true;
    case PN_SHORT:
        *out = pn_data_get_short(d);
        return true;
    case PN_USHORT:
        *out = pn_data_get_ushort(d);
        return true;
    case PN_INT:
        *out = pn_data_get_int(d);
        return true;
    case PN_UINT:
        *out = pn_data_get_uint(d);
        return true;
    case PN_LONG:
        *out = pn_data_get_long(d);
        return true;
    case PN_CHAR:
        *out = pn_data_get_char(d);
        return true;
    case PN_TIMESTAMP:
        *out = pn_data_get_timestamp(d);
        return true;
    case PN_ULONG: {
        uint64_t v = pn_data_get_ulong(d);
        if (v > (uint64_t)LLONG_MAX)
            return false;
        *out = (long long)v;
        return true;
    }
    default:
        return false;
    }
}

static void decode_header(decoder_t *dc, bool received)
{
    pn_data_t *d = dc->d;
    if (pn_data_type(d) != PN_LIST) {
        fail(dc, "the %s section is not a list", "header");
        return;
    }
    pn_data_enter(d);
    for (int k = 0; pn_data_next(d); k++) {
        if (k == 4 && pn_data_type(d) != PN_NULL) {
            long long n;
            if (!get_integer(d, &n) || n < 0 || n > UINT_MAX - 1) {
                fail(dc, "header.%s is not a uint", "delivery-count");
                break;
            }
            dc->msg->delivery_count = (unsigned)n + (received ? 1u : 0u);
        }
    }
    pn_data_exit(d);
}

static void decode_properties(decoder_t *dc)
{
    pn_data_t *d = dc->d;
    sb_msg_t *msg = dc->msg;
    if (pn_data_type(d) != PN_LIST) {
        fail(dc, "the %s section is not a list", "properties");
        return;
    }
    if (dc->props_seen) {
        fail(dc, "%s", "more than one properties section");
        return;
    }
    dc->props_seen = true;
    pn_data_enter(d);
    for (int k = 0; pn_data_next(d); k++) {
        switch (k) {
        case 0:
            msg->message_id = render_id(dc, true);
            break;
        case 3:
            msg->subject = get_string(dc, "subject");
            break;
        case 5:
            msg->correlation_id = render_id(dc, false);
            break;
        case 6:
            msg->content_type = get_string(dc, "content-type");
            break;
        case 10:
            msg->session_id = get_string(dc, "group-id");
            break;
        default:
            break;
        }
    }
    pn_data_exit(d);
}

/* Key of a map entry (string or symbol), else NULL. */
static bool map_key(pn_data_t *d, pn_bytes_t *key)
{
    if (pn_data_type(d) == PN_SYMBOL) {
        *key = pn_data_get_symbol(d);
        return true;
    }
    if (pn_data_type(d) == PN_STRING) {
        *key = pn_data_get_string(d);
        return true;
    }
    return false;
}

static bool key_is(pn_bytes_t k, const char *s)
{
    return k.size == strlen(s) && memcmp(k.start, s, k.size) == 0;
}

static void decode_annotations(decoder_t *dc)
{
    pn_data_t *d = dc->d;
    sb_msg_t *msg = dc->msg;
    if (pn_data_type(d) != PN_MAP) {
        fail(dc, "the %s section is not a map", "message-annotations");
        return;
    }
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t key;
        bool keyed = map_key(d, &key);
        long long v;
        if (!pn_data_next(d))
            break;
        if (!keyed)
            continue;
        if (key_is(key, "x-opt-sequence-number")) {
            if (get_integer(d, &v))
                msg->sequence_number = v;
            else
                fail(dc, "%s is not a long", "x-opt-sequence-number");
        } else if (key_is(key, "x-opt-enqueued-time")) {
            if (get_integer(d, &v))
                msg->enqueued_ms = v;
            else
                fail(dc, "%s is not a timestamp", "x-opt-enqueued-time");
        } else if (key_is(key, "x-opt-locked-until")) {
            if (get_integer(d, &v))
                msg->locked_until_ms = v;
            else
                fail(dc, "%s is not a timestamp", "x-opt-locked-until");
        }
    }
    pn_data_exit(d);
}

static void render_prop(decoder_t *dc, sb_prop_t *p)
{
    pn_data_t *d = dc->d;
    pn_type_t t = pn_data_type(d);
    long long v;
    char buf[64];

    switch (t) {
    case PN_NULL:
        p->type = SB_PROP_NULL;
        return;
    case PN_BOOL:
        p->type = SB_PROP_BOOL;
        p->i = pn_data_get_bool(d) ? 1 : 0;
        return;
    case PN_FLOAT:
        p->type = SB_PROP_DOUBLE;
        p->d = pn_data_get_float(d);
        return;
    case PN_DOUBLE:
        p->type = SB_PROP_DOUBLE;
        p->d = pn_data_get_double(d);
        return;
    case PN_STRING:
    case PN_SYMBOL: {
        pn_bytes_t b = t == PN_STRING ? pn_data_get_string(d) : pn_data_get_symbol(d);
        p->type = SB_PROP_STRING;
        p->str = dup_bytes(dc, b.start, b.size);
        return;
    }
    case PN_TIMESTAMP:
        p->type = SB_PROP_OTHER;
        p->i = pn_data_get_timestamp(d);
        ib_time_rfc3339(buf, sizeof(buf), p->i < 0 ? 0 : p->i);
        p->str = dup_str(dc, buf);
        return;
    case PN_UUID: {
        pn_uuid_t u = pn_data_get_uuid(d);
        p->type = SB_PROP_OTHER;
        sb_guid_format((const unsigned char *)u.bytes, buf);
        p->str = dup_str(dc, buf);
        return;
    }
    case PN_BINARY: {
        pn_bytes_t b = pn_data_get_binary(d);
        p->type = SB_PROP_OTHER;
        p->str = hex_of(dc, b.start, b.size);
        return;
    }
    default:
        if (get_integer(d, &v)) {
            p->type = SB_PROP_INT64;
            p->i = v;
            return;
        }
        if (t == PN_ULONG) {
            p->type = SB_PROP_OTHER;
            snprintf(buf, sizeof(buf), "%llu", (unsigned long long)pn_data_get_ulong(d));
        } else {
            p->type = SB_PROP_OTHER;
            snprintf(buf, sizeof(buf), "<%s>", pn_type_name(t));
        }
        p->str = dup_str(dc, buf);
        return;
    }
}

/* Keeps the dead-letter fields the broker adds, wherever they sit in the map. */
static void note_dead_letter_field(decoder_t *dc, pn_bytes_t key)
{
    sb_msg_t *msg = dc->msg;
    pn_data_t *d = dc->d;
    pn_bytes_t v;
    if (pn_data_type(d) == PN_STRING)
        v = pn_data_get_string(d);
    else if (pn_data_type(d) == PN_SYMBOL)
        v = pn_data_get_symbol(d);
    else
        return;
    if (key_is(key, "DeadLetterReason") && !msg->dead_letter_reason)
        msg->dead_letter_reason = dup_bytes(dc, v.start, v.size);
    else if (key_is(key, "DeadLetterErrorDescription") && !msg->dead_letter_description)
        msg->dead_letter_description = dup_bytes(dc, v.start, v.size);
}

/*
 * At most MAX_PROPS entries are kept (memory stays bounded); a larger map
 * is a decode error, but the whole map is still walked so that the broker's
 * DeadLetterReason / DeadLetterErrorDescription are found wherever they are.
 */
static void decode_app_props(decoder_t *dc)
{
    pn_data_t *d = dc->d;
    sb_msg_t *msg = dc->msg;
    size_t count, keep;
    if (pn_data_type(d) != PN_MAP) {
        fail(dc, "the %s section is not a map", "application-properties");
        return;
    }
    if (msg->props)
        return; /* a second section is ignored */
    count = pn_data_get_map(d) / 2;
    if (count > MAX_PROPS)
        fail(dc, "%s has too many entries", "application-properties");
    keep = count > MAX_PROPS ? MAX_PROPS : count;
    if (keep == 0)
        return;
    msg->props = calloc(keep, sizeof(sb_prop_t));
    if (!msg->props) {
        dc->nomem = true;
        return;
    }
    pn_data_enter(d);
    while (pn_data_next(d) && !dc->nomem) {
        pn_bytes_t key;
        sb_prop_t *p = &msg->props[msg->nprops];
        bool keyed = map_key(d, &key);
        if (!pn_data_next(d))
            break;
        if (!keyed) {
            fail(dc, "%s has a key that is not a string", "application-properties");
            continue;
        }
        note_dead_letter_field(dc, key);
        if (msg->nprops == keep)
            continue;
        p->key = dup_bytes(dc, key.start, key.size);
        if (!p->key)
            break;
        render_prop(dc, p);
        msg->nprops++;
    }
    pn_data_exit(d);
}

/* Keeps the bytes of the first application-properties map: sec is the whole
 * section (0x00, its descriptor, the map), n bytes. */
static void keep_app_props_enc(decoder_t *dc, const unsigned char *sec, size_t n)
{
    long dn = n > 1 ? sb_enc_skip(sec + 1, n - 1) : -1;
    sb_msg_t *msg = dc->msg;
    if (msg->props_enc || dn < 0 || (size_t)dn + 1 >= n)
        return;
    msg->props_enc = malloc(n - 1 - (size_t)dn);
    if (!msg->props_enc) {
        dc->nomem = true;
        return;
    }
    msg->props_enc_len = n - 1 - (size_t)dn;
    memcpy(msg->props_enc, sec + 1 + dn, msg->props_enc_len);
}

static void body_append(decoder_t *dc, const char *p, size_t n)
{
    sb_msg_t *msg = dc->msg;
    if (dc->body_in_buf) { /* a section more: the body so far moves out of the input */
        const char *kept = (const char *)msg->body;
        size_t kept_len = msg->body_len;
        msg->body = NULL;
        msg->body_len = 0;
        dc->body_in_buf = false;
        body_append(dc, kept, kept_len);
        if (dc->nomem)
            return;
    }
    if (msg->body_len + n + 1 > dc->body_cap) {
        size_t cap = dc->body_cap ? dc->body_cap : 64;
        unsigned char *nb;
        while (cap < msg->body_len + n + 1)
            cap *= 2;
        nb = realloc(msg->body, cap);
        if (!nb) {
            dc->nomem = true;
            return;
        }
        msg->body = nb;
        dc->body_cap = cap;
    }
    if (n)
        memcpy(msg->body + msg->body_len, p, n);
    msg->body_len += n;
    msg->body[msg->body_len] = '\0'; /* convenience for text bodies; not counted */
}

static void decode_value(decoder_t *dc)
{
    pn_data_t *d = dc->d;
    switch (pn_data_type(d)) {
    case PN_STRING: {
        pn_bytes_t b = pn_data_get_string(d);
        body_append(dc, b.start, b.size);
        break;
    }
    case PN_BINARY: {
        pn_bytes_t b = pn_data_get_binary(d);
        body_append(dc, b.start, b.size);
        break;
    }
    case PN_NULL:
        break;
    default:
        fail(dc, "an amqp-value body of type %s is not supported", pn_type_name(pn_data_type(d)));
        break;
    }
}

/* The section code of the described value under the cursor, or 0. */
static unsigned long section_code(pn_data_t *d)
{
    unsigned long code = 0;
    if (!pn_data_next(d))
        return 0;
    if (pn_data_type(d) == PN_ULONG) {
        code = (unsigned long)pn_data_get_ulong(d);
    } else if (pn_data_type(d) == PN_SYMBOL) {
        pn_bytes_t b = pn_data_get_symbol(d);
        for (size_t k = 0; k < sizeof(section_names) / sizeof(section_names[0]); k++)
            if (key_is(b, section_names[k].name))
                code = section_names[k].code;
    }
    return code;
}

/*
 * A data section in its usual encoding (descriptor 0x75 as a smallulong, a
 * vbin8 or vbin32) appended to the body straight from sec: through
 * pn_data_decode a large body would be copied once more first. The first
 * body of an in-place decode is not copied at all: the body points at it.
 * Returns its encoded size, 0 when it is not one (the general path decodes
 * it).
 */
static size_t data_section_direct(decoder_t *dc, const unsigned char *sec, size_t left)
{
    size_t hdr, n;
    if (left < 5 || sec[0] != 0x00 || sec[1] != 0x53 || sec[2] != SEC_DATA)
        return 0;
    if (sec[3] == 0xa0) {
        hdr = 5;
        n = sec[4];
    } else if (sec[3] == 0xb0 && left >= 8) {
        hdr = 8;
        n = (size_t)sec[4] << 24 | (size_t)sec[5] << 16 | (size_t)sec[6] << 8 | sec[7];
    } else {
        return 0;
    }
    if (n > left - hdr)
        return 0;
    if (dc->in_place && !dc->msg->body) {
        dc->msg->body = (unsigned char *)sec + hdr; /* the input is the caller's to give */
        dc->msg->body_len = n;
        dc->body_in_buf = true;
    } else {
        body_append(dc, (const char *)sec + hdr, n);
    }
    return hdr + n;
}

/* sb_msg_decode; with in_place, *in_buf tells whether msg->body points into buf. */
static ib_err_t decode(sb_msg_t *msg, const unsigned char *buf, size_t len, bool received,
                       bool in_place, bool *in_buf)
{
    decoder_t dc = {msg, NULL, 0, false, false, in_place, false};
    size_t off = 0;
    bool body_seen = false;

    memset(msg, 0, sizeof(*msg));
    msg->sequence_number = -1;
    msg->delivery_count = received ? 1 : 0;
    dc.d = pn_data(16);
    if (!dc.d)
        return ib_error_set(&msg->decode_err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    if (len == 0)
        fail(&dc, "%s", "the message is empty");
    while (off < len && !dc.nomem) {
        ssize_t n;
        unsigned long code;
        const unsigned char *sec = buf + off;
        size_t direct = data_section_direct(&dc, sec, len - off);
        if (direct) {
            off += direct;
            body_seen = true;
            continue;
        }
        pn_data_clear(dc.d);
        n = pn_data_decode(dc.d, (const char *)buf + off, len - off);
        if (n <= 0) {
            fail(&dc, "%s", "a section does not decode as AMQP");
            break;
        }
        off += (size_t)n;
        pn_data_rewind(dc.d);
        if (!pn_data_next(dc.d) || pn_data_type(dc.d) != PN_DESCRIBED) {
            fail(&dc, "%s", "a section is not a described value");
            break;
        }
        pn_data_enter(dc.d);
        code = section_code(dc.d);
        if (!pn_data_next(dc.d)) {
            fail(&dc, "%s", "a section has no value");
            break;
        }
        switch (code) {
        case SEC_HEADER:
            decode_header(&dc, received);
            break;
        case SEC_DELIVERY_ANN:
        case SEC_FOOTER:
            break;
        case SEC_MESSAGE_ANN:
            decode_annotations(&dc);
            break;
        case SEC_PROPERTIES:
            decode_properties(&dc);
            break;
        case SEC_APP_PROPS:
            decode_app_props(&dc);
            if (pn_data_type(dc.d) == PN_MAP)
                keep_app_props_enc(&dc, sec, (size_t)n);
            break;
        case SEC_DATA:
            if (pn_data_type(dc.d) != PN_BINARY) {
                fail(&dc, "the %s section is not binary", "data");
            } else {
                pn_bytes_t b = pn_data_get_binary(dc.d);
                body_append(&dc, b.start, b.size);
            }
            body_seen = true;
            break;
        case SEC_VALUE:
            if (body_seen)
                fail(&dc, "%s", "more than one amqp-value section");
            decode_value(&dc);
            body_seen = true;
            break;
        case SEC_SEQUENCE:
            fail(&dc, "%s", "an amqp-sequence body is not supported");
            body_seen = true;
            break;
        default:
            fail(&dc, "%s", "unknown message section");
            break;
        }
    }
    pn_data_free(dc.d);
    if (dc.nomem) {
        if (dc.body_in_buf) { /* not the message's to free */
            msg->body = NULL;
            msg->body_len = 0;
        }
        sb_msg_clear(msg);
        return ib_error_set(&msg->decode_err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    *in_buf = dc.body_in_buf;
    return msg->decode_err.code;
}

ib_err_t sb_msg_decode(sb_msg_t *msg, const unsigned char *buf, size_t len, bool received)
{
    bool in_buf = false;
    return decode(msg, buf, len, received, false, &in_buf);
}

ib_err_t sb_msg_decode_owned(sb_msg_t *msg, unsigned char *buf, size_t len, size_t cap,
                             bool received)
{
    bool in_buf = false;
    ib_err_t rc = decode(msg, buf, len, received, buf && cap > len, &in_buf);
    if (!in_buf) {
        free(buf);
        return rc;
    }
    /* Every section is read: the byte after the body may be overwritten
     * (within cap) by the convenience NUL. */
    msg->owned = buf;
    msg->body[msg->body_len] = '\0';
    return rc;
}

sb_msg_t *sb_msg_new_decoded(const unsigned char *buf, size_t len, bool received)
{
    sb_msg_t *msg = malloc(sizeof(*msg));
    if (!msg)
        return NULL;
    if (sb_msg_decode(msg, buf, len, received) == IB_E_NOMEM) {
        free(msg);
        return NULL;
    }
    return msg;
}

void sb_msg_clear(sb_msg_t *msg)
{
    if (!msg)
        return;
    free(msg->message_id);
    free(msg->correlation_id);
    free(msg->subject);
    free(msg->content_type);
    free(msg->session_id);
    free(msg->dead_letter_reason);
    free(msg->dead_letter_description);
    for (size_t k = 0; k < msg->nprops; k++) {
        free(msg->props[k].key);
        free(msg->props[k].str);
    }
    free(msg->props);
    free(msg->props_enc);
    if (msg->owned)
        free(msg->owned); /* the body points into it */
    else
        free(msg->body);
    memset(msg, 0, sizeof(*msg));
}

void sb_msg_free(sb_msg_t *msg)
{
    if (!msg)
        return;
    sb_msg_clear(msg);
    free(msg);
}

const sb_prop_t *sb_msg_prop(const sb_msg_t *msg, const char *key)
{
    for (size_t k = 0; k < msg->nprops; k++)
        if (msg->props[k].key && strcmp(msg->props[k].key, key) == 0)
            return &msg->props[k];
    return NULL;
}

const char *sb_disposition_name(sb_disposition_t d)
{
    switch (d) {
    case SB_COMPLETE:
        return "complete";
    case SB_ABANDON:
        return "abandon";
    case SB_DEADLETTER:
        return "deadletter";
    case SB_DEFER:
        return "defer";
    case SB_RELEASE:
        return "release";
    }
    return "unknown";
}

size_t sb_utf8_cap(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return n;
    n = max;
    /* Back up over continuation bytes to the start of the cut sequence. */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}
