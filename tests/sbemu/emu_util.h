/*
 * emu_util.h - small helpers of the Service Bus emulator: clocks, lock-token
 * byte order, base64, percent-decoding, and a byte-keyed hash map.
 *
 * thread: any (no shared state), except emu_uuid_new, whose random base
 * (drawn once through OpenSSL's RNG) and counter are shared.
 */
#ifndef EMU_UTIL_H
#define EMU_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Wall-clock milliseconds since the Unix epoch. */
int64_t emu_now_ms(void);

/* .NET ticks (100 ns since 0001-01-01 UTC) of a Unix millisecond instant. */
int64_t emu_ms_to_ticks(int64_t unix_ms);

/*
 * Fills out with a new UUID in the RFC 4122 version-4 shape: a random base
 * drawn once per process plus a counter, so unique within the process.
 */
void emu_uuid_new(uint8_t out[16]);

/*
 * Converts between the canonical (RFC 4122, big-endian) lock token and the
 * delivery-tag order (.NET Guid.ToByteArray: first three groups
 * little-endian). The conversion is its own inverse; in and out may alias.
 */
void emu_lock_swap(const uint8_t in[16], uint8_t out[16]);

/* Formats 16 canonical bytes as "xxxxxxxx-xxxx-...", out at least 37 bytes. */
void emu_uuid_str(const uint8_t id[16], char out[37]);

/* Base64 of len bytes into out (at least 4*((len+2)/3)+1 bytes). */
void emu_base64(const uint8_t *in, size_t len, char *out);
/* Decodes base64 or base64url (padding optional); returns length or -1. */
long emu_base64_decode(const char *in, size_t inlen, uint8_t *out, size_t outsize);

/* Percent-decodes in[0..len) into out (size bytes, terminated); -1 if malformed. */
int emu_pct_decode(const char *in, size_t len, char *out, size_t size);

/* Case-insensitive ASCII comparison of two byte ranges. */
bool emu_ieq(const char *a, size_t alen, const char *b, size_t blen);

/*
 * A hash map from byte strings to pointers. Keys are copied; values are
 * not owned. Grows by doubling; memory is bounded by what callers insert.
 */
typedef struct emu_map emu_map_t;
emu_map_t *emu_map_new(void);
/* Frees the map and its key copies, not the values. NULL is a no-op. */
void emu_map_free(emu_map_t *map);
void *emu_map_get(const emu_map_t *map, const void *key, size_t klen);
/* Inserts or replaces; returns 0, or -1 when out of memory. */
int emu_map_put(emu_map_t *map, const void *key, size_t klen, void *value);
/* Removes key; returns its value or NULL. */
void *emu_map_del(emu_map_t *map, const void *key, size_t klen);
size_t emu_map_count(const emu_map_t *map);
/* Calls fn for every value; fn must not change the map. */
void emu_map_each(const emu_map_t *map, void (*fn)(void *ctx, void *value), void *ctx);

#endif
