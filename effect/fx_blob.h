/*
 * fx_blob.h - Get Blob (Azure Blob Storage's REST API) for a claim-checked
 * message: one GET over libcurl with the request's authorisation (a SAS
 * already in the URL, a Shared Key signature, or a bearer token), the
 * size checked against a bound before the body is read and while it is,
 * the body kept in one buffer of its announced size. And the outbox
 * relay's upload of a large row's body (fx_blob_put, fx_blob_put.c): Put
 * Blob, or Put Block + Put Block List, read in place from the caller's bytes.
 *
 *   fx_blob_req_t rq = {.url = u, .max_bytes = 1 << 24, .timeout_ms = 30000};
 *   fx_blob_t b;
 *   fx_blob_get(&rq, &b);      // b.res says what came of it
 *   fx_blob_free(&b);
 *
 * It knows nothing of messages or routes: worker/ binds the reference and
 * decides what each result means for the message; relay/ names the blob
 * and decides what a failed upload means for its row.
 *
 * thread: any (each call has its own handle); fx_global_init first.
 */
#ifndef FX_BLOB_H
#define FX_BLOB_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"

/* The scope of an Azure AD token for Azure Storage (workload identity). */
#define FX_BLOB_TOKEN_SCOPE "https://storage.azure.com/.default"

/* The x-ms-version inboxd speaks. */
#define FX_BLOB_VERSION "2021-12-02"

typedef enum {
    FX_BLOB_OK,        /* data holds the blob */
    FX_BLOB_MISSING,   /* 404: no such blob (or container) */
    FX_BLOB_REFUSED,   /* 401, 403 or another 4xx: the account will not give it */
    FX_BLOB_TOO_LARGE, /* Content-Length above max_bytes, or the body ran past it */
    FX_BLOB_CHANGED,   /* 412, or its ETag / SHA-256 is not the one expected */
    FX_BLOB_NO_ROOM,   /* admit said no to its size: nothing read, try later */
    FX_BLOB_TRANSIENT, /* no answer (refused, DNS, TLS, timeout), 408, 429, 5xx */
} fx_blob_result_t;

typedef struct fx_blob_req {
    const char *url;
    const char *account;     /* shared_key: the account name; NULL otherwise */
    const char *account_key; /* shared_key: the base64 key; NULL otherwise */
    const char *bearer;      /* workload identity: the access token; NULL otherwise */
    const char *etag;        /* expected ETag (quotes ignored); NULL: not checked */
    const char *sha256;      /* expected SHA-256, hex; NULL: not checked */
    size_t max_bytes;
    const char *max_name; /* the setting max_bytes stands for, in errors; NULL:
                             "claim_check.max_bytes" */
    long timeout_ms;
    const char *ca_file; /* NULL: the system store */
    /*
     * Asked once, before the body is read, with the bytes it will take
     * (Content-Length, else max_bytes); false: nothing is read, the result
     * is FX_BLOB_NO_ROOM. NULL: always room. The caller gives the bytes
     * back when it frees the blob (fx_blob_t.reserved).
     */
    bool (*admit)(void *ctx, size_t bytes);
    void *admit_ctx;
} fx_blob_req_t;

typedef struct fx_blob {
    fx_blob_result_t res;
    long status;         /* HTTP status; 0 when no answer came */
    long retry_after_ms; /* from Retry-After; -1 when absent */
    char *data;          /* FX_BLOB_OK: the blob, data[len] = '\0'; else NULL */
    size_t len;
    size_t reserved; /* bytes admit granted (0 when none was asked or it said no) */
    char etag[130];  /* the answer's ETag, quotes removed */
    char sha256[65]; /* of the bytes read (FX_BLOB_OK), lower-case hex */
    double duration_s;
    ib_error_t err; /* why, when res is not FX_BLOB_OK; never holds a key or a SAS */
} fx_blob_t;

/* Performs Get Blob for req into out (freed with fx_blob_free); returns out->res. */
fx_blob_result_t fx_blob_get(const fx_blob_req_t *req, fx_blob_t *out);
void fx_blob_free(fx_blob_t *b);
/* "ok", "missing", "refused", "too_large", "changed", "no_room", "transient". */
const char *fx_blob_result_name(fx_blob_result_t r);

/*
 * The Shared Key Authorization value of a GET of url with headers x-ms-date
 * and x-ms-version (RFC 1123 date, version) by account with key (base64):
 * "SharedKey account:signature". False when the key is not base64 or the
 * URL has no path. thread: any.
 */
bool fx_blob_shared_key(const char *url, const char *account, const char *key, const char *date,
                        const char *version, char *out, size_t size);

/*
 * The Shared Key Authorization value of any request (fx_blob_put's too):
 * verb, URL, Content-Length (0: none), Content-Type (NULL: none), the
 * x-ms- headers other than x-ms-date and x-ms-version that sort before
 * x-ms-date, as canonical "name:value\n" lines (NULL: none), date and
 * version. False as fx_blob_shared_key. thread: any.
 */
typedef struct fx_blob_sig {
    const char *verb, *url;
    size_t content_length;
    const char *content_type, *ms_headers, *date, *version;
} fx_blob_sig_t;
bool fx_blob_sign(const fx_blob_sig_t *sg, const char *account, const char *key, char *out,
                  size_t size);

/* ---- upload (the outbox relay's claim checks) ------------------------------ */

/* Above this many bytes a blob goes up in blocks of this size (Put Block + Put Block List). */
#define FX_BLOB_BLOCK_BYTES (4u << 20)

typedef struct fx_blob_put_req {
    const char *url;         /* the blob's URL; a SAS in its query when auth is sas */
    const char *account;     /* shared_key: the account name; NULL otherwise */
    const char *account_key; /* shared_key: the base64 key; NULL otherwise */
    const char *bearer;      /* workload identity: the access token; NULL otherwise */
    const char *content_type; /* the blob's; NULL: application/octet-stream */
    const void *data;        /* borrowed: read in place, never copied */
    size_t len;
    size_t block_bytes;      /* 0: FX_BLOB_BLOCK_BYTES */
    long timeout_ms;         /* each request, connect included */
    const char *ca_file;     /* NULL: the system store */
} fx_blob_put_req_t;

typedef struct fx_blob_put {
    fx_blob_result_t res; /* FX_BLOB_OK, MISSING (no container), REFUSED, TRANSIENT */
    long status;          /* the last request's HTTP status; 0 when no answer came */
    long retry_after_ms;  /* from Retry-After; -1 when absent */
    unsigned requests;    /* HTTP requests made */
    double duration_s;
    ib_error_t err;       /* why, when res is not FX_BLOB_OK; never holds a key or a SAS */
} fx_blob_put_t;

/*
 * Writes data as the block blob at url, replacing any blob of that name:
 * one Put Blob up to block_bytes, else Put Block per block_bytes (block ids
 * fixed by position, so a retry overwrites its own) and Put Block List.
 * Holds nothing beyond the caller's bytes and curl's buffers. Returns
 * out->res.
 */
fx_blob_result_t fx_blob_put(const fx_blob_put_req_t *req, fx_blob_put_t *out);

#endif
