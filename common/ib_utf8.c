/*
 * ib_utf8.c - UTF-8 validation and replacement of invalid bytes (see
 * ib_utf8.h). thread: any.
 */
#include "ib_utf8.h"

#include <string.h>

size_t ib_utf8_seq_len(const unsigned char *p, size_t n)
{
    unsigned char c;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (n == 0)
        return 0;
    c = p[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return len;
}

bool ib_utf8_valid(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        size_t l = ib_utf8_seq_len(u + i, n - i);
        if (l == 0)
            return false;
        i += l;
    }
    return true;
}

size_t ib_utf8_sanitize(char *dst, size_t size, const char *src)
{
    const unsigned char *u = (const unsigned char *)src;
    size_t n = strlen(src), i = 0, o = 0;

    while (i < n) {
        size_t l = ib_utf8_seq_len(u + i, n - i);
        const char *from = l ? src + i : IB_UTF8_REPLACEMENT;
        size_t take = l ? l : 3;
        if (o + take + 1 > size)
            break;
        memcpy(dst + o, from, take);
        o += take;
        i += l ? l : 1;
    }
    dst[o] = '\0';
    return o;
}
