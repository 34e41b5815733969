/*
 * emu_auth.h - token checks of the emulator's $cbs node: Service Bus SAS
 * tokens (HMAC-SHA256 over the percent-encoded resource and expiry, keyed
 * with the UTF-8 bytes of the key text) and HS256 JWTs.
 *
 * thread: any (pure functions).
 */
#ifndef EMU_AUTH_H
#define EMU_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Checks a "SharedAccessSignature sr=..&sig=..&se=..&skn=.." token against
 * key (the key text exactly as configured) and, when key_name is not NULL,
 * the rule name. audience is the put-token `name`; the token's resource must
 * cover it (see emu_audience_covers). On success returns 0 and stores the
 * token expiry (Unix seconds) in *expiry_s; otherwise returns -1 and writes
 * the reason into why.
 */
int emu_sas_check(const char *token, const char *key_name, const char *key, const char *audience,
                  int64_t now_s, int64_t *expiry_s, char *why, size_t whylen);

/*
 * Checks an HS256 JWT: signature with secret, `iss` equal to issuer, `aud`
 * (string or array) containing "https://servicebus.azure.net", `exp` in the
 * future and `nbf` (if present) not in the future. Same return convention.
 */
int emu_jwt_check(const char *token, const char *issuer, const char *secret, int64_t now_s,
                  int64_t *expiry_s, char *why, size_t whylen);

/*
 * True when the granted audience covers the entity path. Both may be URIs
 * ("sb://host:5672/orders") or bare paths ("orders/$management"); scheme and
 * host are ignored, paths compare case-insensitively on segment boundaries,
 * and an empty granted path covers the whole namespace.
 */
bool emu_audience_covers(const char *granted, const char *path);

/* Points at the path part of an audience URI (after scheme://host/), or at s itself. */
const char *emu_audience_path(const char *s);

#endif
