/*
 * ib_enc.c - hex, percent and JSON string encoders, hex and percent
 * decoders (see ib_enc.h).
 * thread: any.
 */
#include "ib_enc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ib_utf8.h"

static const char hex_lower[] = "0123456789abcdef";
static const char hex_upper[] = "0123456789ABCDEF";

void ib_enc_hex(char *dst, const void *src, size_t n)
{
    const unsigned char *p = src;
    for (size_t k = 0; k < n; k++) {
        dst[2 * k] = hex_lower[p[k] >> 4];
        dst[2 * k + 1] = hex_lower[p[k] & 15];
    }
    dst[2 * n] = '\0';
}

int ib_hex_digit(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One digit of the case asked; -1 when it is not. */
static int digit_of(char c, ib_hex_case_t hcase)
{
    return hcase == IB_HEX_LOWER && c >= 'A' && c <= 'F' ? -1 : ib_hex_digit((unsigned char)c);
}

bool ib_dec_hex(void *dst, const char *src, size_t n, ib_hex_case_t hcase)
{
    unsigned char *out = dst;
    for (size_t k = 0; k < n; k++) {
        int hi = digit_of(src[2 * k], hcase);
        if (hi < 0)
            return false;
        int lo = digit_of(src[2 * k + 1], hcase);
        if (lo < 0)
            return false;
        out[k] = (unsigned char)(hi << 4 | lo);
    }
    return true;
}

/* RFC 3986 section 2.3. */
static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

size_t ib_enc_pct(char *dst, size_t size, const char *src, size_t n)
{
    size_t len = 0;
    bool cut = false;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)src[k];
        size_t w = unreserved(c) ? 1 : 3;
        if (!cut && len + w < size) {
            if (w == 1) {
                dst[len] = (char)c;
            } else {
                dst[len] = '%';
                dst[len + 1] = hex_upper[c >> 4];
                dst[len + 2] = hex_upper[c & 15];
            }
        } else if (size > 0 && !cut) {
            cut = true;
            dst[len] = '\0';
        }
        len += w;
    }
    if (size > 0 && !cut)
        dst[len] = '\0';
    return len;
}

char *ib_enc_pct_dup(const char *s)
{
    size_t n = strlen(s);
    size_t need = ib_enc_pct(NULL, 0, s, n) + 1;
    char *out = malloc(need);
    if (out)
        ib_enc_pct(out, need, s, n);
    return out;
}

char *ib_dec_pct(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        int hi = r[0] == '%' ? ib_hex_digit((unsigned char)r[1]) : -1;
        int lo = hi >= 0 ? ib_hex_digit((unsigned char)r[2]) : -1;
        if (lo >= 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return s;
}

/* The escape of the byte c (< 0x80) into e; returns its length. */
static size_t ascii_escape(unsigned char c, char e[6])
{
    const char *two = NULL;
    switch (c) {
    case '"':
        two = "\\\"";
        break;
    case '\\':
        two = "\\\\";
        break;
    case '\n':
        two = "\\n";
        break;
    case '\r':
        two = "\\r";
        break;
    case '\t':
        two = "\\t";
        break;
    case '\b':
        two = "\\b";
        break;
    case '\f':
        two = "\\f";
        break;
    default:
        break;
    }
    if (two) {
        memcpy(e, two, 2);
        return 2;
    }
    if (c < 0x20 || c == 0x7f) {
        memcpy(e, "\\u00", 4);
        e[4] = hex_lower[c >> 4];
        e[5] = hex_lower[c & 15];
        return 6;
    }
    e[0] = (char)c;
    return 1;
}

/* True for a byte that stands for itself inside a JSON string (printable ASCII but " and \). */
static bool json_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

size_t ib_enc_json(char *dst, size_t size, const char *src, size_t n, size_t *used)
{
    size_t len = 0, k = 0;
    while (k < n) {
        unsigned char c = (unsigned char)src[k];
        if (json_plain(c)) { /* a run of such bytes goes in one copy */
            size_t run = 1, room = size > len + 1 ? size - len - 1 : 0;
            while (k + run < n && json_plain((unsigned char)src[k + run]))
                run++;
            if (run > room)
                run = room;
            memcpy(dst + len, src + k, run);
            len += run;
            k += run;
            if (run == room)
                break;
            continue;
        }
        char e[6];
        const char *out = e;
        size_t w, take = 1;
        if (c < 0x80) {
            w = ascii_escape(c, e);
        } else if ((take = ib_utf8_seq_len((const unsigned char *)src + k, n - k)) > 0) {
            out = src + k;
            w = take;
        } else {
            out = "\\ufffd";
            w = 6;
            take = 1;
        }
        if (len + w >= size)
            break;
        memcpy(dst + len, out, w);
        len += w;
        k += take;
    }
    if (size > 0)
        dst[len] = '\0';
    if (used)
        *used = k;
    return len;
}

size_t ib_enc_decimal(char out[IB_ENC_DECIMAL_MAX], long long v)
{
    char rev[IB_ENC_DECIMAL_MAX];
    /* The magnitude as unsigned: LLONG_MIN has none as a long long. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t n = 0, len = 0;
    do {
        rev[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = rev[--n];
    out[len] = '\0';
    return len;
}
