/*
 * sb_guid.c - lock token byte orders (see sb_msg.h and the wire reference
 * §4.3): the delivery tag is in .NET Guid.ToByteArray() order, $management
 * uses canonical RFC 4122 order.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

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

void sb_guid_format(const unsigned char u[16], char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool sb_guid_parse(const char *s, unsigned char uuid[16])
{
    int k = 0;
    if (!s || strlen(s) != 36)
        return false;
    for (int i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
            i++;
            continue;
        }
        int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        uuid[k++] = (unsigned char)(hi << 4 | lo);
        i += 2;
    }
    return k == 16;
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
