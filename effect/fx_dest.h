/*
 * fx_dest.h - the destination of an HTTP call: the scheme, host and port of
 * its URL, the key under which inboxd governs calls to one server (circuit,
 * Retry-After, rate, concurrency) and labels its metrics.
 *
 * thread: any (a pure function).
 */
#ifndef FX_DEST_H
#define FX_DEST_H

#include <stdbool.h>
#include <stddef.h>

#define FX_DEST_KEY_MAX 300 /* "https://host:port" */

/*
 * The destination of url: "scheme://host:port" in lower case, the port
 * spelled out (80, 443 by default), userinfo left out. False when url has
 * no such prefix, the key does not fit in size, or it would hold a
 * character that a metric label cannot (a quote, a backslash...).
 */
bool fx_dest_key(const char *url, char *key, size_t size);

#endif
