/*
 * ib_enc.h - the text encoders of inboxd: hex, percent (URI) and JSON string.
 *
 *   ib_enc_hex   bytes -> lowercase hex (ids, hashes, tokens, binary bodies)
 *   ib_dec_hex   the reverse (either case, or lowercase only where a format
 *                says so, as W3C trace context does); ib_hex_digit one digit
 *   ib_enc_pct   RFC 3986 percent-encoding: everything but the unreserved
 *                characters A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase hex),
 *                for SAS token audiences, form bodies and URL templates
 *   ib_dec_pct   the reverse of ib_enc_pct, in place (OTLP header and
 *                resource attribute values)
 *   ib_enc_json  the inside of a JSON string: " and \ escaped, control
 *                characters (and DEL) as \n \r \t \b \f or \u00XX,
 *                well-formed UTF-8 kept, any other byte as \ufffd, so the
 *                result is always valid JSON and valid UTF-8
 *
 * thread: any (pure functions).
 */
#ifndef IB_ENC_H
#define IB_ENC_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the n bytes at src as 2n lowercase hex digits and a NUL into dst (2n+1 bytes). */
void ib_enc_hex(char *dst, const void *src, size_t n);

/* The value of the hex digit c (0-9, a-f, A-F), -1 when c is not one. */
int ib_hex_digit(int c);

typedef enum {
    IB_HEX_ANY_CASE, /* a-f and A-F */
    IB_HEX_LOWER,    /* a-f only */
} ib_hex_case_t;

/*
 * Decodes the 2n hex digits at src into the n bytes at dst. False when one
 * of them is not a hex digit of that case (a NUL ends the reading there, so
 * a shorter string is refused, never read past); dst is then partly written.
 */
bool ib_dec_hex(void *dst, const char *src, size_t n, ib_hex_case_t hcase);

/*
 * Percent-encodes the n bytes at src into dst (size bytes; dst may be NULL
 * when size is 0) with snprintf's contract: writes at most size-1 bytes,
 * never half an escape, NUL-terminates when size > 0, and returns the length
 * of the whole encoding (so a result >= size means it was cut).
 */
size_t ib_enc_pct(char *dst, size_t size, const char *src, size_t n);

/* The percent-encoding of the string s, malloc'd; NULL when out of memory. */
char *ib_enc_pct_dup(const char *s);

/*
 * Percent-decodes the string s in place: each %XX (either case of hex)
 * becomes its byte; a '%' not followed by two hex digits stays as it is.
 * Returns s.
 */
char *ib_dec_pct(char *s);

/*
 * Escapes the n bytes at src as the inside of a JSON string (no quotes) into
 * dst (size > 0). Stops before an escape or UTF-8 sequence that would not fit
 * whole and always NUL-terminates. Returns the bytes written; *used, when not
 * NULL, gets the bytes of src consumed (n when everything fit).
 */
size_t ib_enc_json(char *dst, size_t size, const char *src, size_t n, size_t *used);
/* v in decimal as "%lld" writes it, into out (IB_ENC_DECIMAL_MAX bytes, NUL included); its length. */
#define IB_ENC_DECIMAL_MAX 21
size_t ib_enc_decimal(char out[IB_ENC_DECIMAL_MAX], long long v);

#endif
