/*
 * fx_client.h - the HTTP client of inboxd's effects beyond the database
 * (libcurl). One client per worker thread: it owns one curl handle whose
 * connection cache is reused from call to call. It never touches amqp/ or
 * db/; worker/ builds the request and decides what the answer means for the
 * message.
 *
 * Not to be confused with worker/wk_health.c, the metrics and health server.
 *
 *   fx_client_t *fx = fx_client_new();
 *   fx_request_t rq = {.method = "POST", .url = url, .body = b, .body_len = n,
 *                      .headers = hdrs, .nheaders = 2, .timeout_ms = 10000};
 *   fx_response_t rs;
 *   fx_client_call(fx, &rq, &rs);       // rs.cls says applied/transient/...
 *   fx_response_free(&rs);
 *   fx_client_free(fx);
 *
 * thread: a client belongs to one thread at a time; fx_global_init once
 * before any thread starts.
 */
#ifndef FX_CLIENT_H
#define FX_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"

/* What an answer (or its absence) means for the effect. */
typedef enum {
    FX_APPLIED,   /* 2xx: the destination acted */
    FX_TRANSIENT, /* 408, 429, 5xx, or nothing was sent: call again, same key */
    FX_PERMANENT, /* any other status: the destination refused the request */
    FX_AMBIGUOUS, /* the whole request was sent and no answer came back */
} fx_class_t;

typedef struct fx_client fx_client_t;

typedef struct fx_header {
    const char *name;
    const char *value;
} fx_header_t;

typedef struct fx_request {
    const char *method; /* GET, POST, PUT, PATCH, DELETE */
    const char *url;
    const char *body; /* NULL: no body (GET/DELETE); otherwise body_len bytes */
    size_t body_len;
    const fx_header_t *headers;
    size_t nheaders;
    long timeout_ms;     /* the whole exchange, connect included */
    const char *ca_file; /* PEM bundle to trust; NULL: the system store */
} fx_request_t;

/* The longest response body kept (the rest is read and dropped). */
#define FX_BODY_MAX (64 * 1024)

typedef struct fx_response {
    fx_class_t cls;
    long status;         /* HTTP status; 0 when no answer came */
    long retry_after_ms; /* from Retry-After; -1 when absent */
    bool sent;           /* every byte of the request reached the connection */
    double duration_s;
    char *body; /* NUL-terminated, at most FX_BODY_MAX bytes; never NULL after a call */
    size_t body_len;
    bool body_truncated;
    char *headers; /* the final response's header lines, "Name: value\r\n"... */
    size_t headers_len;
    ib_error_t err; /* why, when cls is not FX_APPLIED; never holds a header value */
} fx_response_t;

/* Initialises libcurl for the process. thread: main, before workers start. */
ib_err_t fx_global_init(ib_error_t *err);
void fx_global_cleanup(void);

/* A client with its own connection cache; NULL when out of memory. */
fx_client_t *fx_client_new(void);
void fx_client_free(fx_client_t *fx);

/*
 * Performs one request and classifies the outcome into resp (which the
 * caller frees with fx_response_free). libcurl is never allowed to send the
 * request body twice on its own: when a reused connection turns out dead
 * after the body went out, the call ends ambiguous instead. Returns
 * IB_E_OK when an HTTP answer arrived (whatever its status), otherwise the
 * error also stored in resp->err. thread: the client's.
 */
ib_err_t fx_client_call(fx_client_t *fx, const fx_request_t *req, fx_response_t *resp);
void fx_response_free(fx_response_t *resp);

/*
 * The value of response header name (case-insensitive) copied into buf, or
 * NULL when absent. thread: any.
 */
const char *fx_response_header(const fx_response_t *resp, const char *name, char *buf, size_t size);

/* Classification of a status alone, as fx_client_call applies it. */
fx_class_t fx_classify_status(long status);
/* "applied", "transient", "permanent", "ambiguous". */
const char *fx_class_name(fx_class_t cls);
/* The metrics label of an outcome: "2xx", "429", "4xx", "5xx", "timeout" or "error". */
const char *fx_response_metric_class(const fx_response_t *resp);

#endif
