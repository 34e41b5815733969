/*
 * sb_enc.h - AMQP-encoded values handled as bytes: the length of one encoded
 * value, and a copy of an encoded application-properties map without some
 * of its keys. So a message sent again (dlq replay) carries its application
 * properties exactly as they arrived, whatever their types (lists, maps,
 * arrays, described values such as .NET's TimeSpan, char, uuid, ulong...),
 * rather than as the plain values sb_prop_t can hold.
 *
 * thread: any. Pure functions over the caller's memory.
 */
#ifndef SB_ENC_H
#define SB_ENC_H

#include <stddef.h>

#include "ib_err.h"

/* Bytes taken by the one encoded AMQP value at p (constructor included,
 * descriptor included for a described value); -1 when it does not fit in
 * len or its constructor is not an AMQP format code. */
long sb_enc_skip(const unsigned char *p, size_t len);

/*
 * Copies the encoded map at map (map8 or map32, len bytes) into a malloc'd
 * map32 at *out (*out_len bytes), leaving out every entry whose key is a
 * string or symbol equal to one of drop[0..ndrop). Other entries are copied
 * byte for byte, in order. Fails with IB_E_DECODE (permanent) when map is
 * not one well-formed map, IB_E_NOMEM when out of memory.
 */
ib_err_t sb_enc_map_filter(const unsigned char *map, size_t len, const char *const *drop,
                           size_t ndrop, unsigned char **out, size_t *out_len, ib_error_t *err);

#endif
