/*
 * sb_enc.c - encoded AMQP values as bytes (sb_enc.h). Called by whichever
 * thread decodes a message or prepares a send.
 *
 * The format code's high nibble says how the value's length is found
 * (AMQP 1.0 part 1, 1.2 and 1.6): 0x4 no data, 0x5..0x9 a fixed 1, 2, 4, 8
 * or 16 bytes, 0xa/0xc/0xe a one-byte size, 0xb/0xd/0xf a four-byte size
 * before the data; 0x00 starts a described value (descriptor, then value).
 */
#include "sb_enc.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DESCRIBED_DEPTH_MAX 16

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static long skip_depth(const unsigned char *p, size_t len, int depth)
{
    static const size_t fixed[] = {0, 1, 2, 4, 8, 16}; /* nibbles 0x4..0x9 */
    unsigned char c;
    size_t need;

    if (len < 1 || depth > DESCRIBED_DEPTH_MAX)
        return -1;
    c = p[0];
    if (c == 0x00) {
        long d = skip_depth(p + 1, len - 1, depth + 1), v;
        if (d < 0)
            return -1;
        v = skip_depth(p + 1 + d, len - 1 - (size_t)d, depth + 1);
        return v < 0 ? -1 : 1 + d + v;
    }
    switch (c >> 4) {
    case 0x4:
    case 0x5:
    case 0x6:
    case 0x7:
    case 0x8:
    case 0x9:
        need = 1 + fixed[(c >> 4) - 4];
        break;
    case 0xa:
    case 0xc:
    case 0xe:
        if (len < 2)
            return -1;
        need = 2 + (size_t)p[1];
        break;
    case 0xb:
    case 0xd:
    case 0xf:
        if (len < 5)
            return -1;
        need = 5 + (size_t)rd32(p + 1);
        break;
    default:
        return -1;
    }
    return need <= len && need <= (size_t)LONG_MAX ? (long)need : -1;
}

long sb_enc_skip(const unsigned char *p, size_t len)
{
    return skip_depth(p, len, 0);
}

/* The text of a string or symbol key at p (kn bytes), else false. */
static bool key_text(const unsigned char *p, size_t kn, const unsigned char **s, size_t *n)
{
    if ((p[0] == 0xa1 || p[0] == 0xa3) && kn >= 2) {
        *s = p + 2;
        *n = kn - 2;
        return true;
    }
    if ((p[0] == 0xb1 || p[0] == 0xb3) && kn >= 5) {
        *s = p + 5;
        *n = kn - 5;
        return true;
    }
    return false;
}

static bool dropped(const unsigned char *key, size_t kn, const char *const *drop, size_t ndrop)
{
    const unsigned char *s;
    size_t n;
    if (!key_text(key, kn, &s, &n))
        return false;
    for (size_t k = 0; k < ndrop; k++)
        if (strlen(drop[k]) == n && memcmp(drop[k], s, n) == 0)
            return true;
    return false;
}

/* The entries of the map at p: where they start, how many bytes, how many values. */
static bool map_entries(const unsigned char *p, size_t len, const unsigned char **ents,
                        size_t *elen, uint32_t *count)
{
    long whole = sb_enc_skip(p, len);
    if (whole < 0 || (size_t)whole != len)
        return false;
    if (p[0] == 0xc1 && len >= 3) {
        *count = p[2];
        *ents = p + 3;
        *elen = len - 3;
    } else if (p[0] == 0xd1 && len >= 9) {
        *count = rd32(p + 5);
        *ents = p + 9;
        *elen = len - 9;
    } else {
        return false;
    }
    return *count % 2 == 0;
}

ib_err_t sb_enc_map_filter(const unsigned char *map, size_t len, const char *const *drop,
                           size_t ndrop, unsigned char **out, size_t *out_len, ib_error_t *err)
{
    const unsigned char *ents;
    size_t elen, o = 9;
    uint32_t count, kept = 0;
    unsigned char *b;

    *out = NULL;
    *out_len = 0;
    if (!map || !map_entries(map, len, &ents, &elen, &count))
        return ib_error_set(err, IB_E_DECODE, IB_CLASS_PERMANENT,
                            "the application properties are not one encoded map");
    b = malloc(9 + elen);
    if (!b)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    for (uint32_t i = 0; i < count; i += 2) {
        long kn = sb_enc_skip(ents, elen);
        long vn = kn < 0 ? -1 : sb_enc_skip(ents + kn, elen - (size_t)kn);
        if (vn < 0) {
            free(b);
            return ib_error_set(err, IB_E_DECODE, IB_CLASS_PERMANENT,
                                "the application properties hold %u values, entry %u does not "
                                "decode",
                                (unsigned)count, (unsigned)(i / 2));
        }
        if (!dropped(ents, (size_t)kn, drop, ndrop)) {
            memcpy(b + o, ents, (size_t)(kn + vn));
            o += (size_t)(kn + vn);
            kept += 2;
        }
        ents += kn + vn;
        elen -= (size_t)(kn + vn);
    }
    b[0] = 0xd1;
    wr32(b + 1, (uint32_t)(o - 5));
    wr32(b + 5, kept);
    *out = b;
    *out_len = o;
    return IB_E_OK;
}
