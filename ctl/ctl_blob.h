/*
 * ctl_blob.h - `inboxctl blob show|fetch --message-id M --config F`: the
 * blob reference of a claim-checked message (peeked from the entity, or
 * its dead-letter queue with --dlq; nothing locked or moved) as its route's
 * claim_check binds it, and, for fetch, the blob itself fetched the way
 * inboxd does (the route's auth, max_bytes, ETag and SHA-256 checks) into
 * --out FILE. Called by inboxctl's main on its connection. thread: main.
 *
 * Prints one JSON object: message_id, route, url (without its query, so
 * never a SAS), destination, auth, sha256 / etag (null when the message
 * carries none), max_bytes; fetch adds result, http_status, bytes,
 * blob_sha256, blob_etag and error.
 *
 * Exit status: 0 shown / fetched (result ok); 1 broker failure, the fetch
 * failed, or the file cannot be written; 3 no such message; 2 usage, or
 * the message's route has no claim_check.
 */
#ifndef CTL_BLOB_H
#define CTL_BLOB_H

#include <stdbool.h>

#include "sb_send.h"
#include "wk_config.h"

typedef struct ctl_blob_opts {
    const char *entity;
    bool dlq;
    const char *message_id;
    bool fetch;
    const char *out; /* fetch: the file the blob is written to */
} ctl_blob_opts_t;

int ctl_blob(sb_sender_t *s, const wk_config_t *cfg, const ctl_blob_opts_t *o);

#endif
