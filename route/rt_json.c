/*
 * rt_json.c - the checked scan that reads body fields without jansson
 * (rt_json.h).
 * thread: any.
 */
#include "rt_json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_enc.h"

/* ---- the checked scan ---------------------------------------------------- */

typedef struct scan {
    const unsigned char *p, *end;
    int depth;
} scan_t;

static void skip_ws(scan_t *sc)
{
    while (sc->p < sc->end &&
           (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
        sc->p++;
}

/* Four hex digits at p (p + 4 <= end); -1 when they are not. */
static long hex4(const unsigned char *p, const unsigned char *end)
{
    long v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int d = ib_hex_digit(p[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One \u escape at sc->p (after the 'u'), with the low half of a pair; as jansson decides. */
static bool unicode_escape(scan_t *sc)
{
    long v = hex4(sc->p, sc->end);
    if (v <= 0) /* invalid, or \u0000 (jansson refuses NUL without JSON_ALLOW_NUL) */
        return false;
    sc->p += 4;
    if (v >= 0xDC00 && v <= 0xDFFF)
        return false;
    if (v >= 0xD800 && v <= 0xDBFF) {
        long lo;
        if (sc->end - sc->p < 6 || sc->p[0] != '\\' || sc->p[1] != 'u')
            return false;
        lo = hex4(sc->p + 2, sc->end);
        if (lo < 0xDC00 || lo > 0xDFFF)
            return false;
        sc->p += 6;
    }
    return true;
}

/* One UTF-8 sequence at sc->p (its first byte >= 0x80), checked as jansson's utf8_check_full. */
static bool utf8_char(scan_t *sc)
{
    unsigned char c = *sc->p;
    size_t n;
    unsigned long cp;

    if (c >= 0xC2 && c <= 0xDF)
        n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, cp = c & 0x07;
    else
        return false;
    if ((size_t)(sc->end - sc->p) < n)
        return false;
    for (size_t i = 1; i < n; i++) {
        if ((sc->p[i] & 0xC0) != 0x80)
            return false;
        cp = (cp << 6) | (sc->p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return false;
    sc->p += n;
    return true;
}

/*
 * True when none of the 8 bytes at p ends or complicates a string: no
 * control character, no byte of 0x80 or above, no quote, no backslash
 * (the "has a byte less than" and "has a zero byte" word tests).
 */
static bool plain8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t v, q, b;

    memcpy(&v, p, sizeof(v));
    q = v ^ (ones * '"');
    b = v ^ (ones * '\\');
    return ((v | ((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b)) & high) == 0;
}

/* A string at sc->p (on its opening quote); *escaped when it holds a backslash. */
static bool scan_string(scan_t *sc, bool *escaped)
{
    *escaped = false;
    sc->p++;
    while (sc->p < sc->end) {
        while (sc->end - sc->p >= 8 && plain8(sc->p))
            sc->p += 8;
        if (sc->p >= sc->end)
            break;
        unsigned char c = *sc->p;
        if (c == '"') {
            sc->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            if (!utf8_char(sc))
                return false;
            continue;
        }
        sc->p++;
        if (c != '\\')
            continue;
        *escaped = true;
        if (sc->p >= sc->end)
            return false;
        c = *sc->p++;
        if (c == 'u') {
            if (!unicode_escape(sc))
                return false;
        } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
            return false;
        }
    }
    return false;
}

static bool is_digit(const scan_t *sc)
{
    return sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9';
}

static void skip_digits(scan_t *sc)
{
    while (is_digit(sc))
        sc->p++;
}

/*
 * A number, with jansson's grammar and its range checks: an integer must
 * fit a long long, a real must not overflow. Numbers longer than 63
 * characters are left to jansson.
 */
static bool scan_number(scan_t *sc)
{
    const unsigned char *start = sc->p;
    bool real = false;
    char buf[64];

    if (*sc->p == '-')
        sc->p++;
    if (sc->p < sc->end && *sc->p == '0') {
        sc->p++;
        if (is_digit(sc))
            return false;
    } else if (is_digit(sc)) {
        skip_digits(sc);
    } else {
        return false;
    }
    if (sc->p < sc->end && *sc->p == '.') {
        sc->p++, real = true;
        if (!is_digit(sc))
            return false;
        skip_digits(sc);
    }
    if (sc->p < sc->end && (*sc->p == 'e' || *sc->p == 'E')) {
        sc->p++, real = true;
        if (sc->p < sc->end && (*sc->p == '+' || *sc->p == '-'))
            sc->p++;
        if (!is_digit(sc))
            return false;
        skip_digits(sc);
    }
    if ((size_t)(sc->p - start) >= sizeof(buf))
        return false;
    if (!real && sc->p - start <= 18)
        return true; /* at most 18 digits always fit */
    memcpy(buf, start, (size_t)(sc->p - start));
    buf[sc->p - start] = '\0';
    errno = 0;
    if (real) {
        double d = strtod(buf, NULL);
        return !(isinf(d) && errno == ERANGE);
    }
    (void)strtoll(buf, NULL, 10);
    return errno != ERANGE;
}

static bool scan_value(scan_t *sc);

/*
 * A value of an object or array, then what follows it: 0 when close ends
 * the container (consumed), 1 after a ',' (another member follows), -1 when
 * the text is not JSON.
 */
static int scan_member(scan_t *sc, unsigned char close)
{
    if (!scan_value(sc))
        return -1;
    skip_ws(sc);
    if (sc->p >= sc->end)
        return -1;
    if (*sc->p == close) {
        sc->p++;
        return 0;
    }
    if (*sc->p++ != ',')
        return -1;
    skip_ws(sc);
    return 1;
}

/* Members of an object at sc->p ('{'): keys unescaped and distinct, as JSON_REJECT_DUPLICATES wants. */
static bool scan_object(scan_t *sc)
{
    const unsigned char *key[RT_JSON_KEYS_MAX];
    size_t klen[RT_JSON_KEYS_MAX], n = 0;
    bool escaped;
    int next;

    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == '}') {
        sc->p++;
        return true;
    }
    for (;;) {
        if (sc->p >= sc->end || *sc->p != '"' || n == RT_JSON_KEYS_MAX)
            return false;
        key[n] = sc->p + 1;
        if (!scan_string(sc, &escaped) || escaped)
            return false;
        klen[n] = (size_t)(sc->p - key[n]) - 1;
        for (size_t i = 0; i < n; i++)
            if (klen[i] == klen[n] && memcmp(key[i], key[n], klen[n]) == 0)
                return false;
        n++;
        skip_ws(sc);
        if (sc->p >= sc->end || *sc->p++ != ':')
            return false;
        skip_ws(sc);
        next = scan_member(sc, '}');
        if (next <= 0)
            return next == 0;
    }
}

static bool scan_array(scan_t *sc)
{
    int next;
    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == ']') {
        sc->p++;
        return true;
    }
    for (;;) {
        next = scan_member(sc, ']');
        if (next <= 0)
            return next == 0;
    }
}

static bool scan_word(scan_t *sc, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, w, n) != 0)
        return false;
    sc->p += n;
    return true;
}

/* One value at sc->p (no leading white space). */
static bool scan_value(scan_t *sc)
{
    bool escaped, ok;

    if (sc->p >= sc->end)
        return false;
    switch (*sc->p) {
    case '"':
        return scan_string(sc, &escaped);
    case '{':
    case '[':
        if (++sc->depth > RT_JSON_DEPTH_MAX)
            return false;
        ok = *sc->p == '{' ? scan_object(sc) : scan_array(sc);
        sc->depth--;
        return ok;
    case 't':
        return scan_word(sc, "true");
    case 'f':
        return scan_word(sc, "false");
    case 'n':
        return scan_word(sc, "null");
    default:
        return scan_number(sc);
    }
}

bool rt_json_checked(const char *text, size_t len)
{
    scan_t sc = {(const unsigned char *)text, (const unsigned char *)text + len, 0};

    if (!text)
        return false;
    skip_ws(&sc);
    if (!scan_value(&sc))
        return false;
    skip_ws(&sc);
    return sc.p == sc.end;
}

/* ---- finding a value in a checked text ----------------------------------- */

/* Past the value at sc->p, which the check has accepted. */
static void skip_value(scan_t *sc)
{
    int depth = 0;

    do {
        unsigned char c = *sc->p;
        if (c == '"') {
            for (sc->p++; *sc->p != '"'; sc->p++)
                if (*sc->p == '\\')
                    sc->p++;
            sc->p++;
        } else if (c == '{' || c == '[') {
            depth++, sc->p++;
        } else if (c == '}' || c == ']') {
            depth--, sc->p++;
        } else if (depth > 0) {
            sc->p++;
        } else {
            while (sc->p < sc->end && !strchr(",}] \t\n\r", *sc->p))
                sc->p++;
        }
    } while (depth > 0);
}

/* Moves sc->p to the value of member name of the object at sc->p; false when absent. */
static bool find_member(scan_t *sc, const char *name)
{
    size_t nlen = strlen(name);

    sc->p++;
    for (;;) {
        skip_ws(sc);
        if (*sc->p == '}')
            return false;
        const unsigned char *k = sc->p + 1;
        skip_value(sc); /* the key: checked keys hold no escapes */
        bool hit = (size_t)(sc->p - k) - 1 == nlen && memcmp(k, name, nlen) == 0;
        skip_ws(sc);
        sc->p++; /* ':' */
        skip_ws(sc);
        if (hit)
            return true;
        skip_value(sc);
        skip_ws(sc);
        if (*sc->p == ',')
            sc->p++;
    }
}

/* Moves sc->p to element index of the array at sc->p; false when there are fewer. */
static bool find_element(scan_t *sc, size_t index)
{
    sc->p++;
    for (size_t i = 0;; i++) {
        skip_ws(sc);
        if (*sc->p == ']')
            return false;
        if (i == index)
            return true;
        skip_value(sc);
        skip_ws(sc);
        if (*sc->p == ',')
            sc->p++;
    }
}

static rt_json_kind_t kind_at(const scan_t *sc, const unsigned char *end)
{
    switch (*sc->p) {
    case '"':
        return RT_JV_STRING;
    case '{':
        return RT_JV_OBJECT;
    case '[':
        return RT_JV_ARRAY;
    case 't':
        return RT_JV_TRUE;
    case 'f':
        return RT_JV_FALSE;
    case 'n':
        return RT_JV_NULL;
    default:
        for (const unsigned char *q = sc->p; q < end; q++)
            if (*q == '.' || *q == 'e' || *q == 'E')
                return RT_JV_REAL;
        return RT_JV_INTEGER;
    }
}

bool rt_json_find(const char *text, size_t len, const rt_json_step_t *steps, size_t nsteps,
                  rt_json_span_t *out)
{
    scan_t sc = {(const unsigned char *)text, (const unsigned char *)text + len, 0};
    const unsigned char *start;

    skip_ws(&sc);
    for (size_t i = 0; i < nsteps; i++) {
        bool found = steps[i].name ? *sc.p == '{' && find_member(&sc, steps[i].name)
                                   : *sc.p == '[' && find_element(&sc, steps[i].index);
        if (!found)
            return false;
    }
    start = sc.p;
    skip_value(&sc);
    out->kind = kind_at(&(scan_t){start, sc.p, 0}, sc.p);
    out->at = (const char *)start;
    out->len = (size_t)(sc.p - start);
    out->escaped = false;
    if (out->kind == RT_JV_STRING) {
        out->at++;
        out->len -= 2;
        out->escaped = memchr(out->at, '\\', out->len) != NULL;
    }
    return true;
}

/* Appends code point cp as UTF-8 at o; returns the new end. */
static char *put_utf8(char *o, unsigned long cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

char *rt_json_string(const rt_json_span_t *v)
{
    /* An escape never yields more bytes than it takes: \uXXXX (6) gives at most 3, a pair (12) 4. */
    char *s = malloc(v->len + 1), *o = s;
    const unsigned char *p = (const unsigned char *)v->at, *end = p + v->len;

    if (!s)
        return NULL;
    if (!v->escaped) {
        memcpy(s, v->at, v->len);
        s[v->len] = '\0';
        return s;
    }
    while (p < end) {
        unsigned char c = *p++;
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        c = *p++;
        if (c == 'u') {
            unsigned long cp = (unsigned long)hex4(p, end);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)hex4(p + 2, end) - 0xDC00);
                p += 6;
            }
            o = put_utf8(o, cp);
            continue;
        }
        *o++ = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : (char)c;
    }
    *o = '\0';
    return s;
}
