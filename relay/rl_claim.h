/*
 * rl_claim.h - the relay's claim check (rl_relay.h, rl_claim_options_t):
 * a large row's body uploaded to Blob Storage, its reference put in the
 * message's application properties. Internal to relay/.
 *
 * thread: the relay's.
 */
#ifndef RL_CLAIM_H
#define RL_CLAIM_H

#include <stdbool.h>

#include "db_outbox.h"
#include "rl_relay.h"
#include "sb_msg.h"

/* A row's uploaded blob: what its message carries instead of the body. */
typedef struct rl_claim_ref {
    char *url; /* the blob's URL (read_sas appended when configured) */
    char sha256[65];
    long long size;
} rl_claim_ref_t;

/*
 * The claim check's state: its options and, under workload identity, the
 * token source (started here, fetching in its own thread). NULL with err
 * set when the source cannot start. thread: main.
 */
typedef struct rl_claim rl_claim_t;
rl_claim_t *rl_claim_new(const rl_claim_options_t *o, ib_error_t *err);
void rl_claim_free(rl_claim_t *c);

/* True when row's body goes to a blob. */
bool rl_claim_wanted(const rl_claim_t *c, const db_outbox_row_t *row);
/*
 * Uploads row's body as the blob named after its message id (a retry
 * overwrites it). IB_E_OK with ref filled (free with rl_claim_ref_free),
 * else a transient error naming the request and the HTTP status, never
 * a key or a SAS.
 */
ib_err_t rl_claim_upload(rl_claim_t *c, const db_outbox_row_t *row, rl_claim_ref_t *ref,
                         ib_error_t *err);
/* Sets (or adds, in the spare room) the reference's three properties; strings point into ref. */
void rl_claim_props(const rl_claim_ref_t *ref, sb_prop_t *props, size_t *nprops);
void rl_claim_ref_free(rl_claim_ref_t *ref);

#endif
