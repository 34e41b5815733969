/*
 * emu_amqpval.c - request/response plumbing shared by $cbs and
 * $management: reply-link routing, pre-settled sends, map lookups.
 */
#include "emu_broker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* thread: proactor */
emu_link_t *emu_reply_link(emu_conn_t *conn, const char *reply_to)
{
    if (!reply_to)
        return NULL;
    for (emu_link_t *l = conn->links; l; l = l->next) {
        if (l->kind != EMU_LINK_REPLY)
            continue;
        const char *t = pn_terminus_get_address(pn_link_remote_target(l->pl));
        if (t && strcmp(t, reply_to) == 0)
            return l;
    }
    for (emu_link_t *l = conn->links; l; l = l->next)
        if (l->kind == EMU_LINK_REPLY && strcmp(pn_link_name(l->pl), reply_to) == 0)
            return l;
    return NULL;
}

/* thread: proactor */
void emu_send_message(emu_link_t *l, pn_message_t *msg)
{
    char tag[16];
    uint64_t t = ++l->tag_counter;
    memcpy(tag, &t, sizeof t);
    pn_delivery_t *d = pn_delivery(l->pl, pn_dtag(tag, sizeof t));
    pn_rwbytes_t buf = {0, NULL};
    pn_message_send(msg, l->pl, &buf);
    free(buf.start);
    pn_delivery_settle(d);
}

/* thread: proactor */
bool emu_map_find(pn_data_t *data, const char *key)
{
    size_t kl = strlen(key);
    pn_data_rewind(data);
    if (!pn_data_next(data) || pn_data_type(data) != PN_MAP)
        return false;
    pn_data_enter(data);
    while (pn_data_next(data)) {
        pn_type_t t = pn_data_type(data);
        bool match = false;
        if (t == PN_STRING || t == PN_SYMBOL) {
            pn_bytes_t k = t == PN_STRING ? pn_data_get_string(data) : pn_data_get_symbol(data);
            match = k.size == kl && memcmp(k.start, key, kl) == 0;
        }
        if (!pn_data_next(data))
            return false;
        if (match)
            return true;
    }
    return false;
}

/* thread: proactor */
const char *emu_app_prop_str(pn_message_t *m, const char *key, char *buf, size_t size)
{
    pn_data_t *p = pn_message_properties(m);
    if (!p || !emu_map_find(p, key))
        return NULL;
    pn_type_t t = pn_data_type(p);
    if (t != PN_STRING && t != PN_SYMBOL)
        return NULL;
    pn_bytes_t s = t == PN_STRING ? pn_data_get_string(p) : pn_data_get_symbol(p);
    snprintf(buf, size, "%.*s", (int)s.size, s.start);
    return buf;
}
