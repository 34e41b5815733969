/*
 * ib_utf8.h - keeping text that leaves inboxd valid UTF-8.
 *
 * Subjects, ids, property values and driver messages arrive as bytes; a log
 * line or a dead-letter description holding an invalid sequence is dropped
 * by log shippers and may be refused by the broker. These helpers find
 * well-formed sequences (RFC 3629: no overlongs, no surrogates, nothing past
 * U+10FFFF) and replace every byte that is not part of one with U+FFFD.
 *
 * thread: any (pure functions).
 */
#ifndef IB_UTF8_H
#define IB_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The replacement character U+FFFD in UTF-8. */
#define IB_UTF8_REPLACEMENT "\xEF\xBF\xBD"

/*
 * Length (1-4) of the well-formed UTF-8 sequence at the start of the n bytes
 * at p, or 0 when the first byte does not start one (n == 0 gives 0).
 */
size_t ib_utf8_seq_len(const unsigned char *p, size_t n);

/* True when the n bytes at p are entirely well-formed UTF-8. */
bool ib_utf8_valid(const char *p, size_t n);

/*
 * Copies the NUL-terminated src into dst (size bytes, size > 0), replacing
 * each byte that is not part of a well-formed sequence with U+FFFD, never
 * splitting a sequence when dst is too small, and always terminating.
 * src and dst may not overlap. Returns the length written.
 */
size_t ib_utf8_sanitize(char *dst, size_t size, const char *src);

#endif
