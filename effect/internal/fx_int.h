/*
 * fx_int.h - the inside of effect/: one exchange's state and its two
 * halves, shared by the one-call client (fx_client.c) and the concurrent
 * calls (fx_multi.c), so an outcome is classified in one place.
 *
 * thread: the caller's (an exchange belongs to one thread).
 */
#ifndef FX_INT_H
#define FX_INT_H

#include <curl/curl.h>

#include "fx_client.h"

/* The state of one exchange, shared by the callbacks. */
typedef struct exchange {
    const fx_request_t *req;
    fx_response_t *resp;
    size_t read_pos;  /* next body byte handed to libcurl */
    char tail[4];     /* the last outgoing bytes, to find the header end */
    bool header_done; /* "\r\n\r\n" has gone out */
    size_t body_out;  /* bytes written after the header end */
    size_t body_cap;
    size_t headers_cap;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
} exchange_t;

/*
 * Sets easy handle c up for req (x and resp belong to the exchange until
 * fx_exchange_end). False when out of memory: resp is then classified
 * transient and nothing is to be performed.
 */
bool fx_exchange_begin(CURL *c, const fx_request_t *req, fx_response_t *resp, exchange_t *x);

/* After the transfer ended with cc: fills and classifies x->resp; frees what begin made. */
ib_err_t fx_exchange_end(CURL *c, CURLcode cc, exchange_t *x);

/*
 * Follows the n bytes at p that went out on the connection (libcurl's
 * debug callback, chunk after chunk): the end of the header block, then
 * the body bytes; sets x->resp->sent once all of them have gone out.
 */
void fx_count_out(exchange_t *x, const char *p, size_t n);

#endif
