/*
 * sb_guid.c - lock token byte orders (see sb_msg.h and the wire reference
 * §4.3): the delivery tag is in .NET Guid.ToByteArray() order, $management
 * uses canonical RFC 4122 order.
 */
#include <string.h>

#include "ib_enc.h"
#include "sb_msg.h"

void sb_guid_swap(const unsigned char in[16], unsigned char out[16])
{
    unsigned char t[16];
    memcpy(t, in, 16);
    out[0] = t[3];
    out[1] = t[2];
    out[2] = t[1];
    out[3] = t[0];
    out[4] = t[5];
    out[5] = t[4];
    out[6] = t[7];
    out[7] = t[6];
    memcpy(out + 8, t + 8, 8);
}

/* The canonical form's groups: bytes of the uuid, in order, 4-2-2-2-6. */
static const unsigned char guid_groups[5] = {4, 2, 2, 2, 6};

void sb_guid_format(const unsigned char u[16], char out[37])
{
    char *o = out;
    for (int g = 0; g < 5; g++) {
        if (g)
            *o++ = '-';
        ib_enc_hex(o, u, guid_groups[g]);
        o += 2 * guid_groups[g];
        u += guid_groups[g];
    }
}

bool sb_guid_parse(const char *s, unsigned char uuid[16])
{
    if (!s || strlen(s) != 36)
        return false;
    for (int g = 0; g < 5; g++) {
        if (g && *s++ != '-')
            return false;
        if (!ib_dec_hex(uuid, s, guid_groups[g], IB_HEX_ANY_CASE))
            return false;
        s += 2 * guid_groups[g];
        uuid += guid_groups[g];
    }
    return true;
}

bool sb_lock_token_from_tag(const unsigned char *tag, size_t tag_len, unsigned char uuid[16],
                            char text[37])
{
    if (!tag || tag_len != 16) {
        text[0] = '\0';
        return false;
    }
    sb_guid_swap(tag, uuid);
    sb_guid_format(uuid, text);
    return true;
}
