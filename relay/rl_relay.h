/*
 * rl_relay.h - the outbox relay: a thread of its own that publishes the
 * pending rows of the outbox table and marks them published, or failed with
 * the broker's condition.
 *
 * It joins db/ (db_outbox.h: the claim / mark transaction) and amqp/
 * (sb_client_send_each: the messages go out on a sender link that the
 * client's proactor thread owns, on the process's one AMQP connection; the
 * relay thread only waits for the broker's accept of every message). One
 * round: claim up to `batch` rows in id order (rows held by another replica
 * are skipped), send them pipelined (at most one row per session id in
 * flight, so a session's rows leave in order), mark the published ones
 * together (db_outbox_mark_published) and a failed one alone, commit. A transient send failure (connection,
 * busy, timeout) ends the round with that row and every later one still
 * pending, and the next round waits a backoff; a permanent one (entity not
 * found, unauthorized, too large) marks the row failed and the round goes
 * on. A crash between send and commit re-sends the same MessageId later,
 * which duplicate detection or the next inbox absorbs.
 *
 * The relay sleeps outbox.poll_ms between rounds that found nothing; a
 * local commit that emitted wakes it at once (rl_relay_wake). Published
 * rows older than outbox.retention_s are deleted by the same thread in
 * bounded turns.
 */
#ifndef RL_RELAY_H
#define RL_RELAY_H

#include <stdbool.h>

#include "db_conn.h"
#include "ib_err.h"
#include "ot_trace.h"
#include "sb_client.h"

typedef struct rl_relay rl_relay_t;

/*
 * Claim check (rl_claim.c): a row whose body is larger than over_bytes is
 * uploaded (effect/'s fx_blob_put) as CONTAINER/<message id, percent-encoded>
 * before its message is sent, and the message carries, instead of the body
 * (it goes out empty), the application properties RL_CLAIM_URL (the blob's
 * URL, read_sas appended when given), RL_CLAIM_SHA256 (hex) and
 * RL_CLAIM_SIZE (bytes). A failed upload is the row's transient failure:
 * nothing is sent, the row stays pending and the round backs off. Strings
 * are borrowed and must outlive the relay.
 */
#define RL_CLAIM_URL "blob-url"
#define RL_CLAIM_SHA256 "blob-sha256"
#define RL_CLAIM_SIZE "blob-size"
typedef struct rl_claim_options {
    long long over_bytes;      /* 0: off */
    const char *container_url; /* no query */
    const char *sas;           /* the container SAS's query (auth sas); NULL or "": none */
    const char *read_sas;      /* appended to RL_CLAIM_URL; NULL or "": none */
    const char *account;       /* shared_key; NULL otherwise */
    const char *account_key;   /* shared_key; NULL otherwise */
    bool workload_identity;    /* a bearer token for FX_BLOB_TOKEN_SCOPE (the relay's own source) */
    long long timeout_ms;
    const char *ca_file;       /* NULL: the system store */
} rl_claim_options_t;

typedef struct rl_relay_options {
    sb_client_t *client;              /* sends on it; must outlive the relay */
    db_options_t db;                  /* the relay's own connection (copied by db_conn_new) */
    const char *table;                /* outbox.table; copied */
    long long poll_ms;                /* idle wait between rounds */
    int batch;                        /* rows per round */
    long long retention_s;            /* published rows kept this long; 0: deleted at once */
    long long backoff_max_ms;         /* longest wait after a transient failure */
    ot_exporter_t *otel;              /* NULL: no publish spans; must outlive the relay */
    rl_claim_options_t claim;         /* over_bytes 0: no claim check */
} rl_relay_options_t;

/*
 * Starts the relay thread. The outbox table must exist (db_outbox_migrate
 * ran). NULL with err filled when the thread cannot start. The relay keeps
 * trying when the database or the broker is away. thread: main.
 */
rl_relay_t *rl_relay_start(const rl_relay_options_t *opt, ib_error_t *err);
/* Wakes the relay for a round now (a local commit inserted rows). thread: any. */
void rl_relay_wake(rl_relay_t *r);
/*
 * The relay's figures, shown as the inboxd_outbox_* metrics: the pending
 * count, the oldest pending row's age and the session ids held back by a
 * failed row (db_outbox.h, DB_OUTBOX_SKIPPED) at the relay's last look, rows
 * published, and rows failed by broker condition (the last entry may be
 * "other" once RL_RELAY_CONDITIONS are in use).
 */
#define RL_RELAY_CONDITIONS 16
typedef struct rl_relay_stats {
    long long pending;
    long long oldest_pending_s;
    long long blocked_sessions;
    unsigned long long published_total;
    unsigned long long claim_checked_total; /* rows published with a blob reference */
    unsigned long long claim_upload_failed_total; /* uploads that failed (the row retried) */
    size_t nfailed;
    struct {
        char condition[96];
        unsigned long long count;
    } failed[RL_RELAY_CONDITIONS];
} rl_relay_stats_t;

/* A copy of the counters (relay is an rl_relay_t, void * for a metrics source). thread: any. */
void rl_relay_stats(void *relay, rl_relay_stats_t *out);
/*
 * Stops after the current round (its transaction commits or rolls back) and
 * joins; the counters stay readable. Call it before stopping the client, so
 * a round's sends get their answers. thread: main.
 */
void rl_relay_halt(rl_relay_t *r);
/* Halts if needed and frees. thread: main. */
void rl_relay_stop(rl_relay_t *r);

/*
 * The application properties of an outbox row (a JSON object as text) as
 * sb_prop_t values: strings, integers, reals, booleans and null keep their
 * type. *props is malloc'd with room for RL_PROPS_SPARE entries after the
 * *n given (the relay adds the trace context and a claim check's reference
 * there), owned by *holder (free
 * both with rl_relay_props_free). Fails (IB_E_INVALID_JSON, permanent, nothing to
 * free) when the text is not a JSON object or a value in it is an array or
 * an object, which no application property can hold. thread: any.
 */
struct sb_prop;
#define RL_PROPS_SPARE 5 /* the trace context's two, the claim check's three */
ib_err_t rl_relay_props_parse(const char *json, struct sb_prop **props, size_t *n, void **holder,
                              ib_error_t *err);
void rl_relay_props_free(struct sb_prop *props, void *holder);

#endif
