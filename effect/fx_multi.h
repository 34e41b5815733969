/*
 * fx_multi.h - several calls to destinations made at once (libcurl's multi
 * interface), each with its own timeout and classified exactly as
 * fx_client_call classifies a call made alone (fx_client.h).
 *
 *   fx_multi_t *m = fx_multi_new();
 *   fx_multi_call(m, reqs, resps, n);  // resps[i] answers reqs[i]
 *   for (i...) fx_response_free(&resps[i]);
 *
 * or, to act on each answer as it comes (a slow call holds only itself):
 *
 *   fx_multi_start(m, reqs, resps, n);
 *   while ((k = fx_multi_next(m, done)) > 0)
 *       for (j < k) use resps[done[j]];
 *   fx_multi_free(m);
 *
 * thread: a multi client belongs to one thread at a time; fx_global_init
 * once before any thread starts.
 */
#ifndef FX_MULTI_H
#define FX_MULTI_H

#include <stddef.h>

#include "fx_client.h"

typedef struct fx_multi fx_multi_t;

/* A multi client with its own connection cache; NULL when out of memory. */
fx_multi_t *fx_multi_new(void);
void fx_multi_free(fx_multi_t *m);

/*
 * Performs the n requests concurrently and returns when every one has an
 * outcome in resps (each freed by the caller with fx_response_free). The
 * destination's limits are the caller's: every request given is started.
 */
void fx_multi_call(fx_multi_t *m, const fx_request_t *reqs, fx_response_t *resps, size_t n);

/* Starts the n requests; their outcomes arrive through fx_multi_next. */
void fx_multi_start(fx_multi_t *m, const fx_request_t *reqs, fx_response_t *resps, size_t n);

/*
 * Waits until at least one started request has its outcome in resps and
 * writes the indices of every one that has, not returned before, into done
 * (room for the n given to fx_multi_start); returns how many, 0 once every
 * outcome was returned.
 */
size_t fx_multi_next(fx_multi_t *m, size_t *done);

#endif
