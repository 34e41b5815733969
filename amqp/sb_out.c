/*
 * sb_out.c - an outgoing message's id and its encoding (sb_out.h). Called by
 * whichever thread prepares a send: the relay, inboxctl, tests.
 */
#include "sb_out.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <proton/message.h>

#include "ib_enc.h"
#include "sb_core.h"

/* A "binary:" id's hex text h as at most max bytes into out (*n of them). */
static bool binary_id(const char *h, unsigned char *out, size_t max, size_t *n)
{
    size_t len = strlen(h);
    if (len % 2 || len / 2 > max || !ib_dec_hex(out, h, len / 2, IB_HEX_ANY_CASE))
        return false;
    *n = len / 2;
    return true;
}

void sb_out_msg_set_id(sb_out_msg_t *m, const char *rendered, unsigned char *scratch)
{
    size_t n;
    m->message_id = rendered;
    m->message_id_len = 0;
    m->message_id_type = SB_ID_STRING;
    if (!rendered)
        return;
    if (strncmp(rendered, "string:", 7) == 0) {
        m->message_id = rendered + 7;
    } else if (strncmp(rendered, "ulong:", 6) == 0 && rendered[6] &&
               strspn(rendered + 6, "0123456789") == strlen(rendered + 6)) {
        m->message_id = rendered + 6;
        m->message_id_type = SB_ID_ULONG;
    } else if (strncmp(rendered, "uuid:", 5) == 0 && sb_guid_parse(rendered + 5, scratch)) {
        m->message_id = (const char *)scratch;
        m->message_id_len = 16;
        m->message_id_type = SB_ID_UUID;
    } else if (strncmp(rendered, "binary:", 7) == 0 &&
               binary_id(rendered + 7, scratch, SB_ID_SCRATCH, &n) && n > 0) {
        m->message_id = (const char *)scratch;
        m->message_id_len = n;
        m->message_id_type = SB_ID_BINARY;
    }
}

/* One JSON value as p's value; false for an array or an object. */
static bool prop_from_json(json_t *v, sb_prop_t *p)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        p->type = SB_PROP_STRING;
        p->str = (char *)json_string_value(v);
        return true;
    case JSON_INTEGER:
        p->type = SB_PROP_INT64;
        p->i = json_integer_value(v);
        return true;
    case JSON_REAL:
        p->type = SB_PROP_DOUBLE;
        p->d = json_real_value(v);
        return true;
    case JSON_TRUE:
    case JSON_FALSE:
        p->type = SB_PROP_BOOL;
        p->i = json_is_true(v);
        return true;
    case JSON_NULL:
        p->type = SB_PROP_NULL;
        return true;
    default:
        return false;
    }
}

ib_err_t sb_out_props_from_json(json_t *obj, sb_prop_t *props, size_t max, size_t *n,
                                ib_error_t *err)
{
    const char *k;
    json_t *v;
    size_t i = 0;

    *n = 0;
    if (!json_is_object(obj))
        return ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                            "properties is not a JSON object of application properties");
    if (json_object_size(obj) > max)
        return ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                            "properties holds %zu application properties, at most %zu are taken",
                            json_object_size(obj), max);
    json_object_foreach(obj, k, v)
    {
        sb_prop_t *p = &props[i++];
        memset(p, 0, sizeof(*p));
        p->key = (char *)k;
        if (!prop_from_json(v, p))
            return ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                                "properties.%s is a JSON %s; application properties are strings, "
                                "numbers, booleans or null",
                                k, json_is_object(v) ? "object" : "array");
    }
    *n = i;
    return IB_E_OK;
}

/*
 * The application-properties map: the encoded entries as Proton decodes
 * them (each value keeps its AMQP type: lists, maps, arrays, described
 * values), then the plain ones. False when props_enc is not one map.
 */
static bool put_app_props(pn_data_t *ap, const sb_out_msg_t *om)
{
    if (!om->props_enc_len) {
        pn_data_put_map(ap);
        pn_data_enter(ap);
    } else {
        ssize_t n = pn_data_decode(ap, (const char *)om->props_enc, om->props_enc_len);
        if (n != (ssize_t)om->props_enc_len)
            return false;
        pn_data_rewind(ap);
        if (!pn_data_next(ap) || pn_data_type(ap) != PN_MAP)
            return false;
        pn_data_enter(ap);
        while (pn_data_next(ap))
            ; /* the cursor stays on the last entry: what follows is put after it */
    }
    sb_props_put(ap, om->props, om->nprops, false);
    pn_data_exit(ap);
    return true;
}

static pn_message_t *build(const sb_out_msg_t *om)
{
    pn_message_t *m = pn_message();
    pn_data_t *ap;
    if (om->message_id) {
        pn_atom_t id;
        size_t n = om->message_id_len ? om->message_id_len : strlen(om->message_id);
        if (om->message_id_type == SB_ID_ULONG) {
            id.type = PN_ULONG;
            id.u.as_ulong = strtoull(om->message_id, NULL, 10);
        } else if (om->message_id_type == SB_ID_UUID) {
            id.type = PN_UUID;
            memcpy(id.u.as_uuid.bytes, om->message_id, 16);
        } else {
            id.type = om->message_id_type == SB_ID_BINARY ? PN_BINARY : PN_STRING;
            id.u.as_bytes = pn_bytes(n, om->message_id);
        }
        pn_message_set_id(m, id);
    }
    if (om->correlation_id) {
        pn_atom_t id;
        id.type = PN_STRING;
        id.u.as_bytes = pn_bytes(strlen(om->correlation_id), om->correlation_id);
        pn_message_set_correlation_id(m, id);
    }
    if (om->subject)
        pn_message_set_subject(m, om->subject);
    if (om->content_type)
        pn_message_set_content_type(m, om->content_type);
    if (om->session_id)
        pn_message_set_group_id(m, om->session_id);
    if (om->ttl_ms > 0)
        pn_message_set_ttl(m, (pn_millis_t)om->ttl_ms);
    pn_message_set_durable(m, true);
    if (om->scheduled_ms > 0) { /* the broker holds it (scheduled) until then */
        static const char key[] = "x-opt-scheduled-enqueue-time";
        pn_data_t *ma = pn_message_annotations(m);
        pn_data_put_map(ma);
        pn_data_enter(ma);
        pn_data_put_symbol(ma, pn_bytes(sizeof key - 1, key));
        pn_data_put_timestamp(ma, (pn_timestamp_t)om->scheduled_ms);
        pn_data_exit(ma);
    }
    if (om->props_enc_len || om->nprops) {
        ap = pn_message_properties(m);
        if (!put_app_props(ap, om)) {
            pn_message_free(m);
            return NULL;
        }
    }
    pn_message_set_inferred(m, true); /* a binary body goes out as one data section */
    pn_data_put_binary(pn_message_body(m), pn_bytes(om->body_len, om->body ? om->body : ""));
    return m;
}

ib_err_t sb_out_encode(const sb_out_msg_t *m, char **buf, size_t *len, ib_error_t *err)
{
    pn_message_t *pm = build(m);
    pn_rwbytes_t rw = {0, NULL};
    ssize_t n = pm ? pn_message_encode2(pm, &rw) : -1;
    if (pm)
        pn_message_free(pm);
    if (n < 0) {
        free(rw.start);
        *buf = NULL;
        *len = 0;
        return ib_error_set(err, IB_E_INVAL, IB_CLASS_PERMANENT, "the message does not encode (%s)",
                            m->message_id && !m->message_id_len ? m->message_id : "binary id");
    }
    *buf = rw.start;
    *len = (size_t)n;
    return IB_E_OK;
}
